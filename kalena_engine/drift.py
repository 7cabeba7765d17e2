"""Drift between what production asked for and what it steadily needs (docs/design.md §10).

The steady-state reservation ``r̃_p`` is the p95 of workload p's reservation over the window,
startup grace excluded (:func:`kalena_engine.archive.observed_stats`). Per dimension::

    D = Σ_p |q_p − r̃_p| / Σ_p q_p

and node n contributes ``Σ_{p on n} |q_p − r̃_p| / Σ_p q_p`` (contributions sum to D).
Worked example: two pods with q = 4 and 2 cores, r̃ = 1 and 2.5 → D = (3 + 0.5) / 6 = 0.583.
Above an operator threshold Kalena emits a re-plan *recommendation*; it never re-plans itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena_engine.ledger import node_sum
from kalena_engine.resources import CPU, DIMS, RAM


@dataclass(frozen=True, eq=False)
class DriftReport:
    """Drift per dimension ``(8,)`` (NaN where nothing is requested), per node ``(n, 8)`` and
    per workload ``(p, 8)`` (``|q − r̃|`` in internal units)."""

    per_dimension: np.ndarray
    per_node: np.ndarray
    per_workload: np.ndarray

    def exceeds(self, threshold_ratio: float, dims: tuple[int, ...] = (CPU, RAM)) -> list[str]:
        """Names of the dimensions in ``dims`` whose drift is above ``threshold_ratio``."""
        return [DIMS[d] for d in dims if np.isfinite(self.per_dimension[d]) and self.per_dimension[d] > threshold_ratio]


def drift(request: np.ndarray, steady_reservation: np.ndarray, node_of: np.ndarray, n_nodes: int) -> DriftReport:
    """Compute :class:`DriftReport`.

    Args:
        request: ``(p, 8)`` production requests.
        steady_reservation: ``(p, 8)`` r̃ per workload; rows with NaN (no steady samples yet)
            take no part.
        node_of: ``(p,)`` node row per workload.
        n_nodes: number of nodes.
    """
    known = ~np.isnan(steady_reservation).any(axis=1)
    gap = np.where(known[:, None], np.abs(request - np.nan_to_num(steady_reservation)), 0.0)
    total = np.where(known[:, None], request, 0.0).sum(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        per_dimension = np.where(total > 0, gap.sum(axis=0) / total, np.nan)
        per_node = np.where(total > 0, node_sum(node_of, gap, n_nodes) / total, 0.0)
    return DriftReport(per_dimension=per_dimension, per_node=per_node, per_workload=gap)
