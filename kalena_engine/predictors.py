"""Peak predictors over each workload's own usage history, vectorised over workloads (docs/design.md §5).

The reservation estimator (:mod:`kalena_engine.estimator`) serves one member of a family. Every
member below is a pure function of per-bucket usage *peaks*: the usage of workload ``w`` in
dimension ``d`` is folded into buckets of ``bucket_s`` seconds (default 300 s, the Google 2019
trace's 5-minute windows) keeping each bucket's maximum, and a predictor forecasts the next
bucket's peak from the closed buckets. All arrays are ``(n, k, 8)`` (workloads × buckets ×
dimensions) with ``nan`` for a bucket that holds no sample; every function returns ``(n, 8)``
with ``nan`` where a workload has too little history (the estimator then serves its
conservative member, the asymmetric rule).

Members (each is multiplied by the margin ``μ`` — the policy's ``peak_margin_ratio`` instead, when set — and
bounded by the estimator, not here):

* ``percentile`` — Borg's "RC-like" predictor: the ``p``-th percentile of the peaks in the last
  ``window_s`` (Bashir et al., "Take it to the limit: peak prediction-driven resource
  overcommitment in datacenters", EuroSys 2021, §4).
* ``nsigma`` — ``mean + N·σ`` of the peaks in the window (Bashir et al. 2021, §4; the
  Gaussian-tail rule of thumb).
* ``periodic`` — the next hour's peak from the same hours of earlier days: the hourly peak series
  of the last ``D`` days is transformed with a discrete Fourier transform, only the mean and the
  ``k`` strongest daily harmonics are kept, and the reconstruction is read at the next hour
  (the method of Crane's DSP predictor, gocrane.io: detect the dominant period, filter the
  spectrum, forecast the next cycle). Keeping all twelve daily harmonics reduces exactly to the
  mean of the same hour on the earlier days.
* ``max`` — the maximum of several members (Bashir et al. 2021, §5: the max predictor of
  percentile and N-sigma members is their best policy on the Google 2019 trace).

The per-workload choice (``auto``) follows Autopilot (Rzadca et al., EuroSys 2020, §3.2): each
candidate's reservation at a bucket's start is scored against the highest bucket peak of the
``cost_horizon_s`` that follows (20 min by default: the slack a reservation frees is lent to
batch for longer than a bucket; ``oracle-60m`` reserves the peak of the next hour), under-prediction weighted
far above over-prediction, costs decayed with a half-life; a workload switches to the cheapest
candidate only when it is cheaper than the current one by the hysteresis margin. Scoring one
bucket ahead only (``cost_horizon_s = bucket_s``) favours the asymmetric rule, which tracks the
last sample closely but decays below the peaks that follow within the hour (docs/evaluation.md,
the ×4 diagnosis).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from kalena_engine.policy import EstimatorPolicy

#: Predictor names a policy may select (``estimator.predictor``).
PREDICTORS = ("asymmetric", "percentile", "nsigma", "periodic", "max", "auto")
#: Members ``max`` and ``auto`` may combine.
MEMBERS = ("asymmetric", "percentile", "nsigma", "periodic")
HOUR_S = 3600.0
DAY_HOURS = 24
#: Bucket, hour and forecast id of an empty slot (and the open bucket before any sample). Ids are
#: ``⌊t / bucket_s⌋`` and may be negative: a replay warmed with the days before its window feeds
#: samples at ``t < 0``; no time a workload is sampled at reaches this id.
NO_ID = -(2 ** 62)


def _enough(peaks: np.ndarray, min_buckets: int) -> np.ndarray:
    """``(n, 8)`` bool: at least ``min_buckets`` non-nan peaks along axis 1."""
    return np.sum(~np.isnan(peaks), axis=1) >= max(1, int(min_buckets))


def percentile_peak(peaks: np.ndarray, percentile: float, min_buckets: int = 1) -> np.ndarray:
    """The ``percentile``-th percentile of each workload's bucket peaks ("RC-like", Bashir et
    al. EuroSys 2021 §4; linear interpolation between order statistics, numpy's default).

    Args:
        peaks: ``(n, k, 8)`` bucket peaks of the window, ``nan`` where a bucket is empty.
        percentile: in ``[0, 100]``.
        min_buckets: fewer non-empty buckets than this → ``nan`` (too little history).

    Worked example: peaks 1, 2, 3, 4, 10 cores, p = 90 → rank 0.9 · 4 = 3.6 → 4 + 0.6 · (10 − 4)
    = 7.6 cores; p = 50 → 3 cores.
    """
    ordered = np.sort(peaks, axis=1)                               # nan sorts last
    count = np.sum(~np.isnan(peaks), axis=1)                       # (n, 8)
    rank = (percentile / 100.0) * np.maximum(count - 1, 0)
    low = np.floor(rank).astype(np.int64)
    high = np.minimum(low + 1, np.maximum(count - 1, 0))
    below = np.take_along_axis(ordered, low[:, None, :], axis=1)[:, 0, :]
    above = np.take_along_axis(ordered, high[:, None, :], axis=1)[:, 0, :]
    out = below + (rank - low) * (above - below)                   # numpy's "linear" method
    return np.where(_enough(peaks, min_buckets) & (count > 0), out, np.nan)


def nsigma_peak(peaks: np.ndarray, n_sigma: float, min_buckets: int = 2) -> np.ndarray:
    """``mean + N · σ`` of each workload's bucket peaks (Bashir et al. EuroSys 2021 §4; σ is the
    population standard deviation of the window).

    Worked example: peaks 1, 2, 3, 4, 10 cores, N = 2 → mean 4, σ = √(50/5) = 3.1623 →
    4 + 2 · 3.1623 = 10.325 cores.
    """
    with np.errstate(all="ignore"), _quiet():
        out = np.nanmean(peaks, axis=1) + n_sigma * np.nanstd(peaks, axis=1)
    return np.where(_enough(peaks, max(2, min_buckets)), out, np.nan)


def periodic_peak(hourly: np.ndarray, harmonics: int, ahead: int = 0) -> np.ndarray:
    """The next hour's peak from the hourly peaks of the last ``D`` whole days (Crane's DSP
    method: Fourier transform, keep the mean and the ``harmonics`` strongest daily harmonics,
    read the reconstruction at the next hour).

    Args:
        hourly: ``(n, 24·D, 8)`` hourly peaks, oldest first, ending with the hour before the one
            forecast, so the forecast hour is the same hour of day as ``hourly[:, 0]``. Empty
            hours (``nan``) are filled with the workload's highest hourly peak (conservative);
            fewer than 24 non-empty hours → ``nan``.
        harmonics: daily harmonics kept, 1–12; 12 keeps them all.
        ahead: also read the reconstruction this many hours further and keep the highest (the
            estimator passes 1 in an hour's last bucket, so a daily rise is reserved one bucket
            before it arrives).

    With ``N = 24·D`` samples, the daily harmonics are the DFT bins ``j·D`` (j = 1…12); the
    reconstruction at ``t = N`` (≡ 0) is ``(X₀ + Σ_kept c_j · Re X_{jD}) / N`` with ``c_j = 2``
    (``1`` for the Nyquist bin j = 12). Worked example: D = 2, the forecast hour's peaks on
    the two earlier days were 2 and 4 cores, every other hour 1 core (mean 52/48 = 1.0833): with
    all 12 harmonics the forecast is the same-hour mean, 3 cores; each daily bin is X_{jD} =
    1 + 3 = 4, so 1 harmonic gives 1.0833 + 2 · 4/48 = 1.25 cores and 3 give 1.5833; with
    ``ahead = 1`` and 1 harmonic the next hour reads 1.0833 + 2 · 4/48 · cos(2π/24) = 1.2443, and
    the forecast stays 1.25.
    """
    n, length, dims = hourly.shape
    days = length // DAY_HOURS
    if days < 1 or length != days * DAY_HOURS:
        raise ValueError(f"hourly peaks must span whole days (24·D hours), got {length}")
    valid = ~np.isnan(hourly)
    enough = valid.sum(axis=1) >= DAY_HOURS                       # (n, 8)
    rows = enough.any(axis=1)
    if not rows.all():                                           # transform only what can serve
        out = np.full((n, dims), np.nan)
        if rows.any():
            out[rows] = periodic_peak(hourly[rows], harmonics, ahead)
        return out
    with np.errstate(all="ignore"), _quiet():
        top = np.nanmax(hourly, axis=1)
    filled = np.where(valid, hourly, np.nan_to_num(top, nan=0.0)[:, None, :])
    spectrum = np.fft.rfft(filled, axis=1)                       # (n, N/2 + 1, 8)
    daily = spectrum[:, days * np.arange(1, 13), :]               # (n, 12, 8)
    weight = np.full(12, 2.0)
    weight[11] = 1.0
    keep = max(1, min(12, int(harmonics)))
    mask = np.ones(daily.shape, dtype=bool)
    if keep < 12:
        order = np.argsort(-np.abs(daily), axis=1, kind="stable")
        mask = np.zeros(daily.shape, dtype=bool)
        np.put_along_axis(mask, order[:, :keep, :], True, axis=1)
    forecast = np.full(daily.shape[::2], -np.inf)
    for offset in range(int(ahead) + 1):                           # this hour and the ones ahead
        phase = np.exp(2j * np.pi * np.arange(1, 13) * offset / DAY_HOURS)
        contrib = weight[None, :, None] * (daily * phase[None, :, None]).real
        value = (spectrum[:, 0, :].real + np.where(mask, contrib, 0.0).sum(axis=1)) / length
        forecast = np.maximum(forecast, value)
    return np.where(enough, np.maximum(forecast, 0.0), np.nan)


def max_peak(members: list[np.ndarray]) -> np.ndarray:
    """The maximum of several members' forecasts (Bashir et al. EuroSys 2021 §5), ignoring a
    member with too little history; ``nan`` only where every member is.

    Worked example: percentile 7.6, N-sigma 10.325, periodic nan → 10.325 cores.
    """
    stacked = np.stack(members)
    with np.errstate(all="ignore"), _quiet():
        return np.nanmax(stacked, axis=0)


def prediction_cost(forecast: np.ndarray, actual: np.ndarray, under_weight: float, over_weight: float) -> np.ndarray:
    """Autopilot's cost of one forecast (Rzadca et al. EuroSys 2020 §3.2, without the
    change penalty, which hysteresis replaces): ``w_u · max(0, actual − forecast) + w_o ·
    max(0, forecast − actual)``, same units as usage.

    Worked example: forecast 4 cores, actual 5, w_u = 10, w_o = 1 → 10; forecast 6 → 1.
    """
    return under_weight * np.maximum(0.0, actual - forecast) + over_weight * np.maximum(0.0, forecast - actual)


def choose(cost: np.ndarray, current: np.ndarray, hysteresis_ratio: float) -> np.ndarray:
    """Per workload and dimension, the candidate to serve: the cheapest one, but only if it is
    cheaper than ``current``'s cost × (1 − ``hysteresis_ratio``); otherwise ``current`` stays.

    Args:
        cost: ``(n, c, 8)`` decayed costs of the ``c`` candidates.
        current: ``(n, 8)`` int index of the candidate served now.

    Worked example: costs (10, 9.5, 3), current 0, hysteresis 0.1 → 2 (3 < 9); costs
    (10, 9.5), current 0 → 0 (9.5 is not below 9).
    """
    best = np.argmin(cost, axis=1)
    now = np.take_along_axis(cost, current[:, None, :], axis=1)[:, 0, :]
    low = np.take_along_axis(cost, best[:, None, :], axis=1)[:, 0, :]
    return np.where(low < now * (1.0 - hysteresis_ratio), best, current)


class _quiet:
    """Silence numpy's "all-nan slice" warnings: an empty history is an expected case here."""

    def __enter__(self) -> None:
        import warnings

        self._ctx = warnings.catch_warnings()
        self._ctx.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc: object) -> None:
        self._ctx.__exit__(*exc)


