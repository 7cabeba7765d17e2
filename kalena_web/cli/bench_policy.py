"""``kalena bench preflight``: the policy pre-flight on a live cluster of ``--nodes`` nodes.

The real Irina infrastructure, workloads and blueprint replicated to ``--nodes`` nodes
(:mod:`kalena_web.cli.bench_cluster`) are imported into a fresh PostgreSQL database; every
production pod gets a usage sample (a seeded fraction 0.3–1.0 of its request, r = 1.15 · u) and
``--pending`` batch pods are queued. Then the pre-flight of ``margin_ratio`` 1.15 → 1.3 is timed
(database read, engine, whole), and the policy page's server time through Django's test client
(GET and the POST that runs the pre-flight). Figures only; no assertion on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/kalena_bench_preflight"


def add_parsers(which: argparse._SubParsersAction) -> None:
    parser = which.add_parser("preflight", help="policy pre-flight and policy page time on a live cluster",
                              description=__doc__.split("\n\n")[1])
    parser.add_argument("--nodes", type=int, default=620, help="cluster size (620)")
    parser.add_argument("--pending", type=int, default=500, help="pending batch pods (500)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the median is reported (3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--database-url", default=DEFAULT_DB,
                        help=f"PostgreSQL database to (re)create for the run ({DEFAULT_DB})")
    parser.add_argument("--summary-json", type=Path, help="also write the figures to this JSON file")
    parser.set_defaults(handler=handle)


def _setup(args: argparse.Namespace):
    from kalena_web.cli import benchenv

    benchenv.recreate_database(args.database_url)
    os.environ.update(DATABASE_URL=args.database_url, DJANGO_SETTINGS_MODULE="kalena_web.settings")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import numpy as np

    from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads
    from kalena_web.cli.bench_cluster import replicate
    from kalena_web.cli.inputs import DEFAULTS
    from kalena_web.cli.paths import data_path
    from kalena_web.control.services import live_cluster_import
    from kalena_web.ledger.models import WorkloadReservation
    from kalena_web.scheduling.services import batch_submit

    workloads = load_workloads(data_path(DEFAULTS["workloads"]))
    infra, workloads, blueprint = replicate(load_infrastructure(data_path(DEFAULTS["infra"])), workloads,
                                            load_blueprint(data_path(DEFAULTS["blueprint"]), workloads), args.nodes)
    now = time.time()
    cluster = live_cluster_import(name="bench", infra=infra, workloads=workloads, blueprint=blueprint,
                                  now_s=now - 3600).cluster
    rng = np.random.default_rng(args.seed)
    rows = list(WorkloadReservation.objects.filter(workload__cluster=cluster).select_related("workload"))
    for row in rows:
        q = np.array(row.workload.request, dtype=float)
        u = q * rng.uniform(0.3, 1.0)
        row.last_usage, row.value = list(u), list(np.maximum(u * 1.15, 0.0))
        row.updated_s, row.last_sample_s = now - 5.0, now - 5.0
    WorkloadReservation.objects.bulk_update(rows, ["last_usage", "value", "updated_s", "last_sample_s"],
                                            batch_size=1000)
    for i in range(args.pending):
        batch_submit(cluster=cluster, name=f"team-{i % 7}/job-{i}", owner="bench",
                     request={"cpu": float(rng.choice([0.25, 0.5, 1.0, 2.0])), "ram": float(rng.choice([0.5, 1.0, 4.0]))},
                     now_s=now)
    return cluster, len(rows)


def handle(args: argparse.Namespace) -> int:
    cluster, production = _setup(args)
    from django.contrib.auth.models import Group
    from django.contrib.auth import get_user_model
    from django.test import Client

    from kalena_engine.preflight import policy_preflight
    from kalena_web.policy.drafts import form_fields
    from kalena_web.policy.preflight_io import preflight_cluster_load
    from kalena_web.policy.selectors import current_policy

    current = current_policy(cluster_id=cluster.id)
    proposed = current.policy.with_estimator(margin_ratio=1.3)
    loads, engines, totals, result = [], [], [], None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        state = preflight_cluster_load(cluster=cluster)
        t1 = time.perf_counter()
        result = policy_preflight(state, current=current.policy, proposed=proposed, now_s=time.time())
        t2 = time.perf_counter()
        loads.append(t1 - t0)
        engines.append(t2 - t1)
        totals.append(t2 - t0)
    user = get_user_model().objects.create_user(username="bench-operator", password="bench-operator-pw")
    user.groups.add(Group.objects.get(name="operator"))
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    fields = {f.name: f.value for f in form_fields(current.document)}
    fields["estimator.margin_ratio"] = "1.3"
    gets, posts = [], []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        assert client.get("/policy/bench/").status_code == 200
        t1 = time.perf_counter()
        assert client.post("/policy/bench/", {**fields, "action": "preflight"}).status_code == 200
        t2 = time.perf_counter()
        gets.append(t1 - t0)
        posts.append(t2 - t1)
    figures = {
        "nodes": args.nodes, "production_pods": production, "pending": args.pending,
        "preflight_load_s": statistics.median(loads), "preflight_engine_s": statistics.median(engines),
        "preflight_total_s": statistics.median(totals), "evictions": len(result.evictions),
        "new_evictions": result.new_evictions, "placeable_current": result.placeable_current,
        "placeable_proposed": result.placeable_proposed,
        "policy_page_get_s": statistics.median(gets), "policy_page_preflight_post_s": statistics.median(posts),
    }
    print(f"Kalena policy pre-flight, {args.nodes} nodes, {production} production pods, {args.pending} pending "
          f"(median of {args.repeat}):")
    print(f"  pre-flight: read {figures['preflight_load_s']:.3f} s + engine {figures['preflight_engine_s']:.3f} s "
          f"= {figures['preflight_total_s']:.3f} s; μ 1.15 → 1.3 evicts {figures['evictions']} now "
          f"({figures['new_evictions']} new), placeable {figures['placeable_current']} → {figures['placeable_proposed']}")
    print(f"  policy page server time: GET {figures['policy_page_get_s'] * 1000:.0f} ms, "
          f"POST pre-flight {figures['policy_page_preflight_post_s'] * 1000:.0f} ms")
    if args.summary_json:
        args.summary_json.write_text(json.dumps(figures, indent=2))
    return 0
