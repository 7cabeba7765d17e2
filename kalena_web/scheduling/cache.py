"""The scheduler's cache: what one scheduler holds between passes (kube-scheduler's
``internal/cache``) — the pending queue, the batch pods resident on nodes, the production pods,
and the pods it assumed on a node whose binding is still in flight.

The database stays the record (the estimation loop, escalation, the watch's reconciler and
other processes write it): every pass takes a snapshot (:meth:`SchedulerCache.snapshot`,
numbered by :attr:`SchedulerCache.generation`) that syncs the cache with it by key-only reads —
a per-node key (an MD5 the database computes over the node's row, ledger and condition,
:func:`~kalena_web.scheduling.selectors.node_row_keys`: only nodes whose key moved since the
last pass are read whole, as kube-scheduler's snapshot copies only the nodes whose generation
moved), the queue's and the resident batch pods' ids (whole rows, with their JSON labels and
constraints, only for pods not held yet); production pods are re-read only when their
fingerprint changed (:func:`~kalena_web.scheduling.selectors.production_pods`); the recent
evictions and the kubelet's room are read afresh (small).

A decision is *assumed* at once: the cycle writes it as the record (the node's ledger debited,
the pod bound, :mod:`.recording`), the queue lets the pod go and :meth:`assume` notes it in
flight; the binder's answer *confirms* it (:meth:`confirm`) or *forgets* it (:meth:`forget`,
after the lifecycle returned the pod to the queue and its room to the node). The watch's
``PodRunning`` makes the binding final in the record. A scheduler that starts, restarts or newly
leads builds a new cache: the first snapshot reads everything from the record (which the
watch's list has just reconciled) before any decision.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.placement import BatchResidents, ClusterSnapshot
from kalena_web.inventory.models import Cluster
from kalena_web.scheduling import selectors
from kalena_web.scheduling.mappers import NodeRow, PendingRow, template_of
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.queue import PendingQueue, QueuedPod


@dataclass(frozen=True)
class Snapshot:
    """One pass's view: ``rows`` (nodes in row order), the engine's ``cluster`` snapshot, the
    ``pending`` rows in queue order, and the cache ``generation`` it was taken at (each snapshot
    takes the next number)."""

    generation: int
    rows: list[NodeRow]
    cluster: ClusterSnapshot | None
    pending: list[PendingRow]


@dataclass
class _Resident:
    template_key: tuple
    template: object
    node_id: int


@dataclass
class SchedulerCache:
    """The cache of one scheduler for ``cluster`` (module doc); owned by one thread (the
    scheduler's loop, or one Celery pass)."""

    cluster: Cluster
    queue: PendingQueue = field(default_factory=PendingQueue)
    generation: int = 0
    #: pod id → the pod assumed on a node whose binding is in flight, and the node's name
    in_flight: dict[int, tuple[QueuedPod, str, float]] = field(default_factory=dict)
    _residents: dict[int, _Resident] = field(default_factory=dict)
    #: node id → (key, row) as last read
    _nodes: dict[int, tuple[str, NodeRow]] = field(default_factory=dict)
    nodes_read: int = 0  # node rows read whole since the cache was made (tests and benchmarks)
    _production: dict = field(default_factory=dict)

    def snapshot(self, *, now_s: float, cooldown_s: float, kubelet: bool = True) -> Snapshot:
        """The next snapshot (module doc). No pending pod: no node is read (``cluster`` None)."""
        self.generation += 1
        self.queue.sync(cluster=self.cluster)
        pending = self.queue.rows()
        if not pending:
            return Snapshot(generation=self.generation, rows=[], cluster=None, pending=[])
        rows, snap = selectors.cluster_snapshot(cluster=self.cluster, now_s=now_s, cooldown_s=cooldown_s,
                                                cache=self._production, kubelet=kubelet,
                                                batch=self._batch_residents, rows=self._node_rows())
        return Snapshot(generation=self.generation, rows=rows, cluster=snap if rows else None, pending=pending)

    def _node_rows(self) -> list[NodeRow]:
        """Every node in row order, read whole only where its key moved (module doc)."""
        keys = selectors.node_row_keys(cluster=self.cluster)
        moved = [node_id for node_id, key in keys if not key or self._nodes.get(node_id, ("",))[0] != key]
        if moved:
            fresh = {r.id: r for r in selectors.node_rows(cluster=self.cluster, ids=moved)}
            self.nodes_read += len(fresh)
            wanted = dict(keys)
            for node_id, row in fresh.items():
                self._nodes[node_id] = (wanted[node_id], row)
        held = {node_id for node_id, _ in keys}
        for node_id in [i for i in self._nodes if i not in held]:
            del self._nodes[node_id]
        return [self._nodes[node_id][1] for node_id, _ in keys if node_id in self._nodes]

    def _batch_residents(self, row_of_node: dict[int, int]) -> BatchResidents:
        """Bound batch pods grouped by (template, node), as
        :func:`~kalena_web.scheduling.selectors.batch_residents` reads them, from a key-only read
        of the bound pods (whole rows only for pods not held yet)."""
        keys = dict(BatchPod.objects.filter(cluster=self.cluster, state=BatchPod.BOUND, workload__node__isnull=False)
                    .values_list("id", "workload__node_id"))
        for pod_id in [i for i in self._residents if i not in keys]:
            del self._residents[pod_id]
        for pod_id, node_id in keys.items():
            if pod_id in self._residents:
                self._residents[pod_id].node_id = node_id
        missing = [i for i in keys if i not in self._residents]
        if missing:
            for pod_id, name, owner, namespace, labels, constraints in BatchPod.objects.filter(id__in=missing).values_list(
                    "id", "workload__name", "workload__owner", "workload__namespace", "workload__labels",
                    "workload__constraints"):
                key = (owner, namespace, repr(sorted((labels or {}).items())), repr(constraints or {}))
                self._residents[pod_id] = _Resident(
                    template_key=key, node_id=keys[pod_id],
                    template=template_of(owner=owner, namespace=namespace, labels=labels or {},
                                         constraints=constraints or {}, min_member=None, member_id=name))
        templates: dict[tuple, int] = {}
        template_list = []
        counts: dict[tuple[int, int], int] = defaultdict(int)
        for resident in self._residents.values():
            if resident.node_id not in row_of_node:
                continue
            if resident.template_key not in templates:
                templates[resident.template_key] = len(template_list)
                template_list.append(resident.template)
            counts[(templates[resident.template_key], row_of_node[resident.node_id])] += 1
        order = list(counts)
        return BatchResidents(node=np.array([k[1] for k in order], dtype=np.int64),
                              count=np.array([counts[k] for k in order], dtype=np.int64),
                              template=np.array([k[0] for k in order], dtype=np.int64),
                              templates=tuple(template_list))

    # -- assume, confirm, forget --------------------------------------------------------------

    def assume(self, pods: list[tuple[QueuedPod, str]], *, now_s: float | None = None) -> None:
        """``(pod, node name)`` pairs the cycle wrote as bound: they leave the queue and are in
        flight until the binder's answer."""
        at = time.time() if now_s is None else now_s
        self.queue.assumed(pod.id for pod, _ in pods)
        for pod, node in pods:
            self.in_flight[pod.id] = (pod, node, at)

    def confirm(self, pod_id: int) -> None:
        """The orchestrator accepted the binding (the watch will report the pod on its node)."""
        self.in_flight.pop(pod_id, None)

    def forget(self, pod_id: int) -> None:
        """The binding failed or was refused: the lifecycle gave the pod back to the record's
        queue and its room back to the node; the next sync reads it as pending again."""
        self.in_flight.pop(pod_id, None)


def residents_of(cache: SchedulerCache) -> int:
    """How many resident batch pods ``cache`` holds (tests and benchmarks)."""
    return len(cache._residents)

