"""Reservation rules of ``kalena evaluate policies``: Koordinator's BatchResource formula, the
VPA recommender's histogram target, the oracles — each with its worked numbers."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.replay.rules import (
    KoordinatorRule, OracleRule, RuleContext, RuleInputs, VpaRule, forward_max, histogram_bucket,
    histogram_bucket_starts, histogram_percentile, make_rule,
)
from kalena_engine.replay.state import Production
from kalena_engine.resources import CPU, GIB, RAM, ir_vector
from tests.engine.replay.synthetic import synthetic_simulator


def two_pod_context(allocatable_cores: float = 64.0, capacity_cores: float = 63.0) -> RuleContext:
    request = np.array([ir_vector(cpu=20, ram=64), ir_vector(cpu=20, ram=64)])
    production = Production(ids=("a/p-0", "a/p-1"), node=np.array([0, 0]), request=request, limit=request.copy())
    allocatable = np.array([ir_vector(cpu=allocatable_cores, ram=256)])
    capacity = np.array([ir_vector(cpu=capacity_cores, ram=255)])
    return RuleContext(production=production, usage=None, allocatable=allocatable, capacity=capacity, step_s=60.0)


def usage_of(cpu_cores: list[float], ram_gib: list[float]) -> np.ndarray:
    return np.array([ir_vector(cpu=c, ram=r) for c, r in zip(cpu_cores, ram_gib, strict=True)])


KOORDINATOR_CASES = {
    "docstring example": (
        # A = 64 cores, DaemonSets 64 − 63 = 1; 5-min means 6 and 10 → 64 · 0.6 − 1 − 16 = 21.4 cores of
        # batch allocatable → Σ r_prod = 63 − 21.4 = 41.6, split by request (20 : 20) → 20.8 each
        [True, True], [20.8, 20.8],
        # ram: 256 · 0.65 − 1 − (16 + 32) = 117.4 GiB → Σ r = 255 − 117.4 = 137.6 → 68.8 GiB each (> q:
        # Koordinator keeps 35 % of the node off limits to batch whatever production requested)
        [68.8, 68.8]),
    "a pod without a fresh metric counts at its request": (
        # pod 1 stale → its usage reads q = 20 cores / 64 GiB: 38.4 − 1 − 26 = 11.4 → Σ r = 51.6 → 25.8 each;
        # ram 166.4 − 1 − 80 = 85.4 → Σ r = 169.6 → 84.8 each
        [True, False], [25.8, 25.8], [84.8, 84.8]),
}


@pytest.mark.parametrize("fresh, cpu_r, ram_r", KOORDINATOR_CASES.values(), ids=KOORDINATOR_CASES.keys())
def test_koordinator_batch_allocatable_as_production_reservations(fresh, cpu_r, ram_r) -> None:
    rule = KoordinatorRule(two_pod_context())
    usage = usage_of([6, 10], [16, 32])
    for step in range(5):  # five 60-s steps fill the 300-s window with the same values
        out = rule.production(RuleInputs(step, step * 60.0, usage, np.array(fresh), usage))
    assert out[:, CPU] / 1000 == pytest.approx(cpu_r)
    assert out[:, RAM] / GIB == pytest.approx(ram_r)


def test_koordinator_usage_is_a_five_minute_mean_and_clamps_at_zero() -> None:
    rule = KoordinatorRule(two_pod_context())
    fresh = np.array([True, True])
    for step, cpu0 in enumerate([6, 6, 6, 6, 6, 16]):
        out = rule.production(RuleInputs(step, step * 60.0, usage_of([cpu0, 10], [16, 32]), fresh, None))
    # the window holds the last 5 steps: pod 0's mean is (4 · 6 + 16) / 5 = 8 → 38.4 − 1 − 18 = 19.4 → Σ r 43.6
    assert out[:, CPU].sum() / 1000 == pytest.approx(43.6)
    busy = KoordinatorRule(two_pod_context())
    out = busy.production(RuleInputs(0, 0.0, usage_of([20, 20], [64, 64]), fresh, None))
    # 38.4 − 1 − 40 < 0 → batch allocatable 0 → production holds all of C: no slack for batch at all
    assert out[:, CPU].sum() / 1000 == pytest.approx(63.0)


def test_vpa_histogram_buckets_follow_upstream() -> None:
    starts = histogram_bucket_starts(0.01, 1.05, 1000.0)
    # start(n) = 0.01 · (1.05ⁿ − 1) / 0.05: 0, 0.01, 0.0205, 0.031525 …
    assert starts[:4] == pytest.approx([0.0, 0.01, 0.0205, 0.031525])
    assert starts[-3] < 1000.0 <= starts[-2]  # the last bucket starts at the maximum (overflow)
    # 1.0 core: log(1 · 0.05 / 0.01 + 1) / log 1.05 = 36.72 → bucket 36
    assert histogram_bucket(np.array([0.005, 1.0, 5000.0]), starts).tolist() == [0, 36, len(starts) - 2]
    weights = np.zeros((1, len(starts) - 1))
    weights[0, [10, 36]] = [0.05, 0.95]  # 90 % of the weight is reached in bucket 36 → its end, start(37)
    assert histogram_percentile(weights, starts, 0.9)[0] == pytest.approx(starts[37])


def test_vpa_target_is_p90_times_1_15_after_300_s_of_samples() -> None:
    ctx = two_pod_context()
    rule = VpaRule(ctx)
    fresh = np.array([True, True])
    starts = histogram_bucket_starts(0.01, 1.05, 1000.0)
    mem_starts = histogram_bucket_starts(1e7, 1.05, 1e12)
    # pod 0 uses 1 core steadily; its memory peaks at 5 GiB at t = 120 s, then falls back
    ram = [3, 4, 5, 2, 2, 2, 2]
    outs = [rule.production(RuleInputs(i, i * 60.0, usage_of([1.0, 0.0], [r, 0.0]), fresh, None))
            for i, r in enumerate(ram)]
    request = ctx.production.request
    assert (outs[4] == request).all()  # 240 s of samples: still the request
    cpu = outs[5][0, CPU]  # 300 s: the recommendation
    # all weight in bucket 36 → p90 = start(37) = 0.01 · (1.05³⁷ − 1) / 0.05 = 1.0163 cores → × 1.15 = 1.1687
    assert cpu == pytest.approx(starts[37] * 1.15 * 1000)
    assert cpu == pytest.approx(1168.7, abs=0.1)
    # memory: one sample per 24-h interval, the peak (5 GiB) replacing the earlier 3 and 4 GiB
    bucket = histogram_bucket(np.array([5 * GIB]), mem_starts)[0]
    assert outs[6][0, RAM] == pytest.approx(mem_starts[bucket + 1] * 1.15)
    # pod 1 uses nothing: the recommender's pod minimum, 25 mcpu and 250 MiB
    assert outs[6][1, CPU] == pytest.approx(25.0) and outs[6][1, RAM] == pytest.approx(250 * 2**20)


def test_forward_max_windows() -> None:
    values = np.array([1.0, 4.0, 2.0, 0.0, 3.0])
    assert forward_max(values, 1).tolist() == [1, 4, 2, 0, 3]
    assert forward_max(values, 2).tolist() == [4, 4, 2, 3, 3]
    assert forward_max(values, 3).tolist() == [4, 4, 3, 3, 3]  # not a power of two
    assert forward_max(values, 10).tolist() == [4, 4, 3, 3, 3]  # cut at the end
    rng = np.random.default_rng(0)
    x = rng.random((50, 3))
    for w in (1, 5, 7, 16, 60):
        expected = np.array([x[t:t + w].max(axis=0) for t in range(50)])
        assert np.array_equal(forward_max(x, w), expected)


def test_oracles_read_future_usage_without_margin() -> None:
    sim = synthetic_simulator(nodes=1, steps=6)
    cpu = [0.1, 0.4, 0.2, 0.0, 0.3, 0.1]  # fraction of the 3-core request per step
    sim.usage.shapes[:, :, 0] = np.array(cpu)[:, None]
    ctx = RuleContext(production=sim.state.production, usage=sim.usage, allocatable=sim.state.capacity,
                      capacity=sim.state.capacity, step_s=60.0)
    three_min = OracleRule(ctx, horizon_s=180.0)
    exact = make_rule("oracle-exact", ctx)
    got = [three_min.production(RuleInputs(i, i * 60.0, None, None, None))[0, CPU] for i in range(6)]
    # max over steps t, t+1, t+2 of 3 cores × (0.1, 0.4, 0.2, 0, 0.3, 0.1) → 1.2, 1.2, 0.9, 0.9, 0.9, 0.3 cores
    assert np.array(got) / 1000 == pytest.approx([1.2, 1.2, 0.9, 0.9, 0.9, 0.3])
    now = [exact.production(RuleInputs(i, i * 60.0, None, None, None))[0, CPU] for i in range(6)]
    assert np.array(now) / 1000 == pytest.approx(np.array(cpu) * 3)


def test_unknown_rule_names_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match="oracle-60m, oracle-exact"):
        make_rule("borg", two_pod_context())
