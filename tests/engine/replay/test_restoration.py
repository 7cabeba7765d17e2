"""DESIGN §6 invariant as a hypothesis stateful test: after any sequence of samples,
placements, completions and evictions, removing all batch leaves every node's request ledger
within capacity and the production set exactly the blueprint's."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kalena_engine.ledger import node_sum
from kalena_engine.resources import CPU, RAM
from tests.engine.replay.synthetic import synthetic_simulator

STEPS = 40
TASKS = [(60.0 * (i % 20), 2 + i % 5, 0.5 + (i % 4), 1.0 + 3 * (i % 6), 30.0 + 97 * (i % 7), i % 3) for i in range(60)]


class ReplayMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sim = synthetic_simulator(nodes=3, steps=STEPS, tasks=TASKS)
        self.step = 0
        self.blueprint_ids = self.sim.state.production.ids
        self.blueprint_nodes = self.sim.state.production.node.copy()
        self.evicted = 0

    @precondition(lambda self: self.step < STEPS)
    @rule(cpu=st.lists(st.floats(0, 1), min_size=6, max_size=6),
          ram=st.lists(st.floats(0, 1), min_size=6, max_size=6))
    def advance(self, cpu: list[float], ram: list[float]) -> None:
        """One step with random production usage (0–100 % of request, including spikes)."""
        self.sim.usage.shapes[self.step, :, 0] = cpu
        self.sim.usage.shapes[self.step, :, 1] = ram
        record = self.sim.step(self.step, self.step * 60.0)
        self.evicted += sum(e.count for e in record.events if e.kind == "evicted")
        assert not any(e.kind == "production_evicted" for e in record.events)
        self.step += 1

    @invariant()
    def removing_batch_restores_the_blueprint(self) -> None:
        st_ = self.sim.state
        assert st_.production.ids == self.blueprint_ids
        np.testing.assert_array_equal(st_.production.node, self.blueprint_nodes)
        without_batch = node_sum(st_.production.node, st_.production.request, len(st_.capacity))
        assert np.all(without_batch[:, [CPU, RAM]] <= st_.capacity[:, [CPU, RAM]] + 1e-6)

    @invariant()
    def conservation(self) -> None:
        self.sim.state.check_invariants()


ReplayMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=STEPS, deadline=None,
    suppress_health_check=[HealthCheck.large_base_example, HealthCheck.too_slow],
)
TestReplayRestoration = ReplayMachine.TestCase
