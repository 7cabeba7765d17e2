"""Writes for the scheduler extender's bind verb: the pod enters Kalena's ledgers in flight at its
request (as a pass's binding does) and is bound through the orchestrator's Binding subresource."""

from __future__ import annotations

from agents.discovery.labels import TIER
from agents.orchestrators import Orchestrator, OrchestratorError
from agents.orchestrators.kubernetes.batch_resources import pod_vectors
from agents.orchestrators.kubernetes.extender import BindingArgs, pod_constraints, pod_priority
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling import services as scheduling
from kalena_web.scheduling.models import BatchPod


class ExtenderBindRefused(Exception):
    """The bind cannot be done; the message (sent as ``ExtenderBindingResult.Error``) says why."""


def extender_bind(*, cluster: Cluster, binding: BindingArgs, orchestrator: Orchestrator, now_s: float) -> BatchPod:
    """Bind ``binding``'s pod to its node: read the pod (its uid must match), queue it as a watched
    batch pod, debit the node's ledger at its request, then create the Binding.

    Raises:
        ExtenderBindRefused: unknown node, a different pod object (uid), or the orchestrator
            refused (the debit is undone).
    """
    node = Node.objects.filter(cluster=cluster, name=binding.node).first()
    if node is None:
        raise ExtenderBindRefused(f"node {binding.node} is not in Kalena cluster {cluster.name}")
    try:
        pod = orchestrator.pod(binding.ref)
    except OrchestratorError as exc:
        raise ExtenderBindRefused(str(exc)) from None
    meta = pod.get("metadata") or {}
    if binding.pod_uid and meta.get("uid") != binding.pod_uid:
        raise ExtenderBindRefused(f"pod {binding.ref} has uid {meta.get('uid')}, not {binding.pod_uid}")
    requests, limits = pod_vectors(pod)
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    batch_pod, _ = scheduling.batch_observe_pending(
        cluster=cluster, ref=binding.ref, request=requests, limit=limits,
        labels={**(meta.get("labels") or {}), TIER: "batch"}, priority=pod_priority(pod),
        owner=f"{owners[0]['kind']}/{owners[0]['name']}" if owners else "", constraints=pod_constraints(pod),
        grace_s=float((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)), at_s=now_s, now_s=now_s)
    batch_pod = BatchPod.objects.select_related("workload").get(id=batch_pod.id)
    if batch_pod.state != BatchPod.PENDING:
        raise ExtenderBindRefused(f"pod {binding.ref} is {batch_pod.state} in Kalena, not pending")
    version = LiveNodeLedger.objects.get(node=node).version
    if not scheduling._bind_in_ledger([batch_pod], node_id=node.id, version=version, now_s=now_s):
        raise ExtenderBindRefused(f"node {node.name}'s ledger changed while binding: retry")
    try:
        orchestrator.bind(scheduling._spec(batch_pod), node.name)
    except OrchestratorError as exc:
        scheduling.batch_drop(pod=batch_pod, now_s=now_s, reason=str(exc))
        raise ExtenderBindRefused(str(exc)) from None
    return batch_pod
