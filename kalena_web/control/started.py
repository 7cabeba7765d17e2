"""Watch events about batch pods Kalena started itself (Docker, Swarm: submitted through the CLI
or REST, ``BatchPod.source == "rest"``), for the reconciler (:mod:`kalena_web.control.reconciler`).

On Kubernetes a pod object is the orchestrator's and an evicted one is terminal; on Docker and
Swarm Kalena is the pod's owner, so (docs/design.md §14):

* only the *current placement* counts: an event naming another node than the one the pod is
  bound to now, or arriving while the pod is pending again, is about an earlier placement and
  changes nothing (the die of a container the agent evicted after the pod was requeued and
  placed elsewhere);
* ``evicted`` (killed by Kalena's agent or Kalena's own stop, node lost, engine restarted)
  requeues the pod from scratch, exactly once, and closes its owner × node pair for the eviction
  cooldown — the agent's own eviction report, when there is one, is the why-evicted record;
* ``oom`` ends the pod (its own limit) with an ``oom_kill`` why-evicted record carrying the
  container's numbers, unless the agent's eviction report explains it (then it is ``evicted``);
  so does ``failed`` (a Swarm task the agent stopped reads ``failed`` in the managers' list);
* ``succeeded`` / ``failed`` end it (completed, with the outcome);
* ``PodGone`` (its unfinished container vanished) and absence from a full re-list of a ready
  node requeue a bound pod.
"""

from __future__ import annotations

from kalena_web.archive.models import EvictionRecord
from kalena_web.control.models import NodeCondition
from kalena_web.inventory.models import Cluster
from kalena_web.scheduling import lifecycle
from kalena_web.scheduling.models import BatchPod
from kalena_web.telemetry.models import MitigationEvent

#: A pod bound this recently may not have its container listed yet: a re-list leaves it alone.
RELIST_GRACE_S = 30.0


def _current_node(pod: BatchPod) -> str | None:
    w = pod.workload
    return w.node.name if pod.state == BatchPod.BOUND and w.node_id is not None else None


#: why the orchestrator stopped a pod Kalena did not evict, in words (why-evicted, ``describe``)
CAUSE_WORDS = {"node_lost": "node lost", "node_drained": "node drained", "orchestrator": "stopped by the orchestrator"}


def orchestrator_cause(pod: BatchPod, reason: str) -> str:
    """The eviction cause of a pod the orchestrator stopped (not Kalena's agent, not Kalena's
    own eviction): ``node_lost`` (its node or engine was lost: ``NodeLost``), ``node_drained``
    (its node takes no new pods now — a Swarm node drained or paused, a cordoned node — and
    the orchestrator shut its container down), else ``orchestrator``."""
    if reason == "NodeLost":
        return "node_lost"
    if NodeCondition.objects.filter(node_id=pod.workload.node_id, schedulable=False).exists():
        return "node_drained"
    return "orchestrator"


def _agent_evicted(pod: BatchPod) -> bool:
    """An agent reported evicting this placement of the pod (its report is the why-evicted)."""
    w = pod.workload
    since = pod.bound_s or 0.0
    return (MitigationEvent.objects.filter(node_id=w.node_id, action="evict", ts__gte=since, workload_id=w.id).exists()
            or MitigationEvent.objects.filter(node_id=w.node_id, action="evict", ts__gte=since,
                                              workload_name=w.name).exists())


def _record(pod: BatchPod, *, cause: str, at_s: float, why: str, detail: dict) -> None:
    w = pod.workload
    if EvictionRecord.objects.filter(workload=w, node_id=w.node_id, time_s__gte=pod.bound_s or 0.0).exists():
        return
    EvictionRecord.objects.get_or_create(source_key=f"watch:{w.id}:{pod.bound_s or 0:.3f}", defaults=dict(
        cluster_id=pod.cluster_id, node_id=w.node_id, workload=w, workload_name=w.name, time_s=at_s, cause=cause,
        tier="batch", priority=w.priority, dimension=detail.get("dimension", ""),
        detail={"why": why, "limit_breach": False, **detail}))


def finished(pod: BatchPod, *, node: str, outcome: str, reason: str, exit_code: int | None, at_s: float,
             now_s: float) -> bool:
    """Apply ``PodFinished`` to a Kalena-started pod (see module doc); returns whether it changed."""
    if _current_node(pod) != node:
        return False
    if outcome in ("oom", "failed") and _agent_evicted(pod):
        outcome = "evicted"  # the agent stopped it (a Swarm task it stopped reads failed from the task list)
    if outcome == "evicted":
        if not _agent_evicted(pod):
            cause = orchestrator_cause(pod, reason)
            _record(pod, cause=cause, at_s=at_s, why=f"{CAUSE_WORDS[cause]}: stopped on {node}: {reason}", detail={})
        lifecycle.batch_evicted(pod=pod, now_s=now_s, reason=f"{reason} on {node}")
        return True
    if outcome == "oom":
        _record(pod, cause="oom_kill", at_s=at_s, why=f"the kernel killed it on {node}: {reason}",
                detail={"dimension": "ram", "exit_code": exit_code, "limit": pod.workload.limit[1],
                        "request": pod.workload.request[1]})
    return lifecycle.batch_finish(pod=pod, now_s=now_s, state=BatchPod.COMPLETED, outcome=outcome,
                                   reason=f"{reason} (exit {exit_code})" if exit_code is not None else reason)


def gone(pod: BatchPod, *, now_s: float) -> bool:
    """Apply ``PodGone``: a bound pod whose container vanished unfinished is requeued."""
    if _current_node(pod) is None:
        return False
    lifecycle.batch_evicted(pod=pod, now_s=now_s, reason="its container was removed")
    return True


def relisted(cluster: Cluster, *, pods: frozenset[str], nodes: frozenset[str], at_s: float, now_s: float) -> bool:
    """Apply ``Resynced``: a pod bound (long enough ago) on a ready listed node whose container
    the list does not hold is requeued."""
    ready = set(NodeCondition.objects.filter(node__cluster=cluster, ready=True, gone=False)
                .values_list("node__name", flat=True)) & set(nodes)  # (a list of thousands of names as parameters costs more)
    changed = False
    for pod in (BatchPod.objects.filter(cluster=cluster, source=BatchPod.REST, state=BatchPod.BOUND,
                                        bound_s__lt=at_s - RELIST_GRACE_S).select_related("workload__node")):
        if pod.workload.name in pods or pod.workload.node is None or pod.workload.node.name not in ready:
            continue
        lifecycle.batch_evicted(pod=pod, now_s=now_s, reason="absent from the engine's re-list")
        changed = True
    return changed
