"""Writes for the hooks Kubernetes calls: the scheduler extender's bind verb — the pod enters
Kalena's ledgers in flight at its request (as a pass's binding does) and is bound through the
orchestrator's Binding subresource — and the record of every refused call to the hooks listener
(a counter in ``/metrics/cluster`` and an audit entry saying who and from where)."""

from __future__ import annotations

from collections.abc import Iterable

from agents.discovery.labels import TIER
from agents.orchestrators import Orchestrator, OrchestratorError
from agents.orchestrators.kubernetes.batch_resources import pod_vectors
from agents.orchestrators.kubernetes.extender import (BindingArgs, pod_constraints, pod_priority, pod_uid,
                                                      unmanaged_reason)
from agents.orchestrators.kubernetes.objects import MalformedObject, timestamp_s
from kalena_engine.policy import Policy
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling import lifecycle, observe
from kalena_web.scheduling.queue import spec_of
from kalena_web.scheduling.recording import bind_in_ledger
from kalena_web.scheduling.models import BatchPod

#: The counter of refused calls (``endpoint``, ``reason`` labels), declared in control.metrics.
REFUSED_COUNTER = "kalena_hooks_refused"


class ExtenderBindRefused(Exception):
    """The bind cannot be done; the message (sent as ``ExtenderBindingResult.Error``) says why and
    ``reason`` names the check as data: ``unknown_node``, ``pod_unreadable``, ``uid_mismatch``,
    ``unmanaged``, ``filter``, ``not_pending``, ``ledger_changed`` or ``orchestrator``."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def hooks_refusal_record(*, endpoint: str, reason: str, peer: str, client: str, detail: str,
                         cluster_name: str = "") -> None:
    """Count one refused call to the hooks listener in ``kalena_hooks_refused_total{endpoint,
    reason}`` and audit it (action ``hooks.refused``; actor: the client certificate's subject, or
    ``anonymous``; the peer address and the reason in ``after``).

    ``endpoint``: ``tls`` (the handshake), ``mutate``, ``filter``, ``prioritize``, ``bind`` or
    ``other`` (a path the listener does not serve).

    Every refusal is counted; the audit log gets the first of each (peer host, endpoint, reason)
    per ``KALENA_HOOKS_AUDIT_COALESCE_S`` seconds (a shared cache key; 0: every one), so an
    anonymous client repeating one refused call cannot grow the audit log without bound — the
    counter says how many there were."""
    from django.conf import settings
    from django.core.cache import cache

    from kalena_web.control.services import metric_increment
    from kalena_web.policy.models import AuditEntry
    from kalena_web.policy.services import audit_record

    metric_increment(name=REFUSED_COUNTER, labels={"endpoint": endpoint, "reason": reason})
    host = peer.rsplit(":", 1)[0]  # "host:port": every connection has a port of its own
    window_s = settings.KALENA_HOOKS_AUDIT_COALESCE_S
    if window_s > 0 and not cache.add(f"kalena:hooks-refused:{host}:{endpoint}:{reason}", 1, timeout=window_s):
        return
    audit_record(actor_kind=AuditEntry.CLIENT, actor=client or "anonymous", action="hooks.refused",
                 cluster_name=cluster_name, target=f"{endpoint} from {peer}"[:300],
                 after={"endpoint": endpoint, "reason": reason, "peer": peer[:100], "detail": detail[:300]})


def _created_s(meta: dict) -> float:
    """The pod's creationTimestamp (Unix s; 0 when absent or unreadable): immutable, so the queue
    can tell this object from an earlier one of the same name."""
    try:
        return timestamp_s(meta.get("creationTimestamp"))
    except MalformedObject:
        return 0.0


def extender_bind(*, cluster: Cluster, binding: BindingArgs, orchestrator: Orchestrator, now_s: float,
                  policy: Policy) -> BatchPod:
    """Bind ``binding``'s pod to its node. The pod is read from the API server (never taken from
    the caller): its uid must equal ``binding.pod_uid``, Kalena must manage it
    (:func:`~agents.orchestrators.kubernetes.extender.unmanaged_reason`) and the scheduler's own
    filters (:func:`~kalena_web.kubehooks.selectors.extender_verdicts` under ``policy``) must
    accept the node — a bind the filter verb would refuse is refused. Then it is queued as a
    watched batch pod, the node's ledger is debited at its request, and the Binding is created.
    A refusal changes nothing.

    Raises:
        ExtenderBindRefused: with its ``reason`` (see the class); the orchestrator's refusal undoes
            the debit.
    """
    from kalena_web.kubehooks.selectors import extender_verdicts

    node = Node.objects.filter(cluster=cluster, name=binding.node).first()
    if node is None:
        raise ExtenderBindRefused(f"node {binding.node} is not in Kalena cluster {cluster.name}", reason="unknown_node")
    try:
        pod = orchestrator.pod(binding.ref)
    except OrchestratorError as exc:
        raise ExtenderBindRefused(str(exc), reason="pod_unreadable") from None
    meta = pod.get("metadata") or {}
    if pod_uid(pod) != binding.pod_uid:
        raise ExtenderBindRefused(f"pod {binding.ref} has uid {pod_uid(pod) or '(none)'}, not {binding.pod_uid}",
                                  reason="uid_mismatch")
    unmanaged = unmanaged_reason(pod)
    if unmanaged:
        raise ExtenderBindRefused(unmanaged, reason="unmanaged")
    failed, _ = extender_verdicts(cluster=cluster, pod=pod, node_names=[node.name], now_s=now_s, policy=policy)
    if node.name in failed:
        raise ExtenderBindRefused(f"the filter refuses node {node.name}: {failed[node.name][1]}", reason="filter")
    requests, limits = pod_vectors(pod)
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    batch_pod, _ = observe.batch_observe_pending(
        cluster=cluster, ref=binding.ref, request=requests, limit=limits,
        labels={**(meta.get("labels") or {}), TIER: "batch"}, priority=pod_priority(pod),
        owner=f"{owners[0]['kind']}/{owners[0]['name']}" if owners else "", constraints=pod_constraints(pod),
        grace_s=float((pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)), uid=pod_uid(pod),
        at_s=_created_s(meta) or now_s, now_s=now_s)
    batch_pod = BatchPod.objects.select_related("workload").get(id=batch_pod.id)
    if batch_pod.state != BatchPod.PENDING:
        raise ExtenderBindRefused(f"pod {binding.ref} is {batch_pod.state} in Kalena, not pending",
                                  reason="not_pending")
    version = LiveNodeLedger.objects.get(node=node).version
    if not bind_in_ledger([batch_pod], node_id=node.id, version=version, now_s=now_s):
        raise ExtenderBindRefused(f"node {node.name}'s ledger changed while binding: retry", reason="ledger_changed")
    try:
        orchestrator.bind(spec_of(batch_pod), node.name)
    except OrchestratorError as exc:
        lifecycle.batch_drop(pod=batch_pod, now_s=now_s, reason=str(exc))
        raise ExtenderBindRefused(str(exc), reason="orchestrator") from None
    return batch_pod


# -- published batch capacity (docs/design.md §14) ---------------------------------------------------------

def batch_capacity_publish(*, cluster: Cluster, orchestrator: Orchestrator, now_s: float,
                           buckets: tuple[float, float], raise_interval_s: float = 30.0,
                           node_names: Iterable[str] | None = None) -> int:
    """Decide every node's published ``batch-cpu`` / ``batch-memory`` from its live reservation
    ledger (:func:`kalena_engine.published.publish_batch`: room = S + Σ batch requests, never below
    what admitted, non-terminal batch pods hold — a pod only bound, not yet admitted by the
    kubelet, does not raise it — lowered at once, raised lazily) and patch the nodes whose value
    changed. An orchestrator without the method (Docker, the fake) publishes nothing. A refused
    patch keeps the old value stored (it is tried again next time). ``node_names``: only these
    nodes (a sharded scheduler's share, issue 32); None: every node. Returns the nodes patched."""
    import numpy as np

    from kalena_engine.ledger import NodeLedgers
    from kalena_engine.published import batch_room, publish_batch
    from kalena_web.kubehooks.models import PublishedBatch
    from kalena_web.kubehooks.selectors import held_by_node

    publish = getattr(orchestrator, "publish_batch_capacity", None)
    if publish is None:
        return 0
    ledgers = LiveNodeLedger.objects.filter(node__cluster=cluster).select_related("node").order_by("node__row")
    if node_names is not None:
        ledgers = ledgers.filter(node__name__in=list(node_names))
    ledgers = list(ledgers)
    if not ledgers:
        return 0

    def stack(name: str) -> np.ndarray:
        return np.array([getattr(led, name) for led in ledgers], dtype=np.float64).reshape(len(ledgers), 8)

    view = NodeLedgers(capacity=stack("capacity"), prod_request=stack("prod_request"),
                       prod_reservation=stack("prod_reservation"), batch_request=stack("batch_request"),
                       batch_reservation=stack("batch_reservation"))
    ids = [led.node_id for led in ledgers]
    held, _ = held_by_node(cluster=cluster, admitted_only=True, node_ids=None if node_names is None else ids)
    stored = PublishedBatch.objects.filter(node__cluster=cluster)
    stored = {p.node_id: p for p in (stored if node_names is None else stored.filter(node_id__in=ids))}
    previous = np.array([[stored[led.node_id].cpu_mcpu, stored[led.node_id].memory_bytes] if led.node_id in stored
                         else [np.nan, np.nan] for led in ledgers])
    changed_s = np.array([stored[led.node_id].changed_s if led.node_id in stored else 0.0 for led in ledgers])
    decided = publish_batch(room=batch_room(view), held=np.array([held.get(led.node_id, np.zeros(8))[:2]
                                                                  for led in ledgers]).reshape(len(ledgers), 2),
                            previous=previous, changed_s=changed_s, now_s=now_s, buckets=buckets,
                            raise_interval_s=raise_interval_s)
    patched = 0
    for i in np.flatnonzero(decided.changed):
        led = ledgers[int(i)]
        cpu, memory = (float(v) for v in decided.value[i])
        try:
            publish(led.node.name, cpu_mcpu=int(cpu), memory_bytes=int(memory))
        except OrchestratorError:
            continue
        PublishedBatch.objects.update_or_create(node=led.node, defaults={
            "cpu_mcpu": cpu, "memory_bytes": memory, "changed_s": now_s, "patched_s": now_s})
        patched += 1
    return patched
