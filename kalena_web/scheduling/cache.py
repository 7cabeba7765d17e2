"""The scheduler's cache: what one scheduler holds between passes (kube-scheduler's
``internal/cache``) — the pending queue, the batch pods resident on nodes, the production pods,
and the pods it assumed on a node whose binding is still in flight.

The database stays the record (the estimation loop, escalation, the watch's reconciler and
other processes write it): every pass takes a snapshot (:meth:`SchedulerCache.snapshot`,
numbered by :attr:`SchedulerCache.generation`) that syncs the cache with it by key-only reads —
a per-node key (an MD5 the database computes over the node's row, ledger and condition,
:func:`~kalena_web.scheduling.selectors.node_row_keys`: only nodes whose key moved since the
last pass are read whole, as kube-scheduler's snapshot copies only the nodes whose generation
moved), the queue's and the resident batch pods' ids (a pod not held yet is read as a
fingerprint of its template and request, and only the first pod of a fingerprint whole);
production pods are re-read only when their fingerprint changed (:func:`~kalena_web.scheduling.selectors.production_pods`); the recent
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
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.placement import BatchResidents, ClusterSnapshot
from kalena_web.inventory.models import Cluster
from kalena_web.scheduling import selectors
from kalena_web.scheduling.mappers import NodeRow, PendingRow, resident_template, template_of
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.queue import PendingQueue, QueuedPod


#: seconds an assumption the binder reported bound waits for the watch's confirmation before
#: the cache lets it go (kube-scheduler's assumed-pod TTL; the record keeps the binding)
ASSUMED_TTL_S = 60.0

#: seconds a binding the API server acknowledged is taken as landed while the watch has not
#: reported it (a watch that far behind is no longer trusted: the record's check asks the API)
ACKNOWLEDGED_TTL_S = 600.0


@dataclass(frozen=True)
class Snapshot:
    """One pass's view: ``rows`` (nodes in row order), the engine's ``cluster`` snapshot, the
    ``pending`` rows in queue order, and the cache ``generation`` it was taken at (each snapshot
    takes the next number)."""

    generation: int
    rows: list[NodeRow]
    cluster: ClusterSnapshot | None
    pending: list[PendingRow]


#: template fingerprints the cache holds before it lets go of those no resident uses any more
TEMPLATES_MAX = 8192


def _pod_fingerprint():
    """The database's MD5 over a bound pod's owner, namespace, labels, constraints and request
    (PostgreSQL: ``jsonb`` prints its keys in one order, so equal labels print alike)."""
    from django.db.models import TextField, Value
    from django.db.models.functions import MD5, Cast, Coalesce, Concat

    text = TextField()
    parts = []
    for column in ("workload__owner", "workload__namespace", "workload__labels", "workload__constraints",
                   "workload__request"):
        parts += [Coalesce(Cast(column, text), Value("~", output_field=text), output_field=text),
                  Value("|", output_field=text)]
    return MD5(Concat(*parts, output_field=text))


@dataclass
class _Resident:
    template_key: tuple
    node_id: int
    request: tuple[float, ...]  # the pod's request (8 dimensions, IR units)
    #: (owner, namespace, labels, constraints, name): what :meth:`template` is made of
    fields: tuple
    _template: object = None

    @classmethod
    def of(cls, node_id: int, name: str, owner: str, namespace: str, labels: dict | None, constraints: dict | None,
           request) -> _Resident:
        key, fields = resident_template(owner, namespace, labels, constraints, name)
        return cls(template_key=key, node_id=node_id, request=tuple(float(v) for v in request), fields=fields)

    def template(self) -> object:
        """The pod's :func:`~kalena_web.scheduling.mappers.template_of`, made when first asked
        (a pass asks only the first resident of each template key)."""
        if self._template is None:
            owner, namespace, labels, constraints, name = self.fields
            self._template = template_of(owner=owner, namespace=namespace, labels=labels, constraints=constraints,
                                         min_member=None, member_id=name)
        return self._template


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
    #: pod fingerprint (:func:`_pod_fingerprint`) → the resident its first pod was read as
    _templates: dict[str, _Resident] = field(default_factory=dict)
    _inbox: deque = field(default_factory=deque)
    _flying_names: dict[str, int] = field(default_factory=dict)  # in-flight pod name → id
    #: pod ids the binder answered "bound" for whose confirmation by the watch is awaited
    bound_unconfirmed: set[int] = field(default_factory=set)
    #: pod name → (id, when) of bindings the orchestrator acknowledged that the watch has not
    #: reported yet (:meth:`acknowledge`): the record's unconfirmed check does not ask about them
    acknowledged: dict[str, tuple[int, float]] = field(default_factory=dict)
    confirmed: int = 0  # assumptions the watch confirmed (tests and benchmarks)
    #: a sharded instance's share (issue 32): called once per snapshot, answers the test
    #: ``(pod name, gang) → held`` for the queue (:meth:`PendingQueue.sync`'s ``keep``); None: every pod
    holds: Callable[[], Callable[[str, str], bool]] | None = None
    #: a long-lived scheduler's cache (``kalena watch``): its first snapshot without a pending pod
    #: still reads the cluster — every node row, the production pods, the bound batch pods — once,
    #: as an informer's cache fills at start, and later ones keep the node rows current (the key
    #: read; whole rows where a key moved), so the first pass with pods reads only what moved
    #: since (False: a cache made for one pass, e.g. Celery's, reads nothing while none is pending)
    warm: bool = False
    _warmed: bool = False

    def watch_feed(self, kind: str, items: list) -> None:
        """What the watch applied (a :attr:`~kalena_web.control.reconciler.Reconciler.listeners`
        callback, on the watch's thread): ``("queued", [BatchPod])`` — pods queued, handed to the
        queue whole; ``("running", [ref])`` — pods reported on a node, which confirms their
        assumption. Kept in a thread-safe inbox the scheduler's thread drains at its next
        snapshot (or :meth:`drain`)."""
        self._inbox.append((kind, list(items)))

    def drain(self, now_s: float | None = None) -> None:
        """Apply the watch's inbox (:meth:`watch_feed`) in the order it came; with ``now_s``,
        bound assumptions the watch has not confirmed within :data:`ASSUMED_TTL_S` expire (the
        record settles them: :func:`~kalena_web.scheduling.lifecycle.batch_unconfirmed`), as
        kube-scheduler's assumed pods expire."""
        if now_s is not None:
            for pod_id in [i for i in self.bound_unconfirmed if self.in_flight[i][2] < now_s - ASSUMED_TTL_S]:
                self.confirm(pod_id)
        while self._inbox:
            kind, items = self._inbox.popleft()
            if kind == "queued":
                self.queue.feed(items)
            elif kind == "running":
                for ref in items:
                    self.acknowledged.pop(ref, None)
                    pod_id = self._flying_names.pop(ref, None)
                    if pod_id is not None:
                        self.confirm(pod_id)

    def snapshot(self, *, now_s: float, cooldown_s: float, kubelet: bool = True) -> Snapshot:
        """The next snapshot (module doc). No pending pod: ``cluster`` None, and no node is read
        (but by a :attr:`warm` cache's first snapshot)."""
        self.generation += 1
        self.drain(now_s)
        self.queue.sync(cluster=self.cluster, now_s=now_s, keep=None if self.holds is None else self.holds())
        pending = self.queue.rows()
        if not pending and (self._warmed or not self.warm):
            if self.warm:  # kept current, as an informer is: key-only, whole rows only where moved
                self._node_rows()
            return Snapshot(generation=self.generation, rows=[], cluster=None, pending=[])
        self._warmed = True
        rows, snap = selectors.cluster_snapshot(cluster=self.cluster, now_s=now_s, cooldown_s=cooldown_s,
                                                cache=self._production, kubelet=kubelet,
                                                batch=self._batch_residents, rows=self._node_rows(),
                                                bound_requests=self._bound_requests)
        if not pending:  # warmed: the pass has nothing to decide
            return Snapshot(generation=self.generation, rows=[], cluster=None, pending=[])
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
        of the bound pods (pods not held yet: :meth:`_read_residents`)."""
        keys = dict(BatchPod.objects.filter(cluster=self.cluster, state=BatchPod.BOUND, workload__node__isnull=False)
                    .values_list("id", "workload__node_id"))
        for pod_id in [i for i in self._residents if i not in keys]:
            del self._residents[pod_id]
        for pod_id, node_id in keys.items():
            if pod_id in self._residents:
                self._residents[pod_id].node_id = node_id
        missing = [i for i in keys if i not in self._residents]
        if missing:
            self._read_residents(missing, keys)
        templates: dict[tuple, int] = {}
        template_list = []
        counts: dict[tuple[int, int], int] = defaultdict(int)
        for resident in self._residents.values():
            if resident.node_id not in row_of_node:
                continue
            if resident.template_key not in templates:
                templates[resident.template_key] = len(template_list)
                template_list.append(resident.template())
            counts[(templates[resident.template_key], row_of_node[resident.node_id])] += 1
        order = list(counts)
        return BatchResidents(node=np.array([k[1] for k in order], dtype=np.int64),
                              count=np.array([counts[k] for k in order], dtype=np.int64),
                              template=np.array([k[0] for k in order], dtype=np.int64),
                              templates=tuple(template_list))

    def _read_residents(self, ids: list[int], node_of: dict[int, int]) -> None:
        """Hold the bound pods ``ids`` (on nodes ``node_of``) as residents. On PostgreSQL each pod
        is read as a fingerprint of its template and request (an MD5 of owner, namespace, labels,
        constraints and request the database computes); only the first pod of a fingerprint not
        held yet is read whole. A sharded instance meets every other shard's bound pods here, and
        a burst's pods share a few templates (a Job's pods are alike): decoding each one's labels,
        constraints and request was most of its passes' reads. Elsewhere (SQLite) every pod is
        read whole."""
        from django.db import connection

        whole = ("id", "workload__name", "workload__owner", "workload__namespace", "workload__labels",
                 "workload__constraints", "workload__request")
        if connection.vendor != "postgresql":
            for pod_id, *values in BatchPod.objects.filter(id__any=ids).values_list(*whole):
                self._residents[pod_id] = _Resident.of(node_of[pod_id], *values)
            return
        rows = list(BatchPod.objects.filter(id__any=ids).annotate(fp=_pod_fingerprint()).values_list("id", "fp"))
        first: dict[str, int] = {}
        for pod_id, fp in rows:
            if fp not in self._templates:
                first.setdefault(fp, pod_id)
        if first:
            fp_of = {pod_id: fp for fp, pod_id in first.items()}
            for pod_id, *values in BatchPod.objects.filter(id__any=list(fp_of)).values_list(*whole):
                self._templates[fp_of[pod_id]] = _Resident.of(-1, *values)
        for pod_id, fp in rows:
            alike = self._templates[fp]
            self._residents[pod_id] = _Resident(alike.template_key, node_of[pod_id], alike.request, alike.fields)
        if len(self._templates) > TEMPLATES_MAX:
            used = {r.template_key for r in self._residents.values()}
            self._templates = {fp: held for fp, held in self._templates.items() if held.template_key in used}

    def resident_ids(self, namespace: str) -> set[int]:
        """Ids of the bound batch pods of ``namespace`` the last snapshot counted (and those
        assumed since): what a write re-checks the record against
        (:class:`~kalena_web.scheduling.shard_view.ClusterWideCheck`)."""
        return {pod_id for pod_id, r in self._residents.items() if r.fields[1] == namespace}

    def _bound_requests(self) -> dict[int, np.ndarray]:
        """Σ requests of the bound batch pods per node id, from the residents the snapshot has
        just synced with the record (what the kubelet's room counts as held,
        :func:`~kalena_web.kubehooks.selectors.held_by_node`; no second read of every bound pod)."""
        if not self._residents:
            return {}
        nodes = np.fromiter((r.node_id for r in self._residents.values()), dtype=np.int64, count=len(self._residents))
        requests = np.array([r.request for r in self._residents.values()], dtype=np.float64).reshape(len(nodes), -1)
        ids, where = np.unique(nodes, return_inverse=True)
        sums = np.zeros((len(ids), requests.shape[1]))
        np.add.at(sums, where, requests)
        return dict(zip(ids.tolist(), sums, strict=True))

    # -- assume, confirm, forget --------------------------------------------------------------

    def assume(self, pods: list[tuple[QueuedPod, str]], *, now_s: float | None = None,
               node_ids: dict[str, int] | None = None) -> None:
        """``(pod, node name)`` pairs the cycle wrote as bound: they leave the queue and are in
        flight until the watch reports them on a node (:meth:`confirm`) or their binding fails
        (:meth:`forget`). With ``node_ids`` (node name → id) they are residents of their nodes
        at once, from the rows the queue holds (the next snapshot reads none of them whole)."""
        at = time.time() if now_s is None else now_s
        for pod, node in pods:
            row = self.queue.row(pod.id)
            if node_ids is None or row is None or node not in node_ids:
                continue
            self._residents[pod.id] = _Resident.of(node_ids[node], row.name, row.owner, row.namespace, row.labels,
                                                   row.constraints, row.request)
        self.queue.assumed(pod.id for pod, _ in pods)
        for pod, node in pods:
            self.in_flight[pod.id] = (pod, node, at)
            self._flying_names[pod.name] = pod.id

    def acknowledge(self, pod: QueuedPod, now_s: float) -> None:
        """The orchestrator acknowledged ``pod``'s binding (the binder's
        ``on_acknowledged``): it landed, and a watch that has not reported it yet is behind —
        the record's unconfirmed check (:func:`~kalena_web.scheduling.lifecycle.batch_unconfirmed`)
        leaves it alone until the watch reports it or :data:`ACKNOWLEDGED_TTL_S` passes."""
        self.acknowledged[pod.name] = (pod.id, now_s)

    def acknowledged_ids(self, now_s: float) -> set[int]:
        """Ids of the acknowledged bindings not yet reported by the watch, younger than
        :data:`ACKNOWLEDGED_TTL_S` (older ones are let go: the record's check asks about them)."""
        for name in [n for n, (_, at) in self.acknowledged.items() if at < now_s - ACKNOWLEDGED_TTL_S]:
            del self.acknowledged[name]
        return {pod_id for pod_id, _ in self.acknowledged.values()}

    def bound(self, pod_id: int) -> None:
        """The orchestrator accepted the binding: the assumption stays until the watch confirms
        it (kube-scheduler's FinishBinding)."""
        if pod_id in self.in_flight:
            self.bound_unconfirmed.add(pod_id)

    def confirm(self, pod_id: int) -> None:
        """The watch reported the pod on its node: the assumption is the record's fact."""
        held = self.in_flight.pop(pod_id, None)
        self.bound_unconfirmed.discard(pod_id)
        if held is not None:
            self._flying_names.pop(held[0].name, None)
            self.confirmed += 1

    def forget(self, pod_id: int) -> None:
        """The binding failed or was refused: the lifecycle gave the pod back to the record's
        queue and its room back to the node; the next sync reads it as pending again."""
        held = self.in_flight.pop(pod_id, None)
        self.bound_unconfirmed.discard(pod_id)
        if held is not None:
            self._flying_names.pop(held[0].name, None)

    def answer(self, pod_id: int, bound: bool) -> None:
        """The binder's answer for an assumed pod (:class:`~kalena_web.scheduling.binder.BindingPool`'s
        ``on_answer``): bound waits for the watch's confirmation, refused forgets."""
        if bound:
            self.bound(pod_id)
        else:
            self.forget(pod_id)


def residents_of(cache: SchedulerCache) -> int:
    """How many resident batch pods ``cache`` holds (tests and benchmarks)."""
    return len(cache._residents)

