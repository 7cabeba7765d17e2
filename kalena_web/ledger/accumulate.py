"""Per-node ledger figures accumulated over a run, chunk by chunk (pure numpy; no Django).

The formulas are the engine's (:class:`kalena_engine.ledger.NodeLedgers`, docs/design.md §6): slack
``S = C − Σ r``, headroom ``H = C − Σ_{p∈P} q_p``, reclaimed ``X = max(0, Σ q − C)``. This
module only reduces them over time: mean and minimum slack, mean and peak usage, mean
reservation, reclaimed and batch request, minimum headroom — for cpu and ram.

Worked example (one node, two steps, cpu in cores): C = 64, production q = 56, production r =
30 then 40, batch q = r = 20 both steps, usage 35 then 45 → slack 14 then 4 (mean 9, min 4),
headroom 8, reclaimed 12 both steps, usage mean 40, peak 45.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kalena_engine.ledger import NodeLedgers
from kalena_engine.resources import CPU, RAM
from kalena_web.archive.series import NODE_INDEX

DIMS = (("cpu", CPU, "mcpu"), ("ram", RAM, "bytes"))


def ledgers_of(chunk: np.ndarray) -> NodeLedgers:
    """Engine ledgers for node-series rows ``(..., NODE_SERIES, 8)`` flattened to ``(k, 8)``."""
    flat = chunk.reshape(-1, *chunk.shape[-2:])
    return NodeLedgers(
        capacity=flat[:, NODE_INDEX["capacity"]],
        prod_request=flat[:, NODE_INDEX["prod_request"]],
        prod_reservation=flat[:, NODE_INDEX["prod_reservation"]],
        batch_request=flat[:, NODE_INDEX["batch_request"]],
        batch_reservation=flat[:, NODE_INDEX["batch_reservation"]],
    )


@dataclass(eq=False)
class LedgerAccumulator:
    """Reduces node-series chunks ``(steps, n, NODE_SERIES, 8)`` to per-node figures."""

    n_nodes: int
    steps: int = 0
    _sum: dict[str, np.ndarray] = field(default_factory=dict)
    _min: dict[str, np.ndarray] = field(default_factory=dict)
    _max: dict[str, np.ndarray] = field(default_factory=dict)
    _capacity: np.ndarray | None = None

    def add(self, chunk: np.ndarray) -> None:
        """Fold in ``steps`` more steps of every node."""
        steps, n = chunk.shape[:2]
        if n != self.n_nodes:
            raise ValueError(f"chunk has {n} nodes, accumulator {self.n_nodes}")
        led = ledgers_of(chunk)
        usage = (chunk[..., NODE_INDEX["prod_usage"], :] + chunk[..., NODE_INDEX["batch_usage"], :]).reshape(-1, 8)
        values = {
            "slack": led.slack, "headroom": led.headroom, "usage": usage, "reservation": led.reservation,
            "reclaimed": led.reclaimed, "batch_request": led.batch_request,
        }
        for name, flat in values.items():
            per_node = flat.reshape(steps, n, 8)[..., [CPU, RAM]]
            total = per_node.sum(axis=0)
            low, high = per_node.min(axis=0), per_node.max(axis=0)
            if name in self._sum:
                self._sum[name] += total
                self._min[name] = np.minimum(self._min[name], low)
                self._max[name] = np.maximum(self._max[name], high)
            else:
                self._sum[name], self._min[name], self._max[name] = total, low, high
        self._capacity = chunk[-1, :, NODE_INDEX["capacity"]][:, [CPU, RAM]]
        self.steps += steps

    def figures(self) -> dict[str, np.ndarray]:
        """``{column: (n,) array}`` named as :class:`~kalena_web.ledger.models.NodeLedger` fields.

        Raises:
            ValueError: nothing was added.
        """
        if self.steps == 0:
            raise ValueError("no steps were accumulated")
        out: dict[str, np.ndarray] = {}
        for i, (dim, _, unit) in enumerate(DIMS):
            capacity = self._capacity[:, i]
            mean = {name: total[:, i] / self.steps for name, total in self._sum.items()}
            out[f"capacity_{dim}_{unit}"] = capacity
            out[f"headroom_{dim}_{unit}"] = self._min["headroom"][:, i]
            out[f"slack_mean_{dim}_{unit}"] = mean["slack"]
            out[f"slack_min_{dim}_{unit}"] = self._min["slack"][:, i]
            out[f"usage_mean_{dim}_{unit}"] = mean["usage"]
            out[f"usage_peak_{dim}_{unit}"] = self._max["usage"][:, i]
            with np.errstate(divide="ignore", invalid="ignore"):
                out[f"usage_mean_{dim}_ratio"] = np.where(capacity > 0, mean["usage"] / capacity, 0.0)
            out[f"reservation_mean_{dim}_{unit}"] = mean["reservation"]
            out[f"reclaimed_mean_{dim}_{unit}"] = mean["reclaimed"]
            out[f"batch_request_mean_{dim}_{unit}"] = mean["batch_request"]
        return out
