"""The heap greedy for identical pods makes exactly the one-pod-at-a-time choices."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.placement.greedy import greedy, greedy_runs


def table(seqs: dict[int, list[float]]):
    """``sequences`` callback over fixed per-node score lists (index k = score after k pods)."""
    def sequences(nodes, start, length):
        return [seqs[int(n)][int(s):int(s) + int(m)] for n, s, m in zip(nodes, start, length, strict=True)]
    return sequences


def one_at_a_time(seqs: dict[int, list[float]], rooms: dict[int, int], budget: int) -> list[int]:
    taken = dict.fromkeys(seqs, 0)
    out = []
    for _ in range(budget):
        live = [n for n in seqs if taken[n] < rooms[n]]
        if not live:
            break
        best = max(live, key=lambda n: (seqs[n][taken[n]], -n))
        taken[best] += 1
        out.append(best)
    return out


def expand(runs):
    return [n for n, c in runs for _ in range(c)]


def test_docstring_example() -> None:
    # heads a = 90, b = 80; a's sequence 90, 85, 79 → a takes 2 (85 ≥ 80), then b (80 > 79)
    seqs = {0: [90.0, 85.0, 79.0], 1: [80.0, 70.0]}
    runs = greedy(np.array([0, 1]), np.array([90.0, 80.0]), np.array([3, 2]), 3, table(seqs))
    assert runs == [(0, 2), (1, 1)]


@pytest.mark.parametrize("seed", range(30))
def test_matches_one_pod_at_a_time_including_ties_and_rising_scores(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8))
    rooms = {i: int(rng.integers(1, 12)) for i in range(n)}
    # coarse values make ties common; scores may rise after a placement (co-location's 50 → 100)
    seqs = {i: rng.integers(0, 6, size=rooms[i]).astype(float).tolist() for i in range(n)}
    budget = int(rng.integers(1, 40))
    cand = np.arange(n)
    runs = greedy(cand, np.array([seqs[i][0] for i in range(n)]), np.array([rooms[i] for i in range(n)]), budget,
                  table(seqs))
    assert expand(runs) == one_at_a_time(seqs, rooms, budget)


def table_values(seqs: dict[int, list[float]]):
    """The array form of :func:`table` (for ``greedy_runs``)."""
    lists = table(seqs)

    def values(nodes, start, length):
        return np.array([v for part in lists(nodes, start, length) for v in part], dtype=np.float64)
    return values


def test_vectorised_runs_docstring_example() -> None:
    seqs = {0: [90.0, 85.0, 79.0], 1: [80.0, 70.0]}
    nodes, pods = greedy_runs(np.array([0, 1]), np.array([90.0, 80.0]), np.array([3, 2]), 3, table_values(seqs))
    assert list(zip(nodes.tolist(), pods.tolist())) == [(0, 2), (1, 1)]


@pytest.mark.parametrize("seed", range(200))
def test_vectorised_runs_are_the_heap_greedys(seed: int) -> None:
    # the same runs, in the same order, as the heap greedy (itself one pod at a time), with ties,
    # rising scores, long sequences that must be extended and budgets beyond every room
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 12))
    rows = np.sort(rng.choice(400, size=n, replace=False))
    rooms = {int(r): int(rng.integers(1, 80 if seed % 3 == 0 else 12)) for r in rows}
    seqs = {r: (rng.integers(0, 6, size=rooms[r]).astype(float) if seed % 2 else
                np.sort(rng.random(rooms[r]))[::-1] * 100).tolist() for r in rooms}
    budget = int(rng.integers(1, 3 * sum(rooms.values()) // 2 + 2))
    heads = np.array([seqs[int(r)][0] for r in rows])
    room = np.array([rooms[int(r)] for r in rows])
    expected = greedy(rows, heads, room, budget, table(seqs))
    nodes, pods = greedy_runs(rows, heads, room, budget, table_values(seqs))
    assert list(zip(nodes.tolist(), pods.tolist())) == expected
    assert expand(expected) == [rows.tolist()[i] for i in one_at_a_time(
        {i: seqs[int(r)] for i, r in enumerate(rows)}, {i: rooms[int(r)] for i, r in enumerate(rows)}, budget)]
