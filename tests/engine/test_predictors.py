"""Peak predictors (docs/design.md §5 predictors): each member's worked example, the bounds every
member keeps, the policy keys that select them, and the per-workload choice."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from kalena_engine.errors import PolicyError
from kalena_engine.estimator import concat, initial_reservations, pinned_mask, take, update_reservations
from kalena_engine.policy import EstimatorPolicy, Policy
from kalena_engine.policy_file import parse_policy_text, policy_with_sections
from kalena_engine.predictors import (
    NO_ID,
    choose, empty_history, horizon_peak, max_peak, nsigma_peak, percentile_peak, periodic_peak, prediction_cost,
    score_and_choose,
)
from kalena_engine.resources import CPU, GPU, RAM, STORAGE, ir_vector, to_ir
from tests.worked import WORKED_ESTIMATOR

def _estimator(**changes: object) -> EstimatorPolicy:
    """The worked examples' estimator (the asymmetric rule, μ 1.15, h 600 s: tests/worked.py) with
    ``changes``: each example's numbers are that policy's, whatever the shipped default is."""
    return replace(WORKED_ESTIMATOR, **changes)


PEAKS = np.array([1.0, 2.0, 3.0, 4.0, 10.0])[None, :, None]


def _horizon_history(horizon_s: float):
    """One workload under ``auto`` (asymmetric, percentile) whose buckets 10, 11, 12 peaked at 1, 3, 2
    cores, with the forecasts made at the start of bucket 10 (asymmetric 2, percentile 4) and of
    bucket 12 (asymmetric 1, percentile 4)."""
    policy = _estimator(predictor="auto", members=("asymmetric", "percentile"), cost_horizon_s=horizon_s,
                             cost_half_life_s=1e12, switch_margin_ratio=0.0)
    history = empty_history(np.zeros((1, 1)), policy)
    for b, peak in ((10, 1.0), (11, 3.0), (12, 2.0)):
        history.peaks[0, b % history.peaks.shape[1], 0] = peak
        history.ids[0, b % history.peaks.shape[1]] = b
    for b, made in ((10, (2.0, 4.0)), (12, (1.0, 4.0))):
        slot = b % history.forecast.shape[1]
        history.forecast[0, slot, :, 0] = made
        history.forecast_ids[0, slot] = b
    return history, policy


def _horizon_costs(horizon_s: float) -> np.ndarray:
    history, policy = _horizon_history(horizon_s)
    return score_and_choose(history, np.array([0]), np.array([12]), policy).cost[0, :, 0]


def _diurnal(days: int, spike_hour: int = 0, spikes: tuple[float, ...] = (2.0, 4.0)) -> np.ndarray:
    hourly = np.ones((1, 24 * days, 1))
    for d, value in enumerate(spikes):
        hourly[0, 24 * d + spike_hour] = value
    return hourly


# The docstrings' worked examples, the same numbers.
@pytest.mark.parametrize(("name", "compute", "expected"), [
    ("percentile p90 of 1,2,3,4,10", lambda: percentile_peak(PEAKS, 90), 7.6),
    ("percentile p50 of 1,2,3,4,10", lambda: percentile_peak(PEAKS, 50), 3.0),
    ("2-sigma of 1,2,3,4,10", lambda: nsigma_peak(PEAKS, 2.0), 4 + 2 * np.sqrt(10)),
    ("periodic, all 12 harmonics = same-hour mean", lambda: periodic_peak(_diurnal(2), 12), 3.0),
    ("periodic, 1 harmonic", lambda: periodic_peak(_diurnal(2), 1), 52 / 48 + 2 * 4 / 48),
    ("periodic, 3 harmonics", lambda: periodic_peak(_diurnal(2), 3), 52 / 48 + 6 * 4 / 48),
    ("periodic, 1 harmonic, an hour ahead too", lambda: periodic_peak(_diurnal(2), 1, ahead=1), 1.25),
    ("periodic, the hour ahead is the spike", lambda: periodic_peak(_diurnal(2, spike_hour=1), 12, ahead=1), 3.0),
    ("max of 7.6, 10.325, nan", lambda: max_peak([np.array([[7.6]]), np.array([[10.325]]), np.array([[np.nan]])]),
     10.325),
    ("cost under-predicted 4 vs 5", lambda: prediction_cost(np.array(4.0), np.array(5.0), 10, 1), 10.0),
    ("cost over-predicted 6 vs 5", lambda: prediction_cost(np.array(6.0), np.array(5.0), 10, 1), 1.0),
    ("horizon peak of 1,3,2", lambda: horizon_peak(_horizon_history(900.0)[0], np.array([0]), np.array([10]), 3), 3.0),
    ("horizon peak of bucket 12 alone",
     lambda: horizon_peak(_horizon_history(900.0)[0], np.array([0]), np.array([12]), 1), 2.0),
    ("3-bucket horizon: asymmetric 2 vs peak 3", lambda: _horizon_costs(900.0)[0], 10.0),
    ("3-bucket horizon: percentile 4 vs peak 3", lambda: _horizon_costs(900.0)[1], 1.0),
    ("1-bucket horizon: asymmetric 1 vs peak 2", lambda: _horizon_costs(300.0)[0], 10.0),
    ("1-bucket horizon: percentile 4 vs peak 2", lambda: _horizon_costs(300.0)[1], 2.0),
])
def test_worked_examples(name: str, compute, expected: float) -> None:
    assert float(np.asarray(compute()).ravel()[0]) == pytest.approx(expected, abs=1e-3), name


def test_too_little_history_is_nan_so_the_conservative_member_serves() -> None:
    two = np.array([[5.0, np.nan, 6.0, np.nan]])[:, :, None]
    assert np.isnan(percentile_peak(two, 99, min_buckets=3)).all()
    assert np.isnan(nsigma_peak(two[:, :1], 3)).all()               # σ needs two buckets
    half_day = np.full((1, 24, 1), np.nan)
    half_day[0, :12] = 1.0
    assert np.isnan(periodic_peak(half_day, 3)).all()              # fewer than 24 hours


def test_vectorised_rows_are_independent() -> None:
    peaks = np.stack([PEAKS[0], PEAKS[0] * 2, np.full_like(PEAKS[0], np.nan)])
    out = percentile_peak(peaks, 90)
    assert out[:, 0] == pytest.approx([7.6, 15.2, np.nan], nan_ok=True)


def test_choose_switches_only_past_the_hysteresis() -> None:
    cost = np.array([[10.0, 9.5, 3.0], [10.0, 9.5, 9.6]])[:, :, None]
    current = np.zeros((2, 1), dtype=np.int64)
    assert choose(cost, current, 0.1)[:, 0].tolist() == [2, 0]


# -- inside the estimator: the bounds of docs/design.md §5 hold for every predictor --------------------

def _run(policy: EstimatorPolicy, usage: np.ndarray, step_s: float = 60.0, request: float = 10.0,
         limit: float = 12.0) -> np.ndarray:
    """cpu reservation (cores) after each sample of a single workload started at t = 0."""
    q = ir_vector(cpu=request)[None, :]
    L = ir_vector(cpu=limit)[None, :]
    state = initial_reservations(q, np.zeros(1))
    out = []
    for i, u in enumerate(usage):
        state = update_reservations(
            state, request=q, limit=L, usage=ir_vector(cpu=float(u))[None, :], sampled=np.array([True]),
            now_s=i * step_s, start_s=np.zeros(1), grace_s=np.array([policy.grace_s]),
            pinned=pinned_mask(np.array([False])), policy=policy)
        out.append(to_ir(state.value[0])[CPU])
    return np.array(out)


@pytest.mark.parametrize("predictor", ["percentile", "nsigma", "periodic", "max", "auto"])
def test_every_predictor_keeps_the_bounds(predictor: str) -> None:
    policy = _estimator(predictor=predictor, window_s=1800.0, min_history_s=600.0)
    rng = np.random.default_rng(0)
    usage = np.clip(2.0 + rng.normal(0.0, 0.3, 300), 0.0, None)   # 5 h of 1-min samples
    usage[200] = 20.0                                              # one sample far above the limit
    r = _run(policy, usage)
    asym = _run(_estimator(), usage)
    assert (r[:5] >= 10.0).all()                                   # grace: never below the request
    assert (r <= 12.0 + 1e-9).all()                                # never above the limit
    assert r[200] == pytest.approx(12.0)                           # rise at once (to L here)
    assert (r >= np.minimum(12.0, 1.15 * usage) - 1e-9).all()      # never below μ · usage
    # too little history (two closed 5-min buckets, i.e. before t = 600 s): the asymmetric rule
    np.testing.assert_allclose(r[:10], asym[:10])


def test_the_shipped_default_keeps_the_bounds_once_its_periodic_member_serves() -> None:
    # four days of 5-min samples of a diurnal load (1–5 cores) with one spike above the limit on day 4
    policy = EstimatorPolicy()
    t = np.arange(4 * 288) * 300.0
    rng = np.random.default_rng(1)
    usage = np.clip(3.0 + 2.0 * np.sin(2 * np.pi * t / 86400.0) + rng.normal(0.0, 0.2, t.size), 0.0, None)
    usage[1000] = 20.0
    r = _run(policy, usage, step_s=300.0)
    assert r[0] >= 10.0                                              # grace: the request
    assert (r <= 12.0 + 1e-9).all() and r[1000] == pytest.approx(12.0)   # never above L; rise at once
    assert (r >= np.minimum(12.0, policy.margin_ratio * usage) - 1e-9).all()  # never below μ · usage
    # the periodic member serves from day 2 (a day of hours): the reservation then differs from the
    # asymmetric rule's somewhere, and on day 1 it is the asymmetric rule's exactly
    alone = _run(replace(policy, predictor="asymmetric"), usage, step_s=300.0)
    np.testing.assert_allclose(r[:288], alone[:288])
    assert not np.allclose(r[300:], alone[300:])


def test_percentile_predictor_releases_more_than_the_slow_decay_and_policy_round_trips() -> None:
    usage = np.r_[np.full(60, 8.0), np.full(240, 2.0)]              # a burst, then steady 2 cores
    pct = _run(_estimator(predictor="percentile", percentile=95, window_s=1800.0, min_history_s=600.0),
               usage)
    asym = _run(_estimator(), usage)
    # 40 min after the burst ends the percentile window (30 min) no longer holds it
    assert pct[100] == pytest.approx(1.15 * 2.0)
    assert asym[100] > pct[100]


def test_peak_margin_ratio_scales_the_forecast_not_the_usage_floor() -> None:
    usage = np.r_[np.full(60, 8.0), np.full(240, 2.0)]              # a burst, then steady 2 cores
    base = dict(predictor="percentile", percentile=95, window_s=1800.0, min_history_s=600.0)
    same = _run(_estimator(**base), usage)
    peak = _run(_estimator(**base, peak_margin_ratio=1.0), usage)
    # 5 min after the burst the window's p95 is still 8 cores: μ 1.15 on it, or none
    assert (same[65], peak[65]) == (pytest.approx(1.15 * 8.0), pytest.approx(8.0))
    # the floor stays μ · usage (μ = margin_ratio): 8 cores in the burst reserve 9.2
    assert peak[30] == pytest.approx(1.15 * 8.0)


@pytest.mark.parametrize("predictor", ["asymmetric", "percentile"])
def test_memory_margin_ratio_widens_memory_only(predictor: str) -> None:
    """``memory_margin_ratio``: memory (incompressible: a shortfall is an eviction) keeps 1.6 × its
    usage or forecast while cpu keeps μ 1.15 — in the asymmetric rule and in a peak member alike."""
    policy = _estimator(predictor=predictor, memory_margin_ratio=1.6, window_s=1800.0, min_history_s=600.0)
    q = ir_vector(cpu=10.0, ram=10.0)[None, :]
    state = initial_reservations(q, np.zeros(1))
    for i in range(180):                                             # 3 h of steady 2 cores, 4 GiB
        state = update_reservations(
            state, request=q, limit=q, usage=ir_vector(cpu=2.0, ram=4.0)[None, :], sampled=np.array([True]),
            now_s=i * 60.0, start_s=np.zeros(1), grace_s=np.array([300.0]), pinned=pinned_mask(np.array([False])),
            policy=policy)
    got = to_ir(state.value[0])
    assert (got[CPU], got[RAM]) == (pytest.approx(1.15 * 2.0, rel=1e-3), pytest.approx(1.6 * 4.0, rel=1e-3))
    assert list(_estimator(memory_margin_ratio=1.6).margins[[CPU, RAM, GPU, STORAGE]]) == [1.15, 1.6, 1.6, 1.6]
    assert list(_estimator().margins[[CPU, RAM]]) == [1.15, 1.15]       # unset: μ everywhere


def test_memory_margin_ratio_in_a_policy_file_is_read_and_range_checked() -> None:
    doc = parse_policy_text("apiVersion: kalena.naughtian.io/v1\nkind: Policy\nspec:\n  estimator:\n"
                            "    memory_margin_ratio: 1.6\n", source="p.yaml")
    assert doc.policy.estimator.memory_margin_ratio == 1.6
    with pytest.raises(PolicyError, match=r"estimator\.memory_margin_ratio: 0\.9 is out of range"):
        parse_policy_text("apiVersion: kalena.naughtian.io/v1\nkind: Policy\nspec:\n  estimator:\n"
                          "    memory_margin_ratio: 0.9\n", source="p.yaml")


def test_auto_picks_the_periodic_member_on_a_diurnal_workload() -> None:
    t = np.arange((3 * 24 + 12) * 12) * 300.0                     # 3.5 days of 5-min samples
    usage = 2.0 + 3.0 * (((t // 3600) % 24) >= 12)                # 2 cores until noon, 5 after
    policy = _estimator(predictor="auto", window_s=3600.0, min_history_s=1800.0, periodic_days=2,
                             periodic_harmonics=12, members=("asymmetric", "percentile", "periodic"))
    q = ir_vector(cpu=10.0)[None, :]
    state = initial_reservations(q, np.zeros(1))
    served = []
    for ts, u in zip(t, usage, strict=True):
        state = update_reservations(
            state, request=q, limit=q, usage=ir_vector(cpu=float(u))[None, :], sampled=np.array([True]),
            now_s=ts, start_s=np.zeros(1), grace_s=np.array([300.0]), pinned=pinned_mask(np.array([False])),
            policy=policy)
        served.append(to_ir(state.value[0])[CPU])
    assert policy.members[int(state.history.chosen[0, CPU])] == "periodic"
    day4 = 3 * 24 * 12
    # 00:55 on day 4: the evening's 5 cores are gone; the look-back window would still hold them
    assert served[day4 + 11] == pytest.approx(1.15 * 2.0)
    # 11:55: the noon rise is reserved before it arrives (the next hour is covered)
    assert served[-1] == pytest.approx(1.15 * 5.0)


def _auto_chosen(usage: np.ndarray, horizon_s: float) -> str:
    """The member ``auto`` (asymmetric, percentile) serves a workload's cpu after 5-min samples of ``usage``."""
    policy = _estimator(predictor="auto", window_s=3600.0, min_history_s=1800.0, cost_horizon_s=horizon_s,
                             members=("asymmetric", "percentile"))
    q = ir_vector(cpu=10.0)[None, :]
    state = initial_reservations(q, np.zeros(1))
    for i, u in enumerate(usage):
        state = update_reservations(
            state, request=q, limit=q, usage=ir_vector(cpu=float(u))[None, :], sampled=np.array([True]),
            now_s=i * 300.0, start_s=np.zeros(1), grace_s=np.array([300.0]), pinned=pinned_mask(np.array([False])),
            policy=policy)
    return policy.members[int(state.history.chosen[0, CPU])]


