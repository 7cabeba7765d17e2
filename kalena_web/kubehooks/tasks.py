"""Published batch capacity loop (docs/design.md §14): every few seconds, each live cluster's nodes get
their ``kalena.naughtian.io/batch-cpu`` / ``batch-memory`` patched when the decision changed."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from kalena_web.control.loops import run_for_clusters
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.kubehooks.services import batch_capacity_publish
from kalena_web.policy.models import PolicyApplied
from kalena_web.policy.services import policy_apply


@shared_task(name="kalena.kubehooks.publish", acks_late=True, ignore_result=True)
def publish(cluster_id: int | None = None, now_s: float | None = None) -> dict[str, str]:
    """One publication pass per live cluster, under the cluster's lock, with the cluster's current
    policy (its cpu and ram slack buckets are the raise hysteresis); nothing at all unless
    ``KALENA_ORCHESTRATOR=kubernetes`` (only the kubelet re-checks requests)."""
    if settings.KALENA_ORCHESTRATOR != "kubernetes":
        return {}

    def body(cluster, now):
        policy = policy_apply(cluster_id=cluster.id, part=PolicyApplied.PUBLISHER, now_s=now).policy
        buckets = policy.placement.slack_buckets
        return batch_capacity_publish(cluster=cluster, orchestrator=orchestrator_for(cluster), now_s=now,
                                      buckets=(buckets[0], buckets[1]))
    return run_for_clusters("publish", body, now_s=now_s, cluster_id=cluster_id)
