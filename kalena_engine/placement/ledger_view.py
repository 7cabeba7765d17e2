"""The slack a scheduling pass reads (docs/design.md §6): the reservation ledger of the workloads that
count, by lifecycle phase.

==========  =====================================================================
phase       counts in the reservation ledger as
==========  =====================================================================
running     its reservation ``r`` (GPU: its request — no GPU reclaim)
in_flight   its request ``q`` (bound, not reporting yet: debits at once, case C2)
terminal    nothing (completed, failed, evicted and gone: case C3)
==========  =====================================================================

    S_n = C_n − Σ_{running on n} r − Σ_{in flight on n} q        (GPU: C − Σ q of both)

Worked example (case C3): C = 8 cores (16 raw − 8 DaemonSets), production running with
r = 5 cores, eight completed 1-core batch pods → S = 8 − 5 = 3 cores; a 2-core pod fits.
"""

from __future__ import annotations

import numpy as np

from kalena_engine.ledger import node_sum
from kalena_engine.resources import GPU

RUNNING, IN_FLIGHT, TERMINAL = "running", "in_flight", "terminal"
PHASES = (RUNNING, IN_FLIGHT, TERMINAL)


def reservation_slack(capacity: np.ndarray, *, node: np.ndarray, request: np.ndarray, reservation: np.ndarray,
                      phase: np.ndarray, count: np.ndarray | None = None) -> np.ndarray:
    """``(n, 8)`` slack from workloads in any phase (see the module doc).

    Args:
        capacity: ``(n, 8)`` post-Phase-0 capacity.
        node: ``(w,)`` node row per workload (−1 unplaced: skipped).
        request, reservation: ``(w, 8)`` per pod.
        phase: ``(w,)`` str, one of :data:`PHASES`.
        count: optional ``(w,)`` identical pods per row.

    Raises:
        ValueError: an unknown phase (naming it and the accepted ones).
    """
    phase = np.asarray(phase)
    unknown = sorted(set(phase.tolist()) - set(PHASES))
    if unknown:
        raise ValueError(f"unknown workload phase(s) {unknown}; accepted: {', '.join(PHASES)}")
    live = phase != TERMINAL
    charged = np.where((phase == IN_FLIGHT)[:, None], request, reservation)
    charged[:, GPU] = request[:, GPU]
    n = capacity.shape[0]
    rows = np.where(live, node, -1)
    return capacity - node_sum(rows, charged, n, None if count is None else np.asarray(count, dtype=np.float64))