# -- per-workload history: the state the estimator carries for every member but the asymmetric one ------

@dataclass(frozen=True, eq=False)
class PeakHistory:
    """Usage-peak history of ``n`` workloads (what the members read), plus the asymmetric
    member's own track and ``auto``'s scores.

    Attributes:
        asym: ``(n, 8)`` the asymmetric rule's reservation (the conservative member).
        bucket: ``(n,)`` id of the open bucket (``⌊t / bucket_s⌋``), :data:`NO_ID` before any sample.
        open_peak: ``(n, 8)`` peak usage in the open bucket so far.
        peaks: ``(n, K, 8)`` closed bucket peaks, bucket ``b`` in slot ``b mod K``.
        ids: ``(n, K)`` the bucket id each slot holds: a slot is read only for the id
            wanted, so a gap in the samples reads as empty buckets. ``K`` = the window's buckets.
            Every id field holds :data:`NO_ID` in an empty slot.
        hours: ``(n, 24·D + 1, 8)`` hourly peaks of the last ``D`` days and the hour under way
            (hour ``h`` in slot ``h mod (24·D + 1)``), folded from the buckets as they close.
        hour_ids: ``(n, 24·D + 1)`` the hour id each slot holds.
        leaf: ``(n, 3, 8)`` the percentile, N-sigma and periodic forecasts (peak usage, no
            margin) made when the last bucket closed; ``nan`` = too little history.
        forecast: ``(n, H, c, 8)`` each candidate's reservation at the start of each of the last
            ``H`` buckets (bucket ``b`` in slot ``b mod H``; ``H`` = the policy's
            ``horizon_buckets``), as it stood before the bucket's first sample; ``auto`` scores the
            one made ``H − 1`` buckets ago when a bucket closes, against the horizon's peak.
        forecast_ids: ``(n, H)`` the bucket id each forecast slot holds.
        cost: ``(n, c, 8)`` each candidate's decayed cost.
        chosen: ``(n, 8)`` index into the policy's ``members`` of the candidate ``auto`` serves;
            −1 until chosen (the conservative member: ``asymmetric`` if a member, else the first).
    """

    asym: np.ndarray
    bucket: np.ndarray
    open_peak: np.ndarray
    peaks: np.ndarray
    ids: np.ndarray
    hours: np.ndarray
    hour_ids: np.ndarray
    leaf: np.ndarray
    forecast: np.ndarray
    forecast_ids: np.ndarray
    cost: np.ndarray
    chosen: np.ndarray

    def __len__(self) -> int:
        return self.asym.shape[0]

    def take(self, rows: np.ndarray) -> PeakHistory:
        return PeakHistory(*(getattr(self, f.name)[rows] for f in fields(PeakHistory)))

    def concat(self, other: PeakHistory) -> PeakHistory:
        return PeakHistory(*(np.concatenate([getattr(self, f.name), getattr(other, f.name)]) for f in fields(PeakHistory)))