def test_auto_scores_over_the_cost_horizon_not_the_next_bucket() -> None:
    # an hourly ramp: 1 → 4 cores over 55 min, then back to 1. One bucket ahead the asymmetric
    # rule (μ · the last sample) is close; over the next hour it is far below the ramp's top, the
    # slack it frees would be lent to batch through the peak
    ramp = np.tile(1.0 + 3.0 * np.arange(12) / 11.0, 8)            # 8 h of 5-min samples
    assert _auto_chosen(ramp, 300.0) == "asymmetric"
    assert _auto_chosen(ramp, 3600.0) == "percentile"


def test_take_and_concat_keep_each_workloads_history() -> None:
    policy = _estimator(predictor="percentile", window_s=1800.0, min_history_s=600.0)
    q = np.stack([ir_vector(cpu=10.0), ir_vector(cpu=4.0)])
    state = initial_reservations(q, np.zeros(2))
    for i in range(40):
        state = update_reservations(state, request=q, limit=q, usage=q * 0.1, sampled=np.ones(2, dtype=bool),
                                    now_s=i * 60.0, start_s=np.zeros(2), grace_s=np.full(2, 300.0),
                                    pinned=pinned_mask(np.zeros(2, dtype=bool)), policy=policy)
    second = take(state, np.array([1]))
    assert second.history.peaks.shape[0] == 1
    np.testing.assert_array_equal(second.history.peaks[0], state.history.peaks[1])
    joined = concat(second, initial_reservations(q[:1], np.zeros(1)))
    assert len(joined.history) == 2 and np.isnan(joined.history.peaks[1]).all()


