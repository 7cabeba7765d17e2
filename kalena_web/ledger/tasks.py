"""Estimation tasks (docs/design.md §8), thin: take ids, call :mod:`kalena_web.ledger.estimation`.

* ``kalena.ledger.estimate(shard)`` — drain one node shard's pending sample batches under the
  Redis lock ``estimation:<shard>`` (TTL ``KALENA_ESTIMATION_LOCK_TTL_S``, 6 s, renewed while
  held so a killed worker's shard resumes within about that), publishing every
  changed node's ledger after each commit. Requested after every ingest commit, coalesced: at
  most one request per shard is queued (a cache key, cleared when the task starts, so samples
  committed while it runs request a new one).
* ``kalena.ledger.sweep()`` — periodic (:mod:`kalena_web.control.schedules`): marks nodes whose
  telemetry stopped (case C1), re-queues shards that still have pending batches (a lost
  request, a worker killed mid-run — its reserved tasks wait for Redis's visibility timeout, so
  the sweep queues regardless of the request marker — a task skipped because its lock was held), and every
  ``PRUNE_EVERY_S`` deletes applied raw samples older than ``KALENA_RETENTION_RAW_S``.

acks_late + reject_on_worker_lost (settings): a task whose worker died is redelivered; it is
idempotent because a batch is marked in the same commit that applies it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from kalena_web.control.locks import loop_lock
from kalena_web.ledger import estimation
from kalena_web.ledger.publisher import publish

log = logging.getLogger(__name__)

QUEUED_TTL_S = 10  # a request marker outlives a lost task by this much at most (the sweep covers it)
PRUNE_EVERY_S = 300  # raw samples past KALENA_RETENTION_RAW_S are deleted at most this often


def _queued_key(shard: int) -> str:
    return f"kalena:estimation:queued:{shard}"


def estimation_request(*, shards: Iterable[int], countdown: float | None = None, force: bool = False) -> list[int]:
    """Queue ``kalena.ledger.estimate`` for each shard that has no request queued yet (``force``:
    for each shard, marked queued or not); returns the shards queued.

    ``force`` is the sweep's: a request can be marked queued and yet never run — its task was
    reserved by a worker that was then SIGKILLed, and Redis redelivers it only after the
    visibility timeout (300 s) — so the sweep does not trust the marker."""
    queued = []
    for shard in shards:
        if force:
            cache.set(_queued_key(shard), 1, timeout=QUEUED_TTL_S)
        if force or cache.add(_queued_key(shard), 1, timeout=QUEUED_TTL_S):
            estimate.apply_async(args=[int(shard)], countdown=countdown)
            queued.append(int(shard))
    return queued


@shared_task(name="kalena.ledger.estimate", acks_late=True, ignore_result=True)
def estimate(shard: int) -> dict:
    """Apply shard ``shard``'s pending sample batches (module doc); returns what it did."""
    cache.delete(_queued_key(shard))
    with loop_lock(f"estimation:{shard}", ttl_s=settings.KALENA_ESTIMATION_LOCK_TTL_S) as taken:
        if not taken:
            # Another worker holds the shard and may have read its batches before ours committed.
            estimation_request(shards=[shard], countdown=0.5)
            return {"shard": shard, "outcome": "skipped"}
        deadline = time.monotonic() + settings.KALENA_ESTIMATION_BUDGET_S
        totals = {"shard": shard, "outcome": "done", "runs": 0, "batches": 0, "samples": 0, "applied": 0}
        while True:
            result = estimation.estimation_run(shard=shard, max_batches=settings.KALENA_ESTIMATION_MAX_BATCHES)
            if result.run_id is None:
                break
            publish(result.points)
            totals["runs"] += 1
            for key in ("batches", "samples", "applied"):
                totals[key] += getattr(result, key)
            if not result.more:
                break
            if time.monotonic() > deadline:
                estimation_request(shards=[shard])
                break
    return totals


@shared_task(name="kalena.ledger.sweep", acks_late=True, ignore_result=True)
def sweep(now_s: float | None = None) -> dict:
    """Mark nodes with stopped telemetry stale and re-queue shards with pending batches."""
    now = time.time() if now_s is None else now_s
    marked = 0
    for node_ids in estimation.stale_candidates(now_s=now).values():
        points = estimation.stale_sweep(node_ids=node_ids, now_s=now)
        marked += len(points)
        publish(points)
    queued = estimation_request(shards=estimation.pending_shards(), force=True)
    pruned = 0
    if cache.add("kalena:telemetry:prune", 1, timeout=PRUNE_EVERY_S):
        from kalena_web.telemetry.services import telemetry_prune

        pruned = telemetry_prune(before_s=now - settings.KALENA_RETENTION_RAW_S)
    return {"stale_marked": marked, "shards_queued": queued, "batches_pruned": pruned}
