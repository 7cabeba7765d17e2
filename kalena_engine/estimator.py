"""Reservation estimator (docs/design.md §5; Borg, Verma et al. EuroSys 2015 §5.5), vectorised over
all workloads and dimensions.

For workload w and dimension d with request ``q``, limit ``L`` and a usage sample ``u`` at
time ``t``::

    τ(t) = min(L, μ · u(t))                          target, capped at the limit
    pinned (reclaim disabled, or d = gpu):  r = q
    t − start < g (startup grace):          r = max(q, τ)
    τ ≥ r(t−) (rise):                       r = τ
    otherwise (decay):                      r = τ + (r(t−) − τ) · 2^(−Δt / h)
        where Δt = t − max(t_prev_update, start + g)  (anchored at the end of grace)
    read-out at ``now``: if now − t_last_sample > T_stale, r = max(r, q)

Because the decay is exponential and anchored at the end of grace, a constant usage gives the
same reservation whatever the sampling interval. Worked example (case C5): q = L = 10 cores,
u = 1 core steady from t = 0, μ = 1.15, g = 300 s, h = 600 s: r = 10 until t = 300, then
r(900) = 1.15 + (10 − 1.15) · 2^(−600/600) = 5.575 cores with samples every 10 s or every 60 s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kalena_engine import predictors
from kalena_engine.policy import EstimatorPolicy
from kalena_engine.predictors import PeakHistory
from kalena_engine.resources import GPU


@dataclass(frozen=True, eq=False)
class Reservations:
    """Estimator state for ``n`` workloads.

    Attributes:
        value: ``(n, 8)`` r after the last update, before the staleness read-out.
        updated_s: ``(n,)`` time of the last update (s).
        last_sample_s: ``(n,)`` time of the last usage sample (s); −inf if none yet.
        history: usage-peak history the peak predictors read (:class:`~kalena_engine.predictors.
            PeakHistory`); None while the policy's predictor is the asymmetric rule, which
            needs none. A state without it under another predictor starts an empty one (too
            little history: the asymmetric rule serves until the workload has some).
    """

    value: np.ndarray
    updated_s: np.ndarray
    last_sample_s: np.ndarray
    history: PeakHistory | None = None

    def __len__(self) -> int:
        return self.value.shape[0]


def initial_reservations(request: np.ndarray, tracked_s: np.ndarray) -> Reservations:
    """State for workloads the estimator starts tracking: ``r = q`` (a new workload is charged
    its full request, docs/design.md §6; a running one Kalena has no history for is treated the same),
    with no sample yet.

    Args:
        request: ``(n, 8)`` requests.
        tracked_s: ``(n,)`` time tracking begins (s) — the start of a new workload, or the
            moment Kalena first sees an already-running one. The first decay runs from here.
    """
    tracked_s = np.asarray(tracked_s, dtype=np.float64)
    return Reservations(
        value=np.array(request, dtype=np.float64, copy=True),
        updated_s=tracked_s.copy(),
        last_sample_s=np.full(tracked_s.shape, -np.inf),
    )


def estimator_limit(declared_limit: np.ndarray, request: np.ndarray, limit_ratio: float) -> np.ndarray:
    """``L`` (docs/design.md §5): the declared limit, or ``limit_ratio × q`` where none is declared (+inf).

    The one definition of L: the estimator caps ``τ`` at it and the agent's limit-breach
    override (docs/design.md §7) evicts a workload using more than it, so the override also protects
    workloads that declare no limit. Shapes ``(…, 8)``, internal units. Example: q = 1 GiB, no
    limit, ratio 1.25 → L = 1.25 GiB; declared 2 GiB → L = 2 GiB whatever the ratio.
    """
    declared = np.asarray(declared_limit, dtype=np.float64)
    return np.where(np.isfinite(declared), declared, np.asarray(request, dtype=np.float64) * float(limit_ratio))


def pinned_mask(reclaim_disabled: np.ndarray) -> np.ndarray:
    """``(n, 8)`` bool: dimensions whose reservation stays at the request.

    GPU is always pinned (never reclaimed); every dimension of a workload annotated
    ``kalena.naughtian.io/reclaim: disabled`` is pinned.
    """
    reclaim_disabled = np.asarray(reclaim_disabled, dtype=bool)
    mask = np.repeat(reclaim_disabled[:, None], 8, axis=1)
    mask[:, GPU] = True
    return mask


def update_reservations(
    state: Reservations,
    *,
    request: np.ndarray,
    limit: np.ndarray,
    usage: np.ndarray,
    sampled: np.ndarray,
    now_s: float | np.ndarray,
    start_s: np.ndarray,
    grace_s: np.ndarray,
    pinned: np.ndarray,
    policy: EstimatorPolicy,
) -> Reservations:
    """Apply one usage sample per workload where ``sampled`` is true (docs/design.md §5 formula).

    Args:
        state: previous :class:`Reservations` (n workloads).
        request, limit, usage: ``(n, 8)`` in internal units; ``usage`` rows are ignored where
            ``sampled`` is false. Memory usage must be the working set.
        sampled: ``(n,)`` bool, which workloads have a fresh sample taken at ``now_s``.
        now_s: the sample time (s), one for all or ``(n,)`` per workload.
        start_s, grace_s: ``(n,)`` start time and startup grace of each workload (s).
        pinned: ``(n, 8)`` bool, see :func:`pinned_mask`.
        policy: margin μ and half-life h.

    Returns:
        New :class:`Reservations`; rows without a sample are unchanged.
    """
    sampled = np.asarray(sampled, dtype=bool)
    if not sampled.any():
        return state
    idx = np.flatnonzero(sampled)
    rows = slice(None) if len(idx) == len(sampled) else idx  # every row sampled: views, no gathers
    now = np.broadcast_to(np.asarray(now_s, dtype=np.float64), sampled.shape)[rows]
    q = request[rows]
    prev = state.value[rows]
    target = np.minimum(limit[rows], policy.margins * usage[rows])
    grace_end = start_s[rows] + grace_s[rows]
    in_grace = (now - start_s[rows]) < grace_s[rows]
    dt = np.maximum(0.0, now - np.maximum(state.updated_s[rows], grace_end))
    decay = np.exp2(-dt / policy.half_life_s)[:, None]
    history = None
    if policy.predictor != "asymmetric":
        history = state.history
        if not predictors.fits(history, len(state), policy):
            history = predictors.empty_history(state.value if history is None else history.asym, policy)
        prev = history.asym[rows]
    new = np.where(target >= prev, target, target + (prev - target) * decay)
    new = np.where(in_grace[:, None], np.maximum(q, target), new)
    new = np.where(pinned[rows], q, new)
    value = state.value.copy()
    if history is None:
        value[rows] = new
    else:
        history, value[rows] = _predicted(history, idx, now, usage[rows], target, limit[rows], new,
                                          in_grace[:, None] | pinned[rows], policy)
    updated = state.updated_s.copy()
    updated[rows] = now
    last = state.last_sample_s.copy()
    last[rows] = now
    return Reservations(value=value, updated_s=updated, last_sample_s=last, history=history)


def _predicted(history: PeakHistory, idx: np.ndarray, now: np.ndarray, usage: np.ndarray, target: np.ndarray,
               limit: np.ndarray, asym: np.ndarray, held: np.ndarray,
               policy: EstimatorPolicy) -> tuple[PeakHistory, np.ndarray]:
    """The peak predictor's reservation for rows ``idx`` (docs/design.md §5 predictors): the sample enters
    the usage buckets; where it closes a bucket, ``auto`` scores its candidates on the closed
    peak and every forecast is renewed; the reservation is the predictor's, bounded as the rule
    is (``held``: in grace or pinned → the asymmetric rule's value, which is then ``max(q, τ)``
    or ``q``)."""
    previous = history.bucket[idx]
    held_before = history.asym[idx]
    history = replace(history, asym=_set_rows(history.asym, idx, asym))
    history, closed = predictors.observe(history, idx, now, usage, policy)
    rows = idx[closed]
    if len(rows):
        if policy.predictor == "auto":
            scored = closed & (previous != predictors.NO_ID)
            history = predictors.score_and_choose(history, idx[scored], previous[scored], policy)
        leaf = history.leaf.copy()
        leaf[rows] = predictors.leaf_forecasts(history, rows, policy)
        history = replace(history, leaf=leaf)
        if policy.predictor == "auto":
            forecast, forecast_ids = history.forecast.copy(), history.forecast_ids.copy()
            # what each candidate would have held before this sample: a forecast, not a reaction;
            # kept for the cost horizon, in the slot of the bucket it opens
            opened = history.bucket[rows]
            slot = np.mod(opened, forecast.shape[1])
            forecast[rows, slot] = predictors.serve(history, rows, np.zeros_like(target[closed]), limit[closed],
                                                    held_before[closed], policy)
            forecast_ids[rows, slot] = opened
            history = replace(history, forecast=forecast, forecast_ids=forecast_ids)
    value = predictors.served(history, idx, target, limit, asym, policy)
    return history, np.where(held, asym, value)


def _set_rows(array: np.ndarray, rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    out = array.copy()
    out[rows] = values
    return out


def effective_reservations(state: Reservations, request: np.ndarray, now_s: float,
                           stale_ttl_s: float) -> np.ndarray:
    """``(n, 8)`` reservations as the ledgers read them at ``now_s``.

    Stale telemetry never creates slack: where ``now − t_last_sample > T_stale`` the
    reservation reads ``max(r, q)``. A workload with no sample yet is stale.
    """
    stale = (now_s - state.last_sample_s) > stale_ttl_s
    if not stale.any():
        return state.value
    return np.where(stale[:, None], np.maximum(state.value, request), state.value)


def stale_mask(state: Reservations, now_s: float, stale_ttl_s: float) -> np.ndarray:
    """``(n,)`` bool: workloads whose last sample is older than ``stale_ttl_s`` at ``now_s``."""
    return (now_s - state.last_sample_s) > stale_ttl_s


def take(state: Reservations, rows: np.ndarray) -> Reservations:
    """The sub-state for ``rows`` (an index array or bool mask), e.g. to drop ended workloads."""
    history = None if state.history is None else state.history.take(rows)
    return Reservations(state.value[rows], state.updated_s[rows], state.last_sample_s[rows], history)


def concat(a: Reservations, b: Reservations) -> Reservations:
    """``a`` followed by ``b`` (admitting new workloads); a side without peak history gets an
    empty one shaped like the other's."""
    history = None
    if a.history is not None or b.history is not None:
        like = a.history if a.history is not None else b.history
        history = _or_empty(a, like).concat(_or_empty(b, like))
    return Reservations(
        np.concatenate([a.value, b.value]),
        np.concatenate([a.updated_s, b.updated_s]),
        np.concatenate([a.last_sample_s, b.last_sample_s]),
        history,
    )


