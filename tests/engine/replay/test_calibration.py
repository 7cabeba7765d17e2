"""The calibration's pure parts: the frontier, the knee at a stated eviction rate, the
ship-as-default comparison and the calibration policy file."""

from __future__ import annotations

import pytest

from kalena_engine.policy_file import PolicyDocument, dump_policy_text, parse_policy_text
from kalena_engine.replay.calibration import (
    better_on_both_axes, calibration_document, frontier, frontier_across_loads, grid_edges, grid_settings, knee,
    sweep_configs, sweep_settings, widen_grid,
)
from kalena_engine.replay.setup import ReplayConfig


def pt(mu: float, h: float, x: float, e: float, c: float = 0.0) -> dict[str, float]:
    return {"margin_ratio": mu, "half_life_s": h, "reclaimed_fraction_cpu": x, "reclaimed_fraction_ram": x / 2,
            "batch_evictions_per_100_pod_hours": e, "production_contention_core_hours": c, "oom_kills": 0.0}


POINTS = [pt(1.4, 600, 0.10, 0.2), pt(1.15, 600, 0.12, 0.6), pt(1.0, 600, 0.13, 1.9),
          pt(1.3, 600, 0.09, 0.5)]  # the last is beaten on both axes by the first


def test_the_frontier_drops_settings_beaten_on_both_axes() -> None:
    assert [p["margin_ratio"] for p in frontier(POINTS)] == [1.4, 1.15, 1.0]


def test_the_knee_is_the_last_point_whose_steps_cost_at_most_the_rate() -> None:
    # steps cost 0.4 / 2 pp = 0.2, then 1.3 / 1 pp = 1.3 per percentage point (the docstring's example)
    assert knee(POINTS, 0.5)["margin_ratio"] == 1.15
    assert knee(POINTS, 2.0)["margin_ratio"] == 1.0  # a looser tolerance walks further
    assert knee(POINTS, 0.0)["margin_ratio"] == 1.4  # no eviction allowed: the safest frontier point
    with pytest.raises(ValueError, match="no calibration point"):
        knee([])


def test_better_on_both_axes_needs_one_strict_gain_and_no_loss() -> None:
    assert better_on_both_axes(pt(1, 600, 0.12, 0.5), pt(1.15, 600, 0.11, 0.5))
    assert not better_on_both_axes(pt(1, 600, 0.12, 0.6), pt(1.15, 600, 0.11, 0.5))
    assert not better_on_both_axes(pt(1, 600, 0.11, 0.5), pt(1.15, 600, 0.11, 0.5))


def test_the_sweep_is_paired_and_refuses_repeats() -> None:
    configs = sweep_configs(ReplayConfig(hours=1, seed=7), (1.0, 1.2), (300.0,), (1.0, 4.0))
    assert len(configs) == 4
    assert {c.seed for c in configs.values()} == {7} and {c.hours for c in configs.values()} == {1}
    assert {(c.policy.estimator.margin_ratio, c.load_factor) for c in configs.values()} == {
        (1.0, 1.0), (1.2, 1.0), (1.0, 4.0), (1.2, 4.0)}
    with pytest.raises(ValueError, match="named twice"):
        sweep_configs(ReplayConfig(hours=1), (1.0, 1.0), (300.0,), (1.0,))


def test_the_calibration_file_carries_the_knee_and_reads_back() -> None:
    chosen = knee(POINTS)
    doc = calibration_document(PolicyDocument(), POINTS, chosen, margins=(1.0, 1.15, 1.3, 1.4), half_lives=(600.0,),
                               created="2026-12-01T00:00:00Z")
    back = parse_policy_text(dump_policy_text(doc), source="cal.yaml")
    assert back == doc
    assert back.policy.estimator.margin_ratio == 1.15 and back.metadata.source == "calibration"
    assert dict(back.metadata.calibration.knee) == {"margin_ratio": 1.15, "half_life_s": 600.0}
    assert len(back.metadata.calibration.points) == 4


