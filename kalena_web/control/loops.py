"""Running a control loop body once per live cluster under its lock, recording each run.

Every loop task is thin: ``run_for_clusters(loop, body)`` takes the per-cluster lock
``<loop>:<cluster id>`` (docs/design.md §8, §12), calls ``body(cluster, now_s)`` and records a
:class:`~kalena_web.control.models.LoopRun` with what it returned. A run whose lock is held
elsewhere is recorded as ``skipped``; an exception is recorded as ``failed`` and re-raised
(Celery retries by redelivery; the body must be idempotent).

Every loop — scheduling, escalation, the batch-capacity publisher, archive, drift — holds its
lock the same way: ``KALENA_LOOP_LOCK_TTL_S`` (5 s), renewed every TTL/3 while the run lasts
(:func:`~kalena_web.control.locks.loop_lock`). A run may take minutes (drift, a large archive
rollup) and keeps its lock; a worker killed mid-run leaves a lock that Redis drops at most one
TTL after the last renewal, so the next beat tick after that runs the loop again on a live
worker: with a 5 s scheduling period, a pass within 5 + 5 = 10 s of the kill (when no worker
survives, plus a new one's start-up) instead of the 60 s a fixed TTL sized for the longest run
held it (``kalena bench faults``, row ``worker-kill``, measures it).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass

from django.conf import settings

from agents.logs import log_context
from kalena_web.control.locks import loop_lock
from kalena_web.control.services import loop_run_record
from kalena_web.inventory.models import Cluster


def run_for_clusters(loop: str, body: Callable[[Cluster, float], object], *, now_s: float | None = None,
                     cluster_id: int | None = None) -> dict[str, str]:
    """Run ``body`` for every live cluster (or the one of ``cluster_id``) under the cluster's
    ``loop`` lock (module doc); returns ``{cluster name: outcome}`` (``done`` or ``skipped``)."""
    clusters = Cluster.objects.filter(kind=Cluster.LIVE)
    if cluster_id is not None:
        clusters = clusters.filter(id=cluster_id)
    outcomes = {}
    for cluster in clusters:
        started = time.time()
        now = started if now_s is None else now_s
        lock = loop_lock(f"{loop}:{cluster.id}", ttl_s=settings.KALENA_LOOP_LOCK_TTL_S)
        with log_context(cluster=cluster.name), lock as taken:
            if not taken:
                loop_run_record(loop=loop, cluster=cluster, started_s=started, finished_s=time.time(),
                                outcome="skipped", detail={"why": "lock held by another worker"})
                outcomes[cluster.name] = "skipped"
                continue
            try:
                result = body(cluster, now)
            except Exception as exc:
                loop_run_record(loop=loop, cluster=cluster, started_s=started, finished_s=time.time(),
                                outcome="failed", detail={"error": f"{type(exc).__name__}: {exc}"})
                raise
            detail = asdict(result) if is_dataclass(result) else (result if isinstance(result, dict) else {})
            loop_run_record(loop=loop, cluster=cluster, started_s=started, finished_s=time.time(),
                            outcome="done", detail=detail)
            outcomes[cluster.name] = "done"
    return outcomes
