"""The proposal's metrics 6–8 from recorded steps: the module doc's worked examples, and the
replay's summary carrying them (a short real replay)."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.replay.proposal_metrics import ProposalMetrics, weighted_quantiles
from kalena_engine.resources import CPU, RAM

CORE = 1000.0  # mcpu


def _metrics(nodes: int = 1) -> ProposalMetrics:
    request = np.zeros((1, 8))
    request[0, CPU] = 4 * CORE
    request[0, RAM] = 8.0
    return ProposalMetrics(pod_request=request, target=np.ones(nodes, dtype=bool), step_s=60.0)


def _step(m: ProposalMetrics, t: float, *, r: float, u: float, batch: float, completed=()) -> None:
    res, use = np.zeros((1, 8)), np.zeros((1, 8))
    res[0, CPU], use[0, CPU] = r * CORE, u * CORE
    res[0, RAM], use[0, RAM] = 8.0, 8.0
    cap, prod, bat = np.zeros((1, 8)), np.zeros((1, 8)), np.zeros((1, 8))
    cap[0, CPU], prod[0, CPU], bat[0, CPU] = 14 * CORE, 4 * CORE, batch * CORE   # headroom H = 10 cores
    cap[0, RAM], prod[0, RAM] = 16.0, 8.0
    m.add(time_s=t, pod_reservation=res, pod_usage=use, capacity=cap, prod_request=prod, batch_request=bat,
          completed=list(completed))


def test_reservation_accuracy_is_the_docs_example() -> None:
    # q = 4 cores, u = 1 then 3, r = 2 then 2 → over (1 + 0) / 8 = 0.125, under (0 + 1) / 8 = 0.125
    m = _metrics()
    _step(m, 0, r=2, u=1, batch=0)
    _step(m, 60, r=2, u=3, batch=0)
    s = m.summary()
    assert s["overestimation_area_cpu"] == pytest.approx(0.125)
    assert s["underestimation_area_cpu"] == pytest.approx(0.125)
    cpu = s["reservation_accuracy"]["cpu"]
    # r/q = 0.5 both steps: the CDF is 0 below 0.5 and 1 from it; u/q = 0.25 and 0.75
    cdf = dict(zip(cpu["reservation_over_request"]["ratio"], cpu["reservation_over_request"]["cdf"]))
    assert cdf[0.49] == 0 and cdf[0.5] == 1
    usage = dict(zip(cpu["usage_over_request"]["ratio"], cpu["usage_over_request"]["cdf"]))
    assert usage[0.25] == 0.5 and usage[0.74] == 0.5 and usage[0.75] == 1
    assert cpu["usage_over_request"]["quantiles"]["p50"] == 0.25
    # ram reserved and used exactly at the request: no area, the CDF jumps at 1
    assert s["overestimation_area_ram"] == 0 and s["reservation_accuracy"]["ram"]["reservation_over_request"]["ratio"][-1] == 1.0


def test_pareto_reserve_yield_is_the_docs_example() -> None:
    # H = 10 cores; batch requests 4, 12, 0 → (4 + 10 + 0) / 30
    m = _metrics()
    for i, batch in enumerate((4, 12, 0)):
        _step(m, 60 * i, r=4, u=4, batch=batch)
    s = m.summary()
    assert s["pareto_reserve_yield_cpu"] == pytest.approx(14 / 30, abs=1e-6)
    assert s["pareto_reserve_yield"]["cpu"]["nodes"] == 1
    assert s["pareto_reserve_yield"]["cpu"]["hourly"] == {"hour": [0], "yield": [pytest.approx(14 / 30, abs=1e-6)]}
    # a node batch may not use has no reserve to fill
    m = _metrics()
    m.target = np.zeros(1, dtype=bool)
    _step(m, 0, r=4, u=4, batch=4)
    assert m.summary()["pareto_reserve_yield_cpu"] == 0.0


def test_forward_progress_distributions_weight_by_instances() -> None:
    m = _metrics()
    # 3 instances never slowed, 1 slowed by 120 s (inflation 2.0)
    _step(m, 0, r=4, u=4, batch=0, completed=[(1.0, 0.0, 3), (2.0, 120.0, 1)])
    p = m.summary()["batch_forward_progress"]
    assert p["completed_instances"] == 4 and p["slowed_share"] == 0.25
    assert p["throttled_seconds"]["quantiles"]["p50"] == 0.0 and p["throttled_seconds"]["quantiles"]["p99"] == 120.0
    assert p["completion_inflation"]["quantiles"]["p75"] == 1.0 and p["completion_inflation"]["quantiles"]["p100"] == 2.0
    assert p["throttled_seconds_total"] == 120.0
    assert p["throttled_seconds"]["cdf"][0] == 0 and p["throttled_seconds"]["cdf"][-1] == 1


def test_weighted_quantiles_nearest_rank() -> None:
    q = weighted_quantiles(np.array([1.0, 2.0]), np.array([3, 1]))
    assert q["p50"] == 1.0 and q["p99"] == 2.0
    assert weighted_quantiles(np.zeros(0), np.zeros(0)) == {}
