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
