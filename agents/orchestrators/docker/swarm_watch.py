"""The Swarm watcher: every node's lifecycle from the managers, and each engine's own events
where Kalena can reach it (docs/design.md §14).

Threads:

* **managers** — list the nodes and Kalena's services with their tasks every ``relist_s``
  seconds, and at once when woken (a manager's ``service`` / ``node`` event, or a container
  event on any watched engine). Each node becomes ``NodeSeen``: ready when ``Status.State`` is
  ``ready``; schedulable when also ``Availability`` is ``active`` (``drain`` / ``pause`` →
  unschedulable); allocatable from ``Description.Resources`` or the engine's allocatable labels;
  images from its engine when watched. A node no longer listed (``docker node rm``) is
  ``NodeGone``. For every node whose engine is not watched now, the task list stands for the
  engine's container list (:func:`~agents.orchestrators.docker.swarm.task_inspect`): batch on a
  worker Kalena cannot reach still runs, completes, fails or is stopped in Kalena's view. A task
  the Swarm scheduler rejected is ``PodRefused``.
* **one per engine** of the configuration (workers too): connect, learn its Swarm node id
  (``docker info``), list its containers, then follow its container events — exactly the
  standalone engine's lifecycle (kill before die → evicted, OOM, production containers). While
  its stream is up the engine is its node's source; when it drops, the task list takes over.
* **timer** — a node the managers report down (or not ready) for ``lost_after_s`` has its pods
  finish ``evicted`` / ``NodeLost``, no faster than ``reschedule_nodes_per_s`` nodes per second
  (docs/design.md §14's 0.1/s): :meth:`Lifecycle.due
  <agents.orchestrators.docker.lifecycle.Lifecycle.due>`, the same store and rate the standalone
  engines use.

One copy per pod: a copy of an older (or lost) attempt found running — a node coming back with
the task it ran when it was declared lost — has its service removed through a manager and its
container stopped on its engine when that engine answers; finished attempts' services, and
refused ones' (a rejected task: the pod is refused, Kalena gives up on that attempt), are
removed once their event is handed on (nothing is left behind, listed or running).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from agents.orchestrators.base import ID_LABEL
from agents.orchestrators.docker.client import (
    ALLOCATABLE_CPU, ALLOCATABLE_MEMORY, Engine, SwarmOrchestrator, image_sizes,
)
from agents.orchestrators.docker.labels import ATTEMPT
from agents.orchestrators.docker.lifecycle import LOST_AFTER_S, RESCHEDULE_NODES_PER_S, Lifecycle
from agents.orchestrators.docker.swarm import (
    node_figures, node_name, node_state, task_event, task_inspect,
)
from agents.orchestrators.events import NodeGone, NodeSeen, PodRefused, Resynced, WatchEvent
from agents.units import parse_k8s_quantity

log = logging.getLogger(__name__)
BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 10.0
#: How often the managers' node and task lists are read without a wake-up (seconds).
RELIST_S = 2.0
#: Every this many manager passes, a ``Resynced`` (the full list) is handed on.
RESYNCED_EVERY = 5


def placed_task(tasks: list[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The task that says a batch service's state: the newest one that had a container (a
    replacement Swarm created after a drain or node failure has none, and Kalena's services
    restart never: the one that ran is the pod), else the newest."""
    def index(t: Mapping[str, Any]) -> int:
        return int((t.get("Version") or {}).get("Index", 0))

    ran = [t for t in tasks if ((t.get("Status") or {}).get("ContainerStatus") or {}).get("ContainerID")]
    pool = ran or list(tasks)
    return max(pool, key=index) if pool else None


def service_attempt(service: Mapping[str, Any]) -> int:
    """A batch service's attempt (its label ``kalena.naughtian.io/attempt``; 0 without one)."""
    try:
        return int(((service.get("Spec") or {}).get("Labels") or {}).get(ATTEMPT, "0") or 0)
    except ValueError:
        return 0


