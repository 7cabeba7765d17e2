"""Estimation on real Celery worker processes (Redis broker, PostgreSQL): a worker SIGKILLed
while it holds a shard's transaction loses nothing and double-applies nothing — another worker
applies every batch exactly once and the reservations equal a clean fold of the same samples —
and two workers drain different shards."""

from __future__ import annotations

import signal
import subprocess
import time

import numpy as np
import psycopg
from django.conf import settings

from kalena_engine.estimator import Reservations, apply_samples
from kalena_engine.policy import Policy
from kalena_web.control.locks import shard_of
from kalena_web.inventory.models import Node, Workload
from kalena_web.ledger.models import EstimationRun, WorkloadReservation
from kalena_web.telemetry.ingest import prepare_message
from kalena_web.telemetry.models import IngestBatch
from kalena_web.telemetry.selectors import node_view_load
from kalena_web.telemetry.storage import store_entries
from kalena_web.telemetry.validation import Limits
from tests.web.telemetry.conftest import child_database_url, record, samples, wait_until


def prefill(nodes: list[Node], *, batches: int, t0: float) -> dict[int, list[tuple[float, float, float]]]:
    """Pending sample batches for ``nodes`` (no estimation requested); returns, per workload id,
    its ``(ts, cpu_mcpu, ram_bytes)`` samples."""
    sent: dict[int, list] = {}
    for node in nodes:
        view = node_view_load(node_id=node.id, shards=settings.KALENA_ESTIMATION_SHARDS)
        pods = list(Workload.objects.filter(node=node).values_list("id", "name", "request"))
        for b in range(batches):
            records = []
            for k, (wid, name, request) in enumerate(pods):
                ts = t0 + 10.0 * b + 0.1 * k
                cpu, ram = request[0] * (0.2 + 0.1 * ((b + k) % 7)), request[1] * (0.3 + 0.05 * ((b * k) % 9))
                records.append(record(name, ts, cpu_mcpu=cpu, ram_bytes=ram))
                sent.setdefault(wid, []).append((ts, cpu, ram))
            entry = prepare_message(samples(node.name, b, records, ts=t0 + 10.0 * b + 1), view=view, now_s=time.time(),
                                    received_s=time.time(), limits=Limits())
            assert not entry.rejected
            store_entries([entry], now_s=time.time(), estimate=False)
    return sent


def clean_fold(sent: dict[int, list], imported_s: float) -> dict[int, np.ndarray]:
    """The reservations a single uninterrupted estimator reaches from the same samples."""
    out = {}
    policy = Policy().estimator
    for wid, rows in sent.items():
        w = Workload.objects.get(id=wid)
        q = np.array([w.request])
        usage = np.array([[c, r, 0, 0, 0, 0, 0, 0] for _, c, r in rows])
        pinned = np.zeros((1, 8), dtype=bool)
        pinned[:, 2:4] = True
        state, _ = apply_samples(
            Reservations(value=q.copy(), updated_s=np.array([imported_s]), last_sample_s=np.array([-np.inf])),
            workload=np.zeros(len(rows), dtype=np.int64), time_s=np.array([t for t, _, _ in rows]), usage=usage,
            request=q, limit=np.array([w.limit]), start_s=np.array([-np.inf]), grace_s=np.array([policy.grace_s]),
            pinned=pinned, policy=policy)
        out[wid] = state.value[0]
    return out


def pending() -> int:
    return IngestBatch.objects.filter(estimation_run__isnull=True).count()


def test_a_worker_killed_inside_its_transaction_loses_and_double_applies_nothing(home, services) -> None:
    imported_s = WorkloadReservation.objects.values_list("updated_s", flat=True).first()
    beta = Node.objects.get(cluster=home, name="thinkcentre-beta")
    sent = prefill([beta], batches=30, t0=time.time() - 1000)
    shard = shard_of(beta.name, settings.KALENA_ESTIMATION_SHARDS)
    assert pending() == 30

    # Hold the node's ledger row, so the worker blocks inside its transaction after it has taken
    # (and locked) the shard's batches and read their samples.
    blocker = psycopg.connect(child_database_url())
    blocker.execute("SELECT 1 FROM ledger_livenodeledger WHERE node_id = %s FOR UPDATE", [beta.id])
    first = services.procs.worker("first")
    services.celery().send_task("kalena.ledger.estimate", args=[shard])
    with psycopg.connect(child_database_url(), autocommit=True) as watch:
        def waiting() -> bool:
            return watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                 "AND wait_event_type = 'Lock' AND query LIKE %s",
                                 ["%ledger_livenodeledger%FOR UPDATE%"]).fetchone()[0] == 1
        wait_until(waiting, what="the worker to block on the ledger row inside its transaction")
        first.send_signal(signal.SIGKILL)                           # mid-transaction
        first.wait(10)
        blocker.rollback()
        blocker.close()
        wait_until(lambda: watch.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                         "AND wait_event_type = 'Lock'").fetchone()[0] == 0,
                   what="the dead worker's transaction to roll back")
    assert pending() == 30 and not EstimationRun.objects.exists()   # nothing of it was committed

    services.procs.worker("second")
    client = services.celery()
    # The killed task is not acknowledged; the periodic sweep re-queues the shard (and the dead
    # worker's lock expires after its TTL).
    deadline = time.monotonic() + 90
    while pending() and time.monotonic() < deadline:
        client.send_task("kalena.ledger.sweep")
        time.sleep(1.0)
    assert pending() == 0, services.log("second")
    runs = EstimationRun.objects.all()
    assert sum(r.batches for r in runs) == 30 and sum(r.samples for r in runs) == 30 * len(sent)
    expected = clean_fold(sent, imported_s)
    stored = dict(WorkloadReservation.objects.filter(workload_id__in=list(sent)).values_list("workload_id", "value"))
    for wid, value in expected.items():
        np.testing.assert_allclose(stored[wid], value, rtol=1e-12)


