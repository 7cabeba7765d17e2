"""What co-location costs in the replay (docs/design.md §11, issue 13): throttled batch finishes later,
production contention, OOM kills by tier, escalation drains — and the summary fields that
report them."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.replay.summary import SummaryAccumulator
from kalena_engine.resources import CPU, RAM
from tests.engine.replay.synthetic import synthetic_simulator
from tests.worked import WORKED_POLICY


def run(sim, steps: int, on_step=None) -> tuple[list, dict]:
    acc = SummaryAccumulator(target=np.ones(len(sim.state.capacity), dtype=bool),
                             production_pods=len(sim.state.production.ids), step_s=sim.clock.step_s)
    records = []
    for i in range(steps):
        record = sim.step(i, i * sim.clock.step_s)
        acc.add(record)
        records.append(record)
        if on_step is not None:
            on_step(i)
    return records, acc.summary()


def test_throttled_batch_finishes_later_and_the_summary_says_by_how_much() -> None:
    # One node of 16 cores; production 2 × 3 cores (idle until t = 1200 s). At t = 900 s each prod r has
    # decayed to 3 · 2^(−900/600) = 1.06 cores → slack 13.9 cores → all 6 batch pods of 2 cores are placed.
    sim = synthetic_simulator(nodes=1, steps=60, tasks=[(900.0, 6, 2.0, 1.0, 1200.0, 0)])
    sim.usage.shapes[20:, :, 0] = 1.0  # from t = 1200 s production uses its full 6 cores
    records, summary = run(sim, 60)
    assert sum(e.count for r in records for e in r.events if e.kind == "placed") == 6
    # 900 → 1200 s at full speed: 300 s of 1200 done. Then B = 16 − 6 = 10 cores for 12 cores of demand:
    # λ = 10/12 → each pod runs at 0.833 → the remaining 900 s take 1080 s → done at 2280 s (not 2100 s).
    [done] = [e for r in records for e in r.events if e.kind == "completed"]
    assert done.time_s == pytest.approx(2280.0)
    assert done.count == 6 and done.detail["inflation"] == pytest.approx(1380.0 / 1200.0)  # 1.15
    assert summary["completion_inflation_p50"] == summary["completion_inflation_p99"] == pytest.approx(1.15)
    # throttled: 12 − 10 = 2 cores for 1080 s = 0.6 core-hours; production would need 6 + 12 − 16 = 2 cores
    # beside the admitted batch for the same 18 node-steps
    assert summary["throttled_batch_core_hours"] == pytest.approx(0.6)
    assert summary["production_contention_core_hours"] == pytest.approx(0.6)
    assert summary["production_contention_node_steps"] == 18
    # 6 pods × 1380 s = 2.3 pod-hours, no eviction; cpu contention is never an eviction (docs/design.md §7)
    assert summary["batch_pod_hours"] == pytest.approx(2.3)
    assert summary["batch_evicted"] == 0 and summary["batch_evictions_per_100_pod_hours"] == 0.0
    assert summary["production_evictions"] == 0 and summary["oom_kills"] == 0
    # metric 7: each of the 6 pods lost 2280 − 2100 = 180 s to the throttle — every completed pod was slowed
    assert done.detail["throttled_s"] == pytest.approx(180.0)
    progress = summary["batch_forward_progress"]
    assert progress["completed_instances"] == 6 and progress["slowed_share"] == 1.0
    assert progress["throttled_seconds"]["quantiles"]["p50"] == pytest.approx(180.0)
    assert summary["throttled_seconds_p99"] == pytest.approx(180.0)
    # metric 8: while they ran the 6 pods held 12 of the node's 16 − 6 = 10 cores of headroom (all of it)
    assert max(summary["pareto_reserve_yield"]["cpu"]["hourly"]["yield"]) > 0


def test_an_unthrottled_run_has_no_inflation() -> None:
    # the same batch with production idle throughout: done at 900 + 1200 s, nothing throttled
    sim = synthetic_simulator(nodes=1, steps=60, tasks=[(900.0, 6, 2.0, 1.0, 1200.0, 0)])
    records, summary = run(sim, 60)
    [done] = [e for r in records for e in r.events if e.kind == "completed"]
    assert done.time_s == pytest.approx(2100.0)
    assert summary["completion_inflation_p99"] == 1.0 and summary["throttled_batch_core_hours"] == 0.0
    assert summary["production_contention_node_steps"] == 0


class UnderReservingRule:
    """A rule that reserves nothing for production: memory it later uses has no cover."""

    name = "under-reserving"
    pins_batch = True

    def production(self, inputs):
        return np.zeros_like(inputs.usage)


def test_memory_over_capacity_is_an_oom_kill_of_batch_not_production() -> None:
    # 64 GiB node, production reserved at 0 → 15 batch pods of 4 GiB (60 GiB) placed at t = 0.
    sim = synthetic_simulator(nodes=1, steps=10, tasks=[(0.0, 15, 0.1, 4.0, 100_000.0, 0)])
    sim.rule = UnderReservingRule()
    sim.usage.shapes[5:, :, 1] = 1.0  # from step 5 production uses its 2 × 12 GiB
    records, summary = run(sim, 6)
    assert records[0].running_instances == 15
    # step 5: working set 24 + 60 = 84 GiB > 64 by 20; Σ r = 0 + 60 ≤ 64, so node-local eviction does
    # not fire: the kernel kills ⌈20 / 4⌉ = 5 batch pods (BestEffort first), production keeps running
    kills = [e for e in records[5].events if e.kind == "oom_killed"]
    assert sum(e.count for e in kills) == 5 and kills[0].detail["tier"] == "batch"
    assert records[5].running_instances == 10
    assert summary["oom_kills"] == 5 and summary["oom_kills_by_tier"] == {"batch": 5, "service": 0}
    assert summary["production_oom_kills"] == 0
    assert sim.state.pending.sum() == 5  # requeued, not lost
    sim.state.check_invariants()


def test_pressure_that_does_not_converge_escalates_and_drains_the_node() -> None:
    # 64 GiB node; production (2 × 12 GiB requested) idle, so at t = 2400 s its r is 2 × 12 · 2^(−4) =
    # 1.5 GiB and 31 batch pods of 2 GiB (62 GiB) fit. They use 90 % of their request (1.8 GiB).
    policy = WORKED_POLICY.with_eviction(min_run_time_s=600.0)  # young batch is skipped by eviction (T_min)
    sim = synthetic_simulator(nodes=1, steps=70, tasks=[(2400.0, 31, 0.1, 2.0, 100_000.0, 0)], policy=policy)
    sim.state.tasks.usage[:] *= 0.9
    sim.usage.shapes[41:, :, 1] = 0.25  # t = 2460 s: production uses 2 × 3 GiB
    since = {}
    records, summary = run(sim, 52, on_step=lambda i: since.setdefault(i, float(sim.escalation.pressure_since_s[0])))
    # t = 2460: working set 31 · 1.8 + 6 = 61.8 GiB ≥ 0.95 · 64 = 60.8 (not acute: < 63.36) and
    # Σ r = 2 × 1.15 · 3 + 31 · 2 = 68.9 > 64, but every batch pod is younger than T_min: nothing evicted
    assert not [e for e in records[41].events if e.kind == "evicted"]
    assert since[41] == 2460.0 and np.isnan(since[40])  # the episode starts here
    # t = 2520: the episode is 60 s old (> T_esc 30 s) → the live loop's decision: not_converged → drain
    [escalated] = [e for e in records[42].events if e.kind == "escalated"]
    assert escalated.reason == "not_converged" and escalated.count == 31
    assert sum(e.count for e in records[42].events if e.kind == "evicted" and e.reason == "escalation") == 31
    assert records[42].running_instances == 0 and sim.state.pending.sum() == 31
    # slack-ineligible for the 600-s cooldown: nothing placed before t = 3120 s
    assert not [e for r in records[43:] for e in r.events if e.kind == "placed"]
    assert summary["escalations"] == 1 and summary["escalations_by_reason"] == {"not_converged": 1}
    later = [sim.step(i, i * 60.0) for i in range(52, 53)]  # t = 3120: eligible again
    assert sum(e.count for e in later[0].events if e.kind == "placed") > 0


def test_one_eviction_round_is_not_a_storm() -> None:
    # Σ r over C on a spike: one round evicts several pods; the node is not escalated for it
    sim = synthetic_simulator(nodes=1, steps=60, tasks=[(0.0, 8, 0.25, 4.0, 10_000.0, 1), (0.0, 8, 0.25, 4.0, 10_000.0, 0)])
    sim.usage.shapes[:, :, RAM] = 0.1
    sim.usage.shapes[40:, :, RAM] = 1.0
    records, summary = run(sim, 42)
    assert sum(e.count for e in records[40].events if e.kind == "evicted") == 4
    assert summary["escalations"] == 0
    assert records[41].running_instances == 10
    assert records[0].batch_request[0, CPU] > 0