class SwarmWatcher:
    """Watch a Swarm (see module doc) and hand every watch event to ``emit``.

    Args:
        swarm: the adapter (its managers, and its ``engines``: the node engines to follow).
        emit: receives each event, from several threads, one at a time.
        lost_after_s, reschedule_nodes_per_s: see :class:`Lifecycle`.
        relist_s: the managers' list period (seconds).
        clock: Unix seconds.
    """

    def __init__(self, swarm: SwarmOrchestrator, emit: Callable[[WatchEvent], None] | None = None, *,
                 lost_after_s: float = LOST_AFTER_S, reschedule_nodes_per_s: float = RESCHEDULE_NODES_PER_S,
                 relist_s: float = RELIST_S, clock: Callable[[], float] = time.time) -> None:
        self.swarm = swarm
        self.engines: list[Engine] = list(swarm.engines)
        self._queue: queue.Queue[WatchEvent] = queue.Queue()
        self.emit = emit or self._queue.put
        self.clock = clock
        self.relist_s = relist_s
        self.lifecycle = Lifecycle(lost_after_s=lost_after_s, reschedule_nodes_per_s=reschedule_nodes_per_s)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._threads: list[threading.Thread] = []
        self._names: dict[str, str] = {}  # Swarm node id → node name
        self._sourced: dict[str, Engine] = {}  # node name → its engine, while its events stream is up
        self._images: dict[str, dict[str, float]] = {}
        self._service_of: dict[str, str] = {}  # container id → service id
        self._refused: dict[str, str] = {}  # service id of a rejected attempt → its node (to remove)
        self._node_keys: dict[str, tuple] = {}
        self._passes = 0
        self._manager_stream: Any = None
        #: per node: how many times its engine was (re)connected and listed
        self.connects: dict[str, int] = {}

    # --- the watcher's own lifecycle -------------------------------------------------------------
    def start(self) -> SwarmWatcher:
        targets: list[tuple[Callable[..., None], tuple]] = [(self._manager_loop, ()), (self._manager_events, ()),
                                                            (self._timer_loop, ())]
        targets += [(self._engine_loop, (engine,)) for engine in self.engines]
        for i, (target, args) in enumerate(targets):
            thread = threading.Thread(target=target, args=args, daemon=True, name=f"kalena-swarm-watch-{i}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        for engine in self.engines:
            engine.close_stream()
        if self._manager_stream is not None:
            try:
                self._manager_stream.close()
            except Exception:  # noqa: BLE001 - already closed
                pass
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def events(self, stop: threading.Event) -> Iterator[WatchEvent]:
        """Start, and yield every event until ``stop`` is set (the port's ``watch``)."""
        self.start()
        try:
            while not stop.is_set():
                try:
                    yield self._queue.get(timeout=0.5)
                except queue.Empty:
                    continue
        finally:
            self.stop()

    def run_forever(self) -> None:
        self.start()
        while not self._stop.wait(1.0):
            pass

    # --- managers --------------------------------------------------------------------------------
    def _manager_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.relist()
            except Exception as exc:  # noqa: BLE001 - no manager answers: nodes keep their last state
                log.warning("swarm watch: cannot list nodes and tasks: %s", exc)
            self._act()
            self._wake.wait(self.relist_s)
            self._wake.clear()

    def _manager_events(self) -> None:
        """Wake the lists on a manager's ``service`` or ``node`` event (a task's progress shows
        as service updates and container events; the timer covers the rest)."""
        backoff = BACKOFF_START_S
        while not self._stop.is_set():
            try:
                stream = self.swarm.manager_call("events", lambda c: c.events(
                    decode=True, filters={"type": ["service", "node"]}))
                self._manager_stream = stream
                backoff = BACKOFF_START_S
                for _ in stream:
                    if self._stop.is_set():
                        return
                    self._wake.set()
                raise ConnectionError("events stream ended")
            except Exception as exc:  # noqa: BLE001 - the manager went away: the timer lists on
                if self._stop.is_set():
                    return
                log.debug("swarm watch: manager events: %s; retrying in %.1f s", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    def relist(self) -> None:
        """One pass over the managers' node and task lists (see module doc)."""
        # a node that just joined has no description yet (no engine labels): named once it has one
        nodes = [n for n in self.swarm.node_list() if ((n.get("Description") or {}).get("Engine") or {})]
        services = self.swarm.services()
        now = self.clock()
        out: list[WatchEvent] = []
        with self._lock:
            names = {n["ID"]: node_name(n) for n in nodes}
            self._names = names
            for node in nodes:
                out += self._node_events(node, now)
            for name in [n for n in self._node_keys if n not in names.values()]:
                del self._node_keys[name]
                out += self.lifecycle.node_down(name, at_s=now, reason="removed from the swarm")
                out.append(NodeGone(name=name, at_s=now))
            by_node: dict[str, list[dict[str, Any]]] = {name: [] for name in names.values()}
            for service in services:
                task = placed_task(list(service.get("Tasks") or []))
                if task is None:
                    continue
                where = names.get(str(task.get("NodeID", "")), "")
                ref = ((service.get("Spec") or {}).get("Labels") or {}).get(ID_LABEL, "")
                if (task.get("Status") or {}).get("State") == "rejected":
                    event = task_event(task, ref=ref, node=where, at_s=now)
                    if isinstance(event, PodRefused):
                        out += self.lifecycle._emit(event, attempt=service_attempt(service))
                        # Kalena gives up on this attempt: its service goes once the refusal is handed on
                        self._refused[str(service.get("ID", ""))] = where
                    continue
                attrs = task_inspect(task)
                if attrs is None or not where:
                    continue
                self._service_of[attrs["Id"]] = str(service.get("ID", ""))
                by_node[where].append(attrs)
            for name, inspects in by_node.items():
                if name in self._sourced:
                    continue  # its engine's own list and events say it
                out += [e for e in self.lifecycle.resync(name, inspects, at_s=now, unobserved_exit_evicts=False)
                        if not isinstance(e, Resynced)]
            self._passes += 1
            if self._passes % RESYNCED_EVERY == 1:
                out.append(self.lifecycle.resynced(at_s=now))
            self._hand(out)

    def _node_events(self, node: Mapping[str, Any], now: float) -> list[WatchEvent]:
        name = node_name(node)
        ready, schedulable = node_state(node)
        cpu_mcpu, memory_bytes, labels = node_figures(node)
        try:
            if ALLOCATABLE_CPU in labels:
                cpu_mcpu = parse_k8s_quantity(labels[ALLOCATABLE_CPU], source=name, field=ALLOCATABLE_CPU) * 1000.0
            if ALLOCATABLE_MEMORY in labels:
                memory_bytes = parse_k8s_quantity(labels[ALLOCATABLE_MEMORY], source=name, field=ALLOCATABLE_MEMORY)
        except Exception as exc:  # noqa: BLE001 - DiscoveryError: the node's own figures stand
            log.warning("swarm watch %s: %s; the node's own figures are used", name, exc)
        state = str((node.get("Status") or {}).get("State", ""))
        labels = {**labels, "kalena.naughtian.io/swarm-role": str((node.get("Spec") or {}).get("Role", "")),
                  "kalena.naughtian.io/swarm-availability": str((node.get("Spec") or {}).get("Availability", ""))}
        sizes = self._images.get(name, {})
        allocatable = (cpu_mcpu, memory_bytes, 0.0, float("inf"), float("inf"), float("inf"), float("inf"),
                       float("inf"))
        key = (ready, schedulable, allocatable, tuple(sorted(labels.items())), tuple(sorted(sizes)))
        if self._node_keys.get(name) == key:
            return []
        self._node_keys[name] = key
        if not ready:
            out = self.lifecycle.node_down(name, at_s=now, reason=f"swarm node {state or 'unknown'}")
            return [replace(e, schedulable=False) if isinstance(e, NodeSeen) else e for e in out]
        seen = NodeSeen(name=name, ready=True, schedulable=schedulable, allocatable=allocatable, labels=labels,
                        images=tuple(sorted(sizes)), at_s=now, image_bytes=dict(sizes))
        before = self.lifecycle.nodes.get(name)
        if before is not None and not before.ready and name in self._sourced:
            # the node is back: its engine's stream reconnects and re-lists, so a copy still
            # running from before it was declared lost is found (and stopped)
            self._sourced[name].close_stream()
        return self.lifecycle.node_up(seen)

    # --- engines ---------------------------------------------------------------------------------
    def _engine_loop(self, engine: Engine) -> None:
        backoff = BACKOFF_START_S
        name = ""
        while not self._stop.is_set():
            try:
                info = engine._call("info", lambda c: c.info())
                node_id = str((info.get("Swarm") or {}).get("NodeID") or "")
                name = self._names.get(node_id, "")
                if not name:  # not listed by a manager yet (or not in the swarm): ask again soon
                    self._wake.set()
                    raise ConnectionError(f"engine of swarm node {node_id or '(none)'} not listed by a manager yet")
                sizes = image_sizes(i.attrs for i in engine._call("images", lambda c: c.images.list()))
                since = engine.engine_time_s()
                stream = engine.events(since_s=since)
                with self._lock:
                    if sizes != self._images.get(name):
                        self._images[name] = sizes
                        self._node_keys.pop(name, None)  # the next pass hands the node on with its images
                    # a task the list showed waiting has no container yet: its engine's create
                    # and start events track it from here (never "gone" for want of one)
                    for key in [k for k in self.lifecycle.containers if k[0] == name and k[1].startswith("task:")]:
                        del self.lifecycle.containers[key]
                    listed = self.lifecycle.resync(name, engine.all_containers(), at_s=self.clock())
                    self._sourced[name] = engine
                    self.connects[name] = self.connects.get(name, 0) + 1
                    self._hand([e for e in listed if not isinstance(e, Resynced)])
                self._wake.set()
                self._act()
                backoff = BACKOFF_START_S
                for message in stream:
                    if self._stop.is_set():
                        return
                    with self._lock:
                        try:
                            self._hand(self.lifecycle.event(name, message))
                        except Exception:  # noqa: BLE001 - a malformed event never stops the watcher
                            log.exception("swarm watch %s: event %r skipped", name, str(message)[:200])
                    if message.get("Action") in ("start", "die", "destroy"):
                        self._wake.set()
                    self._inspect_production(engine, name)
                    self._act()
                if self._stop.is_set():
                    return
                raise ConnectionError("events stream ended")
            except Exception as exc:  # noqa: BLE001 - engine down, stream dropped
                with self._lock:
                    if self._sourced.get(name) is engine:
                        del self._sourced[name]  # the managers' task list says this node from now on
                if self._stop.is_set():
                    return
                log.info("swarm watch %s: %s; the task list stands in; retrying in %.1f s",
                         name or engine.config.url, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    def _inspect_production(self, engine: Engine, name: str) -> None:
        with self._lock:
            wanted = [cid for n, cid in self.lifecycle.inspect_wanted if n == name]
            self.lifecycle.inspect_wanted = [(n, c) for n, c in self.lifecycle.inspect_wanted if n != name]
        for cid in wanted:
            try:
                attrs = engine.inspect(cid)
            except Exception as exc:  # noqa: BLE001 - the next re-list sees it
                log.warning("swarm watch %s: cannot inspect %s: %s", name, cid[:12], exc)
                continue
            if attrs is not None and (attrs.get("State") or {}).get("Status") == "running":
                with self._lock:
                    self._hand(self.lifecycle.production_seen(name, attrs, at_s=self.clock()))

    # --- timer, handing on, acting ---------------------------------------------------------------
    def _timer_loop(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                self._hand(self.lifecycle.due(self.clock()))
            self._act()

    def _hand(self, events: list[WatchEvent]) -> None:
        for message in self.lifecycle.errors:
            log.warning("swarm watch: %s", message)
        self.lifecycle.errors.clear()
        for event in events:
            try:
                self.emit(event)
            except Exception:  # noqa: BLE001 - the reconciler's failure is logged, the watcher goes on
                log.exception("swarm watch: applying %r failed", event)

    def _act(self) -> None:
        """Stale copies: remove their service and stop the container where its engine answers;
        finished attempts and refused ones (a rejected task): remove their service."""
        with self._lock:
            stale, removable = list(self.lifecycle.stale), list(self.lifecycle.removable)
            refused = dict(self._refused)
            self.lifecycle.stale.clear()
            self.lifecycle.removable.clear()
            self._refused.clear()
            services = {cid: self._service_of.get(cid, "") for _, cid in stale + removable}
            engines = dict(self._sourced)
        for node, cid in stale:
            log.warning("swarm watch %s: stopping %s, a copy of a pod placed elsewhere (or lost)", node, cid[:12])
        for node, cid in stale + removable:
            engine = engines.get(node)
            service_id = services[cid] or self._service_from_engine(engine, cid)
            try:
                if service_id:
                    self.swarm.remove_service(service_id)
                if (node, cid) in stale and engine is not None and not cid.startswith("task:"):
                    engine.stop_and_remove(cid, grace_s=2)
            except Exception as exc:  # noqa: BLE001 - retried on the next list
                log.warning("swarm watch %s: cannot remove %s: %s", node, cid[:12], exc)
        for service_id, node in refused.items():
            try:
                self.swarm.remove_service(service_id)  # Swarm removes its task (and any container) with it
            except Exception as exc:  # noqa: BLE001 - still listed (rejected): retried on the next list
                log.warning("swarm watch %s: cannot remove refused service %s: %s", node, service_id[:12], exc)

    @staticmethod
    def _service_from_engine(engine: Engine | None, cid: str) -> str:
        if engine is None or cid.startswith("task:"):
            return ""
        try:
            attrs = engine.inspect(cid) or {}
        except Exception:  # noqa: BLE001 - gone or unreachable
            return ""
        return str(((attrs.get("Config") or {}).get("Labels") or {}).get("com.docker.swarm.service.id", ""))

