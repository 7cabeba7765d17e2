"""Placing ``budget`` identical pods exactly as one-at-a-time greedy would, without one
decision per pod (the equivalence-class fast path of the scheduler).

One-at-a-time greedy puts each pod on the candidate with the highest score (ties → lowest
node row), then rescores that node with ``S − k·q``. Every score is node-local (balance and
co-location read only the node's own slack and residents; image and volatility are fixed), so
placing a pod never changes another node's score: the greedy is a merge of per-node score
sequences ``s_n(0), s_n(1), …`` — a heap of each node's current head. A node keeps taking pods
while its next score still beats the best other head; the sequences are evaluated in vectorised
chunks. Worked example: heads a = 90, b = 80; a's sequence 90, 85, 79 → a takes 2 (85 ≥ 80),
then b (80 > 79) — the same three choices the per-pod loop makes.

:func:`greedy` is that heap merge (the reference); the scheduler calls :func:`greedy_runs`, which
makes the same runs in the same order with one sort instead of a heap operation per run.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

import numpy as np

#: ``(nodes (m,), first k (m,), how many (m,)) → per node, scores after k, k+1, … more pods``.
Sequences = Callable[[np.ndarray, np.ndarray, np.ndarray], list[list[float]]]


def greedy(cand: np.ndarray, heads: np.ndarray, rooms: np.ndarray, budget: int,
           sequences: Sequences) -> list[tuple[int, int]]:
    """``(node, pods)`` runs in the order one-at-a-time greedy would choose them, for
    ``budget`` identical pods.

    Args:
        cand: ``(m,)`` candidate node rows, every one feasible.
        heads: ``(m,)`` their current scores.
        rooms: ``(m,)`` ≥ 1, pods each node can still take.
        budget: pods to place (at most ``rooms.sum()`` are).
        sequences: scores after more pods (see :data:`Sequences`).
    """
    if budget == 1 or len(cand) == 0:  # one pod: the best head (ties → lowest row); no sequences
        return [(int(cand[int(np.argmax(heads))]), 1)] if budget and len(cand) else []
    heap = list(zip((-heads).tolist(), cand.tolist(), strict=True))
    heapq.heapify(heap)
    room_of = dict(zip(cand.tolist(), rooms.tolist(), strict=True))
    chunk = max(4, -(-4 * budget // len(cand)))
    first = np.minimum(rooms - 1, chunk)
    seq = dict(zip(cand.tolist(), sequences(cand, np.ones(len(cand), dtype=np.int64), first), strict=True))
    taken: dict[int, int] = {}
    runs: list[tuple[int, int]] = []
    while budget > 0 and heap:
        _, node = heapq.heappop(heap)
        before = taken.get(node, 0)
        k = before + 1  # this pod goes here
        budget -= 1
        room = room_of[node]
        scores = seq[node]
        while budget > 0 and k < room:
            if k > len(scores):
                more = min(room - 1 - len(scores), max(2 * len(scores), chunk, 8))
                scores.extend(sequences(np.array([node]), np.array([len(scores) + 1]), np.array([more]))[0])
            nxt = scores[k - 1]
            if heap and (nxt < -heap[0][0] or (nxt == -heap[0][0] and node > heap[0][1])):
                heapq.heappush(heap, (-nxt, node))
                break
            k += 1
            budget -= 1
        taken[node] = k
        runs.append((node, k - before))
    return runs


#: ``(nodes (m,), first k (m,), how many (m,)) → (Σ how many,)`` scores after k, k+1, … more pods,
#: node after node (the array form of :data:`Sequences`).
SequenceValues = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def greedy_runs(cand: np.ndarray, heads: np.ndarray, rooms: np.ndarray, budget: int,
                values: SequenceValues) -> tuple[np.ndarray, np.ndarray]:
    """:func:`greedy`'s runs as two arrays ``(node (r,), pods (r,))``, computed without a
    decision per pod — the same runs in the same order.

    The heap merge pops, from each node's sequence in turn, the head with the best key
    ``(−score, node)``. A k-way merge of sequences pops their elements in ascending order of
    the *prefix maximum* of the key (an element cannot leave before those ahead of it in its
    own sequence, and leaves at once after them when it beats every other head), ties within
    a node by position. Here the key's prefix maximum is ``(−min_{j ≤ k} s_n(j), node)``, so
    the choices are the first ``budget`` elements in ascending order of
    ``(−cummin s_n, node, k)`` (one lexsort). Sequences are evaluated lazily as in
    :func:`greedy`: a node whose last known element falls among the chosen is extended and
    the order recomputed, so only what the choices can reach is scored. Worked example (the
    module doc's): a = 90, 85, 79; b = 80, 70 → keys a (90, 85, 79), b (80, 70) → 90 a, 85 a,
    80 b: runs (a, 2), (b, 1).

    Args: as :func:`greedy`, with ``values`` the array form of the sequences callback.
    """
    cand = np.asarray(cand, dtype=np.int64)
    m = len(cand)
    if budget <= 0 or m == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if budget == 1:  # one pod: the best head (ties → lowest row); no sequences
        return cand[[int(np.argmax(heads))]], np.ones(1, dtype=np.int64)
    rooms = np.minimum(np.asarray(rooms, dtype=np.int64), budget)  # element k has k ahead of it
    chunk = max(4, -(-4 * budget // m))
    known = np.ones(m, dtype=np.int64)       # elements known per node: k = 0 … known − 1
    grid = np.full((m, max(2, int(min(rooms.max(), chunk + 1)))), np.inf)
    grid[:, 0] = heads
    want = np.minimum(rooms, chunk + 1)
    while True:
        grow = np.flatnonzero(want > known)
        if len(grow):
            start, count = known[grow], want[grow] - known[grow]
            width = int(want.max())
            if width > grid.shape[1]:
                grid = np.concatenate([grid, np.full((m, max(width, 2 * grid.shape[1]) - grid.shape[1]), np.inf)],
                                      axis=1)
            total = int(count.sum())
            rows = np.repeat(grow, count)
            cols = np.arange(total) - np.repeat(np.cumsum(count) - count, count) + np.repeat(start, count)
            grid[rows, cols] = values(cand[grow], start, count)
            known = np.maximum(known, want)
        level = np.minimum.accumulate(grid, axis=1)
        rows, cols = np.nonzero(np.arange(grid.shape[1]) < known[:, None])  # node-major
        order = np.lexsort((cols, cand[rows], -level[rows, cols]))
        truncated = np.flatnonzero(known < rooms)
        if len(truncated):
            position = np.empty(len(order), dtype=np.int64)
            position[order] = np.arange(len(order))
            last = position[(np.cumsum(known) - 1)[truncated]]
            reach = truncated[last < budget - 1]  # their unknown elements could be chosen
            if len(reach):
                want = known.copy()
                want[reach] = np.minimum(rooms[reach], known[reach] + np.maximum(known[reach], max(chunk, 8)))
                continue
        nodes = cand[rows[order[:budget]]]
        first = np.flatnonzero(np.concatenate(([True], nodes[1:] != nodes[:-1])))
        return nodes[first], np.diff(np.append(first, len(nodes)))