def test_a_knee_on_the_grid_edge_is_named_by_flag_and_an_interior_one_is_not() -> None:
    margins, half_lives = (1.0, 1.15, 1.3), (300.0, 600.0, 1200.0)
    full = grid_settings(margins, half_lives, "full")
    assert grid_edges(pt(1.15, 600, 0.1, 0.1), full) == []
    assert grid_edges(pt(1.3, 1200, 0.1, 0.1), full) == [
        "the largest --margins value (1.3)", "the largest --half-lives value (1200)"]
    assert grid_edges(pt(1.0, 600, 0.1, 0.1), full) == ["the smallest --margins value (1)"]
    assert grid_edges(pt(1.0, 600, 0.1, 0.1), grid_settings(margins, (600.0,))) == ["the smallest --margins value (1)"]
    # a cross: the centre is interior; a knee off it has no other half-life swept in its column
    cross = grid_settings(margins, half_lives, "cross")
    assert sorted(cross) == [(1.0, 600.0), (1.15, 300.0), (1.15, 600.0), (1.15, 1200.0), (1.3, 600.0)]
    assert grid_edges(pt(1.15, 600, 0.1, 0.1), cross) == []
    assert grid_edges(pt(1.3, 600, 0.1, 0.1), cross) == [
        "the largest --margins value (1.3)", "the only --half-lives value swept at μ 1.3 (600)"]
    assert grid_edges(pt(1.15, 1200, 0.1, 0.1), cross) == [
        "the only --margins value swept at h 1200 s (1.15)", "the largest --half-lives value (1200)"]


def test_the_default_sweep_is_a_cross_of_the_grid_and_pins_still_hold() -> None:
    from kalena_engine.replay.calibration import HALF_LIVES, MARGINS

    assert len(grid_settings(MARGINS, HALF_LIVES, "cross")) == len(MARGINS) + len(HALF_LIVES) - 1
    assert len(grid_settings(MARGINS, HALF_LIVES, "full")) == len(MARGINS) * len(HALF_LIVES)
    # an even count centres on the lower middle value
    assert grid_settings((1.0, 1.2), (600.0, 1200.0), "cross") == [(1.0, 600.0), (1.2, 600.0), (1.0, 1200.0)]
    settings = sweep_settings((1.0, 1.2, 1.4), (600.0, 1200.0, 2400.0), ("asymmetric", "nsigma:margin_ratio=1"), "cross")
    assert settings["nsigma:margin_ratio=1"] == [(1.0, 1200.0), (1.0, 600.0), (1.0, 2400.0)]
    with pytest.raises(ValueError, match="grid 'star' is not one of cross, full"):
        grid_settings((1.0,), (600.0,), "star")


def test_widening_steps_past_the_edge_the_knee_is_on() -> None:
    margins, lives = (1.0, 1.05, 1.1, 1.15, 1.25, 1.4), (300.0, 600.0, 1200.0)
    full = grid_settings(margins, lives)
    # the outside check's case: the knee on the safest corner (μ 1.4, h 1200 s) — only its
    # neighbours past the edges are added, not a whole row and column
    added, said = widen_grid(pt(1.4, 1200, 0.1, 0.1), full)
    assert added == [(1.55, 1200.0), (1.4, 2400.0)] and len(said) == 2
    # on the smallest half-life: halved; the smallest margin is the estimator's floor: not widened
    added, said = widen_grid(pt(1.0, 300, 0.1, 0.1), full)
    assert added == [(1.0, 150.0)]
    assert any("smallest margin: not widened" in s for s in said)
    # a smallest margin above the floor steps down by the gap, at most to the floor
    assert widen_grid(pt(1.1, 600, 0.1, 0.1), grid_settings((1.1, 1.2, 1.3), lives))[0] == [(1.0, 600.0)]
    assert widen_grid(pt(1.05, 600, 0.1, 0.1), grid_settings((1.05, 1.2), lives))[0] == [(1.0, 600.0)]
    # interior: nothing added, nothing said
    assert widen_grid(pt(1.15, 600, 0.1, 0.1), full) == ([], [])
    # a cross grows towards a knee off its centre: the margins widened past it, its column
    # filled from the half-lives swept elsewhere; then the knee is interior
    cross = grid_settings((1.15, 1.3, 1.45), (600.0, 1200.0, 2400.0), "cross")
    added, said = widen_grid(pt(1.45, 1200, 0.1, 0.1), cross)
    assert added == [(1.6, 1200.0), (1.45, 600.0), (1.45, 2400.0)]
    assert said[0] == "--margins widened to 1.6 (the knee was on the largest, 1.45)"
    assert grid_edges(pt(1.45, 1200, 0.1, 0.1), cross + added) == []


