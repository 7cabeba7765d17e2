"""CPU throttle budget (docs/design.md §7), case C6's exact quota."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.mitigation import batch_cpu_budget_mcpu, batch_cpu_shares


@pytest.mark.parametrize(
    ("service_r_mcpu", "quota_us"),
    [
        pytest.param(3600, 40_000, id="C6: budget max(0.1, 4 − 3.6) = 0.4 core → 40,000 µs"),
        pytest.param(3200, 80_000, id="r_S decays to 3.2 → 0.8 core → 80,000 µs"),
        pytest.param(2500, 100_000, id="budget 1.5 core, capped at B's limit 1 core → 100,000 µs"),
        pytest.param(3990, 10_000, id="floor: min_batch_cpu 0.1 core → 10,000 µs"),
    ],
)
def test_case_c6_quota(service_r_mcpu: float, quota_us: int) -> None:
    budget = batch_cpu_budget_mcpu(4000, service_r_mcpu, 1, 100)
    (share,) = batch_cpu_shares(budget, np.array([1000.0]), np.array([1000.0]), np.array([False]),
                                min_batch_cpu_mcpu=100)
    assert share.quota_us == quota_us and share.period_us == 100_000


def test_shares_proportional_to_requests_with_caps_redistributed() -> None:
    # budget 3 cores; requests 1 and 3 cores; first capped at its 0.5-core limit → the rest to the second
    shares = batch_cpu_shares(3000, np.array([1000.0, 3000.0]), np.array([500.0, 4000.0]),
                              np.array([False, False]), min_batch_cpu_mcpu=100)
    assert [s.share_mcpu for s in shares] == pytest.approx([500.0, 2500.0])
    # a declared limit binds whatever slack-cpu says (case C6)
    shares = batch_cpu_shares(3000, np.array([1000.0, 3000.0]), np.array([500.0, 4000.0]),
                              np.array([True, False]), min_batch_cpu_mcpu=100)
    assert [s.share_mcpu for s in shares] == pytest.approx([500.0, 2500.0])


@pytest.mark.parametrize(
    ("allowed", "shares_mcpu"),
    [
        # no limit declared: allowed → capped only by the budget: 3 cores split 1 : 1 → 1.5 + 1.5
        pytest.param(True, [1500.0, 1500.0], id="no limit, slack-cpu allow: proportional share of the budget"),
        # deny → capped at its request 1 core; the other takes the remaining 2 cores
        pytest.param(False, [1000.0, 2000.0], id="no limit, slack-cpu deny: capped at the request"),
    ],
)
def test_undeclared_limit_follows_slack_cpu(allowed: bool, shares_mcpu: list[float]) -> None:
    shares = batch_cpu_shares(3000, np.array([1000.0, 1000.0]), np.array([np.inf, np.inf]),
                              np.array([allowed, True]), min_batch_cpu_mcpu=100)
    assert [s.share_mcpu for s in shares] == pytest.approx(shares_mcpu)
