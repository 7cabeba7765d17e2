"""Running a control loop body once per live cluster under its lock, recording each run.

Every loop task is thin: ``run_for_clusters(loop, body, ttl_s=…)`` takes the per-cluster lock
(DESIGN §8: scheduling, escalation and drift hold one with a TTL), calls ``body(cluster, now_s)``
and records a :class:`~kalena_web.control.models.LoopRun` with what it returned. A run whose
lock is held elsewhere is recorded as ``skipped``; an exception is recorded as ``failed`` and
re-raised (Celery retries by redelivery; the body must be idempotent).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, is_dataclass

from agents.logs import log_context
from kalena_web.control.locks import loop_lock
from kalena_web.control.services import loop_run_record
from kalena_web.inventory.models import Cluster


def run_for_clusters(loop: str, body: Callable[[Cluster, float], object], *, ttl_s: float,
                     now_s: float | None = None, cluster_id: int | None = None) -> dict[str, str]:
    """Run ``body`` for every live cluster (or one); returns ``{cluster name: outcome}``."""
    clusters = Cluster.objects.filter(kind=Cluster.LIVE)
    if cluster_id is not None:
        clusters = clusters.filter(id=cluster_id)
    outcomes = {}
    for cluster in clusters:
        started = time.time()
        now = started if now_s is None else now_s
        with log_context(cluster=cluster.name), loop_lock(f"{loop}:{cluster.id}", ttl_s=ttl_s) as taken:
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
