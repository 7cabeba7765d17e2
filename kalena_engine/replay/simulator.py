"""The replay simulator: the engine's own functions driven by an injected clock (docs/design.md §11,
Borg's Fauxmaster idea); enforcement is stubbed, everything else is the production code path.

Each step at replay time ``t``:

1. batch groups whose running time is done complete (terminal: they leave every ledger);
2. batch tasks that arrived by ``t`` join the pending queue;
3. samples — production usage from the mapped VM series (held between source samples; a
   source sample older than T_stale is not fed, so its pod reads ``max(r, q)``), batch usage =
   request × ``batch_usage_ratio``;
4. estimator → reservations → slack on the nodes batch may use;
5. pending batch is placed by the batch scheduler (:mod:`kalena_engine.placement`, the control
   plane's code path, through :class:`~kalena_engine.replay.scheduling.ReplayScheduler`):
   filters, scores, in-flight placements debiting at once, bound with a version check;
6. on a node whose working set on ram (or storage) reaches the eviction threshold while
   ``Σ r > C``, batch is evicted by docs/design.md §7's ordering and stop rule and requeued from
   scratch. Production is never evicted. ``unaccounted_ram`` (per node, bytes; 0 unless set)
   is memory the node holds outside every pod's row — the agent's ``unaccounted`` term
   (docs/design.md §7): added to the working set and the ledger, never a victim;
7. memory still above capacity is an OOM kill (batch first, :mod:`.compressible`); killed
   batch is requeued;
8. escalation (docs/design.md §8, :mod:`.escalation`): a node whose pressure did not converge or that
   evicted too often is drained and takes no batch for the cooldown;
9. compressible cpu for the step that follows: production usage first, the rest shared among
   batch by request, each capped at its demand; throttled batch progresses at ``g / d`` and
   its projected end moves out.

The production reservations the ledgers read come from a reservation rule
(:mod:`.rules`): the engine's estimator (``kalena``, the default) or a baseline or an oracle,
so every policy runs through this one code path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.estimator import effective_reservations, pinned_mask, update_reservations
from kalena_engine.mitigation.eviction import (
    TIER_BATCH, TIER_SERVICE, NodeWorkloads, PressureSignal, ledger_freshness, plan_evictions,
)
from kalena_engine.ledger import node_sum
from kalena_engine.placement import PassResult, ProductionPods
from kalena_engine.policy import Policy
from kalena_engine.replay.compressible import oom_victims, share_compressible_cpu
from kalena_engine.replay.escalation import ReplayEscalation
from kalena_engine.replay.rules import KalenaRule, ReservationRule, RuleInputs
from kalena_engine.replay.scheduling import ReplayScheduler, default_node_table
from kalena_engine.replay.state import ClusterState
from kalena_engine.replay.usage import ProductionUsage
from kalena_engine.resources import CPU, RAM, STORAGE


@dataclass(frozen=True)
class SimClock:
    """The injected clock: ``steps`` ticks of ``step_s`` seconds from ``start_s``."""

    start_s: float
    step_s: float
    steps: int

    def times(self) -> np.ndarray:
        """``(steps,)`` replay times (s)."""
        return self.start_s + self.step_s * np.arange(self.steps)

    def __iter__(self) -> Iterator[tuple[int, float]]:
        return iter(enumerate(self.times().tolist()))


@dataclass(frozen=True)
class BatchEvent:
    """One lifecycle event of a group of identical batch pods.

    ``kind``: ``submitted`` | ``placed`` | ``evicted`` | ``completed`` | ``oom_killed`` |
    ``production_evicted`` | ``production_oom_killed`` | ``escalated``. For ``evicted``,
    ``reason`` is ``limit_breach``, ``priority`` or ``escalation`` and ``detail`` carries the
    numbers; ``completed`` carries ``start_s``, ``inflation`` (actual ÷ undisturbed run time) and
