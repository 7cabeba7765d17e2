"""Rates from cumulative counters reported by remote sources (Docker, cAdvisor, kubelet)."""

from __future__ import annotations

import math


class RateTracker:
    """Remembers the last ``(ts_s, value)`` per key and returns the rate per second since then.

    ``rate(key, ts, value)`` is ``NaN`` for the first value of a key, for a timestamp that did
    not advance, and for a counter that went backwards (restart), in which case the new value
    becomes the anchor. Example: values 100 at t=0 and 600 at t=5 → 100 per second.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[float, float]] = {}

    def rate(self, key: str, ts_s: float, value: float | None) -> float:
        if value is None:
            return math.nan
        previous = self._last.get(key)
        if previous is not None and ts_s <= previous[0]:
            return math.nan
        self._last[key] = (ts_s, value)
        if previous is None or value < previous[1]:
            return math.nan
        return (value - previous[1]) / (ts_s - previous[0])

    def forget(self, prefix: str) -> None:
        """Drop every key starting with ``prefix`` (a workload that left)."""
        for key in [k for k in self._last if k.startswith(prefix)]:
            del self._last[key]
