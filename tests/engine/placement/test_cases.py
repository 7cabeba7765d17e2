"""Cases C2, C3 and C7 of ../shared/cases with their exact numbers (cores, GiB)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kalena_engine.placement import (
    AntiAffinityTerm, BatchTemplate, LabelSelector, ProductionPods, RUNNING, TERMINAL, reservation_slack,
    schedule_batch,
)
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU, GIB, RAM, ir_vector
from tests.engine.placement.builders import Entry, Node, node_table, pending, snapshot

RNG = np.random.default_rng


@pytest.mark.parametrize("naive", [False, True], ids=["optimised", "naive"])
def test_c2_in_flight_placements_debit_at_once(naive: bool) -> None:
    # One node with 70 GiB of ram slack, every other dimension ample; 30 pods of 32 GiB in one pass.
    snap = snapshot([Node("n1", cpu=64, ram=128, slack_ram=70)])
    result = schedule_batch(snap, pending([Entry("batch/job", 30, cpu=0.1, ram=32)]), Policy(), rng=RNG(0), naive=naive)
    assert result.placed == 2 and result.pending == 28  # 70 → 38 → 6 GiB: the third does not fit
    [record] = result.why_pending()
    assert record.pending == 28
    assert record.binding == "ram"
    assert record.nodes_total == 1 and record.excluded == {"ram": 1}
    short = record.shortfall_of("ram")
    assert short.amount == pytest.approx(26 * GIB)  # 32 − 6 = 26 GiB short on the best node
    assert short.node == "n1" and short.nodes == 1
    assert record.reduction.by == {"ram": pytest.approx(26 * GIB)} and record.reduction.fits_nodes == 1
    out = json.loads(json.dumps(record.to_dict()))
    assert out["shortfall"] == [{"dim": "ram", "unit": "GiB", "amount": 26.0, "node": "n1", "nodes": 1}]


def test_c3_terminated_workloads_never_count() -> None:
    # Node raw 16 cores, DaemonSets 8 → C = 8 cores; production reservation 5 cores; eight
    # completed 1-core batch pods; a new batch pod of 2 cores.
    capacity = np.array([ir_vector(cpu=16 - 8, ram=64)])
    node = np.array([0] * 9)
    request = np.array([ir_vector(cpu=6, ram=8)] + [ir_vector(cpu=1, ram=1)] * 8)
    reservation = np.array([ir_vector(cpu=5, ram=8)] + [ir_vector(cpu=1, ram=1)] * 8)
    phase = np.array([RUNNING] + [TERMINAL] * 8)
    slack = reservation_slack(capacity, node=node, request=request, reservation=reservation, phase=phase)
    assert slack[0, CPU] == pytest.approx(3000.0)  # 8 − 5 = 3 cores: the completed pods are in no ledger
    assert slack[0, RAM] == pytest.approx(56 * GIB)
    snap = snapshot([Node("n1", cpu=8, ram=64, slack_cpu=3, slack_ram=56)])
    result = schedule_batch(snap, pending([Entry("batch/new", 1, cpu=2, ram=1)]), Policy(), rng=RNG(0))
    assert result.placed == 1 and result.why_pending() == ()


def test_c3_in_flight_counts_at_request_and_unknown_phase_is_an_error() -> None:
    capacity = np.array([ir_vector(cpu=8, ram=64)])
    request, reservation = np.array([ir_vector(cpu=2, ram=4)]), np.array([ir_vector(cpu=0.5, ram=1)])
    slack = reservation_slack(capacity, node=np.array([0]), request=request, reservation=reservation,
                              phase=np.array(["in_flight"]))
    assert slack[0, CPU] == pytest.approx(6000.0)  # 8 − q (2), not 8 − r (0.5)
    with pytest.raises(ValueError, match="unknown workload phase.*'done'.*running, in_flight, terminal"):
        reservation_slack(capacity, node=np.array([0]), request=request, reservation=reservation, phase=np.array(["done"]))


def _c7(slack_b_cores: float):
    nodes = [Node("A", slack_cpu=10), Node("B", slack_cpu=slack_b_cores)]
    db = ProductionPods(
        ids=("prod/db-0",), node=np.array([0]), namespaces=("prod",), labels=({"app": "db"},),
        terms=((AntiAffinityTerm(LabelSelector.of(app="noisy-io"), "kubernetes.io/hostname"),),), names=((),),
    )
    template = BatchTemplate(owner="batch/noisy", namespace="batch", labels={"app": "noisy-io"})
    return snapshot(nodes, production=db, table=node_table(nodes)), pending([Entry("batch/noisy-0", 1, cpu=2, ram=1)], [template])


@pytest.mark.parametrize("naive", [False, True], ids=["optimised", "naive"])
def test_c7_production_anti_affinity_binds_batch(naive: bool) -> None:
    snap, queue = _c7(4.0)
    result = schedule_batch(snap, queue, Policy(), rng=RNG(0), naive=naive)
    assert result.placed == 1
    assert result.bindings.node.tolist() == [1]  # B, never A (A has more slack: 10 cores)


def test_c7_pending_names_db0_on_a_and_the_cpu_shortfall_on_b() -> None:
    snap, queue = _c7(1.0)
    result = schedule_batch(snap, queue, Policy(), rng=RNG(0))
    [record] = result.why_pending()
    assert record.excluded == {"production_anti_affinity": 1, "cpu": 1}
    anti = [r for r in record.rejections if r.kind == "production_anti_affinity"]
    assert [(r.node, r.pod) for r in anti] == [("A", "prod/db-0")]
    assert anti[0].rule == "app=noisy-io" and anti[0].topology_key == "kubernetes.io/hostname"
    cpu = record.shortfall_of("cpu")
    assert (cpu.node, cpu.amount) == ("B", pytest.approx(1000.0))  # 2 − 1 = 1 core short on B
    assert record.binding == "cpu"
    assert record.reduction.by == {"cpu": pytest.approx(1000.0)} and record.reduction.fits_nodes == 1
