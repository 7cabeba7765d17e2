"""The pure decisions the agent added to kalena_engine.mitigation (docs/design.md §7), with the
numbers of the docstrings' worked examples and case C6."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kalena_engine.mitigation import (
    batch_memory_cap,
    plan_batch_cpu,
    plan_starvation_relief,
    service_cpu_claims_mcpu,
    throttled_window_ratio,
)
from kalena_engine.policy import EvictionPolicy

POLICY = EvictionPolicy()
MIB = 2**20


def plan(service_r: float, *, request: float = 3600, contended: bool = False, slack: bool = True, limit: float = 1000):
    return plan_batch_cpu(capacity_mcpu=4000, service_reservation_mcpu=np.array([service_r]),
                          service_request_mcpu=np.array([request]), service_contended=np.array([contended]),
                          batch_request_mcpu=np.array([1000.0]), batch_limit_mcpu=np.array([limit]),
                          batch_slack_cpu=np.array([slack]), policy=POLICY)


@pytest.mark.parametrize(("service_r", "slack", "quota_us"), [
    pytest.param(3600, True, 40_000, id="C6: max(0.1, 4 − 3.6) = 0.4 core → 40,000 µs"),
    pytest.param(1150, False, 100_000, id="C6 after decay: budget 2.85 capped at B's 1-core limit → 100,000 µs"),
    pytest.param(1150, True, 100_000, id="C6 literally (slack-cpu allowed): a declared limit still binds → 100,000 µs"),
    pytest.param(3990, True, 10_000, id="floor min_batch_cpu 0.1 core → 10,000 µs"),
])
def test_batch_cpu_plan(service_r: float, slack: bool, quota_us: int) -> None:
    (share,) = plan(service_r, slack=slack).shares
    assert (share.quota_us, share.period_us) == (quota_us, 100_000)


def test_contended_service_claims_its_request() -> None:
    # r = 2.0 cores measured under contention, q = 3.6: uncontended claim 2.0 → budget 2.0 cores
    # (a batch pod without a declared limit, slack-cpu allowed, takes the whole budget);
    # contended claim max(2.0, 3.6) = 3.6 → budget 0.4 core, and batch drops to the minimum weight
    uncontended = plan(2000, limit=np.inf)
    assert uncontended.shares[0].quota_us == 200_000 and not uncontended.batch_weight_minimum
    contended = plan(2000, contended=True, limit=np.inf)
    assert contended.shares[0].quota_us == 40_000 and contended.batch_weight_minimum
    claims = service_cpu_claims_mcpu(np.array([500.0, 2000.0]), np.array([1000.0, 1000.0]), np.array([True, True]))
    assert claims.tolist() == [1000.0, 2000.0]


def test_starvation_worked_example() -> None:
    # one batch throttled 80 % of the window (> θ = 50 %); S1 u = 1.5 > q = 1.0, S2 u = 0.8 within
    result = plan_starvation_relief(np.array([0.8]), np.array([1500.0, 800.0]), np.array([1000.0, 1000.0]),
                                    policy=POLICY)
    (cap,) = result.caps
    assert (cap.row, cap.cap_mcpu, cap.quota_us, cap.release_mcpu) == (0, 1400.0, 140_000, 100.0)
    # a window later, batch still starving and S1 at its 1.4-core cap: deepened to 1.3 cores
    again = plan_starvation_relief(np.array([0.8]), np.array([1400.0, 800.0]), np.array([1000.0, 1000.0]),
                                   None, np.array([1400.0, np.nan]), policy=POLICY)
    assert [(c.row, c.cap_mcpu) for c in again.caps] == [(0, 1300.0)]
    # at its request S1 stays capped at q while batch starves; once no batch starves every cap lifts
    floor = plan_starvation_relief(np.array([0.8]), np.array([1000.0]), np.array([1000.0]), None,
                                   np.array([1000.0]), policy=POLICY)
    assert [(c.row, c.cap_mcpu) for c in floor.caps] == [(0, 1000.0)]
    assert plan_starvation_relief(np.array([0.2]), np.array([1400.0]), np.array([1000.0]), None,
                                  np.array([1400.0]), policy=POLICY).caps == ()


@pytest.mark.parametrize(("throttled_s", "span_s", "ratio"), [
    pytest.param(48.0, 60.0, 0.8, id="48 s throttled in a 60 s window: 0.8"),
    pytest.param(20.0, 20.0, 1 / 3, id="seen for 20 s only: divided by the whole 60 s window"),
    pytest.param(90.0, 60.0, 1.5, id="throttled on two cpus at once: above 1"),
])
def test_throttled_window_ratio_is_throttled_time_over_the_window(throttled_s: float, span_s: float, ratio: float) -> None:
    assert throttled_window_ratio(throttled_s * 1e6, span_s, 60.0) == pytest.approx(ratio)


@pytest.mark.parametrize(("ratio", "usage", "svc_request", "contended"), [
    pytest.param(0.5, 1500.0, 1000.0, False, id="throttled exactly θ: not starving"),
    pytest.param(0.9, 900.0, 1000.0, False, id="service within its request"),
    pytest.param(0.9, 1500.0, 1500.0, False, id="service using exactly its request"),
    pytest.param(0.9, 1500.0, 1000.0, True, id="contended service"),
])
def test_starvation_never_caps(ratio: float, usage: float, svc_request: float, contended: bool) -> None:
    result = plan_starvation_relief(np.array([ratio]), np.array([usage]), np.array([svc_request]),
                                    np.array([contended]), policy=POLICY)
    assert result.caps == ()


def test_starvation_release_is_shared_by_excess_and_bounded() -> None:
    # two starving batch → need 0.2 core; excess over the request 0.3 and 0.1 core → releases 0.15 and 0.05
    result = plan_starvation_relief(np.array([0.9, 0.7]), np.array([1300.0, 1100.0]), np.array([1000.0, 1000.0]),
                                    policy=POLICY)
    assert [c.release_mcpu for c in result.caps] == pytest.approx([150.0, 50.0])
    # only 0.05 core of excess in total: release 0.05, cap never below q
    small = plan_starvation_relief(np.array([0.9, 0.9]), np.array([1050.0]), np.array([1000.0]), policy=POLICY)
    assert small.released_mcpu == pytest.approx(50.0) and small.caps[0].cap_mcpu == pytest.approx(1000.0)


@pytest.mark.parametrize(("request_b", "limit_b", "slack", "high", "maximum"), [
    pytest.param(64 * MIB, 128 * MIB, False, 64 * MIB, 128 * MIB, id="slack denied: high = request 64 MiB"),
    pytest.param(64 * MIB, 128 * MIB, True, 128 * MIB, 128 * MIB, id="slack allowed: high = limit"),
    pytest.param(64 * MIB, math.inf, False, 64 * MIB, None, id="no limit: only the soft cap"),
    pytest.param(0.0, math.inf, False, None, None, id="no request, no limit: uncapped"),
])
def test_batch_memory_cap(request_b: float, limit_b: float, slack: bool, high, maximum) -> None:
    cap = batch_memory_cap(request_b, limit_b, slack)
    assert (cap.high_bytes, cap.max_bytes) == (high, maximum)
