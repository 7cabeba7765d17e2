"""Cluster compaction's pure parts: the first-fit-decreasing repack (selectors, taints,
capacity), the search for the smallest fitting cluster, the p90 figures, the peak window."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kalena_engine.kuberina import Infrastructure, Workloads
from kalena_engine.kuberina.model import NodeSpec, PodSpec, Taint, Toleration
from kalena_engine.replay.compaction import (
    first_fit_decreasing, node_order, peak_window_start_s, smallest_fitting, summarise_trials,
)
from kalena_engine.resources import ir_vector
from kalena_engine.traces.batch import BatchTasks


def node(name: str, cpu: float, ram: float, labels=None, taints=()) -> NodeSpec:
    return NodeSpec(name=name, zone="z", rack="r", labels=labels or {}, taints=tuple(taints),
                    allocatable=ir_vector(cpu=cpu, ram=ram))


def pod(name: str, cpu: float, ram: float, selector=None, tolerations=()) -> PodSpec:
    return PodSpec(id=f"ns/{name}", namespace="ns", name=name, declaration=name, replica_index=0,
                   requests=ir_vector(cpu=cpu, ram=ram), node_selector=selector or {}, tolerations=tuple(tolerations))


def place(nodes, pods) -> dict[str, str | None]:
    infra = Infrastructure(source="t", nodes=tuple(nodes), daemonsets=())
    rows = first_fit_decreasing(infra, Workloads(source="t", pods=tuple(pods)), infra.allocatable)
    return {p.name: (nodes[r].name if r >= 0 else None) for p, r in zip(pods, rows.tolist(), strict=True)}


def test_ffd_places_the_largest_pods_first_on_the_first_node_with_room() -> None:
    # decreasing: big (6) → a; mid (3) → b (a has 2 left); small (2) → a
    got = place([node("a", 8, 32), node("b", 8, 32)], [pod("small", 2, 1), pod("big", 6, 1), pod("mid", 3, 1)])
    assert got == {"big": "a", "mid": "b", "small": "a"}


def test_ffd_honours_selectors_taints_and_every_dimension() -> None:
    nodes = [node("tainted", 64, 256, taints=[Taint("gpu")]), node("small-ram", 64, 4),
             node("labelled", 64, 256, labels={"disk": "ssd"}), node("plain", 64, 256)]
    pods = [pod("needs-ssd", 1, 1, selector={"disk": "ssd"}), pod("ram-heavy", 1, 8),
            pod("tolerates", 1, 1, tolerations=[Toleration(key="gpu")]), pod("nowhere", 1, 1, selector={"x": "y"})]
    got = place(nodes, pods)
    assert got["needs-ssd"] == "labelled"
    assert got["ram-heavy"] == "labelled"  # skips the taint it does not tolerate and the node short of ram
    assert got["tolerates"] == "tainted"
    assert got["nowhere"] is None  # no node matches: reported unplaced, never forced


def test_the_search_finds_the_exact_boundary_from_either_side() -> None:
    for boundary in (3, 150, 151, 152, 153, 451, 999):
        calls: list[int] = []

        def unserved(m: int, b=boundary) -> float:
            calls.append(m)
            return 0.0 if m >= b else min(1.0, (b - m) / b + 0.003)

        assert smallest_fitting(unserved, 152, 2_000, 1) == boundary
        assert len(calls) < 40
    assert smallest_fitting(lambda m: 1.0, 152, 300, 1) is None  # never fits within the limit
    assert smallest_fitting(lambda m: math.inf if m < 140 else 0.0, 152, 300, 120) == 140  # production floor


def test_p90_is_nearest_rank_with_min_and_max_and_extra_is_paired() -> None:
    trials = [{"seed": s, "nodes_needed_on": 100 + s, "nodes_needed_off": 110 + 2 * s} for s in range(11)]
    out = summarise_trials(trials)
    assert out["nodes_needed_p90_on"] == 109  # the ⌈0.9 · 11⌉ = 10th of 100 … 110
    assert (out["nodes_needed_on_min"], out["nodes_needed_on_max"]) == (100, 110)
    assert out["nodes_needed_p90_off"] == 128
    assert out["extra_nodes_without_reclamation_p90"] == 19  # per seed 10 + s
    assert (out["extra_nodes_without_reclamation_min"], out["extra_nodes_without_reclamation_max"]) == (10, 20)
    assert out["seeds"] == list(range(11))
    with pytest.raises(ValueError, match="no compaction trial"):
        summarise_trials([])


def test_node_order_is_a_seeded_permutation_then_empty_nodes_then_copies() -> None:
    infra = Infrastructure(source="t", nodes=tuple(node(f"n{i}", 8, 8) for i in range(6)), daemonsets=())
    a = node_order(infra, np.array([0, 1, 2, 3]), 5, copies=3)
    assert [n.name for n in a.nodes] == [n.name for n in node_order(infra, np.array([0, 1, 2, 3]), 5, copies=3).nodes]
    assert sorted(n.name for n in a.nodes[:4]) == ["n0", "n1", "n2", "n3"] and a.active == 4
    assert sorted(n.name for n in a.nodes[4:6]) == ["n4", "n5"]
    assert all("~copy" in n.name for n in a.nodes[6:]) and len(a.nodes) == 9
    orders = {tuple(n.name for n in node_order(infra, np.array([0, 1, 2, 3]), s, copies=0).nodes[:4]) for s in range(8)}
    assert len(orders) > 1  # removal is at random


def test_the_peak_window_is_the_one_receiving_the_most_batch_cpu() -> None:
    arrival = np.array([3600.0 * 2 + 5, 3600.0 * 10, 3600.0 * 11 + 7, 3600.0 * 23])
    instances = np.array([1, 10, 10, 1])
    batch = BatchTasks(source="t", task_id=np.array(["a", "b", "c", "d"], dtype=object), job_id=np.array(["a", "b", "c", "d"], dtype=object),
                       instances=instances, arrival_s=arrival, duration_s=np.full(4, 100.0),
                       request=np.array([ir_vector(cpu=1, ram=1)] * 4), priority=np.zeros(4, dtype=np.int64), anomalies={})
    assert peak_window_start_s(batch, 0.0, 2) == 10 * 3600.0
    assert peak_window_start_s(batch, 0.0, 24) == 0.0
    with pytest.raises(ValueError, match="within one day"):
        peak_window_start_s(batch, 0.0, 25)