LEAVES = ("percentile", "nsigma", "periodic")


def ring_length(policy: EstimatorPolicy) -> int:
    """Buckets the history keeps: the window's, or ``auto``'s cost horizon if longer."""
    return max(policy.window_buckets, horizon_length(policy))


def horizon_length(policy: EstimatorPolicy) -> int:
    """Forecasts ``auto`` keeps per candidate (its cost horizon in buckets; none for another predictor)."""
    return policy.horizon_buckets if policy.predictor == "auto" else 0


def in_use(policy: EstimatorPolicy) -> frozenset[str]:
    """The members the policy's predictor reads: itself, or its ``members`` for ``max``/``auto``."""
    return frozenset(policy.members) if policy.predictor in ("max", "auto") else frozenset({policy.predictor})


def hour_ring_length(policy: EstimatorPolicy) -> int:
    """Hours the history keeps: ``periodic_days`` whole days and the hour under way, when the
    periodic member is in use (else none)."""
    return policy.periodic_days * DAY_HOURS + 1 if "periodic" in in_use(policy) else 0


def candidates(policy: EstimatorPolicy) -> int:
    """Candidates ``auto`` scores (none for another predictor)."""
    return len(policy.members) if policy.predictor == "auto" else 0


def empty_history(asym: np.ndarray, policy: EstimatorPolicy) -> PeakHistory:
    """History for workloads with no sample yet; ``asym`` is their current reservation."""
    n, dims = asym.shape
    k, c, h, f = ring_length(policy), candidates(policy), hour_ring_length(policy), horizon_length(policy)
    return PeakHistory(
        asym=np.array(asym, dtype=np.float64, copy=True), bucket=np.full(n, NO_ID, dtype=np.int64),
        open_peak=np.zeros((n, dims)), peaks=np.full((n, k, dims), np.nan), ids=np.full((n, k), NO_ID, dtype=np.int64),
        hours=np.full((n, h, dims), np.nan), hour_ids=np.full((n, h), NO_ID, dtype=np.int64),
        leaf=np.full((n, len(LEAVES), dims), np.nan), forecast=np.full((n, f, c, dims), np.nan),
        forecast_ids=np.full((n, f), NO_ID, dtype=np.int64),
        cost=np.zeros((n, c, dims)), chosen=np.full((n, dims), -1, dtype=np.int64))


