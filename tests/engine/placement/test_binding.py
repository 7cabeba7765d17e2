"""Optimistic concurrency: a binding decided against a ledger version that moved is stale and
requeued, never lost; the next pass places it."""

from __future__ import annotations

import numpy as np

from kalena_engine.placement import SlackLedger, requeue, schedule_batch
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU, ir_vector
from tests.engine.placement.builders import Entry, Node, pending, snapshot


def _pass(ledger: SlackLedger, queue, nodes):
    slack, version = ledger.read()
    snap = snapshot(nodes)
    snap = type(snap)(**{**snap.__dict__, "slack": slack, "version": version})
    return schedule_batch(snap, queue, Policy(), rng=np.random.default_rng(0))


def test_a_stale_binding_is_requeued_never_lost() -> None:
    nodes = [Node("a", slack_cpu=8), Node("b", slack_cpu=4)]
    ledger = SlackLedger.of(snapshot(nodes).slack, ("a", "b"))
    queue = pending([Entry("etl", 6, cpu=2, ram=1)])
    first = _pass(ledger, queue, nodes)
    assert first.placed == 6 and first.pending == 0
    by_node = {int(n): int(c) for n, c in zip(first.bindings.node, first.bindings.count, strict=True)}
    # Meanwhile another writer rewrites node a (e.g. the estimator raised production's reservation).
    ledger.write(0, ir_vector(cpu=3, ram=64))
    outcome = ledger.bind(first.bindings)
    assert outcome.stale.node.tolist() == [0] and outcome.accepted.node.tolist() == [1]
    assert [(r.node, r.expected_version, r.found_version) for r in outcome.reasons] == [("a", 0, 1)]
    # nothing stale was applied: a keeps the writer's 3 cores; b lost what was bound there
    assert ledger.slack[0, CPU] == 3000.0
    assert ledger.slack[1, CPU] == 4000.0 - 2000.0 * by_node[1]
    remaining = requeue(first.remaining, outcome)
    assert remaining.tolist() == [by_node[0]]  # requeued: every pod is placed or pending
    assert int(outcome.accepted.count.sum()) + int(remaining.sum()) == 6
    # The next pass sees the new versions and places what fits (a: 3 cores → one 2-core pod).
    queue2 = pending([Entry("etl", int(remaining[0]), cpu=2, ram=1)])
    second = _pass(ledger, queue2, nodes)
    outcome2 = ledger.bind(second.bindings)
    assert len(outcome2.stale) == 0
    assert int(outcome2.accepted.count.sum()) == 1 and outcome2.accepted.node.tolist() == [0]


def test_bind_bumps_versions_so_a_second_binder_on_the_same_read_is_stale() -> None:
    nodes = [Node("a", slack_cpu=4)]
    ledger = SlackLedger.of(snapshot(nodes).slack, ("a",))
    queue = pending([Entry("p", 2, cpu=2, ram=1)])
    one = _pass(ledger, queue, nodes)
    two = _pass(ledger, queue, nodes)  # a second scheduler read the same version
    assert len(ledger.bind(one.bindings).accepted) == 1
    late = ledger.bind(two.bindings)
    assert len(late.accepted) == 0 and int(late.stale.count.sum()) == 2
    assert requeue(two.remaining, late).tolist() == [2]
    assert ledger.slack[0, CPU] == 0.0  # never double-booked