def test_two_workers_share_the_shards_and_never_run_one_shard_twice_at_once(home, services) -> None:
    nodes = list(Node.objects.filter(cluster=home).order_by("row"))
    shards = {shard_of(n.name, settings.KALENA_ESTIMATION_SHARDS) for n in nodes}
    assert len(shards) == 3, "the homelab's three nodes fall into three shards"
    prefill(nodes, batches=40, t0=time.time() - 1000)
    services.env["KALENA_ESTIMATION_MAX_BATCHES"] = "5"             # several runs per shard
    services.procs.worker("w1")
    services.procs.worker("w2")
    client = services.celery()
    for s in sorted(shards) * 2:                                    # both workers get every shard
        client.send_task("kalena.ledger.estimate", args=[s])
    wait_until(lambda: pending() == 0, timeout_s=90, what="the workers to drain every shard")
    runs = list(EstimationRun.objects.order_by("started_s"))
    assert {r.shard for r in runs} == shards and sum(r.batches for r in runs) == 120 and len(runs) >= 24
    for a in runs:                      # the shard lock: never two runs of one shard at the same time
        for b in runs:
            if a.id != b.id and a.shard == b.shard:
                assert a.committed_s <= b.started_s or b.committed_s <= a.started_s


def test_a_worker_that_published_ledgers_stops_on_sigterm(home, services) -> None:
    beta = Node.objects.get(cluster=home, name="thinkcentre-beta")
    prefill([beta], batches=3, t0=time.time() - 1000)
    worker = services.procs.worker("published")
    services.celery().send_task("kalena.ledger.estimate", args=[shard_of(beta.name, settings.KALENA_ESTIMATION_SHARDS)])
    wait_until(lambda: pending() == 0, timeout_s=90, what="the worker to apply the batches (and publish the ledgers)")
    worker.send_signal(signal.SIGTERM)                                # what a rollout sends
    try:
        worker.wait(60)
    except subprocess.TimeoutExpired:
        raise AssertionError("the worker ignored SIGTERM:\n" + services.log("published")[-2000:]) from None
    assert worker.returncode == 0


def test_a_held_shard_lock_is_renewed_and_a_dead_holders_lock_expires_within_its_ttl(home, services) -> None:
    import redis

    beta = Node.objects.get(cluster=home, name="thinkcentre-beta")
    prefill([beta], batches=5, t0=time.time() - 1000)
    shard = shard_of(beta.name, settings.KALENA_ESTIMATION_SHARDS)
    key = f"kalena:lock:estimation:{shard}"
    ttl_s = float(services.env["KALENA_ESTIMATION_LOCK_TTL_S"])     # 3 s for the test workers
    r = redis.Redis.from_url(services.redis_url)
    blocker = psycopg.connect(child_database_url())                   # the run outlasts its TTL: blocked in its transaction
    try:
        blocker.execute("SELECT 1 FROM ledger_livenodeledger WHERE node_id = %s FOR UPDATE", [beta.id])
        worker = services.procs.worker("holder")
        services.celery().send_task("kalena.ledger.estimate", args=[shard])
        wait_until(lambda: r.exists(key), timeout_s=60, what="the worker to take the shard lock")
        ttls_ms = []
        held_until = time.monotonic() + 4 * ttl_s
        while time.monotonic() < held_until:                          # renewed while held
            ttls_ms.append(r.pttl(key))
            time.sleep(0.1)
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        left_at_kill_ms = r.pttl(key)       # what Redis itself will still hold it for (no renewal after the kill)
        wait_until(lambda: not r.exists(key), timeout_s=30, every_s=0.05, what="the dead holder's lock to expire")
    finally:
        blocker.rollback()
        blocker.close()
    assert min(ttls_ms) > 0 and max(ttls_ms) <= ttl_s * 1000, f"the held lock expired: {ttls_ms}"
    # the dead holder's lock lives at most its TTL past the kill: Redis's own countdown, not our wall clock
    assert left_at_kill_ms == -2 or 0 < left_at_kill_ms <= ttl_s * 1000, \
        f"the lock outlives its holder: {left_at_kill_ms} ms"
    assert settings.KALENA_ESTIMATION_LOCK_TTL_S <= 10.0 - 3.0      # the default leaves room to resume within 10 s
    services.procs.worker("next")
    client = services.celery()
    deadline = time.monotonic() + 60
    while pending() and time.monotonic() < deadline:
        client.send_task("kalena.ledger.sweep")
        time.sleep(1.0)
    assert pending() == 0 and sum(run.batches for run in EstimationRun.objects.all()) == 5
