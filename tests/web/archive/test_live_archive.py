"""The live archive: raw samples fold into minute rows (idempotently), and the agents' eviction
actions become why-evicted records that requeue the evicted batch and count toward storms."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.policy import Policy
from kalena_engine.resources import GIB
from kalena_web.archive.cursors import SETTLE_S
from kalena_web.archive.evictions import evictions_record
from kalena_web.archive.models import EvictionRecord, UsageRollup
from kalena_web.archive.samples import samples_rollup
from kalena_web.control.models import Escalation
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.control.tasks import escalate
from kalena_web.inventory.models import Workload
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass
from kalena_web.telemetry.models import IngestBatch, MitigationEvent, Sample

_seq = iter(range(1, 10**6))
LATER = 5000.0  # every batch of these tests has settled by then


def batch(node, kind="samples", ts=1000.0, stored_s=None) -> IngestBatch:
    return IngestBatch.objects.create(node=node, batch_id=f"{node.name}:{next(_seq)}", kind=kind, shard=0, ts=ts,
                                      received_s=ts, stored_s=ts if stored_s is None else stored_s, estimation_run=0)


def sample(b, workload, ts, cpu, ram) -> Sample:
    return Sample(batch=b, node_id=b.node_id, workload=workload, ts=ts, cpu_mcpu=cpu, ram_bytes=ram)


def test_samples_fold_into_minutes_once(live) -> None:
    postgres = Workload.objects.get(cluster=live, name="database/postgres-0")  # q = 1 core, 2 GiB
    b = batch(postgres.node)
    Sample.objects.bulk_create([sample(b, postgres, 1000.0 + 10 * i, cpu, 0.5 * GIB)
                                for i, cpu in enumerate((200.0, 400.0, 1200.0, 600.0))])  # 960–1030 s: 2 minutes
    assert samples_rollup(cluster=live, now_s=LATER) == 4
    rows = {r.bucket_s: r for r in UsageRollup.objects.filter(workload=postgres)}
    assert sorted(rows) == [960.0, 1020.0]
    first = rows[960.0]  # ts 1000, 1010 → cpu 200, 400
    assert (first.samples, first.usage_mean[0], first.usage_peak[0], first.above_request) == (2, 300.0, 400.0, 0)
    second = rows[1020.0]  # ts 1020, 1030 → 1200 (above the 1-core request), 600
    assert second.above_request == 1 and second.above_limit == 1 and second.usage_peak[0] == 1200.0
    assert second.reservation[0] >= 1000.0  # r never below what the estimator holds (q until samples)
    assert samples_rollup(cluster=live, now_s=LATER) == 0  # the cursor moved: nothing is folded twice
    Sample.objects.bulk_create([sample(batch(postgres.node), postgres, 1035.0, 800.0, None)])
    assert samples_rollup(cluster=live, now_s=LATER) == 1
    merged = UsageRollup.objects.get(workload=postgres, bucket_s=1020.0)
    assert merged.samples == 3 and merged.usage_mean[0] == pytest.approx((1200 + 600 + 800) / 3)
    assert merged.usage_mean[1] == pytest.approx(0.5 * GIB)  # the unmeasured ram (NULL) took no part


def test_a_batch_that_commits_late_with_a_lower_id_is_not_skipped(live) -> None:
    """Two writers: the one that took the lower batch id commits after the other. The cursor
    waits until both have settled, then folds both; neither is read twice."""
    postgres = Workload.objects.get(cluster=live, name="database/postgres-0")
    late = batch(postgres.node, stored_s=1010.0)   # lower id, stored (and visible) later
    early = batch(postgres.node, stored_s=1000.0)  # higher id, stored first
    Sample.objects.bulk_create([sample(early, postgres, 1000.0, 300.0, GIB), sample(late, postgres, 1001.0, 500.0, GIB)])
    assert samples_rollup(cluster=live, now_s=1000.0 + SETTLE_S + 1) == 0  # `late` is not settled: nothing moves
    assert samples_rollup(cluster=live, now_s=1010.0 + SETTLE_S + 1) == 2
    assert UsageRollup.objects.get(workload=postgres).usage_peak[0] == 500.0
    assert samples_rollup(cluster=live, now_s=LATER) == 0


def test_raw_samples_are_pruned_only_after_the_archive_rolled_them_up(live) -> None:
    from kalena_web.telemetry.services import telemetry_prune

    postgres = Workload.objects.get(cluster=live, name="database/postgres-0")
    b = batch(postgres.node)
    Sample.objects.bulk_create([sample(b, postgres, 1000.0, 300.0, GIB)])
    assert telemetry_prune(before_s=LATER) == 0 and Sample.objects.count() == 1  # not yet in a minute row
    assert samples_rollup(cluster=live, now_s=LATER) == 1
    assert telemetry_prune(before_s=LATER) == 1 and Sample.objects.count() == 0
    assert UsageRollup.objects.get(workload=postgres).samples == 1


def bound_pods(live, n=6):
    for i in range(n):
        batch_submit(cluster=live, name=f"batch/j-{i}", owner="j", request={"cpu": 200.0, "ram": GIB}, now_s=1000.0)
    scheduling_pass(cluster=live, orchestrator=orchestrator_for(live), policy=Policy(), now_s=1000.0,
                    rng=np.random.default_rng(0))
    return list(BatchPod.objects.filter(cluster=live, state=BatchPod.BOUND).select_related("workload__node"))


def agent_evicts(pod, ts: float) -> MitigationEvent:
    w = pod.workload
    return MitigationEvent.objects.create(
        batch=batch(w.node, kind="action", ts=ts), node=w.node, ts=ts, action="evict", reason="priority",
        workload=w, workload_ref=w.name, workload_name=w.name, tier="batch", priority=w.priority,
        trigger_source="psi-trigger", trigger_resource="memory",
        numbers={"dimension": "ram", "capacity": 15.75 * GIB, "working_set": 15.1 * GIB, "ledger_before": 16.2 * GIB,
                 "ledger_after": 15.2 * GIB, "acute": False, "reservation": GIB, "usage": GIB, "limit": GIB},
        result_ok=True, result={})


def test_agent_evictions_become_why_evicted_records_and_requeue_the_pod(live) -> None:
    pod = bound_pods(live)[0]
    node = pod.workload.node
    before = LiveNodeLedger.objects.get(node=node).batch_request[1]
    agent_evicts(pod, 1100.0)
    assert evictions_record(cluster=live, now_s=1101.0) == 0  # not settled yet
    assert evictions_record(cluster=live, now_s=1100.0 + SETTLE_S + 1) == 1
    record = EvictionRecord.objects.get(workload=pod.workload)
    assert record.cause == "priority" and record.dimension == "ram" and record.node == node
    assert record.detail["working_set"] == 15.1 * GIB and record.detail["limit_breach"] is False
    pod.refresh_from_db()
    assert pod.state == BatchPod.PENDING and pod.requeues == 1
    assert LiveNodeLedger.objects.get(node=node).batch_request[1] == pytest.approx(before - GIB)
    assert evictions_record(cluster=live, now_s=1200.0) == 0  # idempotent
    assert EvictionRecord.objects.count() == 1


def test_three_agent_evictions_in_five_minutes_escalate_the_node(live) -> None:
    pods = bound_pods(live)
    node = pods[0].workload.node
    same = [p for p in pods if p.workload.node == node]
    assert len(same) >= 1
    for i, t in enumerate((1100.0, 1200.0, 1300.0)):
        agent_evicts(same[0], t) if i == 0 else MitigationEvent.objects.create(
            batch=batch(node, kind="action", ts=t), node=node, ts=t, action="evict", reason="priority",
            workload_ref=f"batch/gone-{i}", workload_name=f"batch/gone-{i}", tier="batch", priority=0,
            trigger_source="poll", numbers={"dimension": "ram"}, result_ok=True, result={})
    escalate(now_s=1310.0)  # the third report has not settled into a record yet: it counts all the same
    assert Escalation.objects.get(node=node).reason == "eviction_storm"
    escalate(now_s=1310.0 + SETTLE_S)
    assert EvictionRecord.objects.filter(node=node, cause="priority").count() == 3
    assert Escalation.objects.filter(node=node).count() == 1  # in its cooldown: not escalated twice


def test_live_volatility_is_the_engines_tracker_over_the_minute_rows(live) -> None:
    from kalena_engine.placement import VolatilityTracker
    from kalena_web.archive.live import node_volatility
    from kalena_web.control.models import NodeCondition

    led = LiveNodeLedger.objects.filter(node__cluster=live).select_related("node").first()
    zero = [0.0] * 8
    now = 100_000.0
    # production reservation 10, 14, 14 cores at 2 h, 1 h and 0 h ago (h = 3600 s, so α = 0.5 each step):
    # m 10 → 12 → 13, v 0 → 0.5 · (0 + 0.5 · 16) = 4 → 0.5 · (4 + 0.5 · 4) = 3: σ = √3 cores
    for ago_h, cores in ((2, 10.0), (1, 14.0), (0, 14.0)):
        prod = [cores * 1000.0, *zero[1:]]
        UsageRollup.objects.create(cluster=live, resolution="1m", bucket_s=now - 3600.0 * ago_h, node=led.node,
                                   samples=1, usage_mean=zero, usage_peak=zero, reservation=prod, request=zero,
                                   limit=zero, batch_request=zero, prod_reservation=prod)
    node_volatility(cluster=live, now_s=now)
    got = NodeCondition.objects.get(node=led.node).volatility
    capacity_cores = led.capacity[0] / 1000.0
    tracker = VolatilityTracker(3600.0)
    for t, cores in ((now - 7200, 10.0), (now - 3600, 14.0), (now, 14.0)):
        tracker.update(t, np.array([[cores * 1000.0] + [0.0] * 7]))
    assert got == pytest.approx(float(tracker.ratio(np.array([led.capacity]))[0]))
    assert got == pytest.approx(3 ** 0.5 / capacity_cores)      # not the plain σ of the last hour (0)


def test_an_agent_eviction_is_in_the_audit_log_once(live) -> None:
    """Issue 15: every eviction is an audit entry — who (the node's agent), what, before/after."""
    from kalena_web.policy.models import AuditEntry

    pod = bound_pods(live)[0]
    agent_evicts(pod, 1100.0)
    evictions_record(cluster=live, now_s=1100.0 + SETTLE_S + 1)
    evictions_record(cluster=live, now_s=1200.0 + SETTLE_S)
    (entry,) = AuditEntry.objects.filter(action="eviction")
    assert (entry.actor_kind, entry.actor, entry.target) == ("agent", f"agent of {pod.workload.node.name}",
                                                            pod.workload.name)
    assert entry.before == {"ledger": 16.2 * GIB} and entry.after == {"ledger": 15.2 * GIB, "reason": "priority"}