def test_the_asymmetric_rule_carries_no_history_and_the_shipped_default_does() -> None:
    q = ir_vector(cpu=10.0)[None, :]

    def first_update(policy: EstimatorPolicy):
        return update_reservations(initial_reservations(q, np.zeros(1)), request=q, limit=q, usage=q * 0.5,
                                   sampled=np.array([True]), now_s=10.0, start_s=np.zeros(1),
                                   grace_s=np.array([300.0]), pinned=pinned_mask(np.array([False])), policy=policy)

    assert first_update(_estimator()).history is None
    # the shipped default (auto of the asymmetric rule and the periodic member) keeps every
    # workload's bucket peaks from its first sample: the periodic member needs days of them
    shipped = first_update(EstimatorPolicy())
    assert EstimatorPolicy().predictor == "auto" and shipped.history is not None and len(shipped.history) == 1


@pytest.mark.parametrize(("spec", "key"), [
    ({"predictor": "oracle"}, "estimator.predictor"),
    ({"window_s": 30}, "estimator.window_s"),
    ({"window_s": 8 * 86400}, "estimator.window_s"),
    ({"percentile": 101}, "estimator.percentile"),
    ({"periodic_days": 0}, "estimator.periodic_days"),
    ({"members": ["percentile", "magic"]}, "estimator.members[1]"),
    ({"cost_horizon_s": 0}, "estimator.cost_horizon_s"),
    ({"peak_margin_ratio": 0.9}, "estimator.peak_margin_ratio"),
])
def test_policy_refuses_unknown_predictor_or_out_of_range_window_naming_the_key(spec: dict, key: str) -> None:
    with pytest.raises(PolicyError) as err:
        policy_with_sections(Policy(), {"estimator": spec})
    assert key in str(err.value)


