"""The simulator's step on a synthetic cluster: placement into slack, eviction on a
production spike, completion, requeue."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.resources import GIB, RAM
from tests.engine.replay.synthetic import synthetic_simulator


def test_spike_evicts_batch_by_priority_and_requeues_it() -> None:
    # One node: 16 cores / 64 GiB, two prod pods of 12 GiB each. Two batch tasks of 8 × 4 GiB arrive
    # at t = 0; the low-priority one (priority 0) arrives second.
    sim = synthetic_simulator(nodes=1, steps=60, tasks=[(0.0, 8, 0.25, 4.0, 10_000.0, 1), (0.0, 8, 0.25, 4.0, 10_000.0, 0)])
    sim.usage.shapes[:, :, 1] = 0.1  # prod at 10 % of its ram request: r decays from q toward 1.15 · 1.2 GiB
    records = [sim.step(i, i * 60.0) for i in range(40)]
    # after 2,400 s each prod r = 1.38 + (12 − 1.38) · 2^(−4) = 2.04 GiB → slack 64 − 4.07 = 59.9 GiB → 14 × 4 GiB
    assert records[-1].running_instances == 14
    placed_first = [e for r in records for e in r.events if e.kind == "placed"]
    assert placed_first[0].time_s == 0.0  # placed at once: r_prod starts at q = 24 GiB, slack 40 GiB
    # production spikes to its full request: r_prod rises at once to min(L, 1.15 u) = 24 GiB
    sim.usage.shapes[40:, :, 1] = 1.0
    spike = sim.step(40, 2400.0)
    evicted = [e for e in spike.events if e.kind == "evicted"]
    assert evicted and all(e.reason == "priority" for e in evicted)
    assert {sim.state.tasks.priority[e.task] for e in evicted} == {0}  # lowest priority goes first
    assert not any(e.kind == "production_evicted" for e in spike.events)
    # Σr = 24 + 56 = 80 GiB > 64: the stop rule takes exactly 16 GiB = 4 instances
    reserved = spike.prod_reservation[0, RAM] + spike.batch_reservation[0, RAM]
    assert reserved <= spike.capacity[0, RAM] + 1e-6
    assert sum(e.count for e in evicted) == 4
    assert sim.state.pending.sum() == 2 + 4  # the 2 never placed + the 4 requeued, not lost
    sim.state.check_invariants()


def test_batch_completes_after_its_duration_and_leaves_the_ledgers() -> None:
    sim = synthetic_simulator(nodes=1, steps=10, tasks=[(0.0, 4, 1.0, 1.0, 90.0, 0)])
    first = sim.step(0, 0.0)
    assert first.running_instances == 4
    second = sim.step(1, 60.0)
    assert second.running_instances == 4
    # time-weighted: the group runs 30 of the 60 s after t = 60
    assert second.batch_request[0, 0] == pytest.approx(4 * 1000 * 0.5)
    third = sim.step(2, 120.0)
    assert third.running_instances == 0
    assert [e.count for e in third.events if e.kind == "completed"] == [4]
    assert third.batch_reservation.sum() == 0
    assert sim.state.completed.sum() == 4


def test_in_flight_placements_debit_at_once() -> None:
    # Case C2 shape on the replay path: 70 GiB of slack, 30 pods of 32 GiB in one pass → exactly 2 placed.
    sim = synthetic_simulator(nodes=1, prod_per_node=0, steps=2, tasks=[(0.0, 30, 0.1, 32.0, 1000.0, 0)])
    sim.state.capacity[0, RAM] = 70 * GIB
    record = sim.step(0, 0.0)
    assert record.running_instances == 2
    assert sim.state.pending.sum() == 28


def test_evicted_job_stays_off_the_node_for_the_cooldown() -> None:
    # Two nodes; the job's batch was just evicted from node 0 at t = 0 (cooldown 600 s).
    sim = synthetic_simulator(nodes=2, steps=20, tasks=[(0.0, 6, 1.0, 1.0, 100_000.0, 0)])
    sim.scheduler.record_eviction(0, 0, 0.0)
    first = sim.step(0, 0.0)
    assert {e.node for e in first.events if e.kind == "placed"} == {1}
    assert sim.scheduler.evictions(599.0).node.tolist() == [0]
    assert sim.scheduler.evictions(600.0).node.tolist() == []  # the window has passed


def test_spike_eviction_starts_a_cooldown() -> None:
    sim = synthetic_simulator(nodes=1, steps=60, tasks=[(0.0, 8, 0.25, 4.0, 10_000.0, 1), (0.0, 8, 0.25, 4.0, 10_000.0, 0)])
    sim.usage.shapes[:, :, 1] = 0.1
    for i in range(40):
        sim.step(i, i * 60.0)
    sim.usage.shapes[40:, :, 1] = 1.0
    spike = sim.step(40, 2400.0)
    evicted = [e for e in spike.events if e.kind == "evicted"]
    assert evicted
    recent = sim.scheduler.evictions(2400.0)
    assert set(recent.node.tolist()) == {0} and set(recent.owner.tolist()) == {"job-1"}  # priority 0 went
    # the requeued pods of job-1 may not come back to node 0 within 600 s, whatever the slack
    later = [sim.step(i, i * 60.0) for i in range(41, 50)]
    assert not [e for r in later for e in r.events if e.kind == "placed" and e.task == 1]
    assert any(w.binding == "cooldown" for w in later[-1].placement.why_pending())


def test_a_node_with_stale_telemetry_takes_no_batch() -> None:
    # Case C1's rule on the replay path: node 0's production samples are older than T_stale.
    sim = synthetic_simulator(nodes=2, steps=4, tasks=[(0.0, 10, 0.5, 1.0, 10_000.0, 0)])
    sim.usage.sample_age_s[:, :2] = 1e6  # pods 0 and 1 live on node 0
    record = sim.step(0, 0.0)
    assert {e.node for e in record.events if e.kind == "placed"} == {1}
    assert record.running_instances == 10


def test_step_record_carries_the_pass_and_its_why_pending() -> None:
    # 16-core nodes with 6 cores of production each: 20 pods of 4 cores → 2 + 2 fit per node? 10 free → 2 each
    sim = synthetic_simulator(nodes=2, steps=2, tasks=[(0.0, 20, 4.0, 1.0, 10_000.0, 0)])
    record = sim.step(0, 0.0)
    assert record.placement is not None and record.placement.placed == 4
    [why] = record.placement.why_pending()
    assert why.workload == "job-0/task" and why.pending == 16 and why.binding == "cpu"
    assert why.shortfall_of("cpu").amount == pytest.approx(2000.0)  # 10 − 2·4 = 2 free of 4 needed
