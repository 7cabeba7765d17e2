"""Escalation (DESIGN §8) and the node-pressure bookkeeping it reads.

* :func:`node_pressure_observe` — called for every node-level reading an agent reports: keeps
  ``NodeCondition.pressure_since_s``, the start of the node's current unbroken episode of
  non-compressible pressure (working set ≥ ``evict_threshold_ratio · C`` or PSI memory
  ``some`` avg10 ≥ its threshold) while the reservation ledger ``Σ r > C`` on ram.
* :func:`escalation_pass` — for every node: :func:`kalena_engine.escalation.decide_escalation`
  on its episode and recent evictions; an escalated node has its batch drained through the
  orchestrator port (each drained pod requeued, with a why-evicted record) and is made
  slack-ineligible for the cooldown, the reason shown in the console and API.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from django.db import transaction

from agents.orchestrators import Orchestrator, OrchestratorError
from kalena_engine.escalation import EscalationPolicy, decide_escalation
from kalena_engine.mitigation.eviction import PressureSignal, pressure_fires
from kalena_engine.policy import EvictionPolicy
from kalena_engine.resources import RAM
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.models import Escalation, NodeCondition
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_requeue
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
        drained = _drain(node, orchestrator, now_s=now_s, reason=decision.reason, detail=decision.detail,
                         grace_s=grace_s, report=report)
        with transaction.atomic():
            NodeCondition.objects.filter(id=condition.id).update(
                slack_ineligible_until_s=decision.ineligible_until_s, pressure_since_s=None,
                ineligible_reason=f"escalated ({decision.reason}): {decision.detail}", updated_s=now_s)
            Escalation.objects.create(node=node, time_s=now_s, reason=decision.reason, detail=decision.detail,
                                      drained=drained, until_s=decision.ineligible_until_s)
        report.escalated.append(node.name)
        report.drained += len(drained)
    return report


def _drain(node: Node, orchestrator: Orchestrator, *, now_s: float, reason: str, detail: str, grace_s: float,
           report: EscalationReport) -> list[str]:
    drained = []
    pods = BatchPod.objects.filter(workload__node=node, state=BatchPod.BOUND).select_related("workload")
    for pod in pods:
        name = pod.workload.name
        try:
            orchestrator.evict(name, grace_s=grace_s, reason=f"escalation: {reason}")
        except OrchestratorError as exc:
            report.errors.append(str(exc))  # gone already: still take it off the ledger
        EvictionRecord.objects.get_or_create(
            source_key=f"escalation:{node.id}:{now_s:.3f}:{name}",
            defaults=dict(cluster_id=node.cluster_id, node=node, workload=pod.workload, workload_name=name,
                          time_s=now_s, cause="escalation", tier="batch", priority=pod.workload.priority,
                          detail={"escalation": reason, "why": detail, "limit_breach": False}),
        )
        batch_requeue(pod=pod, now_s=now_s, reason=f"escalation: {reason}")
        drained.append(name)
    if drained:
        from kalena_web.policy.audit import audit

        audit("node.drain", cluster_name=node.cluster.name, target=node.name, actor_kind="loop", actor="escalation",
              after={"reason": reason, "drained": drained[:100]})
    return drained