def _or_empty(state: Reservations, like: PeakHistory) -> PeakHistory:
    if state.history is not None:
        return state.history
    n, dims = state.value.shape
    k, c, h, f = like.peaks.shape[1], like.cost.shape[1], like.hours.shape[1], like.forecast_ids.shape[1]
    return PeakHistory(
        asym=state.value.copy(), bucket=np.full(n, predictors.NO_ID, dtype=np.int64), open_peak=np.zeros((n, dims)),
        peaks=np.full((n, k, dims), np.nan), ids=np.full((n, k), predictors.NO_ID, dtype=np.int64),
        hours=np.full((n, h, dims), np.nan), hour_ids=np.full((n, h), predictors.NO_ID, dtype=np.int64),
        leaf=np.full((n, like.leaf.shape[1], dims), np.nan), forecast=np.full((n, f, c, dims), np.nan),
        forecast_ids=np.full((n, f), predictors.NO_ID, dtype=np.int64),
        cost=np.zeros((n, c, dims)), chosen=np.full((n, dims), -1, dtype=np.int64))


def apply_samples(
    state: Reservations,
    *,
    workload: np.ndarray,
    time_s: np.ndarray,
    usage: np.ndarray,
    request: np.ndarray,
    limit: np.ndarray,
    start_s: np.ndarray,
    grace_s: np.ndarray,
    pinned: np.ndarray,
    policy: EstimatorPolicy,
    unmeasured: np.ndarray | None = None,
) -> tuple[Reservations, np.ndarray]:
    """Fold a batch of irregular samples, several per workload allowed, into the state.

    Samples are applied per workload in time order (the formula is sequential), vectorised
    across workloads: the k-th sample of every workload is applied in one
    :func:`update_reservations` call. A sample not newer than the workload's last sample is
    ignored (time going backwards never rewinds a reservation).

    Args:
        workload: ``(m,)`` int row of each sample in ``state``.
        time_s: ``(m,)`` sample times (s).
        usage: ``(m, 8)``.
        request, limit, start_s, grace_s, pinned: per workload, as in
            :func:`update_reservations`.
        unmeasured: optional ``(m, 8)`` bool, dimensions a sample did not measure: for that
            update they are pinned at the request, as the agent does (docs/design.md §5; the agent's
            ``update_estimator``).

    Returns:
        ``(new state, applied (m,) bool)``.
    """
    m = len(workload)
    applied = np.zeros(m, dtype=bool)
    if m == 0:
        return state, applied
    order = np.lexsort((time_s, workload))
    w_sorted = workload[order]
    first = np.r_[True, w_sorted[1:] != w_sorted[:-1]]
    group_start = np.maximum.accumulate(np.where(first, np.arange(m), 0))
    rank = np.arange(m) - group_start
    n = len(state)
    for k in range(int(rank.max()) + 1):
        rows = order[rank == k]
        wl = workload[rows]
        fresh = time_s[rows] > state.last_sample_s[wl]
        rows, wl = rows[fresh], wl[fresh]
        if len(rows) == 0:
            continue
        full_usage = np.zeros((n, usage.shape[1]))
        full_usage[wl] = usage[rows]
        mask = np.zeros(n, dtype=bool)
        mask[wl] = True
        times = np.zeros(n)
        times[wl] = time_s[rows]
        pin = pinned
        if unmeasured is not None:
            pin = pinned.copy()
            pin[wl] |= unmeasured[rows]
        state = update_reservations(
            state, request=request, limit=limit, usage=full_usage, sampled=mask, now_s=times,
            start_s=start_s, grace_s=grace_s, pinned=pin, policy=policy,
        )
        applied[rows] = True
    return state, applied
