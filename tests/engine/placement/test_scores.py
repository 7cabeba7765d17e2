"""Score formulas with the worked examples of their docstrings (kube-scheduler noderesources
test style: each case's comment shows the arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.placement import BatchTemplate, Image, PlacementPolicy, VolatilityTracker, schedule_batch
from kalena_engine.placement.scores import (
    balance_score, colocation_score, image_score, quantise, total_score, volatility_score,
)
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU, RAM, ir_vector
from tests.engine.placement.builders import Entry, Node, pending, snapshot

INF = np.inf
POLICY = PlacementPolicy()


def vec(cpu: float, ram: float, storage: float = 0.0) -> np.ndarray:
    return ir_vector(cpu=cpu, ram=ram, storage=storage)


BALANCE = [
    # (name, capacity (cores, GiB), slack, request, dims, expected)
    # f = (4/16, 32/64) = (0.25, 0.5); std = |0.25 − 0.5| / 2 = 0.125 → 100 · (1 − 0.125) = 87.5
    ("docstring_example", (16, 64), (6, 40), (2, 8), (CPU, RAM), 87.5),
    # f = (8/16, 32/64) = (0.5, 0.5); std 0 → 100
    ("balanced", (16, 64), (10, 40), (2, 8), (CPU, RAM), 100.0),
    # f = (0/16, 64/64) = (0, 1); std 0.5 → 50
    ("all_cpu_gone_ram_stranded", (16, 64), (2, 64), (2, 0), (CPU, RAM), 50.0),
    # one dimension: nothing to balance → 100
    ("single_dimension", (16, 64), (6, 40), (2, 8), (CPU,), 100.0),
]


@pytest.mark.parametrize(("cap", "slack", "req", "dims", "expected"), [c[1:] for c in BALANCE], ids=[c[0] for c in BALANCE])
def test_balance_score(cap, slack, req, dims, expected) -> None:
    got = balance_score(vec(*slack)[None], vec(*req), vec(*cap)[None], dims)
    assert got[0] == pytest.approx(expected)


def test_balance_unconstrained_dimension_takes_no_part() -> None:
    # storage capacity +inf: f_storage is undefined and dropped; cpu/ram as in the docstring → 87.5
    cap = vec(16, 64)
    cap[3] = INF
    slack = vec(6, 40)
    slack[3] = INF
    assert balance_score(slack[None], vec(2, 8), cap[None], (0, 1, 3))[0] == pytest.approx(87.5)
    # a zero-capacity dimension (a node without GPUs) likewise: (cpu, ram, gpu) → 87.5
    assert balance_score(vec(6, 40)[None], vec(2, 8), cap[None], (0, 1, 2))[0] == pytest.approx(87.5)


@pytest.mark.parametrize(("prod", "batch", "expected"), [
    (True, True, 100.0),    # production and batch: already mixing
    (True, False, 50.0),    # production only
    (False, True, 0.0),     # no production: capacity the blueprint freed, not slack
    (False, False, 0.0),
], ids=["mixing", "production_only", "batch_only", "empty"])
def test_colocation_score(prod, batch, expected) -> None:
    assert colocation_score(np.array([prod]), np.array([batch]))[0] == expected


def test_image_locality_kube_thresholds() -> None:
    # one 500 MB image cached on 50 of 100 nodes → 500 · 50/100 = 250 MB on those nodes
    # → 100 · (250 − 23) / (1000 − 23) = 23.234…; nodes without it score 0
    cached = np.zeros(100, dtype=bool)
    cached[:50] = True
    got = image_score((Image("etl:1", 500e6),), {"etl:1": cached}, 100, POLICY)
    assert got[0] == pytest.approx(100 * 227 / 977)
    assert got[99] == 0.0
    # two images, both everywhere, 800 MB + 600 MB → 1,400 MB of max 2 × 1,000 → 100 · (1400 − 23)/(2000 − 23) = 69.65
    everywhere = np.ones(4, dtype=bool)
    two = image_score((Image("a", 800e6), Image("b", 600e6)), {"a": everywhere, "b": everywhere}, 4, POLICY)
    assert two[0] == pytest.approx(100 * 1377 / 1977)
    assert image_score((), {}, 3, POLICY).tolist() == [0.0, 0.0, 0.0]


def test_a_65_mb_image_on_one_node_barely_scores_as_in_kube_scheduler() -> None:
    # docs/docker.md "Image locality": 64,896,830 bytes on 1 of 3 nodes → 21.6 MB < 23 MB → 0;
    # on 1 of 2 → 32.4 MB → 100 · (32.4 − 23) / 977 = 0.97, of the node score (weights 1, 1, 3, 1)
    # 3/6 · 0.97 = 0.48 points
    size = 64_896_830.0
    three = image_score((Image("kalena/big:1", size),), {"kalena/big:1": np.array([True, False, False])}, 3, POLICY)
    assert three.tolist() == [0.0, 0.0, 0.0]
    two = image_score((Image("kalena/big:1", size),), {"kalena/big:1": np.array([True, False])}, 2, POLICY)
    assert two[0] == pytest.approx(100 * (size / 2 - 23e6) / 977e6) and two[0] == pytest.approx(0.97, abs=0.01)
    assert two[0] * POLICY.weight_image / (POLICY.weight_balance + POLICY.weight_colocation + POLICY.weight_image
                                           + POLICY.weight_volatility) == pytest.approx(0.48, abs=0.01)
    # on 1 of 3 nodes an image scores from 69 MB (3 × 23 MB) up
    assert image_score((Image("x", 70e6),), {"x": np.array([True, False, False])}, 3, POLICY)[0] > 0


@pytest.mark.parametrize(("volatility", "expected"), [
    (0.0, 100.0),    # steady node
    (0.05, 50.0),    # σ_cpu = 0.8 core on 16 cores = 0.05; 100 · (1 − 0.05/0.10) = 50
    (0.10, 0.0),     # at v_max
    (0.30, 0.0),     # beyond v_max: floored at 0
], ids=["steady", "docstring_example", "at_max", "beyond_max"])
def test_volatility_score(volatility, expected) -> None:
    assert volatility_score(np.array([volatility]), 0.10)[0] == pytest.approx(expected)


def test_total_is_the_weighted_mean() -> None:
    # balance 87.5 (docstring example), colocation 100, image 0, volatility 50 (v = 0.05), weights 1, 1, 3, 1
    # → (1 · 87.5 + 1 · 100 + 3 · 0 + 1 · 50) / 6 = 39.5833…
    got = total_score(vec(6, 40)[None], vec(2, 8), vec(16, 64)[None], np.array([True]), np.array([True]),
                      np.array([0.05]), (), {}, POLICY)
    assert got[0] == pytest.approx(237.5 / 6)


def test_quantise_rounds_slack_down_to_the_bucket() -> None:
    # 1,930 mcpu with 50-mcpu buckets → 1,900; 1.3 GiB with 128-MiB buckets → 1.25 GiB (10 × 128 MiB); +inf stays
    slack = vec(1.93, 1.3)
    slack[3] = INF
    got = quantise(slack, POLICY.slack_buckets)
    assert got[CPU] == 1900.0 and got[RAM] == 10 * 128 * 2**20 and got[3] == INF


def test_volatility_tracker_worked_example() -> None:
    # h = 600 s; 10 then 14 cores 600 s apart → α = 1 − 2^(−1) = 0.5, δ = 4, m = 12,
    # v = (1 − 0.5) · (0 + 0.5 · 16) = 4 → σ = 2 cores; on 16 cores → 0.125
    tracker = VolatilityTracker(600.0)
    capacity = np.array([vec(16, 64)])
    tracker.update(0.0, np.array([vec(10, 8)]))
    tracker.update(600.0, np.array([vec(14, 8)]))
    assert tracker.mean[0, CPU] == pytest.approx(12_000.0)
    assert tracker.ratio(capacity)[0] == pytest.approx(0.125)
    with pytest.raises(ValueError, match="time went backwards"):
        tracker.update(500.0, np.array([vec(14, 8)]))


def test_steady_series_has_no_volatility() -> None:
    tracker = VolatilityTracker(600.0)
    for t in range(10):
        tracker.update(60.0 * t, np.array([vec(5, 8)]))
    assert tracker.ratio(np.array([vec(16, 64)]))[0] == 0.0


def test_scores_steer_placement() -> None:
    # Two nodes with equal slack; one volatile → the pod goes to the steady one.
    nodes = [Node("volatile", volatility=0.09), Node("steady", volatility=0.0)]
    result = schedule_batch(snapshot(nodes), pending([Entry("p", 1)]), Policy(), rng=np.random.default_rng(0))
    assert result.bindings.node.tolist() == [1]
    # Image locality outweighs a small volatility difference (weight 3 against 1).
    cached = {"etl:1": np.array([True, False])}
    tpl = BatchTemplate("job", images=(Image("etl:1", 900e6),))
    nodes = [Node("has-image", volatility=0.02), Node("steady", volatility=0.0)]
    result = schedule_batch(snapshot(nodes, images=cached), pending([Entry("p", 1)], [tpl]), Policy(),
                            rng=np.random.default_rng(0))
    assert result.bindings.node.tolist() == [0]
