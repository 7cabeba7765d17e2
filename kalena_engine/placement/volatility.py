"""Node volatility for the volatility penalty (docs/design.md §9): how much a node's production
reservation moves, as a fraction of its capacity.

An exponentially weighted mean and variance per node and dimension, with half-life ``h``
(exact for any sampling interval: the weight of the new sample is ``α = 1 − 2^(−Δt/h)``;
the incremental form of Finch, "Incremental calculation of weighted mean and variance", 2009)::

    δ = x − m;   m ← m + α·δ;   v ← (1 − α)·(v + α·δ²)
    volatility_n = max_{d ∈ dims, C_d finite > 0} √v_d / C_d

Worked example: h = 600 s, samples 10 then 14 cores 600 s apart → α = 0.5, δ = 4,
m = 12, v = 0.5 · (0 + 0.5 · 16) = 4, σ = 2 cores; on a 16-core node → 0.125.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.resources import CPU, RAM


def volatility_ratio(variance: np.ndarray, capacity: np.ndarray, dims: Sequence[int] = (CPU, RAM)) -> np.ndarray:
    """``(n,)`` ``max_d √v_d / C_d`` over ``dims`` with finite, positive capacity (0 if none)."""
    dims = list(dims)
    cap = capacity[:, dims]
    valid = np.isfinite(cap) & (cap > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(valid, np.sqrt(np.maximum(variance[:, dims], 0.0)) / np.where(valid, cap, 1.0), 0.0)
    return ratio.max(axis=1) if ratio.shape[1] else np.zeros(len(capacity))


@dataclass(eq=False)
class VolatilityTracker:
    """Running exponentially weighted mean/variance of ``(n, 8)`` per-node values (see the
    module doc). ``update`` takes the time explicitly; nothing reads a clock."""

    half_life_s: float
    mean: np.ndarray | None = None
    variance: np.ndarray | None = None
    last_s: float | None = field(default=None)

    def update(self, now_s: float, values: np.ndarray) -> None:
        """Fold in ``values`` ``(n, 8)`` observed at ``now_s``.

        Raises:
            ValueError: time going backwards, or a shape change.
        """
        values = np.asarray(values, dtype=np.float64)
        if self.mean is None or self.last_s is None:
            self.mean = values.copy()
            self.variance = np.zeros_like(values)
            self.last_s = float(now_s)
            return
        if values.shape != self.mean.shape:
            raise ValueError(f"values shape {values.shape} differs from the tracked {self.mean.shape}")
        dt = float(now_s) - self.last_s
        if dt < 0:
            raise ValueError(f"time went backwards: {now_s} s after {self.last_s} s")
        alpha = 1.0 - 2.0 ** (-dt / self.half_life_s)
        finite = np.isfinite(values) & np.isfinite(self.mean)
        delta = np.where(finite, values - self.mean, 0.0)
        self.mean = np.where(finite, self.mean + alpha * delta, values)
        self.variance = np.where(finite, (1.0 - alpha) * (self.variance + alpha * delta * delta), 0.0)
        self.last_s = float(now_s)

    def ratio(self, capacity: np.ndarray, dims: Sequence[int] = (CPU, RAM)) -> np.ndarray:
        """``(n,)`` volatility ratio (0 before the first update)."""
        if self.variance is None:
            return np.zeros(len(capacity))
        return volatility_ratio(self.variance, capacity, dims)
