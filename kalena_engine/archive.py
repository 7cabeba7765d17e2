"""Usage-archive statistics (docs/design.md §3 export, §8 archive loop, §10 drift): downsampling of
irregular sample series and the per-workload statistics the export and drift read.

Downsampling keeps, per bucket of ``width_s`` seconds, the mean, the maximum and the sample
count of each dimension, so that a 1 min series can be folded again into 1 h without losing
the peak (max of maxes) or biasing the mean (count-weighted). Worked example: samples at
t = 0, 20, 40, 65 s with cpu 1, 3, 2, 6 cores, width 60 s → bucket 0: mean 2, max 3, n 3;
bucket 60: mean 6, max 6, n 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Buckets:
    """A downsampled series: ``b`` buckets of one entity, values ``(b, d)``.

    Attributes:
        start_s: ``(b,)`` bucket start times (multiples of ``width_s``).
        mean, peak: ``(b, d)`` count-weighted mean and maximum per dimension.
        count: ``(b,)`` raw samples folded into each bucket.
    """

    width_s: float
    start_s: np.ndarray
    mean: np.ndarray
    peak: np.ndarray
    count: np.ndarray


def downsample(times_s: np.ndarray, values: np.ndarray, width_s: float,
               counts: np.ndarray | None = None, peaks: np.ndarray | None = None) -> Buckets:
    """Fold samples (or finer buckets) into buckets of ``width_s`` seconds.

    Args:
        times_s: ``(m,)`` sample (or bucket start) times, any order.
        values: ``(m, d)`` sample values (or bucket means).
        width_s: bucket width (s), > 0.
        counts: ``(m,)`` samples behind each row when re-folding buckets (default 1 each).
        peaks: ``(m, d)`` per-row maxima when re-folding buckets (default ``values``).

    Raises:
        ValueError: ``width_s`` ≤ 0 or mismatched shapes.
    """
    if width_s <= 0:
        raise ValueError(f"bucket width {width_s} s must be positive")
    times_s = np.asarray(times_s, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64).reshape(len(times_s), -1)
    counts = np.ones(len(times_s)) if counts is None else np.asarray(counts, dtype=np.float64)
    peaks = values if peaks is None else np.asarray(peaks, dtype=np.float64).reshape(values.shape)
    if len(counts) != len(times_s):
        raise ValueError("counts and times must have the same length")
    if len(times_s) == 0:
        d = values.shape[1]
        return Buckets(width_s, np.zeros(0), np.zeros((0, d)), np.zeros((0, d)), np.zeros(0))
    keys = np.floor(times_s / width_s).astype(np.int64)
    unique, inverse = np.unique(keys, return_inverse=True)
    total = np.zeros(len(unique))
    np.add.at(total, inverse, counts)
    weighted = np.zeros((len(unique), values.shape[1]))
    np.add.at(weighted, inverse, values * counts[:, None])
    peak = np.full((len(unique), values.shape[1]), -np.inf)
    np.maximum.at(peak, inverse, peaks)
    return Buckets(width_s, unique * width_s, weighted / total[:, None], peak, total)


@dataclass(frozen=True, eq=False)
class ObservedStats:
    """Per-workload statistics over a window, each ``(8,)`` in internal units.

    Reservation percentiles exclude the startup grace window (docs/design.md §3, §10).
    """

    window_s: float
    samples: int
    p50: np.ndarray
    p95: np.ndarray
    p99: np.ndarray
    peak: np.ndarray
    usage_peak: np.ndarray
    exceeded_request_fraction: float
    exceeded_limit_events: int


def reservation_percentiles(reservation: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(p50, p95, p99, peak)``, each ``(8,)``, of a reservation series ``(m, 8)`` (m ≥ 1), every
    row weighted equally (numpy's linear percentile). The one definition the export's
    ``observed:`` blocks and the drift's r̃ (p95) use, whether the rows are samples (replay) or
    the live archive's minute rows. Example: cpu rows 1, 2, 3, 4 cores → p50 2.5, peak 4."""
    r = np.asarray(reservation, dtype=np.float64)
    p50, p95, p99 = np.percentile(r, [50, 95, 99], axis=0)
    return p50, p95, p99, r.max(axis=0)


def observed_stats(*, times_s: np.ndarray, reservation: np.ndarray, usage: np.ndarray,
                   request: np.ndarray, limit: np.ndarray, start_s: float, grace_s: float,
                   window_s: float) -> ObservedStats | None:
    """Statistics of one workload's samples (docs/design.md §3 export).

    Args:
        times_s: ``(m,)`` sample times.
        reservation, usage: ``(m, 8)`` at each sample.
        request, limit: ``(8,)``.
        start_s, grace_s: the workload's start and startup grace; samples before
            ``start_s + grace_s`` are excluded from the reservation percentiles.
        window_s: the window the samples cover (reported verbatim).

    Returns:
        ``None`` when no sample lies outside grace. ``exceeded_request_fraction`` is the share
        of samples with usage above the request on any dimension; ``exceeded_limit_events``
        counts samples with usage above the limit on any dimension.
    """
    times_s = np.asarray(times_s, dtype=np.float64)
    steady = times_s >= start_s + grace_s
    if not steady.any():
        return None
    r = reservation[steady]
    p50, p95, p99, peak = reservation_percentiles(r)
    above_request = np.any(usage > request * (1 + 1e-9), axis=1)
    above_limit = np.any(usage > limit * (1 + 1e-9), axis=1)
    return ObservedStats(
        window_s=float(window_s), samples=int(steady.sum()), p50=p50, p95=p95, p99=p99,
        peak=peak, usage_peak=usage.max(axis=0),
        exceeded_request_fraction=float(above_request.mean()),
        exceeded_limit_events=int(above_limit.sum()),
    )


def retention_cutoffs(now_s: float, *, raw_s: float, minute_s: float, hour_s: float) -> dict[str, float]:
    """Oldest time each resolution keeps at ``now_s``: ``{"raw": …, "1m": …, "1h": …}``."""
    return {"raw": now_s - raw_s, "1m": now_s - minute_s, "1h": now_s - hour_s}
