"""Kuberina Phase 0: the post-DaemonSet capacity that every Kalena ledger uses (docs/design.md §3)."""

from __future__ import annotations

import numpy as np

from kalena_engine.kuberina.matching import daemonset_eligible
from kalena_engine.kuberina.model import Infrastructure


def daemonset_eligibility(infra: Infrastructure) -> np.ndarray:
    """``(n_nodes, n_daemonsets)`` bool: DaemonSet d runs on node n (Kuberina's solver rule)."""
    return np.array(
        [[daemonset_eligible(ds, node) for ds in infra.daemonsets] for node in infra.nodes],
        dtype=bool,
    ).reshape(len(infra.nodes), len(infra.daemonsets))


def phase0_capacity(infra: Infrastructure) -> np.ndarray:
    """``C_n = allocatable_n − Σ_{d eligible on n} resources_d``, shape ``(n_nodes, 8)``.

    Source: Kuberina ``phases/phase0.py`` ("ballast water"). Unconstrained (+inf) dimensions
    stay +inf. A DaemonSet larger than its node yields a negative capacity, which blueprint
    verification then reports. Example (Irina standard node): 64 cores − (0.5 + 1 + 0.25 + 0.5)
    = 61.75 cores; 256 GiB − (0.5 + 1 + 0.25 + 1) = 253.25 GiB.
    """
    if not infra.daemonsets:
        return infra.allocatable.copy()
    ballast = daemonset_eligibility(infra).astype(np.float64) @ np.stack([d.resources for d in infra.daemonsets])
    return infra.allocatable - ballast
