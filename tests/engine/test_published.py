"""Published batch capacity (docs/design.md §14) and kubelet admission room in placement (cases C10, C11)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kalena_engine.ledger import ledgers
from kalena_engine.placement import KubeletRoom, schedule_batch
from kalena_engine.placement.policy import DEFAULT_SLACK_BUCKETS
from kalena_engine.policy import Policy
from kalena_engine.published import batch_room, kubelet_room, publish_batch
from kalena_engine.resources import GIB, ir_vector
from tests.engine.placement.builders import Entry, Node, pending, snapshot

BUCKETS = (DEFAULT_SLACK_BUCKETS[0], DEFAULT_SLACK_BUCKETS[1])  # 50 mcpu, 128 MiB
NAN = float("nan")


def _room(prod_r_cores, prod_r_gib, batch_cores=0.0, batch_gib=0.0):
    """One node of C = 8 cores / 32 GiB (case C10) → its (1, 2) room."""
    cap = ir_vector(cpu=8, ram=32)[None, :]
    prod = ir_vector(cpu=prod_r_cores, ram=prod_r_gib)[None, :]
    batch = ir_vector(cpu=batch_cores, ram=batch_gib)[None, :]
    led = ledgers(cap, prod_node=np.array([0]), prod_request=ir_vector(cpu=7, ram=24)[None, :],
                  prod_reservation=prod, batch_node=np.array([0] if batch_cores else [], dtype=np.int64),
                  batch_request=batch if batch_cores else np.zeros((0, 8)),
                  batch_reservation=batch if batch_cores else np.zeros((0, 8)))
    return batch_room(led)


def test_c10_room_is_slack_plus_batch_requests():
    # C10: S = 8 − 1.15 = 6.85 cores, 32 − 9.2 = 22.8 GiB → 6850 mcpu, ⌊22.8 · 2³⁰⌋ bytes
    assert _room(1.15, 9.2).tolist() == [[6850.0, 24_481_313_587.0]]
    # the 4-core / 8 GiB batch pod bound (r = q): S = 2.85 / 14.8, room = S + Σ q_b = 6.85 / 22.8 again
    assert _room(1.15, 9.2, 4, 8).tolist() == [[6850.0, 24_481_313_587.0]]


@pytest.mark.parametrize(
    "room, held, previous, changed_s, now_s, expected, changed",
    [
        # first publication: the room itself (C10: 6850 mcpu, 22.8 GiB)
        pytest.param((6850, 24_481_313_587), (0, 0), (NAN, NAN), 0, 0, (6850, 24_481_313_587), True, id="first"),
        # room +50 mcpu (one bucket) only 10 s after the last change → kept
        pytest.param((6900, 24_481_313_587), (4000, 8 * GIB), (6850, 24_481_313_587), 0, 10,
                     (6850, 24_481_313_587), False, id="raise-too-soon"),
        # the same raise at 30 s → taken
        pytest.param((6900, 24_481_313_587), (4000, 8 * GIB), (6850, 24_481_313_587), 0, 30,
                     (6900, 24_481_313_587), True, id="raise-after-30s"),
        # +49 mcpu (under one bucket) after 60 s → kept (jitter)
        pytest.param((6899, 24_481_313_587), (0, 0), (6850, 24_481_313_587), 0, 60,
                     (6850, 24_481_313_587), False, id="raise-below-bucket"),
        # production jumps to 5 cores: room 3000, lowered at once… but the bound pod holds 4000
        pytest.param((3000, 24_481_313_587), (4000, 8 * GIB), (6900, 24_481_313_587), 29, 30,
                     (4000, 24_481_313_587), True, id="lowered-at-once-floored-at-held"),
        # memory lowered at once by one byte, immediately after a change
        pytest.param((6850, 24_481_313_586), (0, 0), (6850, 24_481_313_587), 30, 30,
                     (6850, 24_481_313_586), True, id="lower-one-byte"),
    ],
)
def test_publish_hysteresis(room, held, previous, changed_s, now_s, expected, changed):
    out = publish_batch(room=np.array([room], dtype=float), held=np.array([held], dtype=float),
                        previous=np.array([previous], dtype=float), changed_s=np.array([changed_s], dtype=float),
                        now_s=now_s, buckets=BUCKETS)
    assert out.value.tolist() == [list(map(float, expected))]
    assert out.changed.tolist() == [changed]
    assert out.changed_s.tolist() == [float(now_s if changed else changed_s)]


def test_publish_refuses_bad_shapes():
    with pytest.raises(ValueError, match="held has shape"):
        publish_batch(room=np.zeros((2, 2)), held=np.zeros((1, 2)), previous=np.zeros((2, 2)),
                      changed_s=np.zeros(2), now_s=0, buckets=BUCKETS)
    with pytest.raises(ValueError, match="positive"):
        publish_batch(room=np.zeros((1, 2)), held=np.zeros((1, 2)), previous=np.zeros((1, 2)),
                      changed_s=np.zeros(1), now_s=0, buckets=(0, 1))


def _c11(v_terminating: bool):
    """C11: n1 publishes batch-cpu 4000; V (3 cores) evicted and credited in Kalena's ledger
    (case C4); W (2 cores) pending; n2 has no room."""
    nodes = [Node("n1", cpu=16, ram=64, slack_cpu=10, slack_ram=40), Node("n2", cpu=16, ram=64, slack_cpu=1, slack_ram=40)]
    held = np.array([[3000.0 if v_terminating else 0.0, 3 * GIB if v_terminating else 0.0], [0.0, 0.0]])
    published = np.array([[4000.0, 40 * GIB], [16000.0, 64 * GIB]])
    room = np.full((2, 8), np.inf)
    room[:, :2] = kubelet_room(published, held)
    releasing = {0: (("batch/v", tuple(ir_vector(cpu=3, ram=3))),)} if v_terminating else {}
    snap = dataclasses.replace(snapshot(nodes), kubelet=KubeletRoom(room=room, releasing=releasing))
    return schedule_batch(snap, pending([Entry("batch/w", 1, cpu=2, ram=1)]), Policy(), rng=np.random.default_rng(0))


def test_c11_w_waits_while_v_is_terminating_and_why_pending_names_v():
    result = _c11(v_terminating=True)
    assert len(result.bindings) == 0  # 3000 + 2000 > 4000 would fail OutOfkalena.naughtian.io/batch-cpu
    (record,) = result.why_pending()
    assert record.binding == "releasing"
    assert record.excluded == {"cpu": 1, "releasing": 1}  # n2: Kalena's slack; n1: the kubelet
    releasing = [r for r in record.rejections if r.kind == "releasing"]
    assert [(r.node, r.releasing, r.releasing_amount, r.free) for r in releasing] == [("n1", ("batch/v",), 3000.0, 1000.0)]
    assert releasing[0].to_dict()["releasing_amount"] == 3.0  # cores


def test_c11_w_binds_once_v_is_terminal():
    result = _c11(v_terminating=False)
    assert result.bindings.node.tolist() == [0]
    assert result.why_pending() == ()


def test_node_verdicts_name_the_first_reason_per_node():
    from kalena_engine.placement.verdict import node_verdicts

    # docstring example: 10 and 1 core of slack, a 2-core pod
    nodes = [Node("a", slack_cpu=10), Node("b", slack_cpu=1), Node("c", ready=False)]
    v = node_verdicts(snapshot(nodes), pending([Entry("p", 1)]).templates[0], ir_vector(cpu=2, ram=1), Policy())
    assert v.feasible.tolist() == [True, False, False]
    assert (v.reasons[1].kind, v.reasons[1].requested, v.reasons[1].free) == ("cpu", 2000.0, 1000.0)
    assert v.reasons[2].kind == "node_not_ready" and v.reasons[0] is None
    assert 0 < v.score[0] <= 100 and v.score[1] == v.score[2] == 0
