"""The replay's side of batch placement: turn the cluster state into a scheduling pass's
inputs, run :func:`~kalena_engine.placement.schedule_batch` — the control plane's code path —
bind through a :class:`~kalena_engine.placement.SlackLedger` and hand back what was accepted.

Replay mapping: every node is ready; a node's telemetry is fresh unless one of its production
pods' source samples is older than T_stale; slack-eligible = the replay's batch node set; each
batch trace job is one template (the workload group: equivalence classes and the eviction
cooldown key on it); batch has no labels, selectors, tolerations or images (the traces carry
none), so tainted nodes take no replay batch and image locality scores 0 everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kalena_engine.ledger import NodeLedgers
from kalena_engine.placement import (
    BatchResidents, BatchTemplate, Bindings, ClusterSnapshot, Evictions, NodeTable, PassResult, PendingBatch,
    ProductionPods, ScoreCache, SlackLedger, VolatilityTracker, schedule_batch,
)
from kalena_engine.policy import Policy
from kalena_engine.replay.state import ClusterState, TaskTable


def task_templates(tasks: TaskTable) -> tuple[np.ndarray, tuple[BatchTemplate, ...]]:
    """``(template row per task (k,), templates)``: one template per batch job (owner)."""
    if len(tasks) == 0:
        return np.zeros(0, dtype=np.int64), ()
    owners, row = np.unique(np.asarray(tasks.job_id).astype(str), return_inverse=True)
    return row.reshape(-1).astype(np.int64), tuple(BatchTemplate(owner=str(o)) for o in owners)


def default_node_table(state: ClusterState) -> NodeTable:
    """A node table without labels, taints or topology (synthetic replays)."""
    n = len(state.node_names)
    return NodeTable(names=tuple(state.node_names), zone=("",) * n, rack=("",) * n, labels=({},) * n,
                     taints=((),) * n, capacity=state.capacity)


@dataclass(eq=False)
class ReplayScheduler:
    """Scheduling state a replay keeps across steps: the static node table and production
    residents, the job templates, the score cache, node volatility and recent evictions.

    Attributes:
        rng: node-sampling randomness (derived from the replay seed).
        last_pass: the latest pass (its ``why_pending()`` explains what is still pending).
    """

    nodes: NodeTable
    production: ProductionPods
    tasks: TaskTable
    policy: Policy
    rng: np.random.Generator
    cache: ScoreCache = field(default_factory=ScoreCache)
    last_pass: PassResult | None = None

    def __post_init__(self) -> None:
        self.template_of, self.templates = task_templates(self.tasks)
        self.volatility = VolatilityTracker(self.policy.placement.volatility_half_life_s)
        self._evicted_owner: list[str] = []
        self._evicted_node: list[int] = []
        self._evicted_s: list[float] = []
        n = len(self.nodes)
        self._has_production = np.bincount(self.production.node, minlength=n)[:n] > 0

    def observe(self, now_s: float, ledgers: NodeLedgers) -> None:
        """Fold this step's production reservation into node volatility."""
        self.volatility.update(now_s, np.where(np.isfinite(ledgers.prod_reservation), ledgers.prod_reservation, 0.0))

    def record_eviction(self, task: int, node: int, now_s: float) -> None:
        """Batch of ``task``'s job left ``node`` by eviction at ``now_s`` (cooldown starts)."""
        self._evicted_owner.append(self.templates[self.template_of[task]].owner)
        self._evicted_node.append(int(node))
        self._evicted_s.append(float(now_s))

    def evictions(self, now_s: float) -> Evictions:
        """Evictions still inside the cooldown window at ``now_s`` (older ones are dropped)."""
        horizon = now_s - self.policy.eviction.cooldown_s
        keep = [i for i, t in enumerate(self._evicted_s) if t > horizon]
        if len(keep) != len(self._evicted_s):
            self._evicted_owner = [self._evicted_owner[i] for i in keep]
            self._evicted_node = [self._evicted_node[i] for i in keep]
            self._evicted_s = [self._evicted_s[i] for i in keep]
        return Evictions(owner=np.array(self._evicted_owner, dtype=object),
                         node=np.array(self._evicted_node, dtype=np.int64), time_s=np.array(self._evicted_s))

    def place(self, state: ClusterState, ledgers: NodeLedgers, *, eligible: np.ndarray, stale_pods: np.ndarray,
              now_s: float) -> tuple[np.ndarray, Bindings]:
        """One pass over the pending tasks. Returns ``(task row per binding, accepted bindings)``;
        the state is not modified (the simulator applies the bindings)."""
        waiting = np.flatnonzero(state.pending > 0)
        n = len(self.nodes)
        if len(waiting) == 0:
            self.last_pass = None
            return waiting, Bindings.empty()
        tasks = state.tasks
        groups = state.groups
        stale_nodes = np.bincount(state.production.node[stale_pods], minlength=n)[:n] > 0
        slack = ledgers.slack
        ledger = SlackLedger.of(slack, self.nodes.names)
        read_slack, version = ledger.read()
        snapshot = ClusterSnapshot(
            nodes=self.nodes, slack=read_slack, version=version, ready=np.ones(n, dtype=bool),
            telemetry_fresh=~stale_nodes, slack_eligible=eligible, has_production=self._has_production,
            has_batch=np.bincount(groups.node, minlength=n)[:n] > 0,
            volatility=self.volatility.ratio(self.nodes.capacity), now_s=now_s, production=self.production,
            batch=BatchResidents(node=groups.node, count=groups.count, template=self.template_of[groups.task],
                                 templates=self.templates),
            evictions=self.evictions(now_s),
        )
        pending = PendingBatch(
            ids=tasks.task_id[waiting], template=self.template_of[waiting], templates=self.templates,
            request=tasks.request[waiting], count=state.pending[waiting], priority=tasks.priority[waiting],
            queued_s=tasks.arrival_s[waiting],
        )
        result = schedule_batch(snapshot, pending, self.policy, rng=self.rng, cache=self.cache)
        outcome = ledger.bind(result.bindings)
        # The replay is the only writer of its ledger: nothing can be stale. A stale row would
        # simply stay pending (the simulator only applies accepted bindings).
        self.last_pass = result
        return waiting[outcome.accepted.entry], outcome.accepted
