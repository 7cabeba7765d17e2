"""Archive statistics, drift (docs/design.md §10), escalation (§8) and the two-part export (§3)."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.archive import downsample, observed_stats, reservation_percentiles
from kalena_engine.drift import drift
from kalena_engine.escalation import EscalationPolicy, decide_escalation
from kalena_engine.export import OBSERVED_FIELDS, annotate_workloads, kalena_report, observed_block
from kalena_engine.kuberina import parse_workloads
from kalena_engine.kuberina.yamlio import parse_yaml
from kalena_engine.resources import CPU, RAM, ir_vector, to_ir


def test_downsample_worked_example_and_refold() -> None:
    # samples at 0, 20, 40, 65 s with cpu 1, 3, 2, 6 → [0,60): mean 2, max 3, n 3; [60,120): 6, 6, 1
    b = downsample(np.array([0, 20, 40, 65]), np.array([[1.0], [3.0], [2.0], [6.0]]), 60)
    np.testing.assert_array_equal(b.start_s, [0, 60])
    np.testing.assert_allclose(b.mean[:, 0], [2, 6])
    np.testing.assert_allclose(b.peak[:, 0], [3, 6])
    np.testing.assert_array_equal(b.count, [3, 1])
    # folding the 1 min buckets into 1 h keeps the true mean (count-weighted) and the peak
    h = downsample(b.start_s, b.mean, 3600, counts=b.count, peaks=b.peak)
    assert h.mean[0, 0] == pytest.approx((1 + 3 + 2 + 6) / 4)
    assert h.peak[0, 0] == 6 and h.count[0] == 4


def test_observed_stats_exclude_grace_and_count_exceedances() -> None:
    times = np.arange(0, 1000, 100.0)  # grace until 300
    r = np.array([ir_vector(cpu=10 if t < 300 else 2 + t / 1000) for t in times])
    u = np.array([ir_vector(cpu=1.5 if t != 500 else 11) for t in times])
    stats = observed_stats(times_s=times, reservation=r, usage=u, request=ir_vector(cpu=4),
                           limit=ir_vector(cpu=10), start_s=0, grace_s=300, window_s=1000)
    assert stats.samples == 7
    assert to_ir(stats.peak)[CPU] == pytest.approx(2.9)  # the grace values (10) are excluded
    assert stats.exceeded_request_fraction == pytest.approx(1 / 10)
    assert stats.exceeded_limit_events == 1
    assert observed_stats(times_s=times[:2], reservation=r[:2], usage=u[:2], request=ir_vector(cpu=4),
                          limit=ir_vector(cpu=10), start_s=0, grace_s=300, window_s=100) is None


def test_drift_worked_example() -> None:
    # q = 4 and 2 cores, r̃ = 1 and 2.5 → D = (3 + 0.5) / 6; node contributions sum to D
    q = np.array([ir_vector(cpu=4, ram=8), ir_vector(cpu=2, ram=8)])
    r = np.array([ir_vector(cpu=1, ram=8), ir_vector(cpu=2.5, ram=8)])
    report = drift(q, r, np.array([0, 1]), 2)
    assert report.per_dimension[CPU] == pytest.approx(3.5 / 6)
    assert report.per_dimension[RAM] == 0
    np.testing.assert_allclose(report.per_node[:, CPU], [3 / 6, 0.5 / 6])
    assert report.exceeds(0.5) == ["cpu"]


@pytest.mark.parametrize(
    ("evictions", "pressure_since", "stale", "reason"),
    [
        pytest.param([100, 250, 390], None, False, "eviction_storm", id="3 evictions in 300 s"),
        pytest.param([50, 250, 390], None, False, "", id="only 2 inside the window"),
        pytest.param([], 360.0, False, "not_converged", id="pressure for 40 s > T_esc 30 s"),
        pytest.param([], 380.0, False, "", id="pressure for 20 s"),
        pytest.param([100, 250, 390], 300.0, True, "", id="stale telemetry never escalates (C1)"),
    ],
)
def test_escalation(evictions, pressure_since, stale, reason) -> None:
    decision = decide_escalation(now_s=400, pressure_since_s=pressure_since, eviction_times_s=np.array(evictions, float),
                                 telemetry_stale=stale, ineligible_until_s=0, policy=EscalationPolicy())
    assert decision.reason == reason and decision.escalate == bool(reason)
    if reason:
        assert decision.ineligible_until_s == 1000


def test_observed_block_round_trips_through_the_ir_reader() -> None:
    doc = parse_yaml("apiVersion: kuberina.io/v1\nkind: Workloads\nnamespaces:\n  web:\n    - name: api\n      replicas: 2\n"
                     "      requests: {cpu: 4, ram: 8Gi}\n", source="w.yaml")
    stats = observed_stats(times_s=np.array([400.0, 500.0]), reservation=np.array([ir_vector(cpu=1, ram=2)] * 2),
                           usage=np.array([ir_vector(cpu=0.8, ram=1.5)] * 2), request=ir_vector(cpu=4, ram=8),
                           limit=ir_vector(cpu=4, ram=8), start_s=0, grace_s=300, window_s=86400)
    block = observed_block(stats)
    assert tuple(block) == OBSERVED_FIELDS
    annotated = annotate_workloads(doc, {"web/api": block})
    assert "observed" not in doc["namespaces"]["web"][0]  # input untouched
    # the strict IR v1 reader (unknown keys are errors) accepts the result unchanged
    workloads = parse_workloads(annotated, source="export.yaml")
    assert len(workloads.pods) == 2
    assert annotated["namespaces"]["web"][0]["observed"]["p95"]["cpu"] == pytest.approx(1.0)
    assert annotated["namespaces"]["web"][0]["observed"]["window"] == "86400s"


def test_kalena_report_shape() -> None:
    report = kalena_report(
        window_s=3600, drift_per_dimension=np.array([0.2, 0.1] + [np.nan] * 6),
        workloads=[{"id": "web/api-0000", "declared_request": ir_vector(cpu=4), "observed_peak": ir_vector(cpu=1),
                    "exceeded_limit_events": 2}],
        nodes=[{"name": "n1", "slack_yield": ir_vector(cpu=3.5), "eviction_events": {"priority": 2},
                "drift": np.array([0.1, 0.05] + [0.0] * 6)}],
    )
    assert report["drift"] == {"cpu": 0.2, "ram": 0.1}
    assert report["workloads"][0]["declared_request"]["cpu"] == 4.0
    assert report["nodes"][0]["eviction_events"] == {"priority": 2}


def test_reservation_percentiles_worked_example() -> None:
    rows = np.array([ir_vector(cpu=c) for c in (1, 2, 3, 4)])
    p50, p95, p99, peak = reservation_percentiles(rows)
    assert (p50[0], peak[0]) == (2500.0, 4000.0) and p95[0] == pytest.approx(3850.0) and p99[0] == pytest.approx(3970.0)
