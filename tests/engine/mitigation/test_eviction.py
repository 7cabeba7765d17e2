"""Eviction planning (docs/design.md §7), including case C4 with its exact numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kalena_engine.mitigation import NodeWorkloads, PressureSignal, ledger_freshness, plan_evictions, unaccounted_usage
from kalena_engine.policy import EvictionPolicy
from kalena_engine.resources import GIB, RAM, ir_vector

POLICY = EvictionPolicy()


def node(rows, terminating=()):
    """rows: (tier, priority, start_s, reservation GiB, usage GiB, limit GiB[, count])."""
    k = len(rows)
    return NodeWorkloads(
        reservation=np.array([ir_vector(ram=r[3]) for r in rows]),
        usage=np.array([ir_vector(ram=r[4]) for r in rows]),
        limit=np.array([ir_vector(ram=r[5]) for r in rows]),
        tier=np.array([r[0] for r in rows]),
        priority=np.array([r[1] for r in rows]),
        start_s=np.array([float(r[2]) for r in rows]),
        terminating=np.array([i in terminating for i in range(k)]),
        count=np.array([r[6] if len(r) > 6 else 1 for r in rows]),
    )


def signal(working_set_gib, age=0.0, **psi):
    return PressureSignal(dimension=RAM, working_set=working_set_gib * GIB, sample_age_s=age, **psi)


CAP = ir_vector(ram=64)
# C4: Σ r = 68 GiB over C = 64; V (prio 0, ws 5, r 5.75, grace 30 s), W (prio 1, r 3)
C4_ROWS = [
    ("service", 0, -1e9, 59.25, 51.5, 64),
    ("batch", 0, 0, 5.75, 5.0, 8),   # V
    ("batch", 1, 0, 3.0, 2.6, 4),    # W
]


def test_case_c4_terminating_victim_is_credited() -> None:
    evictions = 0
    terminating: set[int] = set()
    for now in range(1000, 1031):  # loop every 1 s while pressure persists for V's 30 s grace
        plan = plan_evictions(node(C4_ROWS, terminating), CAP, signal(62.0), now_s=now,
                              stale_ttl_s=60, policy=POLICY)
        for victim in plan.victims:
            evictions += victim.count
            terminating.add(victim.row)
        if now == 1000:
            (victim,) = plan.victims
            assert victim.row == 1 and victim.reason == "priority"
            assert victim.ledger_before / GIB == pytest.approx(68.0)
            assert victim.ledger_after / GIB == pytest.approx(62.25)  # 68 − 5.75 ≤ 64: stop
        else:
            assert plan.decision == "ledger_holds"  # V credited while it terminates
    assert evictions == 1
    assert terminating == {1}  # W never chosen


def test_stale_sample_never_starts_an_eviction() -> None:
    plan = plan_evictions(node(C4_ROWS), CAP, signal(63.5, age=61), now_s=1000, stale_ttl_s=60, policy=POLICY)
    assert plan.decision == "stale_sample" and plan.victims == ()


@pytest.mark.parametrize(
    ("working_set", "psi", "decision"),
    [
        pytest.param(50.0, {}, "no_pressure", id="below 95 % of C and no PSI: no pressure"),
        pytest.param(60.8, {}, "evict", id="working set ≥ 0.95 C and Σr > C: evict"),
        pytest.param(50.0, {"psi_some_avg10_pct": 12.0}, "evict", id="PSI some ≥ 10 % and Σr > C: evict"),
    ],
)
def test_start_rule(working_set, psi, decision) -> None:
    assert plan_evictions(node(C4_ROWS), CAP, signal(working_set, **psi), now_s=1000, stale_ttl_s=60,
                          policy=POLICY).decision == decision


def test_pressure_without_ledger_overrun_evicts_nothing() -> None:
    rows = [("service", 0, -1e9, 50, 50, 64), ("batch", 0, 0, 10, 10, 10)]  # Σr = 60 ≤ 64
    plan = plan_evictions(node(rows), CAP, signal(63), now_s=1000, stale_ttl_s=60, policy=POLICY)
    assert plan.decision == "ledger_holds"


def test_limit_breach_first_then_priority_youngest_largest() -> None:
    rows = [
        ("service", 0, -1e9, 40, 36, 64),
        ("service", 0, -1e9, 6, 7.5, 6),     # breaches its own limit: evicted first despite tier
        ("batch", 2, 0, 8, 8, 8),
        ("batch", 1, 100, 4, 4, 4),          # lower priority than row 2
        ("batch", 1, 500, 4, 3, 4),          # same priority, younger → before row 3
        ("daemonset", 0, -1e9, 3, 9, 2),     # DaemonSets are never touched even when breaching
    ]
    # Σr = 65; ws pressured; evict row 1 (limit breach, 6) → 59 ≤ 64 stop
    plan = plan_evictions(node(rows), CAP, signal(62), now_s=1000, stale_ttl_s=60, policy=POLICY)
    assert [(v.row, v.reason) for v in plan.victims] == [(1, "limit_breach")]
    rows[0] = ("service", 0, -1e9, 52, 50, 64)   # Σr = 77: needs 13 more after the breacher
    plan = plan_evictions(node(rows), CAP, signal(62), now_s=1000, stale_ttl_s=60, policy=POLICY)
    assert [(v.row, v.reason) for v in plan.victims] == [(1, "limit_breach"), (4, "priority"), (3, "priority")]
    assert plan.ledger_after / GIB == pytest.approx(63.0)


def test_young_batch_skipped_unless_acute() -> None:
    rows = [("service", 0, -1e9, 60, 55, 64), ("batch", 0, 950, 8, 8, 8)]  # 50 s old < T_min 120 s
    plan = plan_evictions(node(rows), CAP, signal(62), now_s=1000, stale_ttl_s=60, policy=POLICY)
    assert plan.decision == "no_candidate" and plan.skipped_young == 1 and plan.unresolved
    plan = plan_evictions(node(rows), CAP, signal(63.5), now_s=1000, stale_ttl_s=60, policy=POLICY)  # ≥ 0.99 C
    assert plan.acute and [v.row for v in plan.victims] == [1]


def test_grouped_rows_take_only_the_instances_needed() -> None:
    rows = [("service", 0, -1e9, 56, 50, 64), ("batch", 0, 0, 1, 1, 1, 20)]  # 20 × 1 GiB: Σr = 76
    plan = plan_evictions(node(rows), CAP, signal(62), now_s=1000, stale_ttl_s=60, policy=POLICY)
    (victim,) = plan.victims
    assert victim.count == 12  # 76 − 12 = 64 ≤ 64
    assert plan.ledger_after / GIB == pytest.approx(64.0)


def test_service_is_never_evicted_by_priority() -> None:
    rows = [("service", 0, -1e9, 70, 62, 72)]
    plan = plan_evictions(node(rows), CAP, signal(62), now_s=1000, stale_ttl_s=60, policy=POLICY)
    assert plan.victims == () and plan.decision == "no_candidate"


@pytest.mark.parametrize(("node_age", "ages", "live", "held", "age"), [
    pytest.param(1.0, [2.0, 3.0, 90.0], [True, True, True], [False, False, True], 3.0,
                 id="one stale row is held; the decision rests on the fresh ones"),
    pytest.param(1.0, [90.0, 95.0], [True, True], [True, True], 95.0, id="wholly stale (C1): the oldest, > T_stale"),
    pytest.param(1.0, [2.0, math.inf], [True, True], [False, False], 2.0, id="in flight: never sampled, ages nothing"),
    pytest.param(1.0, [2.0, 500.0], [True, False], [False, False], 2.0, id="a terminating row is not held"),
    pytest.param(70.0, [2.0], [True], [False], 70.0, id="a stale node reading"),
])
def test_ledger_freshness(node_age: float, ages: list[float], live: list[bool], held: list[bool], age: float) -> None:
    out = ledger_freshness(node_age, np.array(ages), np.array(live), 60.0)
    assert out.held.tolist() == held and out.sample_age_s == age


def test_a_held_row_counts_in_the_ledger_but_is_never_chosen() -> None:
    # C = 10; P r = 6, B2 (priority 0, held) r = 2, B1 (priority 1) r = 3: Σ r = 11 → B1 goes, B2 never
    wl = NodeWorkloads(
        reservation=np.array([[0, 6.0] + [0] * 6, [0, 2.0] + [0] * 6, [0, 3.0] + [0] * 6]),
        usage=np.array([[0, 5.8] + [0] * 6, [0, 5.0] + [0] * 6, [0, 3.0] + [0] * 6]),
        limit=np.array([[0, 6.0] + [0] * 6, [0, 2.0] + [0] * 6, [0, 3.0] + [0] * 6]),
        tier=np.array(["service", "batch", "batch"]), priority=np.array([0, 0, 1]),
        start_s=np.zeros(3), terminating=np.zeros(3, dtype=bool), count=np.ones(3, dtype=np.int64),
        held=np.array([False, True, False]))
    cap = np.array([0, 10.0] + [0] * 6)
    plan = plan_evictions(wl, cap, PressureSignal(RAM, 9.8), now_s=1000.0, stale_ttl_s=60.0, policy=EvictionPolicy())
    assert [(v.row, v.reason) for v in plan.victims] == [(2, "priority")] and plan.ledger_after == 8.0


@pytest.mark.parametrize(("working_set", "usage", "reservation", "sampled", "terminating", "never", "reserved",
                          "expected"), [
    # the docstring's example: production, batch and the stack's database (a DaemonSet reserving nothing)
    (2125, [1700, 20, 300], [1955, 32, 0], [True] * 3, [False] * 3, [False, False, True], 0, 405),
    (2125, [1700, 20, 300], [1955, 32, 0], [True] * 3, [False] * 3, [False, False, True], 512, 0),   # --reserved
    # a service over its own limit (r held at L = 40): the override takes it whole, not counted twice
    (221, [74, 75, 72], [40, 86, 96], [True] * 3, [False] * 3, [False] * 3, 0, 0),
    (100, [0, 60], [32, 64], [False, True], [False, False], [False, False], 0, 8),   # an in-flight row: its r
    (100, [40, 50], [48, 10], [True, True], [False, True], [False, False], 0, 10),   # a terminating row: credited
    (50, [40, 30], [40, 30], [True, True], [False, False], [False, False], 0, 0),    # never negative
])
def test_unaccounted_usage(working_set, usage, reservation, sampled, terminating, never, reserved, expected) -> None:
    mib = 2**20
    got = unaccounted_usage(working_set * mib, np.array(usage) * mib, np.array(reservation) * mib, np.array(sampled),
                            np.array(terminating), np.array(never), reserved * mib)
    assert got / mib == pytest.approx(expected)


def test_memory_no_workload_holds_is_in_the_ledger_and_batch_yields_to_it() -> None:
    # Σr = 60 ≤ 64 alone (ledger_holds above), but the node reading holds 6 GiB no workload does
    # (the node's own processes): 66 > 64 → the batch row goes; the unaccounted part is never chosen
    rows = [("service", 0, -1e9, 50, 50, 64), ("batch", 0, 0, 10, 10, 10)]
    plan = plan_evictions(node(rows), CAP, PressureSignal(RAM, 66 * GIB, 0.0, unaccounted=6 * GIB), now_s=1000,
                          stale_ttl_s=60, policy=POLICY)
    assert plan.decision == "evict" and [v.row for v in plan.victims] == [1]
    assert plan.ledger_before / GIB == pytest.approx(66) and plan.ledger_after / GIB == pytest.approx(56)
    # production and the unaccounted part alone above C: nothing left to evict, said so
    plan = plan_evictions(node(rows[:1]), CAP, PressureSignal(RAM, 66 * GIB, 0.0, unaccounted=16 * GIB), now_s=1000,
                          stale_ttl_s=60, policy=POLICY)
    assert plan.decision == "no_candidate" and plan.unresolved
