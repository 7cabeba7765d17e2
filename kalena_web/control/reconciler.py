"""The reconciler: applies the orchestrator's watch events (docs/design.md §14) to a live cluster.

A watcher (``orchestrator.watch(stop)``, :mod:`agents.orchestrators.events`) knows its
orchestrator and not Django; this module knows Django and not the orchestrator. Each event
goes through the services of the app that owns the rows, idempotently — the same event twice
changes nothing (a ``NodeSeen`` that differs only in when it was seen is the same):

* ``NodeSeen`` → :func:`~kalena_web.control.observed_nodes.node_observe` (ready, cordon, allocatable,
  labels, taints, images: all read by the next scheduling pass); ``NodeGone`` → the node takes no
  new batch.
* ``PodPending`` → :func:`~kalena_web.scheduling.observe.batch_observe_pending`: the same queue
  the REST submit path feeds; a pod queued, bound or ended is never queued again.
* ``PodRunning`` → bound pods are noted running; a pod someone else bound is adopted there.
* ``PodFinished`` / ``PodRefused`` / ``PodGone`` → the pod leaves every ledger and the queue at
  once; a refusal (``OutOf…``) is never a completion; a pod the orchestrator evicted closes its
  owner × node pair for the eviction cooldown (owner-keyed: the replacement is a new pod).
* ``ProductionSeen`` → the pod joined to its blueprint entry by owner and replica (production
  identity, docs/design.md §15; the claim persists) and its real placement against the blueprint
  (fidelity findings); a pod that maps to no entry is an explained ``extra``, charged once.
* Pods Kalena started itself (Docker, Swarm) follow :mod:`kalena_web.control.started`: only
  their current placement's events count, an eviction requeues them.
* ``Resynced`` → what Kalena holds and the list no longer does is gone (watched batch pods, live
  production pods' claims, nodes).

A production pod reported on a node Kalena does not hold yet (the pod watch ran ahead of the
node watch, or the node joined while the watch was away) is rejected and kept, per node, as the
last report of that pod: when the node's ``NodeSeen`` is applied the kept reports are applied
at once, so a pod the API server reported is never lost until its next change. A later report
of the pod, its ``PodGone`` or a ``Resynced`` whose list no longer holds it drops the kept one.

Bad input — an event whose fields the services refuse — is counted and logged with its ref and
field, and changes nothing; it never stops the watcher. A database that does not answer (a
restart, a failover, connections refused) is not bad input: :meth:`Reconciler.run` keeps the
batch and applies it again once the database answers (every handler is idempotent, so a batch
cut short half-way is safe to apply again), so no event the watch delivered is dropped for it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from django.db import InterfaceError, OperationalError, close_old_connections

from agents.orchestrators.events import (
    NodeGone, NodeSeen, PodFinished, PodGone, PodPending, PodRefused, PodRunning, ProductionSeen, Resynced,
    WatchEvent,
)
from kalena_engine.errors import InputError
from kalena_web.archive.models import EvictionRecord
from kalena_web.control import started
from kalena_web.control.event_batches import CACHED, EXCLUSIVE, cache_form, grouped, images_of, owned, ref_of
from kalena_web.control.models import NodeCondition, ProductionPlacement
from kalena_web.control.observed_nodes import ObservationRejected, node_gone, node_observe, node_observe_many
from kalena_web.control.observed_production import production_gone, production_observe
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.scheduling import lifecycle, observe
from kalena_web.scheduling.models import BatchPod

log = logging.getLogger(__name__)

#: A batch of :meth:`Reconciler.run` takes events while they keep coming — until none has arrived
#: for ``BATCH_QUIET_S`` — for at most ``BATCH_MAX_WAIT_S`` after its first: a burst reaches the
#: watch in chunks, and each batch costs a few queries whatever its size. One of three sharded
#: instances receives a third of the events, further apart: a 10 ms quiet interval cut its share
#: of a burst into some 45 batches against one instance's 20 for the whole (issue 32).
BATCH_QUIET_S = 0.05
BATCH_MAX_WAIT_S = 0.25

#: A batch the database could not take (:data:`DATABASE_DOWN`) is applied again after this many
#: seconds, doubling up to ``RETRY_MAX_S`` while the database stays away.
RETRY_START_S = 0.5
RETRY_MAX_S = 5.0
#: The errors of a database that does not answer (PostgreSQL restarting or refusing connections,
#: a connection cut, a deadlock or serialization failure aborting the transaction): the batch is
#: kept and applied again, never dropped.
DATABASE_DOWN = (OperationalError, InterfaceError)

#: What :meth:`Reconciler.apply` answers (also the keys of :attr:`Reconciler.counts`).
CHANGED, UNCHANGED, UNKNOWN, REJECTED = "changed", "unchanged", "unknown", "rejected"


@dataclass
class Reconciler:
    """Applies watch events to ``cluster``.

    ``wake(cluster_id)`` is called after a pod was queued (default: an event-driven scheduling
    pass, :func:`kalena_web.scheduling.tasks.scheduling_request`); ``clock`` gives ``now_s``.
    ``counts`` tallies outcomes per event kind (``{"PodPending": Counter({"changed": 3})}``);
    ``rejected`` keeps the last rejections as ``(kind, ref, message)``.
    ``owns(kind, ref)`` (``kind`` ``pod`` or ``node``; None: everything): a sharded scheduler's
    share (issue 32, :mod:`kalena_web.scheduling.shards`) — :meth:`run` applies only the events
    of the objects it owns, and a ``Resynced`` marks gone only those.
    """

    cluster: Cluster
    wake: Callable[[int], object] | None = None
    clock: Callable[[], float] = time.time
    counts: dict[str, Counter] = field(default_factory=dict)
    rejected: list[tuple[str, str, str]] = field(default_factory=list)
    #: told of what the watch changed, as it is applied (the scheduler's cache,
    #: :meth:`~kalena_web.scheduling.cache.SchedulerCache.watch_feed`): ``("queued", [BatchPod])``
    #: for pods queued in bulk, ``("running", [ref])`` for pods the watch reports on a node
    listeners: list[Callable[[str, list], object]] = field(default_factory=list, repr=False)
    _seen: dict[tuple, object] = field(default_factory=dict, repr=False)
    #: node name → {pod ref → the last ProductionSeen refused because the node was unknown}
    _awaiting: dict[str, dict[str, ProductionSeen]] = field(default_factory=dict, repr=False)
    owns: Callable[[str, str], bool] | None = None
    #: how many batches :meth:`run` applied (each costs a few queries whatever its size)
    batches: int = 0
    #: how many times :meth:`run` found the database away and kept a batch to apply again
    database_waits: int = 0

    def apply(self, event: WatchEvent) -> str:
        """Apply one event; returns ``changed`` | ``unchanged`` | ``unknown`` (names a pod or node
        Kalena does not hold) | ``rejected`` (bad input, logged, nothing changed).

        An event equal to the last one applied for the same object and kind is ``unchanged``
        without a database read (a re-list repeats every object; idempotency makes the answer
        certain). A terminal event for an object forgets its cached events; ``Resynced``
        forgets all of them."""
        kind = type(event).__name__
        key = (type(event), ref_of(event))
        if type(event) in CACHED and self._seen.get(key) == cache_form(event):
            self.counts.setdefault(kind, Counter())[UNCHANGED] += 1
            return UNCHANGED
        handler = _HANDLERS.get(type(event))
        if handler is None:
            outcome = self._reject(kind, "", f"{kind} is not a watch event")
        else:
            try:
                outcome = handler(self, event)
            except InputError as exc:
                outcome = self._reject(kind, ref_of(event), str(exc))
        self.counts.setdefault(kind, Counter())[outcome] += 1
        if type(event) in CACHED and outcome in (CHANGED, UNCHANGED):
            self._remember(event)
        elif isinstance(event, Resynced):
            self._seen.clear()
        elif isinstance(event, PodFinished | PodRefused | PodGone | NodeGone):
            ref = key[1]
            for cached in CACHED:
                self._seen.pop((cached, ref), None)
        if isinstance(event, PodGone):
            self._await_drop(event.ref)
        elif isinstance(event, NodeSeen) and outcome in (CHANGED, UNCHANGED):
            self._await_apply(event.name)
        return outcome

    def _await_drop(self, ref: str) -> None:
        for node in list(self._awaiting):
            self._awaiting[node].pop(ref, None)
            if not self._awaiting[node]:
                del self._awaiting[node]

    def _await_apply(self, node: str) -> None:
        """Node ``node`` is now held: apply the production reports kept for it (module doc)."""
        for event in list(self._awaiting.pop(node, {}).values()):
            self.apply(event)

    def apply_all(self, events: Iterable[WatchEvent]) -> Counter:
        """Apply events in order; returns the tally of outcomes."""
        tally: Counter = Counter()
        for event in events:
            tally[self.apply(event)] += 1
        return tally

    def apply_many(self, events: list[WatchEvent]) -> list[str]:
        """Apply events in order, as :meth:`apply` would, with runs of consecutive ``PodPending``
        or ``PodRunning`` events applied in bulk (a fixed number of queries per run)."""
        events, order = grouped(events)
        out: list[str] = []
        i = 0
        while i < len(events):
            kind = type(events[i])
            j = i
            while j < len(events) and type(events[j]) is kind:
                j += 1
            run = events[i:j]
            if kind is PodPending and len(run) > 1:
                out += self._pending_run(run)
            elif kind is PodRunning and len(run) > 1:
                out += self._running_run(run)
            elif kind is NodeSeen and len(run) > 1:
                out += self._nodes_run(run)
            else:
                out += [self.apply(e) for e in run]
            i = j
        if order is None:
            return out
        back = [""] * len(out)
        for k, original in enumerate(order):
            back[original] = out[k]
        return back

    def _tell(self, kind: str, items: list) -> None:
        if items:
            for listener in self.listeners:
                listener(kind, items)

    def _cached(self, event) -> bool:
        return self._seen.get((type(event), ref_of(event))) == cache_form(event)

    def _tally(self, event, outcome: str) -> str:
        self.counts.setdefault(type(event).__name__, Counter())[outcome] += 1
        if outcome in (CHANGED, UNCHANGED):
            self._remember(event)
        return outcome

    def _remember(self, event) -> None:
        """Cache ``event`` as the last one applied for its object and kind. A pod is pending or
        on a node, so a report of one forgets the other: a pending report after a running one
        is a new object under the same name, and its own later ``PodRunning`` must be applied."""
        ref = ref_of(event)
        self._seen[(type(event), ref)] = cache_form(event)
        other = EXCLUSIVE.get(type(event))
        if other is not None:
            self._seen.pop((other, ref), None)

    def _pending_run(self, run: list[PodPending]) -> list[str]:
        todo = [e for e in run if not self._cached(e)]
        production = set(Workload.objects.filter(cluster=self.cluster, kind=Workload.PRODUCTION,
                                                 name__any=[e.ref for e in todo]).values_list("name", flat=True))
        results = {}
        batch = [e for e in todo if e.ref not in production]
        for e in todo:
            if e.ref in production:
                results[id(e)] = self._reject("PodPending", e.ref, f"{e.ref!r} is a production pod of the blueprint")
        created: list[BatchPod] = []
        answers = observe.batch_observe_pending_many(cluster=self.cluster, now_s=self.clock(), created=created, pods=[dict(
            ref=e.ref, request=e.requests, limit=e.limits, labels=e.labels, priority=e.priority, owner=e.owner,
            gang=e.gang, min_member=e.min_member, image=e.image, constraints=e.constraints, grace_s=e.grace_s,
            uid=e.uid, at_s=e.at_s) for e in batch])
        self._tell("queued", created)
        for e, answer in zip(batch, answers, strict=True):
            if isinstance(answer, InputError):
                results[id(e)] = self._reject("PodPending", e.ref, str(answer))
            else:
                results[id(e)] = CHANGED if answer else UNCHANGED
        out = [self._tally(e, results.get(id(e), UNCHANGED)) if id(e) in results else self._tally(e, UNCHANGED)
               for e in run]
        if CHANGED in out and self.wake is not None:
            self.wake(self.cluster.id)
        return out

    def _nodes_run(self, run: list[NodeSeen]) -> list[str]:
        todo = [e for e in run if not self._cached(e)]
        answers = node_observe_many(cluster=self.cluster, now_s=self.clock(), nodes=[dict(
            name=e.name, ready=e.ready, schedulable=e.schedulable, allocatable=e.allocatable, labels=e.labels,
            taints=e.taints, images=images_of(e), at_s=e.at_s) for e in todo])
        results = {}
        for e, answer in zip(todo, answers, strict=True):
            results[id(e)] = (self._reject("NodeSeen", e.name, str(answer)) if isinstance(answer, InputError)
                              else CHANGED if answer else UNCHANGED)
        out = [self._tally(e, results.get(id(e), UNCHANGED)) for e in run]
        for e, outcome in zip(run, out, strict=True):
            if outcome in (CHANGED, UNCHANGED):
                self._await_apply(e.name)
        return out

    def _running_run(self, run: list[PodRunning]) -> list[str]:
        todo = [e for e in run if not self._cached(e)]
        node_ids = dict(Node.objects.filter(cluster=self.cluster, name__any={e.node for e in todo})
                        .values_list("name", "id"))
        known = [e for e in todo if e.node in node_ids]
        answers = observe.batch_observe_running_many(
            cluster=self.cluster, now_s=self.clock(),
            reports=[(e.ref, node_ids[e.node], e.at_s, e.admitted) for e in known])
        results = {id(e): (UNKNOWN if a is None else CHANGED if a else UNCHANGED)
                   for e, a in zip(known, answers, strict=True)}
        self._tell("running", [e.ref for e, a in zip(known, answers, strict=True) if a is not None])
        return [self._tally(e, results.get(id(e), UNCHANGED if self._cached(e) else UNKNOWN)) for e in run]

    def run(self, events: Iterable[WatchEvent], *, batch: int = 500, stop: threading.Event | None = None,
            beat: Callable[[], object] | None = None) -> None:
        """Apply a watcher's stream until it ends (a long-running thread's body): events that
        are already waiting are applied together (:meth:`apply_many`, up to ``batch``);
        database connections are recycled between batches; a database that does not answer
        keeps the batch until it does (:meth:`_until_applied`), and any other error is logged
        and counted, never the end of the watch (the batch is then applied one by one). Once
        ``stop`` is set, events still waiting are left unapplied (whoever watches next lists
        the cluster again, so nothing is lost) and the method returns. ``beat`` (e.g. a
        :class:`~kalena_web.control.heartbeat.HeartbeatTicker`) is called on every turn of the
        loop — at least every 0.2 s while it waits for events, after each batch while busy —
        and never once the loop has returned or while it is stuck."""
        waiting: queue.Queue = queue.Queue()
        done = threading.Event()

        def pump() -> None:
            try:
                for event in events:
                    waiting.put(event)
            finally:
                done.set()
        threading.Thread(target=pump, name="kalena-reconciler-pump", daemon=True).start()
        while not (done.is_set() and waiting.empty()):
            if stop is not None and stop.is_set():
                return
            if beat is not None:
                beat()
            try:
                chunk = [waiting.get(timeout=0.2)]
            except queue.Empty:
                continue
            until = time.monotonic() + BATCH_MAX_WAIT_S
            while len(chunk) < batch:
                try:
                    chunk.append(waiting.get_nowait())
                    continue
                except queue.Empty:
                    pass
                left = until - time.monotonic()
                if left <= 0 or (stop is not None and stop.is_set()):
                    break
                try:
                    chunk.append(waiting.get(timeout=min(BATCH_QUIET_S, left)))
                except queue.Empty:
                    break
            if self.owns is not None:  # issue 32: a shard applies its own objects' events
                chunk = [e for e in chunk if owned(self.owns, e)]
                if not chunk:
                    continue
            self.batches += 1
            try:
                if not self._until_applied(lambda c=chunk: self.apply_many(c), stop, beat):
                    return
            except Exception:  # noqa: BLE001 - one bad batch must not stop the watch
                log.exception("reconciler: a batch of %d events failed; applying them one by one", len(chunk))
                for event in chunk:
                    try:
                        if not self._until_applied(lambda e=event: self.apply(e), stop, beat):
                            return
                    except Exception:  # noqa: BLE001
                        log.exception("reconciler: %s %s failed", type(event).__name__, ref_of(event))
                        self.counts.setdefault(type(event).__name__, Counter())["failed"] += 1

    def _until_applied(self, apply: Callable[[], object], stop: threading.Event | None,
                       beat: Callable[[], object] | None) -> bool:
        """Call ``apply`` (on fresh connections) until it does not fail for want of the database
        (:data:`DATABASE_DOWN`), waiting ``RETRY_START_S`` doubling to ``RETRY_MAX_S`` between
        tries and beating meanwhile; returns False when ``stop`` was set first (the batch is left
        to the next watch's list). Any other error is raised."""
        delay = RETRY_START_S
        while True:
            close_old_connections()
            try:
                apply()
                return True
            except DATABASE_DOWN as exc:
                self.database_waits += 1
                log.warning("reconciler: the database did not take a batch (%s: %s); applying it again in %.1f s",
                            type(exc).__name__, str(exc).strip().split("\n", 1)[0], delay)
            if stop is None:
                time.sleep(delay)
            elif stop.wait(delay):
                return False
            if beat is not None:
                beat()
            delay = min(RETRY_MAX_S, delay * 2)

    # -- handlers -------------------------------------------------------------------------------

    def _reject(self, kind: str, ref: str, message: str) -> str:
        log.warning("reconciler: rejected %s %s: %s", kind, ref, message)
        self.rejected = (self.rejected + [(kind, ref, message)])[-100:]
        return REJECTED

    def _node_seen(self, e: NodeSeen) -> str:
        changed = node_observe(cluster=self.cluster, name=e.name, ready=e.ready, schedulable=e.schedulable,
                               allocatable=e.allocatable, labels=e.labels, taints=e.taints, images=images_of(e),
                               at_s=e.at_s, now_s=self.clock())
        return CHANGED if changed else UNCHANGED

    def _node_gone(self, e: NodeGone) -> str:
        return CHANGED if node_gone(cluster=self.cluster, name=e.name, at_s=e.at_s, now_s=self.clock()) else UNCHANGED

    def _pod_pending(self, e: PodPending) -> str:
        if Workload.objects.filter(cluster=self.cluster, kind=Workload.PRODUCTION, name=e.ref).exists():
            raise ObservationRejected(f"{e.ref!r} is a production pod of the blueprint", field="ref",
                                      accepted="a batch pod (tier label batch)")
        _, changed = observe.batch_observe_pending(
            cluster=self.cluster, ref=e.ref, request=e.requests, limit=e.limits, labels=e.labels,
            priority=e.priority, owner=e.owner, gang=e.gang, min_member=e.min_member, image=e.image,
            constraints=e.constraints, grace_s=e.grace_s, uid=e.uid, at_s=e.at_s, now_s=self.clock())
        if changed and self.wake is not None:
            self.wake(self.cluster.id)
        return CHANGED if changed else UNCHANGED

    def _pod(self, ref: str) -> BatchPod | None:
        return BatchPod.objects.filter(cluster=self.cluster, workload__name=ref).select_related("workload").first()

    def _pod_running(self, e: PodRunning) -> str:
        pod = self._pod(e.ref)
        node_id = Node.objects.filter(cluster=self.cluster, name=e.node).values_list("id", flat=True).first()
        if pod is None or node_id is None:
            return UNKNOWN
        self._tell("running", [e.ref])
        return CHANGED if observe.batch_observe_running(pod=pod, node_id=node_id, at_s=e.at_s, now_s=self.clock(),
                                                           admitted=e.admitted) else UNCHANGED

    def _pod_finished(self, e: PodFinished) -> str:
        pod = self._pod(e.ref)
        if pod is None:
            return UNKNOWN
        if pod.source == BatchPod.REST:  # Kalena started it (Docker, Swarm): kalena_web.control.started
            return CHANGED if started.finished(pod, node=e.node, outcome=e.outcome, reason=e.reason,
                                               exit_code=e.exit_code, at_s=e.at_s, now_s=self.clock()) else UNCHANGED
        if e.outcome == "evicted" and pod.state == BatchPod.BOUND and pod.workload.node_id is not None:
            self._eviction_cooldown(pod, e)
        changed = lifecycle.batch_finish(pod=pod, now_s=self.clock(), state=BatchPod.COMPLETED, outcome=e.outcome,
                                          reason=e.reason)
        return CHANGED if changed else UNCHANGED

    def _eviction_cooldown(self, pod: BatchPod, e: PodFinished) -> None:
        """The orchestrator evicted the pod: close its owner × node pair for the cooldown,
        unless Kalena's own eviction of it is already recorded."""
        from kalena_web.control.escalation import eviction_retry_settle

        w = pod.workload
        if EvictionRecord.objects.filter(workload=w, time_s__gte=pod.bound_s or 0.0).exists():
            return
        if eviction_retry_settle(pod=pod, now_s=e.at_s or self.clock(), evicted=True):
            return  # Kalena's own eviction, whose answer had timed out: recorded with its cause
        EvictionRecord.objects.get_or_create(source_key=f"watch:{w.id}:{pod.bound_s or 0:.3f}", defaults=dict(
            cluster=self.cluster, node_id=w.node_id, workload=w, workload_name=w.name, time_s=e.at_s or self.clock(),
            cause="orchestrator", tier="batch", priority=w.priority,
            detail={"why": f"evicted by the orchestrator: {e.reason}", "limit_breach": False}))

    def _pod_refused(self, e: PodRefused) -> str:
        pod = self._pod(e.ref)
        if pod is None:
            return UNKNOWN
        changed = lifecycle.batch_finish(pod=pod, now_s=self.clock(), state=BatchPod.REFUSED, outcome="refused",
                                          reason=f"{e.reason} on {e.node}")
        return CHANGED if changed else UNCHANGED

    def _pod_gone(self, e: PodGone) -> str:
        pod = self._pod(e.ref)
        if pod is not None and pod.source == BatchPod.REST:
            return CHANGED if started.gone(pod, now_s=self.clock()) else UNCHANGED
        if pod is not None:
            return CHANGED if lifecycle.batch_gone(pod=pod, now_s=self.clock()) else UNCHANGED
        return CHANGED if production_gone(cluster=self.cluster, ref=e.ref, now_s=self.clock()) else UNKNOWN

    def _production_seen(self, e: ProductionSeen) -> str:
        if BatchPod.objects.filter(cluster=self.cluster, workload__name=e.ref).exists():
            raise ObservationRejected(f"{e.ref!r} is a batch pod", field="labels",
                                      accepted="a pod's tier does not change while it exists")
        self._await_drop(e.ref)  # this report supersedes any kept one
        try:
            changed = production_observe(
                cluster=self.cluster, ref=e.ref, node_name=e.node, request=e.requests, limit=e.limits,
                labels=e.labels, at_s=e.at_s, now_s=self.clock(), annotations=e.annotations, owner=e.owner,
                owner_error=e.owner_error, start_s=e.start_s, anti_affinity=e.anti_affinity)
        except ObservationRejected as exc:
            if exc.field == "node" and e.node:  # applied when the node's NodeSeen is (module doc)
                self._awaiting.setdefault(e.node, {})[e.ref] = e
            raise
        return CHANGED if changed else UNCHANGED

    def _resynced(self, e: Resynced) -> str:
        now = self.clock()
        for ref in [ref for kept in self._awaiting.values() for ref in kept if ref not in e.pods]:
            self._await_drop(ref)
        changed = started.relisted(self.cluster, pods=e.pods, nodes=e.nodes, at_s=e.at_s, now_s=now)
        absent = [(pod_id, name) for pod_id, name in BatchPod.objects.filter(
            cluster=self.cluster, source=BatchPod.WATCH, gone=False).values_list("id", "workload__name")
            if name not in e.pods]  # names only: whole rows for the absent ones alone
        mine = [pod_id for pod_id, name in absent if self.owns is None or self.owns("pod", name)]
        for pod in BatchPod.objects.filter(id__any=mine).select_related("workload").order_by("id"):
            changed |= lifecycle.batch_gone(pod=pod, now_s=now, reason="absent from the re-list")
        observed = ProductionPlacement.objects.filter(workload__cluster=self.cluster).exclude(pod="").values_list(
            "pod", flat=True)
        for ref in list(observed):
            if ref not in e.pods and (self.owns is None or self.owns("pod", ref)):
                changed |= production_gone(cluster=self.cluster, ref=ref, now_s=now)
        for name in NodeCondition.objects.filter(node__cluster=self.cluster, gone=False).values_list("node__name",
                                                                                                    flat=True):
            if name not in e.nodes and (self.owns is None or self.owns("node", name)):
                changed |= node_gone(cluster=self.cluster, name=name, at_s=e.at_s, now_s=now)
        return CHANGED if changed else UNCHANGED


_HANDLERS: dict[type, Callable[[Reconciler, object], str]] = {
    NodeSeen: Reconciler._node_seen, NodeGone: Reconciler._node_gone, PodPending: Reconciler._pod_pending,
    PodRunning: Reconciler._pod_running, PodFinished: Reconciler._pod_finished, PodRefused: Reconciler._pod_refused,
    PodGone: Reconciler._pod_gone, ProductionSeen: Reconciler._production_seen, Resynced: Reconciler._resynced,
}


def reconcile(*, cluster: Cluster, event: WatchEvent, now_s: float | None = None) -> str:
    """Apply one event to ``cluster`` (no wake-up, see :class:`Reconciler`); returns the outcome."""
    clock = (lambda: now_s) if now_s is not None else time.time
    return Reconciler(cluster=cluster, clock=clock).apply(event)