def fits(history: PeakHistory | None, n: int, policy: EstimatorPolicy) -> bool:
    """Whether ``history`` was built for ``n`` workloads and this policy's ring and members."""
    return (history is not None and len(history) == n and history.peaks.shape[1] == ring_length(policy)
            and history.hours.shape[1] == hour_ring_length(policy)
            and history.cost.shape[1] == candidates(policy)
            and history.forecast_ids.shape[1] == horizon_length(policy))


def _gather(peaks: np.ndarray, ids: np.ndarray, rows: np.ndarray, first: np.ndarray, count: int) -> np.ndarray:
    """``(r, count, 8)`` peaks of ids ``first … first + count − 1`` per row (nan if absent)."""
    k = peaks.shape[1]
    want = first[:, None] + np.arange(count)[None, :]
    slot = np.mod(want, k)
    got = peaks[rows[:, None], slot]
    held = ids[rows[:, None], slot] == want
    return np.where(held[:, :, None], got, np.nan)


def leaf_forecasts(history: PeakHistory, rows: np.ndarray, policy: EstimatorPolicy) -> np.ndarray:
    """``(r, 3, 8)`` percentile, N-sigma and periodic forecasts for ``rows``' open bucket, from the
    closed buckets before it; ``nan`` where a workload has less than ``min_history_s``."""
    b = history.bucket[rows]
    w = policy.window_buckets
    recent = _gather(history.peaks, history.ids, rows, b - w, w)
    need = policy.min_history_buckets
    out = np.full((len(rows), len(LEAVES), history.peaks.shape[2]), np.nan)
    wanted = in_use(policy)
    if "percentile" in wanted:
        out[:, 0] = percentile_peak(recent, policy.percentile, need)
    if "nsigma" in wanted:
        out[:, 1] = nsigma_peak(recent, policy.n_sigma, need)
    if "periodic" in wanted:
        per_hour = int(round(HOUR_S / policy.bucket_s))
        hours = policy.periodic_days * DAY_HOURS
        hour_now = b // per_hour
        hourly = _gather(history.hours, history.hour_ids, rows, hour_now - hours, hours)
        # the forecast covers the open bucket and the next: when the next one starts a new hour,
        # that hour too (a daily rise is reserved one bucket before it arrives)
        last = (b + 1) % per_hour == 0
        for ahead, part in ((1, last), (0, ~last)):                   # each row once: needs a day of hours
            if part.any():
                out[part, 2] = periodic_peak(hourly[part], policy.periodic_harmonics, ahead=ahead)
    return out


