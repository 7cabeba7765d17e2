"""``kalena bench estimation --workers 1 2 --samples N``: estimation throughput with 1, 2, …
real Celery worker processes draining the same pre-filled queue.

For each worker count: ``--samples`` samples (every workload of the replicated Irina cluster,
round after round, 10 s apart) are stored through the real ingest path (checks, entries, the
group write) with estimation *not* requested, so they wait as pending batches; then the workers
start, every shard's ``kalena.ledger.estimate`` is queued, and the time until no batch is left
pending gives samples/s. Each round continues the previous one's timeline, so every count
drains the same amount of the same kind of work. 2 vCPUs are shared with PostgreSQL and Redis
here: the figures are reported, not held to a ratio.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def _prefill(nodes, *, samples: int, t0: float, progress: bool) -> tuple[int, float]:
    """Store about ``samples`` pending samples from ``t0`` on; returns ``(stored, next t0)``."""
    from django.conf import settings

    from kalena_web.telemetry.ingest import prepare_message
    from kalena_web.telemetry.selectors import node_view_load
    from kalena_web.telemetry.storage import store_entries
    from kalena_web.telemetry.validation import Limits

    views = {n.id: node_view_load(node_id=n.id, shards=settings.KALENA_ESTIMATION_SHARDS) for n in nodes}
    limits = Limits(max_age_s=10 * 365 * 86400.0)
    stored, round_no, entries = 0, 0, []
    seq = int(t0)
    while stored < samples:
        ts = t0 + 10.0 * round_no
        for n in nodes:
            if not n.workloads or stored >= samples:
                continue
            seq += 1
            records = [{"workload": w.name, "name": w.name, "kind": "kubernetes", "tier": "service", "priority": 0,
                        "ts": ts, "stale": False, "usage": _usage(w.request, round_no), "request": _usage(w.request, 0),
                        "limit": _usage(w.request, 0), "reservation": _usage(w.request, 0)} for w in n.workloads]
            message = {"type": "samples", "v": 1, "batch_id": f"{n.name}:{seq}", "node": n.name, "ts": ts,
                       "interval_s": 10.0, "node_sample": None, "samples": records}
            entries.append(prepare_message(message, view=views[n.id], now_s=time.time(), received_s=time.time(),
                                           limits=limits))
            stored += len(records)
            if len(entries) >= 500:
                store_entries(entries, now_s=time.time(), estimate=False)
                entries = []
        round_no += 1
        if progress:
            print(f"  pre-filled {stored:,} samples", end="\r", flush=True)
    if entries:
        store_entries(entries, now_s=time.time(), estimate=False)
    if progress:
        print()
    return stored, t0 + 10.0 * round_no


def _usage(request, round_no: int) -> dict:
    f = 0.2 + 0.05 * (round_no % 7)
    keys = ("cpu_mcpu", "ram_bytes", "gpu_devices", "storage_bytes", "disk_read_bps", "disk_write_bps", "net_in_bps",
            "net_out_bps")
    return {k: (None if k in ("gpu_devices", "storage_bytes") else float(v) * f) for k, v in zip(keys, request)}


def run(args: argparse.Namespace, *, setup) -> dict:
    from celery import current_app

    from kalena_web.cli import benchenv

    print(f"bench estimation: {args.nodes} nodes, {args.samples:,} samples per round, workers {args.workers}")
    env, nodes = setup(args, agents=args.nodes)
    from kalena_web.ledger.models import EstimationRun
    from kalena_web.telemetry.models import IngestBatch

    t0 = time.time() - 3 * 86400.0
    rounds = []
    for workers in args.workers:
        stored, t0 = _prefill(nodes, samples=args.samples, t0=t0, progress=not args.no_progress)
        pending = IngestBatch.objects.filter(estimation_run__isnull=True).count()
        first_run = (EstimationRun.objects.order_by("-id").values_list("id", flat=True).first() or 0)
        with benchenv.processes(env, Path("var/bench-estimation")) as procs:
            for i in range(workers):
                procs.worker(f"estimation-{i}")
            benchenv.wait_celery_ready(current_app, workers=workers)
            meter = benchenv.CpuMeter.for_bench(procs)
            meter.start()
            started = time.monotonic()
            for shard in range(args.shards):
                current_app.send_task("kalena.ledger.estimate", args=[shard])
            while IngestBatch.objects.filter(estimation_run__isnull=True).exists():
                time.sleep(0.05)
            seconds = time.monotonic() - started
            cpu = meter.stop()
        runs = EstimationRun.objects.filter(id__gt=first_run)
        rounds.append({"workers": workers, "samples": stored, "batches": pending, "seconds": round(seconds, 2),
                       "samples_per_s": round(stored / seconds, 1), "estimation_runs": runs.count(), "cpu": cpu})
        print(f"  {workers} worker(s): {stored:,} samples in {seconds:.1f} s → {stored / seconds:,.0f} samples/s "
              f"({runs.count()} runs; machine busy {cpu['machine_busy_fraction']:.0%})")
    base = rounds[0]["samples_per_s"]
    for r in rounds:
        r["speedup_vs_first"] = round(r["samples_per_s"] / base, 2)
    if not args.keep_db:
        from django.db import connections

        connections.close_all()
        benchenv.drop_database(args.database_url)
    return {"nodes": args.nodes, "shards": args.shards, "rounds": rounds,
            "note": "2 vCPUs shared with PostgreSQL and Redis: reported, not held to a ratio"}
