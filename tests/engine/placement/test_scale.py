"""Scale techniques never change decisions they must not change: the score cache, equivalence
classes and the greedy for identical pods are exact; sampling at 100 % is no sampling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kalena_engine.placement import BatchTemplate, PlacementPolicy, ScoreCache, schedule_batch
from kalena_engine.policy import Policy
from tests.engine.placement.builders import Entry, Node, pending, placements, snapshot

# Quantities in whole or half cores and whole GiB: float arithmetic is exact, so one-pod-at-a-time
# (naive) and run-at-once (optimised) debits give bit-identical slack and scores.
node_st = st.builds(
    Node, name=st.just("n"), cpu=st.just(64.0), ram=st.just(256.0),
    slack_cpu=st.integers(0, 40).map(float), slack_ram=st.integers(0, 200).map(float),
    batch=st.booleans(), production=st.booleans(), volatility=st.sampled_from([0.0, 0.02, 0.05, 0.2]),
    zone=st.sampled_from(["z1", "z2"]),
)
entry_st = st.builds(
    Entry, id=st.just("e"), count=st.integers(1, 30), cpu=st.sampled_from([0.5, 1.0, 2.0, 4.0]),
    ram=st.sampled_from([1.0, 2.0, 4.0, 8.0, 16.0]), template=st.integers(0, 2),
    priority=st.integers(0, 2), queued_s=st.integers(0, 5).map(float),
)
cluster_st = st.tuples(st.lists(node_st, min_size=1, max_size=30), st.lists(entry_st, min_size=1, max_size=25))
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TEMPLATES = [BatchTemplate(owner=f"job-{i}") for i in range(3)]
FULL = Policy().with_placement(percentage_of_nodes_to_score=100)


def build(nodes, entries):
    nodes = [Node(f"n{i}", **{k: v for k, v in n.__dict__.items() if k != "name"}) for i, n in enumerate(nodes)]
    entries = [Entry(f"e{i}", **{k: v for k, v in e.__dict__.items() if k != "id"}) for i, e in enumerate(entries)]
    return snapshot(nodes), pending(entries, TEMPLATES)


@SETTINGS
@given(cluster_st, st.integers(0, 3))
def test_cached_and_uncached_passes_place_identically(cluster, seed) -> None:
    snap, queue = build(*cluster)
    policy = Policy()  # default sampling: identical with and without the cache too
    cached = schedule_batch(snap, queue, policy, rng=np.random.default_rng(seed), cache=True)
    uncached = schedule_batch(snap, queue, policy, rng=np.random.default_rng(seed), cache=False)
    assert placements(cached) == placements(uncached)
    assert cached.remaining.tolist() == uncached.remaining.tolist()


@SETTINGS
@given(cluster_st)
def test_optimised_without_sampling_equals_naive(cluster) -> None:
    snap, queue = build(*cluster)
    fast = schedule_batch(snap, queue, FULL, rng=np.random.default_rng(0))
    slow = schedule_batch(snap, queue, FULL, rng=np.random.default_rng(0), naive=True)
    assert placements(fast) == placements(slow)


def test_a_cache_kept_across_passes_is_exact() -> None:
    rng = np.random.default_rng(5)
    cache = ScoreCache()
    for step in range(6):
        nodes = [Node(f"n{i}", slack_cpu=float(rng.integers(0, 40)), slack_ram=float(rng.integers(0, 60))) for i in range(40)]
        entries = [Entry(f"e{i}", int(rng.integers(1, 9)), cpu=1.0, ram=2.0, template=i % 3) for i in range(8)]
        snap, queue = snapshot(nodes), pending(entries, TEMPLATES)
        kept = schedule_batch(snap, queue, Policy(), rng=np.random.default_rng(step), cache=cache)
        fresh = schedule_batch(snap, queue, Policy(), rng=np.random.default_rng(step), cache=False)
        assert placements(kept) == placements(fresh)
    assert cache.hits > 0  # the same nodes' quantised slack repeats across passes


def _big_cluster(seed: int = 3, n: int = 300):
    rng = np.random.default_rng(seed)
    nodes = [Node(f"n{i}", slack_cpu=float(rng.integers(4, 40)), slack_ram=float(rng.integers(8, 120)),
                  volatility=float(rng.choice([0.0, 0.03, 0.08]))) for i in range(n)]
    entries = [Entry(f"e{i}", int(rng.integers(1, 40)), cpu=float(rng.choice([0.5, 1, 2])), ram=float(rng.choice([1, 2, 4])),
                     template=i % 3, queued_s=float(i)) for i in range(60)]
    return snapshot(nodes), pending(entries, TEMPLATES)


def test_sampling_at_100_percent_is_no_sampling() -> None:
    snap, queue = _big_cluster()
    reference = placements(schedule_batch(snap, queue, FULL, rng=np.random.default_rng(0), naive=True))
    for seed in range(3):  # the permutation drawn from the rng plays no part
        assert placements(schedule_batch(snap, queue, FULL, rng=np.random.default_rng(seed))) == reference


def test_sampling_scores_a_subset_deterministically_for_a_seed() -> None:
    snap, queue = _big_cluster()
    sampled = Policy().with_placement(percentage_of_nodes_to_score=10, min_feasible_nodes_to_find=30)
    a = schedule_batch(snap, queue, sampled, rng=np.random.default_rng(1))
    b = schedule_batch(snap, queue, sampled, rng=np.random.default_rng(1))
    c = schedule_batch(snap, queue, sampled, rng=np.random.default_rng(2))
    full = schedule_batch(snap, queue, FULL, rng=np.random.default_rng(1))
    assert placements(a) == placements(b) and placements(a) != placements(c)
    assert a.stats.rows_scored < full.stats.rows_scored
    assert a.placed == full.placed  # ample capacity: sampling changes where, not how many


@pytest.mark.parametrize(("n", "pct", "floor", "expected"), [
    (50, 0, 20, 50),         # below 100 nodes: all of them
    (186, 0, 20, 100),       # adaptive 50 − 186//125 = 49 % → 91 → floor of 100 feasible
    (3000, 0, 20, 780),      # adaptive 50 − 24 = 26 % → 780
    (5000, 0, 20, 1000),     # adaptive 50 − 40 = 10 % < Kalena's floor of 20 % → 1,000
    (5000, 0, 5, 500),       # with kube-scheduler's floor of 5 %: 10 % → 500
    (20000, 0, 5, 1000),     # kube-scheduler: 50 − 160 < 5 → 5 % → 1,000
    (1000, 30, 20, 300),     # explicit 30 %
    (1000, 100, 20, 1000),   # 100 %: every node
], ids=["small", "irina", "3000", "5000", "5000_kube", "kube_floor_5pct", "explicit", "all"])
def test_feasible_nodes_to_find_follows_kube_scheduler(n, pct, floor, expected) -> None:
    policy = PlacementPolicy(percentage_of_nodes_to_score=pct, adaptive_min_percentage=floor)
    assert policy.feasible_nodes_to_find(n) == expected


def test_equivalence_classes_are_computed_once_per_class() -> None:
    # 50 single-pod entries of one owner and size, interleaved in queue order with nothing else:
    # one class, one static mask.
    nodes = [Node(f"n{i}") for i in range(20)]
    queue = pending([Entry(f"t{i}", 1, queued_s=float(i)) for i in range(50)])
    result = schedule_batch(snapshot(nodes), queue, FULL, rng=np.random.default_rng(0))
    assert result.placed == 50 and result.stats.classes == 1 and result.stats.units == 1
    naive = schedule_batch(snapshot(nodes), queue, FULL, rng=np.random.default_rng(0), naive=True)
    assert placements(naive) == placements(result) and naive.stats.units == 50


@SETTINGS
@given(cluster_st, st.integers(0, 3))
def test_bindings_made_in_numpy_equal_the_per_run_loop(cluster, seed) -> None:
    from kalena_engine.placement import scheduler

    snap, queue = build(*cluster)
    made = {}
    for name, threshold in (("numpy", 0), ("loop", 10**9)):  # every unit in numpy, or none
        previous = scheduler._VECTOR_RUNS
        scheduler._VECTOR_RUNS = threshold
        try:
            result = schedule_batch(snap, queue, Policy(), rng=np.random.default_rng(seed))
        finally:
            scheduler._VECTOR_RUNS = previous
        b = result.bindings
        made[name] = (b.entry.tolist(), b.node.tolist(), b.count.tolist(), result.remaining.tolist())
    assert made["numpy"] == made["loop"]