def test_the_frontier_across_loads_carries_each_points_figures_at_every_load() -> None:
    at4 = [pt(p["margin_ratio"], p["half_life_s"], p["reclaimed_fraction_cpu"] * 2, p["batch_evictions_per_100_pod_hours"] * 3)
           for p in POINTS]
    front = frontier_across_loads({"1": POINTS, "4": at4})
    assert [f["margin_ratio"] for f in front] == [1.4, 1.15, 1.0]  # the ×1 frontier, in its order
    assert front[1]["loads"]["1"] == POINTS[1] and front[1]["loads"]["4"] == at4[1]
    assert frontier_across_loads({}) == []


def _p(mu: float, x: float, e: float, contention: float = 0.0, prod: float = 1000.0) -> dict[str, float]:
    return {"margin_ratio": mu, "half_life_s": 600.0, "reclaimed_fraction_cpu": x, "reclaimed_fraction_ram": 0.0,
            "batch_evictions_per_100_pod_hours": e, "production_contention_core_hours": contention,
            "oom_kills": 0.0, "production_cpu_core_hours": prod}


def test_the_shipped_setting_is_the_most_harvest_inside_the_operators_tolerance() -> None:
    from kalena_engine.replay.calibration import shipped

    per_load = {"1": [_p(1.4, 0.12, 0.05), _p(1.15, 0.13, 0.3)], "4": [_p(1.4, 0.30, 0.09), _p(1.15, 0.31, 0.5)]}
    chosen, qualified, why = shipped(per_load)
    assert (chosen["margin_ratio"], qualified) == (1.4, True)
    assert "within the tolerance" in why
    # contention above 0.01 % of production cpu at ×4 disqualifies it even with few evictions
    per_load["4"][0] = _p(1.4, 0.30, 0.09, contention=0.2)           # 0.02 % of 1000 core-h
    chosen, qualified, why = shipped(per_load)
    assert qualified is False and "no setting is within the tolerance" in why


def test_when_none_qualifies_the_fewest_evictions_near_the_best_harvest_ships_and_says_so() -> None:
    from kalena_engine.replay.calibration import shipped

    per_load = {"1": [_p(1.4, 0.12, 0.05), _p(1.15, 0.13, 0.3), _p(1.25, 0.128, 0.15)],
                "4": [_p(1.4, 0.30, 0.2), _p(1.15, 0.31, 0.5), _p(1.25, 0.308, 0.25)]}
    chosen, qualified, why = shipped(per_load)
    # best mean harvest 22 % (μ 1.15); μ 1.25 has 21.8 % ≥ 0.98 × 22 % and fewer evictions; μ 1.4 (21 %) is too far
    assert (chosen["margin_ratio"], qualified) == (1.25, False)
    assert "fewest evictions" in why and "within 2% of the best harvest" in why


def test_predictor_variants_are_parsed_checked_and_pinned() -> None:
    from kalena_engine.replay.calibration import parse_variant, variant_grid

    label, params = parse_variant("max:members=percentile+nsigma:margin_ratio=1")
    assert label == "max:members=percentile+nsigma:margin_ratio=1"
    assert dict(params) == {"predictor": "max", "members": ("percentile", "nsigma"), "margin_ratio": 1.0}
    # a pinned axis runs at its one value; the other axis is the grid's
    assert variant_grid(params, (1.0, 1.3), (600.0, 1200.0)) == [(1.0, 600.0), (1.0, 1200.0)]
    assert variant_grid("nsigma", (1.0, 1.3), (600.0,)) == [(1.0, 600.0), (1.3, 600.0)]
    for text, fragment in (("oracle", "predictor 'oracle' is unknown"),
                           ("nsigma:window_s=60", "window_s 60 is shorter than two buckets"),
                           ("percentile:percentile=101", "spec.estimator.percentile: 101.0 is out of range"),
                           ("nsigma:sigma=2", "'sigma' is not a predictor key"),
                           ("max:members=percentile+oracle", "each must be one of")):
        with pytest.raises(ValueError, match=fragment):
            parse_variant(text)