``throttled_s`` (actual − undisturbed run seconds: what compressible cpu cost it).
    """

    time_s: float
    kind: str
    task: int
    count: int
    node: int = -1
    reason: str = ""
    detail: dict = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class StepRecord:
    """What one step did, for metrics and for persistence (console charts).

    Per-node arrays are ``(n, 8)`` over all nodes; batch terms are time-weighted over the
    step (a group ending mid-step counts for the part it ran). ``pod_*`` are per production
    pod, in :attr:`Production.ids` order; arrays are shared with the simulator — copy to keep.
    """

    step: int
    time_s: float
    capacity: np.ndarray
    prod_request: np.ndarray
    prod_reservation: np.ndarray
    prod_usage: np.ndarray
    prod_limit: np.ndarray
    batch_request: np.ndarray
    batch_reservation: np.ndarray
    batch_usage: np.ndarray
    batch_limit: np.ndarray
    pod_usage: np.ndarray        # (p, 8) production usage per pod (clipped at the limit)
    pod_reservation: np.ndarray  # (p, 8) production reservation per pod as the ledgers read it
    clipped: np.ndarray          # (2,) production pods clipped at the limit this step: cpu, ram
    stale_pods: int
    pending_instances: int
    running_instances: int
    events: tuple[BatchEvent, ...]
    placement: PassResult | None = None  # this step's scheduling pass; .why_pending() explains the rest
    batch_instances: float = 0.0         # batch instances running, time-weighted over the step
    batch_cpu_demand_mcpu: float = 0.0   # Σ min(usage, limit) of running batch (time-weighted)
    batch_cpu_granted_mcpu: float = 0.0  # Σ what compressible cpu gave it (production first)
    contention_mcpu: np.ndarray | None = None  # (n,) max(0, Σ u_prod + Σ q_batch − C) on cpu


@dataclass(eq=False)
class Simulator:
    """Drives :class:`ClusterState` through a :class:`SimClock` (see module doc).

    Attributes:
        eligible: ``(n,)`` bool, nodes batch may be placed on (the blueprint's active nodes
            by default) — the scheduler's slack-eligible condition.
        scheduler: the batch scheduler's replay state; by default one with a bare node table,
            production pods without anti-affinity and a generator seeded 0.
    """

    state: ClusterState
    usage: ProductionUsage
    clock: SimClock
    policy: Policy
    eligible: np.ndarray
    stale_ttl_s: float
    scheduler: ReplayScheduler | None = None
    rule: ReservationRule | None = None  # what production reserves (:mod:`.rules`); None = kalena
    #: ``(n,)`` bytes per node held outside every pod's row (module doc, step 6); None = 0
    unaccounted_ram: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.rule is None:
            self.rule = KalenaRule()
        self.escalation = ReplayEscalation(len(self.state.capacity), self.policy.escalation)
        if self.scheduler is None:
            prod = self.state.production
            self.scheduler = ReplayScheduler(
                nodes=default_node_table(self.state),
                production=ProductionPods(ids=prod.ids, node=prod.node, namespaces=("",) * len(prod.ids),
                                          labels=({},) * len(prod.ids), terms=((),) * len(prod.ids),
                                          names=((),) * len(prod.ids)),
                tasks=self.state.tasks, policy=self.policy, rng=np.random.default_rng(0))
        p = len(self.state.production.ids)
        self._prod_start = np.full(p, -np.inf)
        self._prod_grace = np.full(p, self.policy.estimator.grace_s)
        self._prod_pinned = pinned_mask(np.zeros(p, dtype=bool))
        self._arrival_order = np.argsort(self.state.tasks.arrival_s, kind="stable")
        self._prod_sums: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._batch_sums: tuple[np.ndarray, np.ndarray] | None = None
        self._next_arrival = 0
        order = np.argsort(self.state.production.node, kind="stable")
        self._prod_by_node = np.split(order, np.searchsorted(self.state.production.node[order],
                                                             np.arange(1, len(self.state.capacity))))

    def warm(self, times_s: np.ndarray, usage: np.ndarray, sampled: np.ndarray) -> None:
        """Feed production's estimator the usage before the window (a warm start): ``(t,)``
        times before 0 (s, ascending), ``(t, p, 8)`` usage clipped at the limit, ``(t, p)`` bool
        which pods had a fresh sample. Only the estimator's state changes (its reservations and
        the predictors' history, as the live system keeps them across days); no step runs and
        nothing is counted. The pods are past their startup grace (they started before it)."""
        st = self.state
        prod = st.production
        for i, now_s in enumerate(np.asarray(times_s, dtype=np.float64).tolist()):
            st.prod_reservations = update_reservations(
                st.prod_reservations, request=prod.request, limit=prod.limit, usage=usage[i],
                sampled=sampled[i], now_s=now_s, start_s=self._prod_start, grace_s=self._prod_grace,
                pinned=self._prod_pinned, policy=self.policy.estimator)

    def run(self, on_step: Callable[[StepRecord], None] | None = None) -> None:
        """Run every step of the clock; ``on_step`` receives each :class:`StepRecord`."""
        for step, now_s in self.clock:
            record = self.step(step, now_s)
            if on_step is not None:
                on_step(record)

    def step(self, step: int, now_s: float) -> StepRecord:
        """Advance the cluster to ``now_s`` (see the module doc for the order)."""
        st = self.state
        events: list[BatchEvent] = []
        self._prod_sums.clear()
        self._batch_sums = None
        self._complete(now_s, events)
        self._arrive(now_s, events)
        prod_usage, clipped, stale = self._sample(step, now_s)
        estimated = effective_reservations(st.prod_reservations, st.production.request, now_s, self.stale_ttl_s)
        prod_r = self.rule.production(RuleInputs(step, now_s, prod_usage, ~stale, estimated))
        placement = self._place(now_s, prod_r, stale, events)
        self._evict(now_s, prod_r, prod_usage, stale, events)
        self._oom(now_s, prod_usage, events)
        self._escalate(now_s, prod_r, prod_usage, stale, events)
        cpu = self._share_cpu(now_s, prod_usage)
        st.check_invariants()
        return self._record(step, now_s, prod_usage, prod_r, clipped, int(stale.sum()), events, placement, cpu)

    def _prod_sum(self, values: np.ndarray) -> np.ndarray:
        """``node_sum`` of a production ``(p, 8)`` array, computed once per step per array (the
        step's usage and reservations are read by several stages and never changed in place).
        The result is shared: callers copy it before changing it."""
        found = self._prod_sums.get(id(values))
        if found is None or found[0] is not values:
            found = (values, node_sum(self.state.production.node, values, len(self.state.capacity)))
            self._prod_sums[id(values)] = found
        return found[1]

    def _batch_node_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """``(Σ usage, Σ reservation)`` of running batch per node ``(n, 8)``, instances counted;
        kept from :meth:`_evict` through :meth:`_escalate` while no group changes (every stage
        that changes a group drops it). Shared: callers copy before changing."""
        if self._batch_sums is None:
            st = self.state
            g = st.groups
            n = len(st.capacity)
            self._batch_sums = (node_sum(g.node, st.tasks.usage[g.task], n, g.count),
                                node_sum(g.node, g.reservations.value, n, g.count))
        return self._batch_sums

    # -- the steps ---------------------------------------------------------------------------

    def _complete(self, now_s: float, events: list[BatchEvent]) -> None:
        g = self.state.groups
        done = g.end_s <= now_s
        if not done.any():
            return
        rows = np.flatnonzero(done)
        tasks = g.task[rows]
        duration = self.state.tasks.duration_s[tasks].tolist()
        for task, count, node, start, end, undisturbed in zip(
                tasks.tolist(), g.count[rows].tolist(), g.node[rows].tolist(), g.start_s[rows].tolist(),
                g.end_s[rows].tolist(), duration, strict=True):
            inflation = (end - start) / undisturbed if undisturbed > 0 else 1.0
            events.append(BatchEvent(end, "completed", task, count, node, detail={
                "start_s": start, "inflation": inflation, "throttled_s": max(0.0, end - start - undisturbed)}))
        np.add.at(self.state.completed, g.task[done], g.count[done])
        g.keep(~done)

    def _arrive(self, now_s: float, events: list[BatchEvent]) -> None:
        st = self.state
        order = self._arrival_order
        end = self._next_arrival + int(np.searchsorted(st.tasks.arrival_s[order[self._next_arrival:]], now_s, side="right"))
        for task in order[self._next_arrival:end]:
            n = int(st.tasks.instances[task])
            st.pending[task] += n
            st.submitted[task] += n
            events.append(BatchEvent(float(st.tasks.arrival_s[task]), "submitted", int(task), n))
        self._next_arrival = end

    def _sample(self, step: int, now_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        st = self.state
        prod = st.production
        usage, clipped = self.usage.clipped_usage_at(step)
        fresh = self.usage.sample_age_at(step) <= self.stale_ttl_s
        st.prod_reservations = update_reservations(
            st.prod_reservations, request=prod.request, limit=prod.limit, usage=usage,
            sampled=fresh, now_s=now_s, start_s=self._prod_start, grace_s=self._prod_grace,
            pinned=self._prod_pinned, policy=self.policy.estimator,
        )
        g = st.groups
        if len(g):
            tasks = st.tasks
            pinned = pinned_mask(np.full(len(g), bool(self.rule.pins_batch)))
            st.groups.reservations = update_reservations(
                g.reservations, request=tasks.request[g.task], limit=tasks.limit[g.task],
                usage=tasks.usage[g.task], sampled=np.ones(len(g), dtype=bool), now_s=now_s,
                start_s=g.start_s, grace_s=np.full(len(g), self.policy.estimator.grace_s),
                pinned=pinned, policy=self.policy.estimator,
            )
        return usage, clipped, ~fresh

    def _place(self, now_s: float, prod_r: np.ndarray, stale: np.ndarray, events: list[BatchEvent]) -> PassResult | None:
        st = self.state
        ledgers = st.batch_ledgers(prod_r, prod_reservation_ledger=self._prod_sum(prod_r))
        self.scheduler.observe(now_s, ledgers)
        eligible = self.eligible & self.escalation.eligible(now_s)
        task_rows, bound = self.scheduler.place(st, ledgers, eligible=eligible, stale_pods=stale, now_s=now_s)
        if len(bound):
            # one group per (task, node) per step: a pass may bind a task to a node in several chunks;
            # the pairs in (task, node) order, as one key task · n + node
            n = len(st.capacity)
            keys, inverse = np.unique(np.asarray(task_rows, dtype=np.int64) * n + bound.node, return_inverse=True)
            counts = np.bincount(inverse.ravel(), weights=bound.count, minlength=len(keys)).astype(np.int64)
            tasks, nodes = keys // n, keys % n
            np.subtract.at(st.pending, tasks, counts)
            st.groups.append(task=tasks, node=nodes, count=counts, start_s=now_s,
                             duration_s=st.tasks.duration_s[tasks], request=st.tasks.request[tasks])
            for task, node, count in zip(tasks.tolist(), nodes.tolist(), counts.tolist(), strict=True):
                events.append(BatchEvent(now_s, "placed", int(task), int(count), int(node)))
        return self.scheduler.last_pass

    def _evict(self, now_s: float, prod_r: np.ndarray, prod_usage: np.ndarray, stale: np.ndarray,
               events: list[BatchEvent]) -> None:
        st = self.state
        batch_usage, batch_reserved = self._batch_node_sums()
        working = self._prod_sum(prod_usage) + batch_usage
        reserved = self._prod_sum(prod_r) + batch_reserved
        if self.unaccounted_ram is not None:
            working[:, RAM] += self.unaccounted_ram
            reserved[:, RAM] += self.unaccounted_ram
        policy = self.policy.eviction
        threshold = policy.evict_threshold_ratio * st.capacity
        for dim in (RAM, STORAGE):
            for node in np.flatnonzero((working[:, dim] >= threshold[:, dim]) & (reserved[:, dim] > st.capacity[:, dim])):
                self._evict_node(int(node), dim, float(working[node, dim]), now_s, prod_r, prod_usage, stale, events)

    def _evict_node(self, node: int, dim: int, working_set: float, now_s: float, prod_r: np.ndarray,
                    prod_usage: np.ndarray, stale: np.ndarray, events: list[BatchEvent]) -> None:
        st = self.state
        g = st.groups
        tasks = st.tasks
        prod_rows = self._prod_by_node[node]
        group_rows = np.flatnonzero(g.node == node)
        k_p, k_b = len(prod_rows), len(group_rows)
        # The replay's samples are at most one step old; a stale production sample is the source's
        # gap. The agent's rule applies: a stale pod is held at max(r, q) and never chosen, the
        # decision rests on the fresh ones, and a node wholly stale evicts nothing.
        ages = np.concatenate([np.where(stale[prod_rows], self.stale_ttl_s + 1.0, 0.0), np.zeros(k_b)])
        freshness = ledger_freshness(0.0, ages, np.ones(k_p + k_b, dtype=bool), self.stale_ttl_s)
        workloads = NodeWorkloads(
            reservation=np.concatenate([prod_r[prod_rows], g.reservations.value[group_rows]]),
            usage=np.concatenate([prod_usage[prod_rows], tasks.usage[g.task[group_rows]]]),
            limit=np.concatenate([st.production.limit[prod_rows], tasks.limit[g.task[group_rows]]]),
            tier=np.array([TIER_SERVICE] * k_p + [TIER_BATCH] * k_b),
            priority=np.concatenate([np.zeros(k_p, dtype=np.int64), tasks.priority[g.task[group_rows]]]),
            start_s=np.concatenate([self._prod_start[prod_rows], g.start_s[group_rows]]),
            terminating=np.zeros(k_p + k_b, dtype=bool),
            count=np.concatenate([np.ones(k_p, dtype=np.int64), g.count[group_rows]]),
            held=freshness.held,
        )
        unaccounted = float(self.unaccounted_ram[node]) if self.unaccounted_ram is not None and dim == RAM else 0.0
        signal = PressureSignal(dimension=dim, working_set=working_set, sample_age_s=freshness.sample_age_s,
                                unaccounted=unaccounted)
        plan = plan_evictions(workloads, st.capacity[node], signal, now_s=now_s,
                              stale_ttl_s=self.stale_ttl_s, policy=self.policy.eviction)
        requeue = np.zeros(len(g), dtype=np.int64)
        for victim in plan.victims:
            detail = {
                "dimension": plan.dimension, "capacity": plan.capacity, "working_set": working_set,
                "ledger_before": victim.ledger_before, "ledger_after": victim.ledger_after,
                "reservation": victim.reservation, "usage": victim.usage, "limit": victim.limit,
                "priority": victim.priority, "acute": plan.acute,
                **({"unaccounted": unaccounted} if unaccounted else {}),
            }
            if victim.row < k_p:
                pod = int(prod_rows[victim.row])
                events.append(BatchEvent(now_s, "production_evicted", -1, 1, node, victim.reason,
                                         {**detail, "pod": st.production.ids[pod]}))
                continue
            row = int(group_rows[victim.row - k_p])
            task = int(g.task[row])
            requeue[row] += victim.count
            self.scheduler.record_eviction(task, node, now_s)  # cooldown for (job, node)
            events.append(BatchEvent(now_s, "evicted", task, victim.count, node, victim.reason, detail))
        if requeue.any():
            st.requeue_batch(requeue)  # requeued from scratch; no migration
            self._batch_sums = None
        if plan.victims:
            self.escalation.record_eviction_round(node, now_s)

    def _oom(self, now_s: float, prod_usage: np.ndarray, events: list[BatchEvent]) -> None:
        """Memory above capacity after eviction: OOM kills, batch first (module doc, step 7)."""
        st = self.state
        g = st.groups
        tasks = st.tasks
        working = self._prod_sum(prod_usage)[:, RAM] + self._batch_node_sums()[0][:, RAM]
        over = np.flatnonzero(working > st.capacity[:, RAM] * (1 + 1e-9))
        if not len(over):
            return
        keep = np.ones(len(g), dtype=bool)
        for node in over.tolist():
            prod_rows = self._prod_by_node[node]
            group_rows = np.flatnonzero(g.node == node)
            kills, prod_killed = oom_victims(float(st.capacity[node, RAM]), prod_usage[prod_rows, RAM],
                                             g.count[group_rows], tasks.usage[g.task[group_rows], RAM])
            for row, k in zip(group_rows.tolist(), kills.tolist(), strict=True):
                if k == 0:
                    continue
                task = int(g.task[row])
                g.count[row] -= k
                keep[row] = g.count[row] > 0
                st.pending[task] += k  # the pod failed: its owner recreates it, queued from scratch
                events.append(BatchEvent(now_s, "oom_killed", task, k, node, "oom",
                                         {"tier": "batch", "working_set": float(working[node]),
                                          "capacity": float(st.capacity[node, RAM])}))
            for pod in prod_rows[prod_killed].tolist():
                events.append(BatchEvent(now_s, "production_oom_killed", -1, 1, node, "oom",
                                         {"tier": "service", "pod": st.production.ids[pod],
                                          "working_set": float(working[node]), "capacity": float(st.capacity[node, RAM])}))
        self._batch_sums = None  # counts changed in place
        if not keep.all():
            g.keep(keep)

    def _escalate(self, now_s: float, prod_r: np.ndarray, prod_usage: np.ndarray, stale: np.ndarray,
                  events: list[BatchEvent]) -> None:
        """docs/design.md §8 with the live loop's decision (module doc, step 8)."""
        st = self.state
        g = st.groups
        n = len(st.capacity)
        batch_usage, batch_reserved = self._batch_node_sums()
        working = self._prod_sum(prod_usage)[:, RAM] + batch_usage[:, RAM]
        reserved = self._prod_sum(prod_r)[:, RAM] + batch_reserved[:, RAM]
        if self.unaccounted_ram is not None:
            working = working + self.unaccounted_ram
            reserved = reserved + self.unaccounted_ram
        cap = st.capacity[:, RAM]
        self.escalation.observe(now_s, (working >= self.policy.eviction.evict_threshold_ratio * cap) & (reserved > cap))
        stale_nodes = np.bincount(st.production.node[stale], minlength=n)[:n] > 0
        decisions = self.escalation.decide(now_s, stale_nodes)
        if not decisions:
            return
        drained = np.zeros(len(g), dtype=bool)
        for node, decision in decisions:
            rows = np.flatnonzero(g.node == node)
            events.append(BatchEvent(now_s, "escalated", -1, int(g.count[rows].sum()), node, decision.reason,
                                     {"detail": decision.detail, "until_s": decision.ineligible_until_s}))
            for row in rows.tolist():
                task = int(g.task[row])
                st.pending[task] += int(g.count[row])
                self.scheduler.record_eviction(task, node, now_s)
                events.append(BatchEvent(now_s, "evicted", task, int(g.count[row]), node, "escalation",
                                         {"escalation": decision.reason, "why": decision.detail}))
            drained[rows] = True
        if drained.any():
            g.keep(~drained)
            self._batch_sums = None

    def _share_cpu(self, now_s: float, prod_usage: np.ndarray) -> dict[str, object]:
        """Compressible cpu over the step that follows ``now_s`` (module doc, step 9): grants,
        progress and projected ends; returns the step's figures for the record."""
        st = self.state
        g = st.groups
        n = len(st.capacity)
        tasks = st.tasks
        step_s = self.clock.step_s
        prod_cpu = self._prod_sum(prod_usage)[:, CPU]
        demand = np.minimum(tasks.usage[g.task, CPU], tasks.limit[g.task, CPU])
        grant = share_compressible_cpu(np.maximum(0.0, st.capacity[:, CPU] - prod_cpu), g.node, g.count,
                                       tasks.request[g.task, CPU], demand)
        rate = np.divide(grant, demand, out=np.ones(len(g)), where=demand > 0)
        with np.errstate(divide="ignore"):
            g.end_s = np.where(rate > 0, now_s + g.remaining_s / np.where(rate > 0, rate, 1.0), np.inf)
        g.remaining_s = np.maximum(0.0, g.remaining_s - rate * step_s)
        weight = np.clip((g.end_s - now_s) / step_s, 0.0, 1.0) if step_s > 0 else np.ones(len(g))
        running = g.count * weight
        batch_q = np.zeros(n)
        np.add.at(batch_q, g.node, running * tasks.request[g.task, CPU])
        contention = np.maximum(0.0, prod_cpu + batch_q - st.capacity[:, CPU])
        return {"weight": weight, "batch_instances": float(running.sum()),
                "batch_cpu_demand_mcpu": float((running * demand).sum()),
                "batch_cpu_granted_mcpu": float((running * grant).sum()), "contention_mcpu": contention}

    def _record(self, step: int, now_s: float, prod_usage: np.ndarray, prod_r: np.ndarray,
                clipped: np.ndarray, stale: int, events: list[BatchEvent],
                placement: PassResult | None, cpu: dict[str, object]) -> StepRecord:
        st = self.state
        g = st.groups
        n = len(st.capacity)
        weight = cpu["weight"]
        tasks = st.tasks
        return StepRecord(
            step=step, time_s=now_s, capacity=st.capacity,
            prod_request=st.production_ledger("request").copy(),
            prod_reservation=self._prod_sum(prod_r).copy(),
            prod_usage=self._prod_sum(prod_usage).copy(),
            prod_limit=st.production_ledger("limit").copy(),
            batch_request=node_sum(g.node, tasks.request[g.task], n, g.count * weight),
            batch_reservation=node_sum(g.node, g.reservations.value, n, g.count * weight),
            batch_usage=node_sum(g.node, tasks.usage[g.task], n, g.count * weight),
            batch_limit=node_sum(g.node, tasks.limit[g.task], n, g.count * weight),
            pod_usage=prod_usage,
            pod_reservation=prod_r,
            clipped=clipped[:, :2].sum(axis=0),
            stale_pods=stale,
            pending_instances=int(st.pending.sum()),
            running_instances=int(g.count.sum()),
            events=tuple(events),
            placement=placement,
            batch_instances=cpu["batch_instances"],
            batch_cpu_demand_mcpu=cpu["batch_cpu_demand_mcpu"],
            batch_cpu_granted_mcpu=cpu["batch_cpu_granted_mcpu"],
            contention_mcpu=cpu["contention_mcpu"],
        )

