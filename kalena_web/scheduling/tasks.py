"""Scheduling loop task (docs/design.md §8: event-driven and every few seconds)."""

from __future__ import annotations

import time

import numpy as np
from celery import shared_task
from django.conf import settings
from django.core.cache import cache

from kalena_web.archive.evictions import evictions_record
from kalena_web.control.loops import run_for_clusters
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.control.services import scheduling_pass_metrics_record
from kalena_web.policy.models import PolicyApplied
from kalena_web.policy.services import policy_apply
from kalena_web.scheduling.cycle import scheduling_pass


REQUEST_TTL_S = 2.0  # submissions within this long share one event-driven pass


def scheduling_request(*, cluster_id: int) -> bool:
    """Queue one scheduling pass for the cluster now (docs/design.md §8: event-driven, beside the
    periodic pass) unless one was queued in the last ``REQUEST_TTL_S``; returns whether it
    queued one."""
    if not cache.add(f"kalena:scheduling:requested:{cluster_id}", 1, timeout=REQUEST_TTL_S):
        return False
    schedule.delay(cluster_id=cluster_id)
    return True


@shared_task(name="kalena.scheduling.schedule", acks_late=True, ignore_result=True)
def schedule(cluster_id: int | None = None, now_s: float | None = None) -> dict[str, str]:
    """One scheduling pass per live cluster, under the cluster's lock. A Kubernetes cluster is
    scheduled by the Lease holder of ``kalena watch`` (:mod:`kalena_web.control.leading`), never
    here: one scheduler per cluster."""
    if settings.KALENA_ORCHESTRATOR == "kubernetes":
        return {"skipped": "Kubernetes clusters are scheduled by the lease holder of `kalena watch`"}

    def body(cluster, now):
        evictions_record(cluster=cluster, now_s=now)  # batch the agents evicted is queued again first
        started = time.time()
        policy = policy_apply(cluster_id=cluster.id, part=PolicyApplied.SCHEDULER, now_s=now).policy
        report = scheduling_pass(cluster=cluster, orchestrator=orchestrator_for(cluster), policy=policy,
                                 now_s=now, rng=np.random.default_rng())
        scheduling_pass_metrics_record(cluster=cluster, report=report, started_s=started, finished_s=time.time(),
                                       now_s=now)
        return report
    return run_for_clusters("scheduling", body, now_s=now_s, cluster_id=cluster_id)
