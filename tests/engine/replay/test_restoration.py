"""docs/design.md §6 invariant on the replay's mutable state: after any sequence of samples,
placements, completions and evictions, removing every batch workload — through the same
eviction path the simulator uses — leaves exactly the blueprint's production set and request
ledger, and the running ledgers lose every trace of batch. And the check itself compares the
running state with a blueprint recorded apart from it, so a production pod that moved is
caught even where it still fits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kalena_engine.errors import InvariantViolation
from kalena_engine.estimator import effective_reservations
from kalena_engine.ledger import node_sum, slack_of
from tests.engine.replay.synthetic import synthetic_simulator

STEPS = 40
TASKS = [(60.0 * (i % 20), 2 + i % 5, 0.5 + (i % 4), 1.0 + 3 * (i % 6), 30.0 + 97 * (i % 7), i % 3) for i in range(60)]


class ReplayMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sim = synthetic_simulator(nodes=3, steps=STEPS, tasks=TASKS)
        self.step = 0
        prod = self.sim.state.production
        # the blueprint as the test knows it, computed apart from the state's own snapshot
        self.blueprint_ledger = node_sum(prod.node.copy(), prod.request.copy(), len(self.sim.state.capacity))
        self.ran_batch = False

    def prod_r(self) -> np.ndarray:
        st_ = self.sim.state
        return effective_reservations(st_.prod_reservations, st_.production.request, self.step * 60.0, 60.0)

    @precondition(lambda self: self.step < STEPS)
    @rule(cpu=st.lists(st.floats(0, 1), min_size=6, max_size=6),
          ram=st.lists(st.floats(0, 1), min_size=6, max_size=6))
    def advance(self, cpu: list[float], ram: list[float]) -> None:
        """One step with random production usage (0–100 % of request, including spikes)."""
        self.sim.usage.shapes[self.step, :, 0] = cpu
        self.sim.usage.shapes[self.step, :, 1] = ram
        record = self.sim.step(self.step, self.step * 60.0)
        assert not any(e.kind == "production_evicted" for e in record.events)
        self.ran_batch |= len(self.sim.state.groups) > 0
        self.step += 1

    @rule(fraction=st.floats(0, 1))
    def evict_some(self, fraction: float) -> None:
        """Evict a random share of every running group (requeued, as the simulator does)."""
        g = self.sim.state.groups
        self.sim.state.requeue_batch(np.floor(g.count * fraction).astype(np.int64))

    @rule()
    def evict_all_batch_restores_the_blueprint(self) -> None:
        st_ = self.sim.state
        prod_r = self.prod_r()
        expected = st_.without_batch_ledgers(prod_r)
        submitted = st_.submitted.copy()
        st_.requeue_batch(st_.groups.count.copy())
        after = st_.batch_ledgers(prod_r)           # the running ledgers, as placement reads them
        assert len(st_.groups) == 0 and len(st_.groups.reservations) == 0
        np.testing.assert_array_equal(after.batch_request, 0.0)
        np.testing.assert_array_equal(after.batch_reservation, 0.0)
        np.testing.assert_array_equal(after.request, self.blueprint_ledger)
        for name in ("prod_request", "prod_reservation", "batch_request", "batch_reservation"):
            np.testing.assert_array_equal(getattr(after, name), getattr(expected, name))
        prod_reserved = node_sum(st_.production.node, prod_r, len(st_.capacity))
        np.testing.assert_array_equal(after.slack, slack_of(st_.capacity, prod_reserved, self.blueprint_ledger))
        np.testing.assert_array_equal(st_.submitted, submitted)                 # nothing lost: all pending again
        assert st_.pending.sum() + st_.completed.sum() == submitted.sum()
        assert st_.blueprint_violations() == ()

    @invariant()
    def the_blueprint_state_holds(self) -> None:
        assert self.sim.state.blueprint_violations() == ()
        self.sim.state.check_invariants()


ReplayMachine.TestCase.settings = settings(
    max_examples=40, stateful_step_count=STEPS, deadline=None,
    suppress_health_check=[HealthCheck.large_base_example, HealthCheck.too_slow],
)
TestReplayRestoration = ReplayMachine.TestCase


def test_the_workload_mix_reaches_running_batch() -> None:
    # the machine above is only worth something if its steps really run batch
    sim = synthetic_simulator(nodes=3, steps=STEPS, tasks=TASKS)
    for step in range(5):
        sim.step(step, step * 60.0)
    assert sim.state.groups.count.sum() > 0


def test_a_production_pod_off_its_blueprint_node_breaks_the_invariant_even_where_it_fits() -> None:
    sim = synthetic_simulator(nodes=3)
    sim.state.production.node[0] = 1        # prod/p-0 on n1 now: Σ q = 9 ≤ 16 cores, still within capacity
    with pytest.raises(InvariantViolation, match=r"n0: missing production prod/p-0; n1: extra production prod/p-0"):
        sim.state.check_invariants()
    with pytest.raises(InvariantViolation):
        sim.step(0, 0.0)


def test_requeue_refuses_more_than_a_group_holds_and_changes_nothing() -> None:
    sim = synthetic_simulator(nodes=3, tasks=TASKS)
    sim.step(0, 0.0)
    g = sim.state.groups
    before = (g.count.copy(), sim.state.pending.copy())
    with pytest.raises(InvariantViolation, match="cannot requeue"):
        sim.state.requeue_batch(g.count + 1)
    np.testing.assert_array_equal(g.count, before[0])
    np.testing.assert_array_equal(sim.state.pending, before[1])