def observe(history: PeakHistory, rows: np.ndarray, now_s: np.ndarray, usage: np.ndarray,
            policy: EstimatorPolicy) -> tuple[PeakHistory, np.ndarray]:
    """Fold one usage sample per row of ``rows`` (``(r,)`` times, ``(r, 8)`` usage) into the
    buckets. A sample in a later bucket closes the open one (its peak enters the ring) and opens
    its own; a sample in an earlier bucket is ignored. Returns the new history and ``(r,)`` bool,
    which rows closed a bucket (their forecasts must be renewed)."""
    b_new = np.floor(now_s / policy.bucket_s).astype(np.int64)
    b_old = history.bucket[rows]
    later = b_new > b_old
    same = b_new == b_old
    open_peak = history.open_peak.copy()
    open_peak[rows[same]] = np.maximum(open_peak[rows[same]], usage[same])
    bucket = history.bucket.copy()
    peaks, ids, hours, hour_ids = history.peaks, history.ids, history.hours, history.hour_ids
    closing = later & (b_old != NO_ID)
    if closing.any():
        peaks, ids = peaks.copy(), ids.copy()
        c = rows[closing]
        slot = np.mod(b_old[closing], peaks.shape[1])
        peaks[c, slot] = open_peak[c]
        ids[c, slot] = b_old[closing]
        if hours.shape[1]:
            hours, hour_ids = hours.copy(), hour_ids.copy()
            hour = b_old[closing] // int(round(HOUR_S / policy.bucket_s))
            h_slot = np.mod(hour, hours.shape[1])
            same_hour = (hour_ids[c, h_slot] == hour)[:, None]
            hours[c, h_slot] = np.where(same_hour, np.fmax(hours[c, h_slot], open_peak[c]), open_peak[c])
            hour_ids[c, h_slot] = hour
    open_peak[rows[later]] = usage[later]
    bucket[rows[later]] = b_new[later]
    return replace(history, bucket=bucket, open_peak=open_peak, peaks=peaks, ids=ids, hours=hours,
                   hour_ids=hour_ids), later