def test_policy_file_selects_the_predictor_and_its_parameters() -> None:
    doc = parse_policy_text(
        "apiVersion: kalena.naughtian.io/v1\nkind: Policy\nspec:\n  estimator:\n    predictor: max\n"
        "    percentile: 95\n    n_sigma: 2\n    members: [percentile, nsigma]\n", source="p.yaml")
    est = doc.policy.estimator
    assert (est.predictor, est.percentile, est.n_sigma, est.members) == ("max", 95.0, 2.0, ("percentile", "nsigma"))


def test_stored_history_reads_back_and_a_changed_policy_starts_empty() -> None:
    from kalena_engine.predictors import empty_history, pack_rows, unpack_rows

    policy = _estimator(predictor="auto")
    history = empty_history(np.ones((2, 8)), policy)
    history.peaks[1, 5, CPU] = 7.0
    history.chosen[1, CPU] = 2
    history.bucket[1] = 99
    blobs = pack_rows(history, np.array([0, 1]))
    back = unpack_rows([None, blobs[1]], np.zeros((2, 8)), policy)
    assert (back.peaks[1, 5, CPU], back.chosen[1, CPU], back.bucket[1]) == (7.0, 2, 99)
    assert back.asym[0, CPU] == 0.0 and back.bucket[0] == NO_ID       # no bytes: empty, stored r
    other = unpack_rows([blobs[1]], np.full((1, 8), 3.0), _estimator(predictor="auto", window_s=3600.0))
    assert other.bucket[0] == NO_ID and other.asym[0, CPU] == 3.0      # another window: empty


