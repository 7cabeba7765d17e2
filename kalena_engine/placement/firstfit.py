"""First-fit placement of identical batch instances (the foundation's placer; the full
filter/score scheduler replaces it behind the same call).

For one equivalence class of ``count`` identical pods with per-instance request ``q`` and
node slack ``S`` ``(m, 8)``::

    room_n  = min_{d: q_d > 0} ⌊S_{n,d} / q_d⌋        instances node n can still take
    take_n  = min(room_n, count − Σ_{k<n} take_k)      fill nodes in order

Worked example: q = 2 cores, S_cpu = (5, 1, 8) cores, count = 4 → room = (2, 0, 4),
take = (2, 0, 2).
"""

from __future__ import annotations

import numpy as np

from kalena_engine.ledger import LEDGER_RTOL


def instance_room(request: np.ndarray, slack: np.ndarray) -> np.ndarray:
    """``(m,)`` int: how many instances of ``request`` ``(8,)`` fit in each row of ``slack``."""
    need = request > 0
    if not need.any():
        return np.full(slack.shape[0], np.iinfo(np.int64).max // 4, dtype=np.int64)
    tolerant = slack[:, need] * (1 + LEDGER_RTOL) + 1e-9
    with np.errstate(invalid="ignore"):
        room = np.floor(np.min(tolerant / request[need], axis=1))
    room = np.nan_to_num(room, nan=0.0, posinf=np.iinfo(np.int64).max // 4, neginf=0.0)
    return np.maximum(room, 0).astype(np.int64)


def first_fit(request: np.ndarray, count: int, slack: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """Instances to place on each node, ``(m,)`` int, filling eligible nodes in row order.

    Args:
        request: ``(8,)`` per-instance request.
        count: instances wanted.
        slack: ``(m, 8)`` current slack (reservation ledger headroom).
        eligible: ``(m,)`` bool, nodes batch may use.
    """
    room = np.where(eligible, instance_room(request, slack), 0)
    before = np.cumsum(room) - room
    return np.clip(count - before, 0, room)
