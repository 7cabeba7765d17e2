"""Compressible cpu in the replay (docs/design.md §11): production first, the rest water-filled among
batch by request, each capped at its demand; memory above capacity is an OOM kill, batch first."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.replay.compressible import oom_victims, share_compressible_cpu

GIB = 2**30

# Each case: one or two nodes; budget B = C − Σ u_prod per node (mcpu); groups are
# (node, count, request, demand) per instance; expected grant per instance.
CPU_CASES = {
    "demand fits: everyone gets its demand": (
        # C = 16, production uses 10 → B = 6 cores; demand 2·2 + 1 = 5 ≤ 6
        [6000.0], [(0, 2, 2000.0, 2000.0), (0, 1, 4000.0, 1000.0)], [2000.0, 1000.0]),
    "issue example: the small-demand group is capped first": (
        # B = 16 − 13 = 3 cores. λ = 1 would give 2·2 + 1 = 5 > 3. B's d/q = 0.25 is reached first:
        # it takes its 1 core; 2 cores remain for A's 2 · 2 cores of request → λ = 0.5 → 1 core each.
        [3000.0], [(0, 2, 2000.0, 2000.0), (0, 1, 4000.0, 1000.0)], [1000.0, 1000.0]),
    "proportional to request when nobody is capped": (
        # B = 3 cores among requests 1 and 2 (demand = request): λ = 3 / (1 + 2) = 1 → full demand;
        # with B = 1.5 cores λ = 0.5 → 0.5 and 1 core
        [1500.0], [(0, 1, 1000.0, 1000.0), (0, 1, 2000.0, 2000.0)], [500.0, 1000.0]),
    "production uses it all: batch gets nothing": (
        # C − Σ u_prod ≤ 0 → B = 0 → every grant 0 (rate 0: the task makes no progress)
        [0.0], [(0, 3, 500.0, 500.0)], [0.0]),
    "nodes are independent": (
        # node 0: B = 1 core for 4 × 0.5 core → λ = 0.5 → 250 mcpu each; node 1: B = 8 cores, demand 1 → 1 core
        [1000.0, 8000.0], [(0, 4, 500.0, 500.0), (1, 1, 1000.0, 1000.0)], [250.0, 1000.0]),
    "zero demand gets zero and takes nothing": (
        # a group that uses no cpu: grant 0; the other gets all of B = 0.5 core of its 1 core
        [500.0], [(0, 1, 1000.0, 0.0), (0, 1, 1000.0, 1000.0)], [0.0, 500.0]),
}


@pytest.mark.parametrize("budget, groups, expected", CPU_CASES.values(), ids=CPU_CASES.keys())
def test_cpu_is_shared_by_request_capped_at_demand(budget, groups, expected) -> None:
    node, count, request, demand = (np.array(col) for col in zip(*groups, strict=True))
    grant = share_compressible_cpu(np.array(budget), node.astype(np.int64), count.astype(np.int64), request, demand)
    assert grant == pytest.approx(expected)
    assert (grant <= demand + 1e-9).all()
    for n, b in enumerate(budget):  # never more than the node has left after production
        assert (count * grant)[node == n].sum() <= b + 1e-6


def test_grants_do_not_depend_on_group_order() -> None:
    rng = np.random.default_rng(3)
    node = rng.integers(0, 5, 200)
    count = rng.integers(1, 6, 200)
    request = rng.uniform(100, 4000, 200)
    demand = request * rng.uniform(0, 1.5, 200)
    budget = rng.uniform(0, 40_000, 5)
    grant = share_compressible_cpu(budget, node, count, request, demand)
    perm = rng.permutation(200)
    assert share_compressible_cpu(budget, node[perm], count[perm], request[perm], demand[perm]) == pytest.approx(grant[perm])
    used = np.bincount(node, weights=count * grant, minlength=5)
    wanted = np.bincount(node, weights=count * demand, minlength=5)
    # a node either satisfies all demand or hands out exactly its budget
    assert np.allclose(used, np.minimum(wanted, budget))


OOM_CASES = {
    "fits: nothing killed": (
        # 40 + 3·4 + 2·6 = 64 GiB ≤ 64
        64, [40.0], [(3, 4.0), (2, 6.0)], [0, 0], [False]),
    "largest batch first, just enough": (
        # 40 + 3·4 + 2·6 = 64 > 60 by 4 GiB → one 6-GiB instance (the largest) covers it
        60, [40.0], [(3, 4.0), (2, 6.0)], [0, 1], [False]),
    "docstring example": (
        # 40 + 12 + 12 = 64 over C = 52 by 12 GiB → both 6-GiB instances go (12 GiB), the 4-GiB group stays
        52, [40.0], [(3, 4.0), (2, 6.0)], [0, 2], [False]),
    "production only after all batch": (
        # 50 + 10 = 60 > 45: all batch (2 × 5) goes, still 50 > 45 → the 30-GiB production pod is killed
        45, [30.0, 20.0], [(2, 5.0)], [2], [True, False]),
}


@pytest.mark.parametrize("capacity, prod, batch, kills, prod_killed", OOM_CASES.values(), ids=OOM_CASES.keys())
def test_oom_kills_batch_first_largest_first(capacity, prod, batch, kills, prod_killed) -> None:
    count = np.array([c for c, _ in batch], dtype=np.int64)
    usage = np.array([u for _, u in batch]) * GIB
    got_kills, got_prod = oom_victims(capacity * GIB, np.array(prod) * GIB, count, usage)
    assert got_kills.tolist() == kills
    assert got_prod.tolist() == prod_killed
