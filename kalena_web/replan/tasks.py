"""Drift loop task (docs/design.md §8: minutes to hours)."""

from __future__ import annotations

from celery import shared_task

from kalena_web.control.loops import run_for_clusters
from kalena_web.replan.services import drift_pass


@shared_task(name="kalena.replan.drift", acks_late=True, ignore_result=True)
def drift(cluster_id: int | None = None, now_s: float | None = None) -> dict[str, str]:
    """Drift and re-plan recommendations for every live cluster (per-cluster lock)."""
    return run_for_clusters("drift", lambda cluster, now: drift_pass(cluster=cluster, now_s=now), now_s=now_s,
                            cluster_id=cluster_id)