def test_history_stored_by_the_previous_version_reads_back_with_its_empty_slots_empty() -> None:
    """Version 3 wrote an empty slot's id as −1; ids may now be negative (a warmed replay), so an
    empty slot is NO_ID — a stored v3 history must not read −1 as bucket −1."""
    from kalena_engine.predictors import empty_history, pack_rows, unpack_rows

    policy = _estimator(predictor="auto")
    history = empty_history(np.ones((1, 8)), policy)
    history.peaks[0, 5, CPU] = 7.0
    history.ids[0, 5] = 5
    history.bucket[0] = 6
    flat = np.frombuffer(pack_rows(history, np.array([0]))[0], dtype=np.float64).copy()
    flat[0] = 3.0
    flat[flat == NO_ID] = -1.0                                          # as version 3 wrote it
    back = unpack_rows([flat.tobytes()], np.zeros((1, 8)), policy)
    assert back.peaks[0, 5, CPU] == 7.0 and back.ids[0, 5] == 5 and back.bucket[0] == 6
    assert np.all(np.delete(back.ids[0], 5) == NO_ID) and np.all(back.hour_ids[0] == NO_ID)


def test_samples_before_time_zero_fill_the_history_as_later_ones_do() -> None:
    """A warmed replay feeds the days before its window at negative times: bucket −1 (the five
    minutes before 0) is a bucket like any other, and the periodic member reads yesterday's hours
    across 0."""
    from kalena_engine.predictors import empty_history, leaf_forecasts, observe

    policy = _estimator(predictor="periodic", periodic_days=1, periodic_harmonics=12)
    history = empty_history(np.zeros((1, 8)), policy)
    rows = np.array([0])
    forecasts = {}
    for t in np.arange(-86_400.0, 3_301.0, 300.0):                     # a day before 0, then the first hour
        usage = np.zeros((1, 8))
        usage[0, CPU] = 2.0 if -86_400 + 3_600 <= t < -86_400 + 7_200 else 1.0   # yesterday's 01:00 hour peaks
        history, _ = observe(history, rows, np.array([t]), usage, policy)
        forecasts[t] = leaf_forecasts(history, rows, policy)[0, 2, CPU]
    assert history.ids[0, np.mod(-1, history.ids.shape[1])] == -1       # bucket −1 held, not read as empty
    assert np.isnan(forecasts[-3_600.0])                                # less than a day of hours yet
    assert forecasts[300.0] == pytest.approx(1.0)                       # 00:05: yesterday's 00:00 hour
    assert forecasts[3_300.0] == pytest.approx(2.0)                     # 00:55: the 01:00 rise, a bucket ahead


