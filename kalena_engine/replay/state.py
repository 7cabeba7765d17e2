"""Cluster state of a replay: production from the blueprint, batch as grouped identical pods.

Batch pods of one task are identical, so the state keeps them as *groups* — (task, node,
count, start, end) rows — never as one Python object per pod (a busy Alibaba day has ~10⁶
instances). Every ledger is recomputed from these arrays, so batch can always be removed and
the blueprint state restored exactly (docs/design.md §6 invariant).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kalena_engine.errors import InvariantViolation
from kalena_engine.estimator import Reservations, concat, initial_reservations, take
from kalena_engine.ledger import BlueprintViolation, NodeLedgers, blueprint_violations, ledgers, node_sum


@dataclass(frozen=True, eq=False)
class Production:
    """The blueprint's production set (fixed for a replay): ``p`` pods.

    ``node``: ``(p,)`` node row; ``request``/``limit``: ``(p, 8)``; ``ids``: pod ids.
    """

    ids: tuple[str, ...]
    node: np.ndarray
    request: np.ndarray
    limit: np.ndarray


@dataclass(frozen=True, eq=False)
class TaskTable:
    """Batch tasks of a replay in arrival order; per-instance vectors ``(k, 8)``.

    ``arrival_s`` is on the replay clock (0 = replay start).
    """

    task_id: np.ndarray
    job_id: np.ndarray
    instances: np.ndarray
    arrival_s: np.ndarray
    duration_s: np.ndarray
    request: np.ndarray
    limit: np.ndarray
    usage: np.ndarray
    priority: np.ndarray

    def __len__(self) -> int:
        return len(self.task_id)


@dataclass(eq=False)
class BatchGroups:
    """Running batch: ``G`` rows of identical instances of one task on one node.

    ``end_s`` is the projected end at the group's current progress rate (a throttled group
    finishes later, docs/design.md §11); ``remaining_s`` is the undisturbed work left at the next step.
    """

    task: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    node: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    count: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    start_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    end_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    remaining_s: np.ndarray = field(default_factory=lambda: np.zeros(0))
    reservations: Reservations = field(default_factory=lambda: initial_reservations(np.zeros((0, 8)), np.zeros(0)))

    def __len__(self) -> int:
        return len(self.task)

    def keep(self, rows: np.ndarray) -> None:
        """Keep only ``rows`` (bool mask or index array)."""
        self.task, self.node, self.count = self.task[rows], self.node[rows], self.count[rows]
        self.start_s, self.end_s, self.remaining_s = self.start_s[rows], self.end_s[rows], self.remaining_s[rows]
        self.reservations = take(self.reservations, rows)

    def append(self, *, task: np.ndarray, node: np.ndarray, count: np.ndarray, start_s: float,
               duration_s: np.ndarray, request: np.ndarray) -> None:
        """Admit new groups; each starts with ``r = q`` (docs/design.md §6)."""
        starts = np.full(len(task), float(start_s))
        self.task = np.concatenate([self.task, task])
        self.node = np.concatenate([self.node, node])
        self.count = np.concatenate([self.count, count])
        self.start_s = np.concatenate([self.start_s, starts])
        self.end_s = np.concatenate([self.end_s, starts + duration_s])
        self.remaining_s = np.concatenate([self.remaining_s, np.asarray(duration_s, dtype=np.float64)])
        self.reservations = concat(self.reservations, initial_reservations(request, starts))


@dataclass(eq=False)
class ClusterState:
    """Everything that changes during a replay.

    Attributes:
        capacity: ``(n, 8)`` post-Phase-0 capacity.
        production: the blueprint's production set.
        prod_reservations: estimator state of production pods.
        tasks: the batch task table.
        pending: ``(k,)`` instances of each task waiting to be placed.
        groups: running batch.
        submitted, completed: ``(k,)`` instances per task so far.
        blueprint_ids, blueprint_node: the blueprint's production pods and ``(p,)`` node rows,
            an independent copy taken when the state is built (default: from ``production``) —
            what :meth:`check_invariants` compares the running state with.
    """

    capacity: np.ndarray
    node_names: tuple[str, ...]
    production: Production
    prod_reservations: Reservations
    tasks: TaskTable
    pending: np.ndarray
    groups: BatchGroups
    submitted: np.ndarray
    completed: np.ndarray
    blueprint_ids: tuple[str, ...] | None = None
    blueprint_node: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.blueprint_ids is None:
            self.blueprint_ids = tuple(self.production.ids)
        if self.blueprint_node is None:
            self.blueprint_node = np.array(self.production.node, dtype=np.int64, copy=True)
        self._verified: tuple[tuple[str, ...], np.ndarray, np.ndarray, np.ndarray] | None = None
        self._production_sums: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}

    def _production_unchanged(self) -> bool:
        """True when the production set, placement, requests and capacity are those last found to
        hold the blueprint (array comparisons in numpy: the check is incremental)."""
        if self._verified is None:
            return False
        ids, node, request, capacity = self._verified
        prod = self.production
        return (ids is prod.ids and np.array_equal(node, prod.node) and np.array_equal(request, prod.request)
                and np.array_equal(capacity, self.capacity))

    def production_ledger(self, which: str) -> np.ndarray:
        """``(n, 8)`` Σ over each node's production pods of their ``request`` or ``limit``
        (``which``) — :func:`~kalena_engine.ledger.node_sum`, computed again only when the
        production placement or those values changed since the last call (compared in numpy).
        The result is shared: copy it before changing it."""
        prod = self.production
        values = prod.request if which == "request" else prod.limit
        found = self._production_sums.get(which)
        if (found is None or found[0] is not values or not np.array_equal(found[1], values)
                or not np.array_equal(found[2], prod.node)):
            found = (values, values.copy(), np.array(prod.node, copy=True),
                     node_sum(prod.node, values, self.capacity.shape[0]))
            self._production_sums[which] = found
        return found[3]

    def batch_ledgers(self, prod_reservation: np.ndarray, batch_weight: np.ndarray | None = None, *,
                      prod_reservation_ledger: np.ndarray | None = None) -> NodeLedgers:
        """Ledgers from the current state; ``batch_weight`` ``(G,)`` scales each group's
        count (time-weighting for metrics); production reservations are given (effective),
        and optionally their per-node sum ``prod_reservation_ledger`` when the caller has it.
        The same figures as :func:`~kalena_engine.ledger.ledgers` of the state."""
        g = self.groups
        n = self.capacity.shape[0]
        count = g.count.astype(np.float64) if batch_weight is None else g.count * batch_weight
        if prod_reservation_ledger is None:
            prod_reservation_ledger = node_sum(self.production.node, prod_reservation, n)
        return NodeLedgers(
            capacity=self.capacity,
            prod_request=self.production_ledger("request").copy(),
            prod_reservation=np.array(prod_reservation_ledger, copy=True),
            batch_request=node_sum(g.node, self.tasks.request[g.task], n, count),
            batch_reservation=node_sum(g.node, g.reservations.value, n, count),
        )

    def blueprint_request_ledger(self) -> np.ndarray:
        """``(n, 8)`` request ledger of the blueprint's production set (its recorded placement)."""
        request = dict(zip(self.production.ids, self.production.request, strict=True))
        rows = np.array([request[i] for i in self.blueprint_ids]).reshape(-1, self.capacity.shape[1])
        return node_sum(self.blueprint_node, rows, self.capacity.shape[0])

    def requeue_batch(self, counts: np.ndarray) -> None:
        """Take ``counts`` ``(G,)`` instances off each running group and queue them again from
        scratch (eviction; no migration); emptied groups leave.

        Raises:
            InvariantViolation: a count below 0 or above the group's.
        """
        counts = np.asarray(counts, dtype=np.int64)
        g = self.groups
        if counts.shape != g.count.shape or (counts < 0).any() or (counts > g.count).any():
            raise InvariantViolation(f"cannot requeue {counts.tolist()} of groups holding {g.count.tolist()}")
        np.add.at(self.pending, g.task, counts)
        g.count = g.count - counts
        if (g.count == 0).any():
            g.keep(g.count > 0)

    def without_batch_ledgers(self, prod_reservation: np.ndarray) -> NodeLedgers:
        """The ledgers with every running batch workload removed (what evicting all batch leaves),
        computed by the same :func:`~kalena_engine.ledger.ledgers` as the running ones."""
        empty = np.zeros(0, dtype=np.int64)
        return ledgers(self.capacity, prod_node=self.production.node, prod_request=self.production.request,
                       prod_reservation=prod_reservation, batch_node=empty,
                       batch_request=np.zeros((0, self.capacity.shape[1])),
                       batch_reservation=np.zeros((0, self.capacity.shape[1])))

    def blueprint_violations(self) -> tuple[BlueprintViolation, ...]:
        """:func:`~kalena_engine.ledger.blueprint_violations` of the state now against the
        blueprint recorded at construction (docs/design.md §6).

        Incremental: batch never enters this check, so once the production placement and
        requests are found to hold the blueprint, a later call only compares them with that
        verified copy and runs the full check again only when something changed.
        """
        if self._production_unchanged():
            return ()
        found = blueprint_violations(
            node_names=self.node_names, capacity=self.capacity, prod_ids=self.production.ids,
            prod_node=self.production.node, prod_request=self.production.request,
            blueprint_ids=self.blueprint_ids, blueprint_node=self.blueprint_node)
        if not found:
            prod = self.production
            self._verified = (prod.ids, np.array(prod.node, copy=True), np.array(prod.request, copy=True),
                              np.array(self.capacity, copy=True))
        return found

    def check_invariants(self) -> None:
        """Blueprint fidelity and conservation of batch instances.

        Raises:
            InvariantViolation: removing all batch would not leave the blueprint's production set
                on every node with its request ledger within capacity (the running production
                arrays against the blueprint recorded at construction), a negative count, or
                instances submitted ≠ pending + running + completed for some task.
        """
        if violations := self.blueprint_violations():
            raise InvariantViolation("the blueprint state is broken: " + "; ".join(str(v) for v in violations[:5]))
        if (self.pending < 0).any() or (self.groups.count <= 0).any():
            raise InvariantViolation("a batch count went negative or a zero-count group survived")
        running = np.bincount(self.groups.task, weights=self.groups.count, minlength=len(self.tasks))
        if not np.array_equal(self.submitted, self.pending + running.astype(np.int64) + self.completed):
            bad = int(np.flatnonzero(self.submitted != self.pending + running.astype(np.int64) + self.completed)[0])
            raise InvariantViolation(
                f"batch task {self.tasks.task_id[bad]}: submitted {self.submitted[bad]} ≠ pending "
                f"{self.pending[bad]} + running {int(running[bad])} + completed {self.completed[bad]}"
            )