def test_the_sweep_crosses_variants_with_the_grid_and_the_file_carries_the_shipped_setting() -> None:
    from kalena_engine.replay.calibration import point, shipped

    configs = sweep_configs(ReplayConfig(hours=1), (1.0, 1.3), (600.0,), (1.0, 4.0),
                            ("asymmetric", "nsigma:n_sigma=5:half_life_s=1200"))
    assert len(configs) == 2 * (2 + 2)
    nsigma = configs["nsigma:n_sigma=5:half_life_s=1200 μ1.3 h1200 ×4"].policy.estimator
    assert (nsigma.predictor, nsigma.n_sigma, nsigma.margin_ratio, nsigma.half_life_s) == ("nsigma", 5.0, 1.3, 1200.0)
    with pytest.raises(ValueError, match="named twice"):
        sweep_configs(ReplayConfig(hours=1), (1.0,), (600.0,), (1.0,), ("nsigma", "nsigma"))
    summary = {"reclaimed_fraction_cpu": 0.1, "reclaimed_fraction_ram": 0.05, "batch_evictions_per_100_pod_hours": 0.05,
               "production_contention_core_hours": 0.0, "production_cpu_core_hours": 1000.0}
    per_load = {load: {"points": [point(1.0, 1200.0, summary, "nsigma:n_sigma=5:half_life_s=1200"),
                                  point(1.3, 600.0, {**summary, "batch_evictions_per_100_pod_hours": 0.5})]}
                for load in ("1", "4")}
    chosen, within, _ = shipped({k: v["points"] for k, v in per_load.items()})
    assert within and chosen["predictor"] == "nsigma:n_sigma=5:half_life_s=1200"
    doc = calibration_document(PolicyDocument(), per_load, knee(per_load["1"]["points"]), chosen, within,
                               margins=(1.0, 1.3), half_lives=(600.0,), predictors=("asymmetric", chosen["predictor"]),
                               created="2026-12-02T00:00:00Z")
    back = parse_policy_text(dump_policy_text(doc), source="cal.yaml")
    assert back == doc
    est = back.policy.estimator
    assert (est.predictor, est.n_sigma, est.margin_ratio, est.half_life_s) == ("nsigma", 5.0, 1.0, 1200.0)
    cal = back.metadata.calibration
    assert dict(cal.shipped)["predictor"] == "nsigma:n_sigma=5:half_life_s=1200" and dict(cal.shipped)["qualified"] == 1
    assert dict(cal.tolerance) == {"max_evictions_per_100_pod_hours": 0.1, "max_contention_share": 0.0001}
    assert sorted({(p.load_factor, p.predictor) for p in cal.points}) == [
        (1.0, "asymmetric"), (1.0, "nsigma:n_sigma=5:half_life_s=1200"),
        (4.0, "asymmetric"), (4.0, "nsigma:n_sigma=5:half_life_s=1200")]


def test_a_calibration_point_naming_an_unknown_predictor_is_refused_naming_the_key() -> None:
    from kalena_engine.errors import PolicyError

    text = """apiVersion: kalena.naughtian.io/v1
kind: Policy
metadata:
  calibration:
    points:
    - {predictor: oracle, margin_ratio: 1, half_life_s: 600, reclaimed_fraction_cpu: 0.1, reclaimed_fraction_ram: 0,
       batch_evictions_per_100_pod_hours: 0, production_contention_core_hours: 0}
"""
    with pytest.raises(PolicyError, match=r"metadata\.calibration\.points\[0\]\.predictor: unknown predictor 'oracle'"):
        parse_policy_text(text, source="cal.yaml")
