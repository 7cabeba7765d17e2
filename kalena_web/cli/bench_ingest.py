"""``kalena bench ingest`` and ``kalena bench estimation``: the control plane's ingest path
and estimation loop on real PostgreSQL, Redis, Daphne and Celery worker processes (loopback
only, bounded in count and time; prints figures, not a timed test).

``ingest``: a dedicated database (recreated), a live cluster of ``--agents`` nodes
(:mod:`kalena_web.cli.bench_cluster`), a token per node, Daphne and ``--workers`` estimation
workers with production settings, then ``--agents`` simulated agents
(:mod:`kalena_web.cli.bench_agents`) streaming ``--rate`` samples/s for ``--seconds``.
Afterwards the database is read: ``samples_stored`` counts stored samples matching a sent
``(node, workload, ts)``; ``samples_lost = samples_sent − samples_stored`` (never from acks);
``ingest_to_ledger`` runs from each sample's send time (its batch's ``ts``) to the commit of the
estimation run that applied it (:class:`~kalena_web.ledger.models.EstimationRun`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/kalena_bench_ingest"
DEFAULT_REDIS = "redis://127.0.0.1:6379/14"


def add_parsers(which: argparse._SubParsersAction) -> None:
    ingest = which.add_parser("ingest", help="agent ingest → estimation on PostgreSQL, Redis, Daphne, Celery",
                              description=__doc__.split("\n\n")[1])
    ingest.add_argument("--agents", type=int, default=620, help="concurrent agent connections = nodes (620)")
    ingest.add_argument("--rate", type=float, default=5000.0, help="samples/s across all agents (5000)")
    ingest.add_argument("--seconds", type=float, default=60.0, help="streaming time (60)")
    _common(ingest)
    ingest.set_defaults(handler=handle_ingest)
    est = which.add_parser("estimation", help="estimation throughput with 1, 2, … worker processes",
                           description="Pre-fill pending sample batches, drain them with N real Celery worker "
                                       "processes, print samples/s for each N.")
    est.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to measure (1 2)")
    est.add_argument("--samples", type=int, default=200_000, help="samples pre-filled for each count (200,000)")
    est.add_argument("--nodes", type=int, default=620, help="cluster size (620)")
    _common(est, workers=False)
    est.set_defaults(handler=handle_estimation)


def _common(parser: argparse.ArgumentParser, *, workers: bool = True) -> None:
    if workers:
        parser.add_argument("--workers", type=int, default=1, help="estimation worker processes (1)")
    parser.add_argument("--shards", type=int, default=16, help="KALENA_ESTIMATION_SHARDS (16)")
    parser.add_argument("--database-url", default=DEFAULT_DB,
                        help=f"PostgreSQL database to (re)create for the run ({DEFAULT_DB})")
    parser.add_argument("--redis-url", default=DEFAULT_REDIS, help=f"Redis database, flushed ({DEFAULT_REDIS})")
    parser.add_argument("--keep-db", action="store_true", help="keep the database afterwards")
    parser.add_argument("--summary-json", type=Path, help="also write the figures to this JSON file")
    parser.add_argument("--no-progress", action="store_true", help="no progress lines")


def _setup(args: argparse.Namespace, *, agents: int):
    """Recreate the database, configure Django for it, import the cluster, create tokens.
    Returns ``(env for child processes, SimNodes)``."""
    from kalena_web.cli import benchenv

    benchenv.recreate_database(args.database_url)
    benchenv.check_redis(args.redis_url)
    env = dict(os.environ, DATABASE_URL=args.database_url, REDIS_URL=args.redis_url,
               KALENA_ESTIMATION_SHARDS=str(args.shards), DJANGO_SETTINGS_MODULE="kalena_web.settings",
               KALENA_LOG_LEVEL="WARNING")
    os.environ.update({k: env[k] for k in ("DATABASE_URL", "REDIS_URL", "KALENA_ESTIMATION_SHARDS",
                                           "DJANGO_SETTINGS_MODULE")})
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    return env, _cluster(agents)


def _cluster(n_nodes: int):
    from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads
    from kalena_web.cli.bench_agents import SimNode, SimWorkload
    from kalena_web.cli.bench_cluster import replicate
    from kalena_web.cli.inputs import DEFAULTS
    from kalena_web.cli.paths import data_path
    from kalena_web.control.services import live_cluster_import
    from kalena_web.inventory.fields import encode_vector
    from kalena_web.inventory.models import Node, Workload
    from kalena_web.telemetry.services import agent_token_create

    workloads = load_workloads(data_path(DEFAULTS["workloads"]))
    infra, workloads, blueprint = replicate(load_infrastructure(data_path(DEFAULTS["infra"])), workloads,
                                            load_blueprint(data_path(DEFAULTS["blueprint"]), workloads), n_nodes)
    imported = live_cluster_import(name="bench", infra=infra, workloads=workloads, blueprint=blueprint,
                                   now_s=time.time())
    by_node: dict[int, list] = {}
    for wid, node_id, name, request in Workload.objects.filter(cluster=imported.cluster).values_list(
            "id", "node_id", "name", "request"):
        by_node.setdefault(node_id, []).append(SimWorkload(wid, name, tuple(request)))
    sims = []
    for node in Node.objects.filter(cluster=imported.cluster).order_by("row"):
        token, _ = agent_token_create(node=node)
        sims.append(SimNode(id=node.id, name=node.name, token=token, capacity=tuple(encode_vector(node.allocatable)),
                            workloads=tuple(by_node.get(node.id, ()))))
    return sims


def _percentiles(values: list[float], qs=(50, 99)) -> list[float | None]:
    import numpy as np

    return [float(np.percentile(values, q)) if values else None for q in qs]


def _wait_drained(timeout_s: float) -> int:
    """Poll until no sample batch waits for estimation; returns how many still wait."""
    from celery import current_app

    from kalena_web.telemetry.models import IngestBatch

    end = time.monotonic() + timeout_s
    swept = 0.0
    while True:
        left = IngestBatch.objects.filter(estimation_run__isnull=True).count()
        if left == 0 or time.monotonic() > end:
            return left
        if time.monotonic() - swept > 10:
            current_app.send_task("kalena.ledger.sweep")  # re-queues any shard whose request was coalesced away
            swept = time.monotonic()
        time.sleep(0.25)


def _stored_and_latency(sent_keys: list[tuple[int, int, float]]) -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT node_id, workload_id, ts FROM telemetry_sample")
        stored = set(cursor.fetchall())
        cursor.execute(
            "SELECT percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY COALESCE(r.committed_s, r.applied_s) - b.ts),"
            " max(COALESCE(r.committed_s, r.applied_s) - b.ts), count(*), count(DISTINCT r.id)"
            " FROM telemetry_sample s JOIN telemetry_ingestbatch b ON b.id = s.batch_id"
            " JOIN ledger_estimationrun r ON r.id = b.estimation_run")
        (p50, p99), worst, estimated, runs = cursor.fetchone()
        cursor.execute("SELECT floor(stored_s) AS s, sum(samples) FROM telemetry_ingestbatch GROUP BY 1 ORDER BY 1")
        per_second = [int(n) for _, n in cursor.fetchall()][1:-1]    # full seconds only
    matched = sum(1 for key in sent_keys if key in stored)
    return {"samples_stored": matched, "samples_in_database": len(stored), "samples_estimated": estimated,
            "stored_samples_per_s_min_1s": min(per_second) if per_second else None,
            "stored_samples_per_s_mean": round(sum(per_second) / len(per_second), 1) if per_second else None,
            "estimation_runs": runs, "ingest_to_ledger_p50_ms": round(p50 * 1000, 1) if p50 is not None else None,
            "ingest_to_ledger_p99_ms": round(p99 * 1000, 1) if p99 is not None else None,
            "ingest_to_ledger_max_ms": round(worst * 1000, 1) if worst is not None else None}


def handle_ingest(args: argparse.Namespace) -> int:
    from kalena_web.cli import benchenv
    from kalena_web.cli.bench_agents import run_agents

    print(f"bench ingest: {args.agents} agents, {args.rate:g} samples/s for {args.seconds:g} s, "
          f"{args.workers} estimation worker(s), database {args.database_url}")
    env, nodes = _setup(args, agents=args.agents)
    workloads = sum(len(n.workloads) for n in nodes)
    print(f"cluster: irina-186-3d replicated to {len(nodes)} nodes, {workloads} production pods; "
          f"each agent sends every {workloads / args.rate:.2f} s")
    port = benchenv.free_port()
    summary: dict = {}
    with benchenv.processes(env, Path("var/bench-ingest")) as procs:
        procs.daphne(port)
        for i in range(args.workers):
            procs.worker(f"estimation-{i}")
        from celery import current_app

        benchenv.wait_celery_ready(current_app, workers=args.workers)
        meter = benchenv.CpuMeter.for_bench(procs)

        def progress(stats, elapsed: float) -> None:
            if not args.no_progress:
                print(f"  t={elapsed:5.0f} s  sent {stats.samples_sent:>9,}  acked {stats.samples_acked:>9,}  "
                      f"connections {stats.connected}", flush=True)

        meter.start()
        stats = asyncio.run(run_agents(nodes, url=f"ws://127.0.0.1:{port}/agent/v1/ws", rate=args.rate,
                                       seconds=args.seconds, progress=progress))
        cpu = meter.stop()
        left = _wait_drained(120.0)
        summary = _summary(args, stats, cpu, left, workloads)
    summary.update(_stored_and_latency(stats.sent_keys))
    summary["samples_lost"] = summary["samples_sent"] - summary["samples_stored"]
    if not args.keep_db:
        from django.db import connections

        connections.close_all()
        benchenv.drop_database(args.database_url)
    _print(summary, args.summary_json)
    return 0


def _summary(args, stats, cpu: dict, left: int, workloads: int) -> dict:
    seconds = [stats.sent_per_second[s] for s in range(int(stats.send_started_s) + 1,
                                                       int(stats.send_started_s + args.seconds))]
    ack50, ack99 = _percentiles(stats.ack_latency_s)
    return {
        "agents": args.agents, "connected": stats.connected, "connect_failures": len(stats.connect_failures),
        "nodes": args.agents, "workloads": workloads, "rate_target": args.rate, "seconds": args.seconds,
        "samples_sent": stats.samples_sent, "samples_acked": stats.samples_acked,
        "batches_sent": stats.batches_sent, "batches_acked": stats.batches_acked,
        "rejected_by_reason": dict(stats.rejected), "server_errors": len(stats.errors),
        "sent_samples_per_s": round(stats.samples_sent / args.seconds, 1),
        "sent_samples_per_s_min_1s": min(seconds) if seconds else None,
        "ack_latency_p50_ms": round(ack50 * 1000, 1) if ack50 is not None else None,
        "ack_latency_p99_ms": round(ack99 * 1000, 1) if ack99 is not None else None,
        "batches_pending_after_drain": left, "workers": args.workers, "shards": args.shards, "cpu": cpu,
        "cluster": "irina-186-3d (real Kuberina blueprint) replicated", "examples_of_errors": stats.errors[:3]
        + stats.connect_failures[:3],
    }


def _print(summary: dict, path: Path | None) -> None:
    print(json.dumps(summary, indent=2))
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"summary written to {path}")


def handle_estimation(args: argparse.Namespace) -> int:
    from kalena_web.cli.bench_estimation import run

    summary = run(args, setup=_setup)
    _print(summary, args.summary_json)
    return 0
