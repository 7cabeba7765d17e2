"""An in-memory orchestrator for the embedded default and tests (same contract as the real
adapters), including the watch part of the port: it emits the same events
(:mod:`agents.orchestrators.events`) the Kubernetes and Docker watchers do."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from agents.orchestrators.base import BatchSpec, StaleBinding, WorkloadGone, WorkloadRef
from agents.orchestrators.events import (
    NodeGone, NodeSeen, PodFinished, PodGone, PodPending, PodRefused, PodRunning, ProductionSeen, Resynced,
    Vector, WatchEvent,
)

_UNREPORTED: Vector = (16000.0, 64 * 2**30, 0.0, float("inf"), float("inf"), float("inf"), float("inf"), float("inf"))


@dataclass
class FakeOrchestrator:
    """Nodes and workloads in dictionaries; every call is recorded in ``log``.

    The watch: :meth:`watch` lists (a ``NodeSeen`` per node, a ``PodPending`` per pending pod,
    ``PodRunning`` per bound batch pod, ``ProductionSeen`` per service pod, then ``Resynced``)
    and then yields every change as it happens — :meth:`create_pending`, :meth:`bind`,
    :meth:`evict`, :meth:`finish`, :meth:`refuse`, :meth:`delete`, :meth:`node_update`,
    :meth:`node_remove`. :meth:`relist` makes the watch re-list (a 410's effect).
    """

    node_names: list[str] = field(default_factory=list)
    running: dict[str, WorkloadRef] = field(default_factory=dict)
    log: list[tuple[str, str, str]] = field(default_factory=list)
    pending: dict[str, PodPending] = field(default_factory=dict)
    node_events: dict[str, NodeSeen] = field(default_factory=dict)
    notes: list[tuple[str, str]] = field(default_factory=list)
    _watchers: list[queue.Queue] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def nodes(self) -> list[str]:
        return list(self.node_names)

    def workloads(self, node: str | None = None) -> list[WorkloadRef]:
        return [w for w in self.running.values() if node is None or w.node == node]

    def add_service(self, workload_id: str, node: str) -> None:
        """Seed a production workload (the blueprint's)."""
        self.running[workload_id] = WorkloadRef(workload_id, node, "service")
        self._emit(ProductionSeen(workload_id, node, (0.0,) * 8, (0.0,) * 8, at_s=time.time()))

    def bind(self, spec: BatchSpec, node: str) -> None:
        if node not in self.node_names:
            raise StaleBinding(f"bind {spec.id}: node {node!r} is gone")
        if spec.id in self.running:
            raise StaleBinding(f"bind {spec.id}: already bound to {self.running[spec.id].node}")
        self.running[spec.id] = WorkloadRef(spec.id, node, "batch", spec.priority)
        self.pending.pop(spec.id, None)
        self.log.append(("bind", spec.id, node))
        self._emit(PodRunning(spec.id, node, at_s=time.time()))

    def evict(self, workload_id: str, *, grace_s: float, reason: str) -> None:
        if workload_id not in self.running:
            raise WorkloadGone(f"evict {workload_id}: no such workload")
        ref = self.running.pop(workload_id)
        self.log.append(("evict", workload_id, reason))
        if ref.tier == "batch":
            self._emit(PodFinished(workload_id, ref.node, "evicted", reason="Evicted", at_s=time.time()))
        self._emit(PodGone(workload_id, at_s=time.time()))

    def note_pending(self, workload_id: str, message: str) -> None:
        """Why a pod stays pending (Kubernetes: a FailedScheduling event); kept in ``notes``."""
        self.notes.append((workload_id, message))

    # -- the world changing (tests and the embedded default drive these) -----------------------

    def create_pending(self, event: PodPending) -> None:
        """A batch pod appears, waiting for Kalena."""
        self.pending[event.ref] = event
        self._emit(event)

    def finish(self, workload_id: str, outcome: str = "succeeded", reason: str = "Completed",
               exit_code: int | None = 0) -> None:
        """A bound batch pod ends on its own."""
        ref = self.running.pop(workload_id)
        self._emit(PodFinished(workload_id, ref.node, outcome, reason, exit_code, at_s=time.time()))

    def refuse(self, workload_id: str, reason: str = "OutOfcpu") -> None:
        """The node refuses a bound pod at admission."""
        ref = self.running.pop(workload_id)
        self._emit(PodRefused(workload_id, ref.node, reason, at_s=time.time()))

    def delete(self, workload_id: str) -> None:
        """The pod object is deleted (pending or bound)."""
        self.pending.pop(workload_id, None)
        self.running.pop(workload_id, None)
        self._emit(PodGone(workload_id, at_s=time.time()))

    def node_update(self, event: NodeSeen) -> None:
        if event.name not in self.node_names:
            self.node_names.append(event.name)
        self.node_events[event.name] = event
        self._emit(event)

    def node_remove(self, name: str) -> None:
        self.node_names = [n for n in self.node_names if n != name]
        self.node_events.pop(name, None)
        self._emit(NodeGone(name, at_s=time.time()))

    def relist(self) -> None:
        """Make every watch re-list (what a 410 Gone does to a Kubernetes watch)."""
        for q in list(self._watchers):
            q.put(_RELIST)

    # -- the watch ------------------------------------------------------------------------------

    def listed(self) -> list[WatchEvent]:
        """The list a watch starts from, ``Resynced`` last."""
        now = time.time()
        out: list[WatchEvent] = [self.node_events.get(n) or NodeSeen(n, True, True, _UNREPORTED, at_s=now)
                                 for n in self.node_names]
        out += list(self.pending.values())
        for ref in self.running.values():
            if ref.tier == "batch":
                out.append(PodRunning(ref.id, ref.node, at_s=now))
            elif ref.tier == "service":
                out.append(ProductionSeen(ref.id, ref.node, (0.0,) * 8, (0.0,) * 8, at_s=now))
        out.append(Resynced(frozenset(self.pending) | frozenset(self.running), frozenset(self.node_names), at_s=now))
        return out

    def watch(self, stop: threading.Event) -> Iterator[WatchEvent]:
        """The list, then every change, until ``stop`` is set (see class doc)."""
        q: queue.Queue = queue.Queue()
        with self._lock:
            self._watchers.append(q)
            events = self.listed()
        try:
            yield from events
            while not stop.is_set():
                try:
                    item = q.get(timeout=0.1)
                except queue.Empty:
                    continue
                if item is _RELIST:
                    yield from self.listed()
                else:
                    yield item
        finally:
            self._watchers.remove(q)

    def _emit(self, event: WatchEvent) -> None:
        for q in list(self._watchers):
            q.put(event)


_RELIST = object()
