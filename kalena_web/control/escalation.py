"""Escalation (docs/design.md §8) and the node-pressure bookkeeping it reads.

* :func:`node_pressure_observe` — called for every node-level reading an agent reports: keeps
  ``NodeCondition.pressure_since_s``, the start of the node's current unbroken episode of
  non-compressible pressure (working set ≥ ``evict_threshold_ratio · C`` or PSI memory
  ``some`` avg10 ≥ its threshold) while the reservation ledger ``Σ r > C`` on ram.
* :func:`escalation_pass` — for every node: :func:`kalena_engine.escalation.decide_escalation`
  on its episode and recent evictions; an escalated node has its batch drained through the
  orchestrator port (each drained pod requeued, with a why-evicted record) and is made
  slack-ineligible for the cooldown, the reason shown in the console and API.
* An eviction the orchestrator refuses for now (a PodDisruptionBudget's 429,
  :class:`~agents.orchestrators.base.EvictionRefused`) or does not perform (any other refusal —
  a 500, a 403 from missing RBAC — or a timeout: only a pod that is gone counts as evicted)
  leaves the pod running with its reservation, writes no why-evicted record, is named in the escalation's detail, and is
  retried by :func:`eviction_retries_run` with backoff (``RETRY_BASE_S`` doubling to
  ``RETRY_MAX_S``: 10, 20, 40 … 300 s after each refusal) until it is evicted once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from django.db import transaction

from agents.orchestrators import EvictionUncertain, Orchestrator, OrchestratorError, WorkloadGone
from kalena_engine.escalation import EscalationPolicy, decide_escalation
from kalena_engine.mitigation.eviction import PressureSignal, pressure_fires
from kalena_engine.policy import EvictionPolicy
from kalena_engine.resources import RAM
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.models import Escalation, EvictionRetry, NodeCondition
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.lifecycle import batch_evicted
from kalena_web.telemetry.models import MitigationEvent


def node_pressure_observe(*, node: Node, ts: float, working_set_bytes: float | None,
                          psi_some_avg10_pct: float | None = None, psi_full_avg10_pct: float | None = None,
                          policy: EvictionPolicy | None = None) -> bool:
    """Fold one node reading into its pressure episode; returns whether the node is in one.

    A reading without a working set or PSI changes nothing.
    """
    policy = policy or EvictionPolicy()
    if working_set_bytes is None and psi_some_avg10_pct is None:
        return False
    ledger = LiveNodeLedger.objects.get(node=node)
    capacity = float(ledger.capacity[RAM])
    reserved = float(ledger.prod_reservation[RAM]) + float(ledger.batch_reservation[RAM])
    signal = PressureSignal(dimension=RAM, working_set=float(working_set_bytes or 0.0),
                            psi_some_avg10_pct=psi_some_avg10_pct, psi_full_avg10_pct=psi_full_avg10_pct)
    pressure, _ = pressure_fires(signal, capacity, policy)
    in_episode = pressure and reserved > capacity
    with transaction.atomic():
        condition = NodeCondition.objects.select_for_update().get(node=node)
        if in_episode and condition.pressure_since_s is None:
            condition.pressure_since_s = ts
        elif not in_episode:
            condition.pressure_since_s = None
        condition.updated_s = max(condition.updated_s, ts)
        condition.save(update_fields=["pressure_since_s", "updated_s"])
    return in_episode


@dataclass
class EscalationReport:
    nodes: int = 0
    escalated: list[str] = field(default_factory=list)
    drained: int = 0
    errors: list[str] = field(default_factory=list)


def escalation_pass(*, cluster: Cluster, orchestrator: Orchestrator, now_s: float,
                    policy: EscalationPolicy | None = None, grace_s: float = 30.0) -> EscalationReport:
    """Escalate every node that needs it (see module doc). Idempotent: a node already in its
    cooldown is not escalated again; a drained pod is requeued once."""
    policy = policy or EscalationPolicy()
    report = EscalationReport()
    eviction_retries_run(cluster=cluster, orchestrator=orchestrator, now_s=now_s, report=report)
    nodes = list(Node.objects.filter(cluster=cluster).select_related("condition", "live_ledger").order_by("row"))
    report.nodes = len(nodes)
    since = now_s - policy.window_s
    evictions: dict[int, list[float]] = {}
    # Every recorded eviction, plus the agents' eviction reports not yet recorded (a why-evicted
    # record follows once its report settles, kalena_web.archive.cursors): a storm counts at once.
    recorded = set()
    for node_id, t, key in EvictionRecord.objects.filter(cluster=cluster, time_s__gte=since).exclude(
            cause="escalation").values_list("node_id", "time_s", "source_key"):
        evictions.setdefault(node_id, []).append(t)
        recorded.add(key)
    for event_id, node_id, t in MitigationEvent.objects.filter(
            node__cluster=cluster, action="evict", ts__gte=since).values_list("id", "node_id", "ts"):
        if f"agent:{event_id}" not in recorded:
            evictions.setdefault(node_id, []).append(t)
    for node in nodes:
        condition = node.condition
        decision = decide_escalation(
            now_s=now_s, pressure_since_s=condition.pressure_since_s,
            eviction_times_s=np.array(evictions.get(node.id, []), dtype=np.float64),
            telemetry_stale=node.live_ledger.stale, ineligible_until_s=condition.slack_ineligible_until_s,
            policy=policy,
        )
        if not decision.escalate:
            continue
        drained, refused = _drain(node, orchestrator, now_s=now_s, reason=decision.reason, detail=decision.detail,
                                  grace_s=grace_s, report=report)
        detail = decision.detail + "".join(f"; eviction of {name} refused: {why}" for name, why in refused)
        with transaction.atomic():
            NodeCondition.objects.filter(id=condition.id).update(
                slack_ineligible_until_s=decision.ineligible_until_s, pressure_since_s=None,
                ineligible_reason=f"escalated ({decision.reason}): {decision.detail}"[:300], updated_s=now_s)
            Escalation.objects.create(node=node, time_s=now_s, reason=decision.reason, detail=detail[:300],
                                      drained=drained, until_s=decision.ineligible_until_s)
        report.escalated.append(node.name)
        report.drained += len(drained)
    return report


RETRY_BASE_S = 10.0
RETRY_MAX_S = 300.0


def _retry_delay_s(attempts: int) -> float:
    """Backoff after the ``attempts``-th refusal: 10, 20, 40, … capped at 300 s."""
    return min(RETRY_MAX_S, RETRY_BASE_S * 2 ** max(0, attempts - 1))


def _evict_one(pod: BatchPod, orchestrator: Orchestrator, *, now_s: float, grace_s: float, cause: str,
               detail: dict, source_key: str, report: EscalationReport) -> OrchestratorError | None:
    """Evict one bound pod; returns the orchestrator's refusal or failure (the pod keeps running
    and its reservation; retried), else None (evicted, or already gone). A call that timed out
    (:class:`~agents.orchestrators.base.EvictionUncertain`) may still land: the retry then finds
    the pod gone (404), or the watch reports it gone first and the retry records the eviction."""
    name = pod.workload.name
    try:
        orchestrator.evict(name, grace_s=grace_s if pod.source != BatchPod.WATCH else pod.grace_s,
                           reason=f"{cause}: {detail.get('escalation', '')} {detail.get('why', '')}".strip())
    except WorkloadGone as exc:
        report.errors.append(str(exc))  # gone already: still take it off the ledger
    except OrchestratorError as exc:  # EvictionRefused (429), another refusal or a timeout: not evicted
        report.errors.append(str(exc))
        return exc
    _record_eviction(pod, time_s=now_s, cause=cause, detail=detail, source_key=source_key)
    batch_evicted(pod=pod, now_s=now_s, reason=f"{cause}: {detail.get('escalation', '')}")
    return None


def _record_eviction(pod: BatchPod, *, time_s: float, cause: str, detail: dict, source_key: str,
                     node_id: int | None = None) -> None:
    EvictionRecord.objects.get_or_create(
        source_key=source_key,
        defaults=dict(cluster_id=pod.cluster_id, node_id=node_id or pod.workload.node_id, workload=pod.workload,
                      workload_name=pod.workload.name, time_s=time_s, cause=cause, tier="batch",
                      priority=pod.workload.priority, detail=detail))


def _drain(node: Node, orchestrator: Orchestrator, *, now_s: float, reason: str, detail: str, grace_s: float,
           report: EscalationReport) -> tuple[list[str], list[tuple[str, str]]]:
    drained, refused = [], []
    pods = BatchPod.objects.filter(workload__node=node, state=BatchPod.BOUND).select_related("workload")
    for pod in pods:
        name = pod.workload.name
        why = {"escalation": reason, "why": detail, "limit_breach": False}
        refusal = _evict_one(pod, orchestrator, now_s=now_s, grace_s=grace_s, cause="escalation", detail=why,
                             source_key=f"escalation:{node.id}:{now_s:.3f}:{name}", report=report)
        if refusal is None:
            drained.append(name)
            continue
        refused.append((name, str(refusal)))
        EvictionRetry.objects.update_or_create(pod=pod, defaults=dict(
            cause="escalation", detail=f"{reason}: {detail}"[:300], attempts=1, first_s=now_s,
            next_s=now_s + _retry_delay_s(1), refusal=str(refusal)[:500],
            uncertain=isinstance(refusal, EvictionUncertain)))
    if drained:
        from kalena_web.policy.audit import audit

        audit("node.drain", cluster_name=node.cluster.name, target=node.name, actor_kind="loop", actor="escalation",
              after={"reason": reason, "drained": drained[:100]})
    return drained, refused


def eviction_retry_settle(*, pod: BatchPod, now_s: float, evicted: bool = False) -> bool:
    """Forget the eviction retry of a pod that is no longer bound (it ended, went, or its name
    now holds a new object). When the last attempt timed out and the pod went without ending on
    its own (``gone``), or the orchestrator reports it evicted (``evicted``), that eviction
    landed: it is recorded with its cause and why-evicted (``landed_after_timeout``). Returns
    whether it was recorded."""
    retry = EvictionRetry.objects.filter(pod=pod).first()
    if retry is None:
        return False
    landed = retry.uncertain and (evicted or (pod.gone and pod.outcome == "gone"))
    if landed:
        reason, _, detail = retry.detail.partition(": ")
        node_id = pod.workload.node_id or Node.objects.filter(
            cluster_id=pod.cluster_id, name=pod.ran_on).values_list("id", flat=True).first()
        _record_eviction(pod, time_s=pod.ended_s or now_s, cause=retry.cause, node_id=node_id,
                         detail={"escalation": reason, "why": detail, "limit_breach": False,
                                 "refused_before": retry.attempts, "last_refusal": retry.refusal,
                                 "landed_after_timeout": True},
                         source_key=f"retry:{pod.id}:{retry.first_s:.3f}")
    retry.delete()
    return landed


def eviction_retries_run(*, cluster: Cluster, orchestrator: Orchestrator, now_s: float,
                         report: EscalationReport | None = None) -> int:
    """Retry every refused eviction that is due; returns how many were evicted now. A pod that
    ended meanwhile is forgotten — unless the last attempt timed out and the pod is gone: that
    eviction landed, and is recorded with its cause. A refusal again doubles the wait
    (:func:`_retry_delay_s`)."""
    report = report or EscalationReport()
    done = 0
    for retry in EvictionRetry.objects.filter(pod__cluster=cluster, next_s__lte=now_s).select_related("pod__workload"):
        pod = retry.pod
        reason, _, detail = retry.detail.partition(": ")  # stored as f"{reason}: {detail}" by _drain
        why = {"escalation": reason, "why": detail, "limit_breach": False,
               "refused_before": retry.attempts, "last_refusal": retry.refusal}
        if pod.state != BatchPod.BOUND or pod.workload.node_id is None:
            eviction_retry_settle(pod=pod, now_s=now_s)
            continue
        refusal = _evict_one(pod, orchestrator, now_s=now_s, grace_s=pod.grace_s, cause=retry.cause, detail=why,
                             source_key=f"retry:{pod.id}:{retry.first_s:.3f}", report=report)
        if refusal is None:
            retry.delete()
            report.drained += 1
            done += 1
        else:
            retry.attempts += 1
            retry.next_s = now_s + _retry_delay_s(retry.attempts)
            retry.refusal = str(refusal)[:500]
            retry.uncertain = isinstance(refusal, EvictionUncertain)
            retry.save(update_fields=["attempts", "next_s", "refusal", "uncertain"])
    return done