def serve(history: PeakHistory, rows: np.ndarray, target: np.ndarray, limit: np.ndarray, asym: np.ndarray,
          policy: EstimatorPolicy) -> np.ndarray:
    """``(r, c, 8)`` each member's reservation for ``rows`` now: ``asymmetric`` → ``asym``; a
    leaf → ``max(τ, min(L, μ · forecast))`` (a sample above it raises it at once), ``asym`` when
    the leaf has too little history."""
    out = np.empty((len(rows), len(policy.members), asym.shape[1]))
    leaf = history.leaf[rows]
    for i, name in enumerate(policy.members):
        if name == "asymmetric":
            out[:, i] = asym
        else:
            value = np.maximum(target, np.minimum(limit, policy.leaf_margins * leaf[:, LEAVES.index(name)]))
            out[:, i] = np.where(np.isnan(value), asym, value)
    return out


def served(history: PeakHistory, rows: np.ndarray, target: np.ndarray, limit: np.ndarray, asym: np.ndarray,
           policy: EstimatorPolicy) -> np.ndarray:
    """``(r, 8)`` the reservation the policy's predictor serves for ``rows`` (before grace and
    pinning, which the estimator applies)."""
    if policy.predictor in LEAVES:
        leaf = history.leaf[rows][:, LEAVES.index(policy.predictor)]
        value = np.maximum(target, np.minimum(limit, policy.leaf_margins * leaf))
        return np.where(np.isnan(value), asym, value)
    members = serve(history, rows, target, limit, asym, policy)
    if policy.predictor == "max":
        return members.max(axis=1)
    chosen = _chosen(history.chosen[rows], policy)
    return np.take_along_axis(members, chosen[:, None, :], axis=1)[:, 0, :]


def _chosen(chosen: np.ndarray, policy: EstimatorPolicy) -> np.ndarray:
    """``chosen`` with "not chosen yet" (−1) read as the conservative member."""
    first = policy.members.index("asymmetric") if "asymmetric" in policy.members else 0
    return np.where(chosen < 0, first, chosen)


def horizon_peak(history: PeakHistory, rows: np.ndarray, first: np.ndarray, count: int) -> np.ndarray:
    """``(r, 8)`` the highest closed bucket peak of ids ``first … first + count − 1`` per row
    (``nan`` where none of them is held).

    Worked example: peaks 1, 3, 2 cores in buckets 10, 11, 12, first 10, count 3 → 3 cores;
    first 12, count 1 → 2 cores.
    """
    with np.errstate(all="ignore"), _quiet():
        return np.nanmax(_gather(history.peaks, history.ids, rows, first, count), axis=1)