def test_percentile_equals_numpys_on_windows_with_gaps() -> None:
    rng = np.random.default_rng(1)
    peaks = rng.random((50, 13, 8))
    peaks[rng.random(peaks.shape) < 0.3] = np.nan
    for p in (0.0, 37.5, 90.0, 99.0, 100.0):
        np.testing.assert_allclose(percentile_peak(peaks, p), np.nanpercentile(peaks, p, axis=1), atol=1e-12)


def test_explain_says_which_member_serves_and_why() -> None:
    from kalena_engine.predictors import explain

    assert explain(None, 0, CPU, _estimator()) == ("asymmetric", "the policy's predictor")
    policy = _estimator(predictor="percentile", window_s=1800.0, min_history_s=600.0)
    q = ir_vector(cpu=10.0)[None, :]
    state = initial_reservations(q, np.zeros(1))
    said = []
    for i in range(12):                                              # 1-min samples: 5-min buckets close at 5, 10
        state = update_reservations(state, request=q, limit=q, usage=q * 0.2, sampled=np.array([True]),
                                    now_s=i * 60.0, start_s=np.zeros(1), grace_s=np.array([300.0]),
                                    pinned=pinned_mask(np.array([False])), policy=policy)
        said.append(explain(state.history, 0, CPU, policy))
    assert said[6] == ("asymmetric", "too little history for percentile: 5 of 10 min")
    assert said[11] == ("percentile", "the policy's predictor")


def test_explain_names_what_the_shipped_default_still_lacks_in_a_workloads_first_day() -> None:
    from kalena_engine.predictors import explain

    policy = EstimatorPolicy()                                       # auto of asymmetric and periodic
    q = ir_vector(cpu=10.0)[None, :]
    state = initial_reservations(q, np.zeros(1))
    for i in range(150):                                             # 2.5 h of 1-min samples
        state = update_reservations(state, request=q, limit=q, usage=q * 0.2, sampled=np.array([True]),
                                    now_s=i * 60.0, start_s=np.zeros(1), grace_s=np.array([300.0]),
                                    pinned=pinned_mask(np.array([False])), policy=policy)
    # hours 0 and 1 closed, hour 2 open: the periodic member needs 24 closed hours
    assert explain(state.history, 0, CPU, policy) == ("asymmetric", "too little history for auto (periodic: 2 of 24 h)")
    # the periodic member alone says the same (not minutes of buckets, which it has), and `auto`
    # of the asymmetric rule alone waits for nothing
    periodic = replace(policy, predictor="periodic")
    assert explain(state.history, 0, CPU, periodic) == ("asymmetric", "too little history for periodic: 2 of 24 h")
    alone = replace(policy, members=("asymmetric",))
    assert explain(state.history, 0, CPU, alone) == ("asymmetric", "auto of the asymmetric rule alone (its only member)")
