"""Reservation estimator (docs/design.md §5), including case C5 with its exact numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kalena_engine.estimator import (
    apply_samples, effective_reservations, estimator_limit, initial_reservations, pinned_mask, update_reservations,
)
from kalena_engine.resources import CPU, GPU, ir_vector, to_ir
from tests.worked import WORKED_ESTIMATOR

POLICY = WORKED_ESTIMATOR  # μ = 1.15, h = 600 s, g = 300 s


def run(usage_cores, times, *, request=10.0, limit=10.0, start=0.0, gpu=0.0, reclaim_disabled=False,
        policy=POLICY):
    """Feed cpu usage samples (cores) at ``times``; return r (cores) after each sample."""
    q = ir_vector(cpu=request, gpu=gpu)[None, :]
    L = ir_vector(cpu=limit, gpu=gpu)[None, :]
    state = initial_reservations(q, np.array([start if np.isfinite(start) else times[0]]))
    out = []
    for t, u in zip(times, usage_cores, strict=True):
        state = update_reservations(
            state, request=q, limit=L, usage=ir_vector(cpu=u, gpu=gpu)[None, :], sampled=np.array([True]),
            now_s=t, start_s=np.array([start]), grace_s=np.array([policy.grace_s]),
            pinned=pinned_mask(np.array([reclaim_disabled])), policy=policy,
        )
        out.append(to_ir(state.value[0]))
    return np.array(out), state


@pytest.mark.parametrize("interval_s", [10, 60], ids=["samples every 10 s", "samples every 60 s"])
def test_case_c5_grace_then_decay_anchored_at_end_of_grace(interval_s: int) -> None:
    # C5: new prod pod q = L = 10 cores, usage 1 core steady from t = 0.
    times = np.arange(0, 901, interval_s)
    r, _ = run(np.ones(len(times)), times)
    in_grace = times < 300
    # node C = 64, other prod 20 → slack 44 − 10 = 34 exactly during grace
    np.testing.assert_allclose(64 - 20 - r[in_grace, CPU], 34.0)
    # r(900) = 1.15 + (10 − 1.15) · 2^(−600/600) = 5.575, whatever the sampling interval
    assert r[-1, CPU] == pytest.approx(5.575, abs=1e-9)


def test_rise_is_immediate_and_capped_at_limit() -> None:
    times = [0, 400, 460, 520]
    r, _ = run([1, 1, 9.5, 20], times, request=10, limit=12)
    assert r[2, CPU] == pytest.approx(min(12, 1.15 * 9.5))  # rise to τ at once: 10.925
    assert r[3, CPU] == pytest.approx(12.0)  # τ = min(L, 1.15 · 20) = L


def test_rise_during_grace_raises_above_request() -> None:
    # Startup grace never goes below q, but usage above q still raises it (up to L).
    r, _ = run([2, 11], [0, 100], request=10, limit=16)
    assert r[0, CPU] == pytest.approx(10.0)
    assert r[1, CPU] == pytest.approx(1.15 * 11)


def test_decay_is_exact_for_any_step_pattern() -> None:
    # Irregular sampling after grace composes to the same reservation as one big step.
    irregular = [300, 337, 420, 611, 700, 900]
    r1, _ = run(np.ones(len(irregular)), irregular)
    r2, _ = run([1, 1], [300, 900])
    assert r1[-1, CPU] == pytest.approx(r2[-1, CPU], rel=1e-12)


def test_already_running_pod_decays_from_first_update() -> None:
    # A pod running since long before (start = −inf) has no grace; decay runs from the last update.
    # Kalena first sees it at t = 0 and charges its request; decay runs from there.
    r, _ = run([1, 1], [0, 600], start=-np.inf)
    assert r[0, CPU] == pytest.approx(10.0)
    assert r[1, CPU] == pytest.approx(1.15 + (10 - 1.15) * 2 ** (-600 / 600))


def test_gpu_and_reclaim_disabled_are_pinned_at_request() -> None:
    r, _ = run([1, 1], [400, 4000], request=10, limit=10, gpu=4)
    assert r[-1, GPU] == pytest.approx(4.0)  # usage-driven τ would be 1.15·4 capped; GPU never reclaimed
    r, _ = run([1, 1], [400, 4000], reclaim_disabled=True)
    assert r[-1, CPU] == pytest.approx(10.0)


def test_stale_telemetry_reads_at_least_the_request() -> None:
    _, state = run([1, 1], [0, 2000], start=-np.inf)
    q = ir_vector(cpu=10)[None, :]
    fresh = to_ir(effective_reservations(state, q, now_s=2030, stale_ttl_s=60)[0])
    stale = to_ir(effective_reservations(state, q, now_s=2061, stale_ttl_s=60)[0])
    assert fresh[CPU] < 10
    assert stale[CPU] == pytest.approx(10.0)  # max(r, q): stale telemetry never creates slack


def test_staleness_ttl_rule() -> None:
    assert POLICY.stale_ttl_s(10) == 60
    assert POLICY.stale_ttl_s(300) == 900


def test_apply_samples_equals_sequential_updates_and_ignores_time_going_backwards() -> None:
    rng = np.random.default_rng(3)
    n = 5
    q = np.array([ir_vector(cpu=4, ram=8)] * n)
    start = np.array([-np.inf, 0, 100, -np.inf, 50])
    grace = np.full(n, POLICY.grace_s)
    pinned = pinned_mask(np.zeros(n, dtype=bool))
    workload = rng.integers(0, n, 60)
    times = rng.uniform(0, 3000, 60).round()
    usage = np.array([ir_vector(cpu=c, ram=r) for c, r in rng.uniform(0, 5, (60, 2))])
    state0 = initial_reservations(q, np.zeros(n))
    batched, applied = apply_samples(state0, workload=workload, time_s=times, usage=usage, request=q, limit=q,
                                     start_s=start, grace_s=grace, pinned=pinned, policy=POLICY)
    # reference: one sample at a time, in time order per workload
    state = state0
    for i in np.lexsort((times, workload)):
        if times[i] <= state.last_sample_s[workload[i]]:
            continue
        mask = np.zeros(n, dtype=bool)
        mask[workload[i]] = True
        full = np.zeros((n, 8))
        full[workload[i]] = usage[i]
        state = update_reservations(state, request=q, limit=q, usage=full, sampled=mask, now_s=times[i],
                                    start_s=start, grace_s=grace, pinned=pinned, policy=POLICY)
    np.testing.assert_allclose(batched.value, state.value)
    # a sample older than the last one is not applied again
    again, applied2 = apply_samples(batched, workload=workload[:3], time_s=times[:3] - 5000, usage=usage[:3],
                                    request=q, limit=q, start_s=start, grace_s=grace, pinned=pinned, policy=POLICY)
    assert not applied2.any()
    np.testing.assert_array_equal(again.value, batched.value)


def test_an_unmeasured_dimension_holds_the_request_for_that_update_only() -> None:
    # q = L = 10; samples at t = 0 (cpu not measured) and t = 600 (cpu = 2, measured):
    # t = 0 → r = q = 10 (pinned for that update); t = 600 → τ = 2.3, decay over Δt = 600 s:
    # r = 2.3 + (10 − 2.3) · 2^(−1) = 6.15. With the same dimension pinned for the whole fold
    # r would stay 10.
    from kalena_engine.estimator import Reservations, apply_samples

    q = np.full((1, 8), 10.0)
    state = Reservations(value=q.copy(), updated_s=np.zeros(1), last_sample_s=np.full(1, -np.inf))
    usage = np.array([[0.0] * 8, [2.0] * 8])
    unmeasured = np.array([[True] * 8, [False] * 8])
    out, applied = apply_samples(state, workload=np.array([0, 0]), time_s=np.array([0.0, 600.0]), usage=usage,
                                 request=q, limit=q, start_s=np.full(1, -np.inf), grace_s=np.full(1, 300.0),
                                 pinned=np.zeros((1, 8), dtype=bool), policy=POLICY, unmeasured=unmeasured)
    assert applied.all()
    np.testing.assert_allclose(out.value[0], 6.15)


@pytest.mark.parametrize(("declared", "request_q", "ratio", "expected"), [
    pytest.param(math.inf, 1.0, 1.0, 1.0, id="no limit, ratio 1: L = q"),
    pytest.param(math.inf, 1.0, 1.25, 1.25, id="no limit, ratio 1.25: L = 1.25 q"),
    pytest.param(2.0, 1.0, 1.25, 2.0, id="declared 2: L = 2 whatever the ratio"),
])
def test_estimator_limit_is_declared_else_request_times_ratio(declared: float, request_q: float, ratio: float,
                                                               expected: float) -> None:
    out = estimator_limit(np.full((1, 8), declared), np.full((1, 8), request_q), ratio)
    assert out.tolist() == [[expected] * 8]
