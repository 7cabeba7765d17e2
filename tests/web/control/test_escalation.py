"""Escalation (docs/design.md §8): eviction storms and non-converging pressure drain a node's batch
through the orchestrator port and make it slack-ineligible; stale telemetry never escalates."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.policy import Policy
from kalena_engine.resources import GIB
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.escalation import node_pressure_observe
from kalena_web.control.models import Escalation, LoopRun, NodeCondition
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.control.tasks import escalate
from kalena_web.inventory.models import Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass


def place(cluster, n: int, now_s: float = 1000.0) -> None:
    for i in range(n):
        batch_submit(cluster=cluster, name=f"batch/job-{i}", owner="job", request={"cpu": 500.0, "ram": GIB},
                     now_s=now_s)
    scheduling_pass(cluster=cluster, orchestrator=orchestrator_for(cluster), policy=Policy(), now_s=now_s,
                    rng=np.random.default_rng(0))


def node_with_batch(cluster) -> Node:
    return Node.objects.filter(cluster=cluster, production__kind="batch").distinct().first()


def record_eviction(node, t: float, i: int) -> None:
    EvictionRecord.objects.create(cluster=node.cluster, node=node, workload_name=f"batch/x-{i}", time_s=t,
                                  cause="priority", source_key=f"agent:{node.id}:{i}")


def test_eviction_storm_drains_batch_and_cools_the_node_down(live) -> None:
    place(live, 6)
    node = node_with_batch(live)
    on_node = BatchPod.objects.filter(workload__node=node, state=BatchPod.BOUND).count()
    assert on_node > 0
    for i, t in enumerate((1100.0, 1250.0, 1390.0)):  # 3 evictions within 300 s by the node's agent
        record_eviction(node, t, i)
    assert escalate(now_s=1400.0) == {"home": "done"}
    condition = NodeCondition.objects.get(node=node)
    assert condition.slack_ineligible_until_s == 2000.0  # 1400 + 600 s cooldown
    assert "eviction_storm" in condition.ineligible_reason
    (escalation,) = Escalation.objects.filter(node=node)
    assert len(escalation.drained) == on_node
    assert not BatchPod.objects.filter(workload__node=node, state=BatchPod.BOUND).exists()
    assert EvictionRecord.objects.filter(node=node, cause="escalation").count() == on_node
    ledger = LiveNodeLedger.objects.get(node=node)
    assert not np.any(ledger.batch_request)  # the drained pods left the ledger at once
    # the node takes no batch during its cooldown; the requeued pods go elsewhere
    scheduling_pass(cluster=live, orchestrator=orchestrator_for(live), policy=Policy(), now_s=1401.0,
                    rng=np.random.default_rng(1))
    assert not BatchPod.objects.filter(workload__node=node, state=BatchPod.BOUND).exists()
    # idempotent: the next run does not escalate the cooling node again
    escalate(now_s=1415.0)
    assert Escalation.objects.filter(node=node).count() == 1
    assert LoopRun.objects.filter(loop="escalation", outcome="done").count() == 2


def test_pressure_that_does_not_converge_escalates_after_t_esc(live) -> None:
    place(live, 6)
    node = node_with_batch(live)
    ledger = LiveNodeLedger.objects.get(node=node)
    capacity = ledger.capacity[1]
    # Σ r > C on ram and the working set at 97 % of C: the agent's mitigation has not relieved it
    LiveNodeLedger.objects.filter(id=ledger.id).update(
        prod_reservation=[*ledger.prod_reservation[:1], capacity * 1.05, *ledger.prod_reservation[2:]])
    for t in (1000.0, 1010.0, 1020.0):
        assert node_pressure_observe(node=node, ts=t, working_set_bytes=0.97 * capacity)
    assert NodeCondition.objects.get(node=node).pressure_since_s == 1000.0
    escalate(now_s=1025.0)  # 25 s < T_esc 30 s
    assert not Escalation.objects.exists()
    escalate(now_s=1031.0)  # 31 s > 30 s
    assert Escalation.objects.get(node=node).reason == "not_converged"
    # a reading back under the threshold ends the episode
    node_pressure_observe(node=node, ts=1040.0, working_set_bytes=0.5 * capacity)
    assert NodeCondition.objects.get(node=node).pressure_since_s is None


def test_stale_telemetry_never_escalates(live) -> None:
    place(live, 6)
    node = node_with_batch(live)
    for i, t in enumerate((1100.0, 1250.0, 1390.0)):
        record_eviction(node, t, i)
    LiveNodeLedger.objects.filter(node=node).update(stale=True)
    escalate(now_s=1400.0)
    assert not Escalation.objects.exists()
    assert BatchPod.objects.filter(workload__node=node, state=BatchPod.BOUND).exists()


def test_a_drain_is_in_the_audit_log_with_the_loop_as_actor(live) -> None:
    """Issue 15: every drain is an audit entry (who: the escalation loop; what: the node)."""
    from kalena_web.policy.models import AuditEntry

    place(live, 6)
    node = node_with_batch(live)
    for i, t in enumerate((1100.0, 1250.0, 1390.0)):
        record_eviction(node, t, i)
    assert not AuditEntry.objects.filter(action="node.drain").exists()
    escalate(now_s=1400.0)
    (entry,) = AuditEntry.objects.filter(action="node.drain")
    assert (entry.actor_kind, entry.actor, entry.cluster_name, entry.target) == ("loop", "escalation", "home", node.name)
