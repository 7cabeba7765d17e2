"""Control loop tasks (docs/design.md §8): escalation."""

from __future__ import annotations

from celery import shared_task

from kalena_web.archive.evictions import evictions_record
from kalena_web.control.escalation import escalation_pass
from kalena_web.control.loops import run_for_clusters
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.policy.models import PolicyApplied
from kalena_web.policy.services import policy_apply


@shared_task(name="kalena.control.escalate", acks_late=True, ignore_result=True)
def escalate(cluster_id: int | None = None, now_s: float | None = None) -> dict[str, str]:
    """Drain and cool down every node whose local mitigation did not converge (per cluster lock)."""
    def body(cluster, now):
        evictions_record(cluster=cluster, now_s=now)  # the agents' evictions count toward a storm
        policy = policy_apply(cluster_id=cluster.id, part=PolicyApplied.ESCALATION, now_s=now).policy
        return escalation_pass(cluster=cluster, orchestrator=orchestrator_for(cluster), now_s=now,
                               policy=policy.escalation)
    return run_for_clusters("escalation", body, now_s=now_s, cluster_id=cluster_id)


@shared_task(name="kalena.control.evict", acks_late=False, ignore_result=True)
def evict_forwarded(*, cluster_id: int, workload_id: str, grace_s: float, reason: str, reply_key: str) -> str:
    """Stop a pod for a console that holds no orchestrator credentials
    (:mod:`kalena_web.control.forwarding`); the answer goes back under ``reply_key``. Not
    acknowledged late: a stop that a dead worker may have half done is reported by the console's
    timeout, never repeated behind its back."""
    from kalena_web.control.forwarding import evict_and_reply
    from kalena_web.inventory.models import Cluster

    cluster = Cluster.objects.get(id=cluster_id)
    return evict_and_reply(cluster=cluster, workload_id=workload_id, grace_s=grace_s, reason=reason,
                           reply_key=reply_key, orchestrator=orchestrator_for(cluster, direct=True))