def score_and_choose(history: PeakHistory, rows: np.ndarray, closed_bucket: np.ndarray,
                     policy: EstimatorPolicy) -> PeakHistory:
    """``auto`` at the close of bucket ``b`` (``closed_bucket``, ``(r,)``; its peak already in
    ``history.peaks``): each candidate's forecast made at the start of bucket ``s = b − H + 1``
    (``H`` = ``horizon_buckets``) is scored against the highest peak of buckets ``s … b``
    (:func:`horizon_peak`, :func:`prediction_cost`) and added to its decayed cost, then
    :func:`choose` with hysteresis. Rows with no forecast for ``s`` score nothing (the costs
    still decay). With ``H = 1`` this is the forecast for ``b`` against ``b``'s peak.

    Worked example (w_u 10, w_o 1, H = 3): asymmetric forecast 2 cores, percentile 4, peaks of
    the three buckets 1, 3, 2 → asymmetric costs 10 · (3 − 2) = 10, percentile 1 · (4 − 3) = 1;
    against bucket ``b``'s peak alone (H = 1) they would cost 0 and 2.
    """
    h = policy.horizon_buckets
    start = np.asarray(closed_bucket, dtype=np.int64) - (h - 1)
    slot = np.mod(start, history.forecast.shape[1])
    held = history.forecast_ids[rows, slot] == start
    forecast = history.forecast[rows, slot]                                 # (r, c, 8)
    peak = horizon_peak(history, rows, start, h)                           # (r, 8)
    new = prediction_cost(forecast, peak[:, None, :], policy.under_cost_weight, policy.over_cost_weight)
    new = np.where(held[:, None, None], new, np.nan)
    decay = 2.0 ** (-policy.bucket_s / policy.cost_half_life_s)
    cost = history.cost.copy()
    cost[rows] = cost[rows] * decay + np.nan_to_num(new, nan=0.0)
    chosen = history.chosen.copy()
    chosen[rows] = choose(cost[rows], _chosen(chosen[rows], policy), policy.switch_margin_ratio)
    return replace(history, cost=cost, chosen=chosen)


# -- the live path's storage: one workload's history as bytes -------------------------------------

_PACK_VERSION = 4.0
#: Version 3 wrote an empty id as −1 (ids were never negative then); it is read as :data:`NO_ID`.
_PACK_V3 = 3.0
_ID_FIELDS = ("bucket", "ids", "hour_ids", "forecast_ids")


def pack_rows(history: PeakHistory, rows: np.ndarray) -> list[bytes]:
    """Each of ``rows``' history as bytes (float64: a header ``[version, K, 24·D, c, leaves, dims, H]``,
    then every field's row in :class:`PeakHistory` order), for the live estimation pass to store
    beside the reservation; :func:`unpack_rows` reads it back."""
    k, c = history.peaks.shape[1], history.cost.shape[1]
    dims, leaves = history.asym.shape[1], history.leaf.shape[1]
    header = np.array([_PACK_VERSION, k, history.hours.shape[1], c, leaves, dims, history.forecast_ids.shape[1]],
                      dtype=np.float64)
    out = []
    for i in np.asarray(rows, dtype=np.int64):
        parts = [header] + [np.asarray(getattr(history, f.name)[i], dtype=np.float64).ravel()
                            for f in fields(PeakHistory)]
        out.append(np.concatenate(parts).tobytes())
    return out


def history_restarts(stored: EstimatorPolicy, new: EstimatorPolicy) -> bool:
    """Whether saving ``new`` over ``stored`` starts every workload's peak history afresh: ``new``
    serves a peak predictor and the history ``stored`` wrote cannot be read under it (none was
    written under the asymmetric rule; another ring length, member list or layout is dropped by
    :func:`unpack_rows`) — the asymmetric rule then serves until each workload has
    ``min_history_s`` of history again, and the periodic member until it has its days.

    Worked example: ``auto`` of asymmetric + periodic → the same with another μ: False (μ is no
    part of the layout); → ``percentile`` alone: True (no candidates to score, one leaf in use)."""
    if new.predictor == "asymmetric":
        return False
    if stored.predictor == "asymmetric":
        return True
    one = np.zeros((1, 1))  # the layout per workload and dimension: one of each tells it
    return _layout(empty_history(one, stored)) != _layout(empty_history(one, new))


def _layout(history: PeakHistory) -> tuple:
    return tuple((f.name, getattr(history, f.name).shape[1:]) for f in fields(PeakHistory))


