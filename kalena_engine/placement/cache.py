"""Score cache keyed on quantised slack (Borg, Verma et al. EuroSys 2015 §3.4: cache scores
until a machine's properties change, ignoring small changes in resource quantities).

The expensive, request-dependent part of a node's score is the stranded-slack balance, a pure
function of ``(request, S̃_n, C_n)`` where ``S̃ = ⌊S / w⌋ · w`` is the slack rounded down to the
policy's bucket widths. The cache keeps, per distinct request, the last ``S̃`` seen on every node
(balance dimensions only) and the balance computed from it; a lookup recomputes only the rows
whose ``S̃`` changed. Because the score is *defined* on ``S̃``, a hit returns exactly what a
recomputation would: cached and uncached passes place identically (tested).

A cache is bound to one node table and one policy; it may live across passes (the replay keeps
one for the whole run, the control plane one per cluster).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.placement.policy import PlacementPolicy
from kalena_engine.placement.scores import balance_score


@dataclass(eq=False)
class ScoreCache:
    """LRU of ``request bytes → (keys (n, |dims|), balance (n,))``; counts hits and misses (rows).

    Attributes:
        hits, misses: rows served from the cache / recomputed, since creation.
    """

    hits: int = 0
    misses: int = 0
    _entries: OrderedDict = field(default_factory=OrderedDict)
    _bound: tuple | None = None
    _limit: int = 1024
    _dims: list[int] = field(default_factory=list)

    def bind(self, capacity: np.ndarray, policy: PlacementPolicy) -> None:
        """Use the cache for this node capacity and policy; anything cached for another
        capacity table, bucket width or balance dimension set is dropped."""
        bound = (capacity.shape, capacity.tobytes(), tuple(policy.balance_dims), tuple(policy.slack_buckets))
        if bound != self._bound:
            self._entries.clear()
            self._bound = bound
        self._limit = policy.score_cache_entries
        self._dims = list(policy.balance_dims)

    def __len__(self) -> int:
        return len(self._entries)

    def balance(self, request: np.ndarray, rows: np.ndarray, slack_q: np.ndarray, capacity: np.ndarray) -> np.ndarray:
        """Balance scores of ``rows`` for ``request`` given their quantised slack ``slack_q``
        ``(len(rows), 8)``; ``capacity`` is the full ``(n, 8)`` table the cache is bound to."""
        key = request.tobytes()
        entry = self._entries.get(key)
        if entry is None:
            n = capacity.shape[0]
            entry = (np.full((n, len(self._dims)), np.nan), np.zeros(n))
            self._entries[key] = entry
            if len(self._entries) > self._limit:
                self._entries.popitem(last=False)
        else:
            self._entries.move_to_end(key)
        keys, values = entry
        now = slack_q[:, self._dims]
        miss = ~np.all(keys[rows] == now, axis=1)
        n_miss = int(miss.sum())
        self.misses += n_miss
        self.hits += len(rows) - n_miss
        if n_miss:
            redo = rows[miss]
            values[redo] = balance_score(slack_q[miss], request, capacity[redo], self._dims)
            keys[redo] = now[miss]
        return values[rows]
