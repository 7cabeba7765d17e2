"""Pure arithmetic of ``kalena-agent bench interference``: latency percentiles, windows, the
scheduling-delay share and the utilisation buckets. No clock, no files: every input is passed in.

Latencies are in milliseconds, times in seconds (the load generator's own clock, Unix epoch).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: waits longer than these count as "long" (the proposal's metric 4, Borg Figure 13)
WAIT_THRESHOLDS_MS = (5.0, 10.0)
#: node cpu utilisation buckets, percent: [0, 20), [20, 40), … [80, 100]
UTIL_BUCKETS = ((0, 20), (20, 40), (40, 60), (60, 80), (80, 100))


def percentile(values: Sequence[float] | np.ndarray, q: float) -> float | None:
    """``q``-th percentile (numpy's linear interpolation) or ``None`` for no values."""
    arr = np.asarray(values, dtype=float)
    return float(np.percentile(arr, q)) if arr.size else None


def latency_summary(latencies_ms: Sequence[float] | np.ndarray) -> dict[str, float | int | None]:
    """``{"count", "p50_ms", "p99_ms", "p999_ms", "max_ms"}`` of one set of latencies (ms)."""
    arr = np.asarray(latencies_ms, dtype=float)
    return {"count": int(arr.size), "p50_ms": percentile(arr, 50), "p99_ms": percentile(arr, 99),
            "p999_ms": percentile(arr, 99.9), "max_ms": float(arr.max()) if arr.size else None}


def windowed_p99(start_s: np.ndarray, latency_ms: np.ndarray, *, t0_s: float, t1_s: float,
                 window_s: float = 1.0) -> list[tuple[float, float | None, int]]:
    """p99 of the requests *started* in each window ``[t0 + k·w, t0 + (k+1)·w)`` up to ``t1``.

    Returns ``[(window start − t0 in s, p99 in ms or None, requests)]``.
    Example: starts ``[0.1, 0.2, 1.5]``, latencies ``[1, 3, 2]``, t0 = 0, t1 = 2 →
    ``[(0.0, 2.98, 2), (1.0, 2.0, 1)]``.
    """
    out = []
    n = max(0, int(math.ceil((t1_s - t0_s) / window_s - 1e-9)))
    for k in range(n):
        lo = t0_s + k * window_s
        mask = (start_s >= lo) & (start_s < lo + window_s)
        out.append((round(k * window_s, 6), percentile(latency_ms[mask], 99), int(mask.sum())))
    return out


def restored_after_s(windows: Sequence[tuple[float, float | None, int]], *, spike_start_s: float,
                     spike_end_s: float, bound_ms: float, hold: int = 3) -> float | None:
    """How long after the spike started the per-window p99 came back within ``bound_ms``.

    The answer is the *end* of the first window (relative to the spike start) that begins a run of
    ``hold`` consecutive windows, all inside the spike, whose p99 is ≤ ``bound_ms``; ``None`` when
    no such run exists. Windows are as returned by :func:`windowed_p99` (start relative to the
    same ``t0`` as ``spike_start_s``). Example: windows p99 ``[9, 9, 2, 2, 2]`` from the spike
    start, bound 3, hold 3 → 3.0 s (the third window ends 3 s in).
    """
    inside = [(start, p99) for start, p99, _ in windows if spike_start_s <= start < spike_end_s]
    width = windows[1][0] - windows[0][0] if len(windows) > 1 else 1.0
    for i in range(len(inside) - hold + 1):
        run = inside[i:i + hold]
        if all(p is not None and p <= bound_ms for _, p in run):
            return round(run[0][0] + width - spike_start_s, 6)
    return None


@dataclass
class WaitTally:
    """Scheduling-delay accumulators for one arm, overall and per utilisation bucket.

    ``runnable_ns`` is cpu time + run-queue wait; ``long_ns[t]`` the wait that counted as longer
    than ``WAIT_THRESHOLDS_MS[t]`` (see :func:`classify_interval`).
    """

    runnable_ns: np.ndarray
    long_ns: np.ndarray          # (thresholds,)
    bucket_runnable_ns: np.ndarray  # (buckets,)
    bucket_long_ns: np.ndarray      # (buckets, thresholds)
    wait_ns: float = 0.0
    intervals: int = 0

    @classmethod
    def empty(cls) -> WaitTally:
        t, b = len(WAIT_THRESHOLDS_MS), len(UTIL_BUCKETS)
        return cls(np.zeros(1), np.zeros(t), np.zeros(b), np.zeros((b, t)))

    def add(self, *, cpu_ns: float, wait_ns: float, slices: int, util_pct: float | None) -> None:
        """One thread's schedstat deltas over one sampling interval (:func:`classify_interval`)."""
        runnable = cpu_ns + wait_ns
        if runnable <= 0:
            return
        long = np.array([wait_ns if classify_interval(wait_ns, slices, t) else 0.0 for t in WAIT_THRESHOLDS_MS])
        self.runnable_ns[0] += runnable
        self.long_ns += long
        self.wait_ns += wait_ns
        self.intervals += 1
        if util_pct is not None:
            b = bucket_of(util_pct)
            self.bucket_runnable_ns[b] += runnable
            self.bucket_long_ns[b] += long

    def merge(self, other: WaitTally) -> None:
        self.runnable_ns += other.runnable_ns
        self.long_ns += other.long_ns
        self.bucket_runnable_ns += other.bucket_runnable_ns
        self.bucket_long_ns += other.bucket_long_ns
        self.wait_ns += other.wait_ns
        self.intervals += other.intervals

    def shares(self) -> dict[str, object]:
        """``wait_over_5ms_share``, ``wait_over_10ms_share``, ``wait_share`` (all waiting / runnable)
        and ``by_utilisation`` ``[{bucket, runnable_s, wait_over_5ms_share, wait_over_10ms_share}]``."""
        total = float(self.runnable_ns[0])

        def ratio(a: float, b: float) -> float | None:
            return float(a / b) if b > 0 else None

        out: dict[str, object] = {f"wait_over_{int(t)}ms_share": ratio(self.long_ns[i], total)
                                  for i, t in enumerate(WAIT_THRESHOLDS_MS)}
        out["wait_share"] = ratio(self.wait_ns, total)
        out["runnable_s"] = total / 1e9
        out["intervals"] = self.intervals
        out["by_utilisation"] = [
            {"bucket": f"{lo}-{hi}%", "runnable_s": float(self.bucket_runnable_ns[b]) / 1e9,
             **{f"wait_over_{int(t)}ms_share": ratio(self.bucket_long_ns[b, i], self.bucket_runnable_ns[b])
                for i, t in enumerate(WAIT_THRESHOLDS_MS)}}
            for b, (lo, hi) in enumerate(UTIL_BUCKETS)]
        return out


def classify_interval(wait_ns: float, slices: int, threshold_ms: float) -> bool:
    """Does a thread's run-queue wait over one sampling interval count as waits > ``threshold_ms``?

    ``/proc/<pid>/task/<tid>/schedstat`` gives cumulative cpu time, cumulative run-queue wait and
    the number of times the thread got a cpu (each ends one wait). Over an interval with ``slices``
    waits ending and ``wait_ns`` waited, the mean wait is ``wait_ns / slices``; the interval's wait
    counts as long when that mean exceeds the threshold, or when no wait ended and the thread still
    waited more than the threshold (it waited through the interval). Exact when at most one wait
    ends per interval; with several, one long wait among short ones is diluted (an underestimate),
    and several waits just under the threshold cannot count. Example: 12 ms waited over 2 slices →
    mean 6 ms > 5 ms → long at 5 ms, not at 10 ms.
    """
    if wait_ns <= threshold_ms * 1e6:
        return False
    return slices <= 0 or wait_ns / slices > threshold_ms * 1e6


def bucket_of(util_pct: float) -> int:
    """Index in :data:`UTIL_BUCKETS` of a utilisation in percent (100 % and above → the last)."""
    for i, (_, hi) in enumerate(UTIL_BUCKETS):
        if util_pct < hi:
            return i
    return len(UTIL_BUCKETS) - 1


def span(values: Sequence[float | None]) -> dict[str, float | None]:
    """``{"min", "max"}`` over repetitions (``None`` entries ignored)."""
    vals = [v for v in values if v is not None]
    return {"min": min(vals) if vals else None, "max": max(vals) if vals else None}


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` or ``None`` when either is missing or ``b`` is 0."""
    return None if a is None or not b else float(a / b)