def unpack_rows(blobs: list[bytes | None], asym: np.ndarray, policy: EstimatorPolicy) -> PeakHistory:
    """:class:`PeakHistory` of ``n`` workloads from their stored bytes. A workload with none, or
    whose bytes were written under another ring length, member list or layout (the policy
    changed), starts empty with ``asym`` (its stored reservation) as the asymmetric track — too
    little history: the asymmetric rule serves until it has some again."""
    history = empty_history(asym, policy)
    k, c = history.peaks.shape[1], history.cost.shape[1]
    dims, leaves = history.asym.shape[1], history.leaf.shape[1]
    want = np.array([_PACK_VERSION, k, history.hours.shape[1], c, leaves, dims, history.forecast_ids.shape[1]],
                    dtype=np.float64)
    shapes = [(f.name, getattr(history, f.name).shape[1:]) for f in fields(PeakHistory)]
    size = len(want) + sum(int(np.prod(s)) for _, s in shapes)
    arrays = {f.name: getattr(history, f.name) for f in fields(PeakHistory)}
    for i, blob in enumerate(blobs):
        if blob is None or len(blob) % 8:
            continue
        flat = np.frombuffer(bytes(blob), dtype=np.float64)
        if flat.size != size or flat[0] not in (_PACK_VERSION, _PACK_V3) or not np.array_equal(flat[1:len(want)], want[1:]):
            continue
        at = len(want)
        for name, shape in shapes:
            count = int(np.prod(shape))
            part = flat[at:at + count].reshape(shape)
            if flat[0] == _PACK_V3 and name in _ID_FIELDS:
                part = np.where(part == -1, NO_ID, part)
            arrays[name][i] = part
            at += count
    return PeakHistory(**arrays)


def explain(history: PeakHistory | None, row: int, dim: int, policy: EstimatorPolicy) -> tuple[str, str]:
    """Which member serves workload ``row`` in dimension ``dim`` and why, for the console:
    ``(member, reason)``.

    Examples: ``("asymmetric", "the policy's predictor")`` under ``predictor: asymmetric``;
    ``("asymmetric", "too little history for percentile: 20 of 60 min")``;
    ``("asymmetric", "too little history for auto (periodic: 5 of 24 h)")`` — the shipped default in
    a workload's first day; ``("periodic", "auto: lowest recent cost, with hysteresis (asymmetric
    3.4, periodic 1.2)")``.
    """
    if policy.predictor == "asymmetric":
        return "asymmetric", "the policy's predictor"
    need_min = policy.min_history_buckets * policy.bucket_s / 60.0
    if history is None or history.bucket[row] == NO_ID:
        return "asymmetric", f"too little history for {policy.predictor}: no sample yet"
    first = history.bucket[row] - policy.window_buckets
    held = history.ids[row]
    have = int(np.sum((held != NO_ID) & (held >= first) & (held < history.bucket[row])))
    leaf = history.leaf[row, :, dim]
    usable = {name: not np.isnan(leaf[LEAVES.index(name)]) for name in LEAVES}
    usable["asymmetric"] = True

    def lacks(member: str) -> str:
        """What ``member`` still needs: closed buckets in its window, or (periodic) a day of hours."""
        if member != "periodic":
            return f"{have * policy.bucket_s / 60.0:g} of {need_min:g} min"
        hour_now = history.bucket[row] // int(round(HOUR_S / policy.bucket_s))
        hour_ids = history.hour_ids[row]
        hours = int(np.sum((hour_ids != NO_ID) & (hour_ids >= hour_now - policy.periodic_days * DAY_HOURS)
                           & (hour_ids < hour_now)))
        return f"{hours} of {DAY_HOURS} h"

    if policy.predictor in LEAVES:
        if usable[policy.predictor]:
            return policy.predictor, "the policy's predictor"
        return "asymmetric", f"too little history for {policy.predictor}: {lacks(policy.predictor)}"
    ready = [m for m in policy.members if usable[m]]
    if ready == ["asymmetric"] or not ready:
        lacking = [f"{m}: {lacks(m)}" for m in policy.members if m != "asymmetric" and not usable[m]]
        if not lacking:                                      # `members: [asymmetric]`: nothing else to wait for
            return "asymmetric", f"{policy.predictor} of the asymmetric rule alone (its only member)"
        return "asymmetric", f"too little history for {policy.predictor} ({'; '.join(lacking)})"
    if policy.predictor == "max":
        return "max", "the highest of " + ", ".join(ready)
    chosen = int(_chosen(history.chosen[row:row + 1, dim:dim + 1], policy)[0, 0])
    costs = ", ".join(f"{m} {history.cost[row, i, dim]:.3g}" for i, m in enumerate(policy.members))
    return policy.members[chosen], f"auto: lowest recent cost, with hysteresis ({costs})"
