"""Ledgers, slack, headroom and reclaimed capacity (docs/design.md §6), including case C3."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.ledger import blueprint_violations, fits, ledgers
from kalena_engine.resources import CPU, GPU, RAM, ir_vector, to_ir


def test_module_worked_example() -> None:
    # C = 64 cores; prod q = 56, r = 30; batch q = r = 20 → slack 14, headroom 8, reclaimed 12
    led = ledgers(
        np.array([ir_vector(cpu=64, ram=100)]),
        prod_node=np.array([0]), prod_request=np.array([ir_vector(cpu=56)]),
        prod_reservation=np.array([ir_vector(cpu=30)]),
        batch_node=np.array([0]), batch_request=np.array([ir_vector(cpu=20)]),
        batch_reservation=np.array([ir_vector(cpu=20)]),
    )
    assert to_ir(led.slack[0])[CPU] == pytest.approx(14)
    assert to_ir(led.headroom[0])[CPU] == pytest.approx(8)
    assert to_ir(led.reclaimed[0])[CPU] == pytest.approx(12)
    assert to_ir(led.reclaimed[0])[RAM] == 0


def test_case_c3_terminated_workloads_never_count() -> None:
    # Raw 16 cores, DaemonSets 8 → C = 8. Prod reservation 5. Eight 1-core batch pods completed.
    capacity = np.array([ir_vector(cpu=8, ram=64)])
    running_batch = np.zeros(0, dtype=np.int64)  # the completed pods are terminal: not in any set
    led = ledgers(
        capacity, prod_node=np.array([0]), prod_request=np.array([ir_vector(cpu=6)]),
        prod_reservation=np.array([ir_vector(cpu=5)]),
        batch_node=running_batch, batch_request=np.zeros((0, 8)), batch_reservation=np.zeros((0, 8)),
    )
    assert to_ir(led.slack[0])[CPU] == pytest.approx(3.0)  # 8 − 5
    assert fits(ir_vector(cpu=2), led.slack)[0]  # the new 2-core batch pod is placed


def test_gpu_slack_is_never_reclaimed() -> None:
    led = ledgers(
        np.array([ir_vector(cpu=48, gpu=8)]),
        prod_node=np.array([0]), prod_request=np.array([ir_vector(cpu=8, gpu=6)]),
        prod_reservation=np.array([ir_vector(cpu=2, gpu=6)]),
        batch_node=np.zeros(0, dtype=np.int64), batch_request=np.zeros((0, 8)), batch_reservation=np.zeros((0, 8)),
    )
    assert to_ir(led.slack[0])[GPU] == pytest.approx(2)


def test_unconstrained_capacity_gives_no_reclaimed() -> None:
    cap = ir_vector(cpu=4)
    cap[3:] = np.inf
    led = ledgers(
        np.array([cap]), prod_node=np.array([0]), prod_request=np.array([ir_vector(cpu=4, disk_read=100)]),
        prod_reservation=np.array([ir_vector(cpu=1, disk_read=10)]),
        batch_node=np.array([0]), batch_request=np.array([ir_vector(cpu=2, disk_read=5)]),
        batch_reservation=np.array([ir_vector(cpu=2, disk_read=5)]),
    )
    assert np.isinf(led.slack[0, 4])
    assert led.reclaimed[0, 4] == 0
    assert to_ir(led.reclaimed[0])[CPU] == pytest.approx(2)


def test_slack_of_reclaims_every_dimension_but_gpu() -> None:
    from kalena_engine.ledger import slack_of

    capacity, reservation, request = np.zeros((3, 2, 8))
    capacity[:, CPU], capacity[:, GPU] = 4000.0, 1.0
    reservation[0, CPU], request[0, CPU], request[0, GPU] = 2500.0, 3000.0, 1.0   # GPU fully requested
    reservation[1, CPU], request[1, CPU], reservation[1, GPU] = 4500.0, 4000.0, 0.0  # overcommitted cpu
    slack = slack_of(capacity, reservation, request)
    assert slack[0, CPU] == 1500.0 and slack[0, GPU] == 0.0   # a requested GPU is never slack, used or not
    assert slack[1, CPU] == -500.0 and slack[1, GPU] == 1.0


@pytest.mark.parametrize(("prod_node", "cpu", "expected"), [
    pytest.param([0, 0], 1.0, [], id="the blueprint state: nothing"),
    pytest.param([0, 1], 1.0, [("n0", "missing", ("b",)), ("n1", "extra", ("b",))], id="b moved to n1 (fits)"),
    pytest.param([0, -1], 1.0, [("n0", "missing", ("b",))], id="b on no node"),
    pytest.param([0, 0], 3.0, [("n0", "over_capacity", ())], id="requests 6 > 4 cores"),
])
def test_blueprint_violations(prod_node: list[int], cpu: float, expected: list[tuple]) -> None:
    # the blueprint puts a and b on n0 (4 cores each node)
    capacity = np.array([ir_vector(cpu=4, ram=8)] * 2)
    got = blueprint_violations(node_names=["n0", "n1"], capacity=capacity, prod_ids=["a", "b"],
                               prod_node=np.array(prod_node), prod_request=np.array([ir_vector(cpu=cpu, ram=1)] * 2),
                               blueprint_ids=["a", "b"], blueprint_node=np.array([0, 0]))
    assert [(v.node, v.kind, v.workloads) for v in got] == expected
    if expected and expected[0][1] == "over_capacity":
        assert (got[0].dimension, got[0].request, got[0].capacity) == ("cpu", 6000.0, 4000.0)


@pytest.mark.parametrize(("cpu", "expected"), [
    pytest.param(1.0, [], id="an explained extra that fits: nothing"),
    pytest.param(3.5, [("n0", "over_capacity", ())], id="a + b + x = 1 + 1 + 3.5 > 4 cores: still over capacity"),
])
def test_an_explained_extra_is_no_violation_but_counts_in_the_request_ledger(cpu: float, expected: list) -> None:
    # the blueprint puts a and b on n0 (1 core each, 4 cores per node); x runs there too, explained
    capacity = np.array([ir_vector(cpu=4, ram=8)] * 2)
    request = np.array([ir_vector(cpu=1, ram=1), ir_vector(cpu=1, ram=1), ir_vector(cpu=cpu, ram=1)])
    got = blueprint_violations(node_names=["n0", "n1"], capacity=capacity, prod_ids=["a", "b", "x"],
                               prod_node=np.array([0, 0, 0]), prod_request=request, blueprint_ids=["a", "b"],
                               blueprint_node=np.array([0, 0]), explained=["x"])
    assert [(v.node, v.kind, v.workloads) for v in got] == expected
