"""``kalena bench preflight``: the policy pre-flight on a live cluster of ``--nodes`` nodes.

The real Irina infrastructure, workloads and blueprint replicated to ``--nodes`` nodes
(:mod:`kalena_web.cli.bench_cluster`) are imported into a fresh PostgreSQL database; every
production pod gets a usage sample (a seeded fraction 0.3–1.0 of its request, r = 1.15 · u), every
node's ledger is fresh (its agent reported 5 s ago), ``--pending`` batch pods are queued, and the
cluster gets 20 policy versions, a calibration import and its audit entries. Then the pre-flight
of ``margin_ratio`` 1.15 → 1.3 is timed — its database read and engine alone, and end to end as
the console's POST through Django's test client (session, form check, read, engine, chart and
page) — and every policy page's server time (policy, history, calibration, export, audit), each
after one warm-up request. Wall time and the process's own CPU time are printed (on a shared
machine the difference is time spent waiting: PostgreSQL, other processes). Figures only; no
assertion on time.
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
    from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
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
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=now - 5.0)
    for i in range(args.pending):
        batch_submit(cluster=cluster, name=f"team-{i % 7}/job-{i}", owner="bench",
                     # batch_submit takes internal units: mcpu and bytes (0.25–2 cores, 0.5–4 GiB)
                     request={"cpu": 1000.0 * float(rng.choice([0.25, 0.5, 1.0, 2.0])),
                              "ram": float(2**30 * rng.choice([0.5, 1.0, 4.0]))},
                     now_s=now)
    _history(cluster)
    return cluster, len(rows)


def _history(cluster) -> None:
    """20 policy versions and one calibration import, as a cluster tuned for a while has."""
    from kalena_engine.policy_file import PolicyDocument, policy_from_document
    from kalena_web.policy.selectors import current_policy
    from kalena_web.policy.services import calibration_import, policy_version_create

    for i in range(20):
        document = current_policy(cluster_id=cluster.id).document
        policy_version_create(cluster=cluster, document=PolicyDocument(
            policy=document.policy.with_estimator(margin_ratio=1.15 + 0.01 * (i % 5)), metadata=document.metadata),
            user="bench-operator", note=f"step {i}")
    points = [{"margin_ratio": m, "half_life_s": 600.0, "reclaimed_fraction_cpu": 0.4 - m / 5,
               "reclaimed_fraction_ram": 0.3 - m / 6, "batch_evictions_per_100_pod_hours": 10 / m,
               "production_contention_core_hours": 1 / m} for m in (1.05, 1.1, 1.2, 1.3, 1.5)]
    calibration_import(cluster=cluster, filename="bench-calibration.yaml", user="bench-operator",
                       document=policy_from_document({
                           "apiVersion": "kalena.naughtian.io/v1", "kind": "Policy", "metadata": {
                               "name": "bench", "calibration": {"sweep": {"margin_ratio": [1.05, 1.1, 1.2, 1.3, 1.5]},
                                                                "points": points,
                                                                "knee": {"margin_ratio": 1.2, "half_life_s": 600.0}}}},
                           source="bench"))


def handle(args: argparse.Namespace) -> int:
    cluster, production = _setup(args)
    from django.contrib.auth.models import Group
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from kalena_engine.preflight import policy_preflight
    from kalena_web.policy.drafts import form_fields
    from kalena_web.policy.preflight_io import preflight_cluster_load
    from kalena_web.policy.selectors import current_policy

    current = current_policy(cluster_id=cluster.id)
    proposed = current.policy.with_estimator(margin_ratio=1.3)
    cooldown_s = max(current.policy.eviction.cooldown_s, proposed.eviction.cooldown_s)
    loads, engines, result = [], [], None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        now = time.time()
        state = preflight_cluster_load(cluster=cluster, now_s=now, cooldown_s=cooldown_s)
        t1 = time.perf_counter()
        result = policy_preflight(state, current=current.policy, proposed=proposed, now_s=now)
        loads.append(t1 - t0)
        engines.append(time.perf_counter() - t1)
    user = get_user_model().objects.create_user(username="bench-operator", password="bench-operator-pw")
    user.groups.add(Group.objects.get(name="operator"))
    client = Client(HTTP_HOST="localhost")
    client.force_login(user)
    fields = {f.name: f.value for f in form_fields(current.document)}
    fields["estimator.margin_ratio"] = "1.3"
    pages = {
        "pre-flight POST": lambda: client.post("/policy/bench/", {**fields, "action": "preflight"}),
        "policy": lambda: client.get("/policy/bench/"),
        "history": lambda: client.get("/policy/bench/history/"),
        "calibration": lambda: client.get("/policy/bench/calibration/"),
        "export": lambda: client.get("/policy/bench/export"),
        "audit": lambda: client.get("/audit/"),
    }
    timed: dict[str, tuple[float, float, int]] = {}
    for name, request in pages.items():
        assert request().status_code == 200, name  # warm-up: templates compiled, connection open
        walls, cpus = [], []
        for _ in range(args.repeat):
            w0, c0 = time.perf_counter(), time.process_time()
            with CaptureQueriesContext(connection) as queries:
                assert request().status_code == 200, name
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
        timed[name] = (statistics.median(walls), statistics.median(cpus), len(queries.captured_queries))
    figures = {
        "nodes": args.nodes, "production_pods": production, "pending": args.pending,
        "preflight_load_s": statistics.median(loads), "preflight_engine_s": statistics.median(engines),
        "preflight_request_s": timed["pre-flight POST"][0], "preflight_request_cpu_s": timed["pre-flight POST"][1],
        "preflight_request_queries": timed["pre-flight POST"][2],
        "evictions": len(result.evictions), "new_evictions": result.new_evictions,
        "placeable_current": result.placeable_current, "placeable_proposed": result.placeable_proposed,
        "pages": {name: {"wall_s": w, "cpu_s": c, "queries": q} for name, (w, c, q) in timed.items()},
        "load_average_1m": os.getloadavg()[0],
    }
    import numpy as np

    from kalena_web.inventory.models import Workload

    requests = np.array(list(Workload.objects.filter(cluster=cluster, kind=Workload.BATCH)
                             .values_list("request", flat=True)), dtype=float).reshape(-1, 8)
    figures["pending_request_mean"] = {"cpu_cores": float(requests[:, 0].mean() / 1000.0) if len(requests) else 0.0,
                                       "ram_gib": float(requests[:, 1].mean() / 2**30) if len(requests) else 0.0}
    print(f"Kalena policy pre-flight, {args.nodes} nodes, {production} production pods, {args.pending} pending "
          f"(mean request {figures['pending_request_mean']['cpu_cores']:.2f} cores, "
          f"{figures['pending_request_mean']['ram_gib']:.2f} GiB; median of {args.repeat}; load average {figures['load_average_1m']:.2f}):")
    print(f"  pre-flight engine {figures['preflight_engine_s']:.3f} s (read {figures['preflight_load_s']:.3f} s); "
          f"end to end (console POST) {figures['preflight_request_s']:.3f} s wall, "
          f"{figures['preflight_request_cpu_s']:.3f} s CPU, {figures['preflight_request_queries']} queries")
    print(f"  μ 1.15 → 1.3 evicts {figures['evictions']} now ({figures['new_evictions']} new); placeable "
          f"{figures['placeable_current']} → {figures['placeable_proposed']} of {args.pending} (engine scheduler)")
    print("  policy pages, server time (wall / CPU, queries):")
    for name, (w, c, q) in timed.items():
        print(f"    {name:<16} {w * 1000:7.0f} ms / {c * 1000:5.0f} ms  {q:3d}")
    if args.summary_json:
        args.summary_json.write_text(json.dumps(figures, indent=2))
    return 0
