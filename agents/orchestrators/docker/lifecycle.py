"""Engine JSON → Kalena's watch events (docs/design.md §14), for every engine at once (pure: no I/O).

:class:`Lifecycle` is the watcher's store (client-go's Reflector store): it is fed each engine's
re-list (``docker inspect`` of every Kalena container, :meth:`Lifecycle.resync`) and then its
events (``GET /events`` JSON, :meth:`Lifecycle.event`), and answers with the events of
``agents.orchestrators.events`` — never one twice, none missed across a reconnect:

==============================  ==========================================================
engine                          watch event
==============================  ==========================================================
``start``                       ``PodRunning(ref, node)``
``die`` exit 0                  ``PodFinished(outcome="succeeded", reason="Completed")``
``die`` after an ``oom``        ``PodFinished(outcome="oom", reason="OOMKilled: …numbers")``
``die`` after a ``kill``        ``PodFinished(outcome="evicted", reason="Killed (signal N)")``
``die`` otherwise               ``PodFinished(outcome="failed", reason="Error")``
other containers (production)   ``ProductionSeen`` while running (ref: workload label, else
                                ``<node>/<name>``), ``PodGone`` when they die
``destroy``                     ``PodGone(ref)`` when an unfinished container of the pod is
                                removed and none is left (removing a finished one is
                                housekeeping: nothing is emitted)
engine unreachable              ``NodeSeen(ready=False)``; after ``lost_after_s`` its pods
                                finish ``evicted`` / ``NodeLost``, one node per
                                ``1 / reschedule_nodes_per_s`` seconds (docs/design.md §14: 0.1/s)
==============================  ==========================================================

Identity: a pod's ref is its ``kalena.naughtian.io/workload`` label; a pod has one *current*
container — the highest attempt seen on any engine. Events of older attempts change nothing
(a late ``destroy`` of a replaced container never removes the running copy), and an older
attempt found running is reported in :attr:`Lifecycle.stale` for the watcher to stop (one copy
per pod). A container found exited on re-list that was running when the watcher lost sight of
it died unobserved (an engine restart kills containers without live-restore): ``evicted`` /
``EngineRestart``, so the pod is requeued once. Malformed labels or events are reported in
:attr:`Lifecycle.errors` (naming the container) and skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from agents.errors import TelemetryError
from agents.orchestrators.docker.labels import LabelError, PodIdentity, identity_of
from agents.units import unix_s_from_rfc3339
from agents.orchestrators.events import (
    NodeSeen, PodFinished, PodGone, PodRunning, ProductionSeen, Resynced, WatchEvent,
)

#: Kubernetes' default node-eviction rate (``--node-eviction-rate``), docs/design.md §14.
RESCHEDULE_NODES_PER_S = 0.1
#: How long an engine may be unreachable before its pods are rescheduled (kube-controller-manager's
#: ``--node-monitor-grace-period`` default, 40 s).
LOST_AFTER_S = 40.0


@dataclass
class Tracked:
    """One Kalena container as last seen: ``status`` ``created`` | ``running`` | ``exited``;
    ``killed_signal`` / ``oom`` set by ``kill`` / ``oom`` events before its ``die``."""

    node: str
    container_id: str
    name: str
    identity: PodIdentity
    status: str
    limit_bytes: float = 0.0
    killed_signal: str = ""
    oom: bool = False
    finished: bool = False
    finished_at_s: float = 0.0


@dataclass
class _Node:
    name: str
    ready: bool = False
    down_since_s: float | None = None
    lost: bool = False
    seen: NodeSeen | None = None


@dataclass
class Lifecycle:
    """The watcher's store over every engine (see module doc).

    Args:
        lost_after_s: an engine unreachable this long has its pods rescheduled.
        reschedule_nodes_per_s: at most this many unreachable nodes' pods per second.
    """

    lost_after_s: float = LOST_AFTER_S
    reschedule_nodes_per_s: float = RESCHEDULE_NODES_PER_S
    containers: dict[tuple[str, str], Tracked] = field(default_factory=dict)
    nodes: dict[str, _Node] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    #: (node, container id) of copies to stop: an older attempt running, or a lost pod's copy.
    stale: list[tuple[str, str]] = field(default_factory=list)
    #: (node, container id) of finished containers of a superseded attempt (safe to remove).
    removable: list[tuple[str, str]] = field(default_factory=list)
    #: (node, container id) of production containers that started: the watcher inspects them
    #: and hands the data to :meth:`production_seen`.
    inspect_wanted: list[tuple[str, str]] = field(default_factory=list)
    production: dict[tuple[str, str], str] = field(default_factory=dict)
    _last_reschedule_s: float | None = None
    _lost_attempts: set[tuple[str, int]] = field(default_factory=set)
    _last: dict[str, tuple] = field(default_factory=dict)

    # --- reads -----------------------------------------------------------------------------
    def current(self, ref: str) -> Tracked | None:
        """The pod's current container (highest attempt on any engine), or None."""
        mine = [t for t in self.containers.values() if t.identity.ref == ref]
        return max(mine, key=lambda t: (t.identity.attempt, t.status == "running")) if mine else None

    def refs(self) -> frozenset[str]:
        """Every pod this store holds: batch pods and production containers."""
        return frozenset(t.identity.ref for t in self.containers.values()) | frozenset(self.production.values())

    def max_attempt(self, ref: str) -> int:
        """Highest attempt of ``ref`` seen anywhere (−1 when none): a new placement uses more."""
        return max((t.identity.attempt for t in self.containers.values() if t.identity.ref == ref), default=-1)

    # --- nodes -------------------------------------------------------------------------------
    def node_up(self, seen: NodeSeen) -> list[WatchEvent]:
        """The engine answered (connect, reconnect): its node is ready as ``seen`` says."""
        node = self.nodes.setdefault(seen.name, _Node(seen.name))
        node.ready, node.down_since_s, node.seen = seen.ready, None, seen
        node.lost = False
        return [seen]

    def node_down(self, name: str, *, at_s: float, reason: str = "") -> list[WatchEvent]:
        """The engine stopped answering: its node is not ready (no new batch), once."""
        node = self.nodes.setdefault(name, _Node(name))
        if not node.ready and node.down_since_s is not None:
            return []
        node.ready = False
        node.down_since_s = at_s
        base = node.seen or NodeSeen(name=name, ready=False, schedulable=False, allocatable=(0.0,) * 8)
        labels = {**base.labels, "kalena.naughtian.io/unreachable": reason[:200] or "engine unreachable"}
        return [replace(base, ready=False, labels=labels, at_s=at_s)]

    def due(self, now_s: float) -> list[WatchEvent]:
        """Pods of engines unreachable for ``lost_after_s`` finish ``evicted``/``NodeLost``, one
        node at a time, no faster than ``reschedule_nodes_per_s``."""
        gap_s = 1.0 / self.reschedule_nodes_per_s
        if self._last_reschedule_s is not None and now_s - self._last_reschedule_s < gap_s:
            return []
        for node in sorted(self.nodes.values(), key=lambda n: (n.down_since_s or 0.0, n.name)):
            if node.ready or node.lost or node.down_since_s is None or now_s - node.down_since_s < self.lost_after_s:
                continue
            node.lost = True
            self._last_reschedule_s = now_s
            out: list[WatchEvent] = []
            for t in list(self.containers.values()):
                if t.node != node.name or t.finished or self.current(t.identity.ref) is not t:
                    continue
                t.finished = True
                self._lost_attempts.add((t.identity.ref, t.identity.attempt))
                out += self._emit(PodFinished(ref=t.identity.ref, node=t.node, outcome="evicted", reason="NodeLost",
                                              at_s=now_s))
            return out
        return []

    # --- re-list -----------------------------------------------------------------------------
    def resync(self, node: str, inspects: Iterable[Mapping[str, Any]], *, at_s: float,
               unobserved_exit_evicts: bool = True) -> list[WatchEvent]:
        """Apply one engine's full list (inspect JSON of every Kalena container on it).

        Returns the events of what changed since it was last seen, then :class:`Resynced`
        with every pod and node this store holds (other engines' pods included).
        ``unobserved_exit_evicts``: a container running when last seen and found exited non-zero
        died unobserved (``evicted`` / ``EngineRestart``) — true for an engine's own list; false
        for a Swarm task list (:func:`~agents.orchestrators.docker.swarm.task_inspect`), whose
        ``failed`` is the task's own outcome.
        """
        before = {cid: t for (n, cid), t in self.containers.items() if n == node}
        seen: set[str] = set()
        out: list[WatchEvent] = []
        inspects = list(inspects)
        production_before = {cid: ref for (n, cid), ref in self.production.items() if n == node}
        production_now: set[str] = set()
        for attrs in inspects:
            if not _is_batch(attrs):
                if (attrs.get("State") or {}).get("Status") == "running":
                    out += self.production_seen(node, attrs, at_s=at_s)
                    production_now.add(str(attrs.get("Id", "")))
                continue
            tracked = self._from_inspect(node, attrs)
            if tracked is None:
                continue
            seen.add(tracked.container_id)
            old = before.get(tracked.container_id)
            if old is not None:
                tracked.finished = old.finished
                if old.status == "running" and tracked.status == "exited" and not tracked.oom \
                        and _exit_code(attrs) != 0 and not tracked.killed_signal:
                    tracked.killed_signal = old.killed_signal or ("EngineRestart" if unobserved_exit_evicts else "")
            self.containers[(node, tracked.container_id)] = tracked
            out += self._state_events(tracked, exit_code=_exit_code(attrs), at_s=at_s)
        for cid, old in before.items():
            if cid not in seen:
                del self.containers[(node, cid)]
                if not old.finished and self.current(old.identity.ref) is None:
                    out += self._emit(PodGone(ref=old.identity.ref, at_s=at_s))
        for cid, ref in production_before.items():
            if cid not in production_now:
                out += self._production_gone(node, cid, at_s)
        out.append(self.resynced(at_s=at_s))
        return out

    def production_seen(self, node: str, attrs: Mapping[str, Any], *, at_s: float) -> list[WatchEvent]:
        """A running container that is not Kalena batch is production on its node (service tier,
        docs/design.md §14 ``ProductionSeen``): its ref is its workload label, else ``<node>/<container
        name>``; requests and limits as the agent reads them (labels, HostConfig)."""
        from agents.discovery.docker import workload_from_inspect
        from agents.errors import DiscoveryError

        errors: list[str] = []
        try:
            w = workload_from_inspect(dict(attrs), cgroup="", errors=errors)
        except (DiscoveryError, KeyError) as exc:
            self.errors.append(f"{node}: production container {attrs.get('Name', '?')!r}: {exc}; skipped")
            return []
        self.errors += [f"{node}: {m}" for m in errors]
        if w.tier != "service":
            return []  # a DaemonSet-like container: never charged, never evicted
        labels = (attrs.get("Config") or {}).get("Labels") or {}
        ref = labels.get("kalena.naughtian.io/workload") or f"{node}/{str(attrs.get('Name', '')).lstrip('/')}"
        self.production[(node, str(attrs["Id"]))] = ref
        event = ProductionSeen(ref=ref, node=node, requests=tuple(float(v) for v in w.request),
                               limits=tuple(float(v) for v in w.limit), labels=dict(labels), at_s=at_s)
        return self._emit(event)

    def _production_gone(self, node: str, cid: str, at_s: float) -> list[WatchEvent]:
        ref = self.production.pop((node, cid), None)
        if ref is None or ref in self.production.values():
            return []
        return self._emit(PodGone(ref=ref, at_s=at_s))

    def resynced(self, *, at_s: float) -> Resynced:
        """Every pod and node this store holds (all engines')."""
        return Resynced(pods=self.refs(), nodes=frozenset(self.nodes), at_s=at_s)

    def _from_inspect(self, node: str, attrs: Mapping[str, Any]) -> Tracked | None:
        cid = str(attrs.get("Id", ""))
        name = str(attrs.get("Name", "")).lstrip("/") or cid[:12]
        labels = (attrs.get("Config") or {}).get("Labels") or {}
        try:
            identity = identity_of(labels, container=name)
        except LabelError as exc:
            self.errors.append(f"{node}: {exc}; skipped")
            return None
        if identity is None or identity.tier != "batch":
            return None
        state = attrs.get("State") or {}
        status = {"running": "running", "created": "created", "restarting": "running", "paused": "running"}.get(
            str(state.get("Status", "")), "exited")
        host = attrs.get("HostConfig") or {}
        return Tracked(node=node, container_id=cid, name=name, identity=identity, status=status,
                       limit_bytes=float(host.get("Memory") or 0), oom=bool(state.get("OOMKilled")),
                       finished_at_s=_rfc3339_s(state.get("FinishedAt")),
                       killed_signal=str(state.get("Killed") or ""))  # a Swarm task stopped (task_inspect)

    # --- events ------------------------------------------------------------------------------
    def event(self, node: str, message: Mapping[str, Any]) -> list[WatchEvent]:
        """Apply one engine event (``GET /events`` JSON). Non-container events, containers that
        are not Kalena batch, and events for containers this store never listed are skipped
        (the latter with a message: they were created before the list and are covered by it,
        or belong to no pod)."""
        if message.get("Type") != "container":
            return []
        actor = message.get("Actor") or {}
        cid = str(actor.get("ID") or message.get("id") or "")
        attributes = actor.get("Attributes") or {}
        action = str(message.get("Action") or message.get("status") or "")
        at_s = _event_time(message)
        name = str(attributes.get("name", cid[:12]))
        key = (node, cid)
        if key in self.production:
            return self._production_gone(node, cid, at_s) if action in ("die", "destroy") else []
        tracked = self.containers.get(key)
        if tracked is None:
            try:
                identity = identity_of(attributes, container=name)
            except LabelError as exc:
                self.errors.append(f"{node}: {exc}; event {action!r} skipped")
                return []
            if identity is None or identity.tier != "batch":
                if action == "start" and str(attributes.get("kalena.naughtian.io/daemonset", "")).lower() != "true":
                    self.inspect_wanted.append(key)
                return []
            if action in ("destroy", "die", "kill", "oom"):
                self.errors.append(f"{node}: event {action!r} for container {name!r} ({cid[:12]}) this watcher "
                                   "never listed; skipped")
                return []
            tracked = Tracked(node=node, container_id=cid, name=name, identity=identity, status="created",
                              limit_bytes=0.0)
            self.containers[key] = tracked
        if action == "start":
            if tracked.status == "exited" and at_s <= tracked.finished_at_s:
                return []  # older than the list that showed it exited
            tracked.status = "running"
            tracked.killed_signal, tracked.oom = "", False
            return self._state_events(tracked, exit_code=None, at_s=at_s)
        if action == "kill":
            tracked.killed_signal = str(attributes.get("signal", "")) or tracked.killed_signal
            return []
        if action == "oom":
            tracked.oom = True
            return []
        if action == "die":
            if tracked.status == "exited":
                return []  # the list already showed it exited
            tracked.status, tracked.finished_at_s = "exited", at_s
            try:
                code = int(attributes.get("exitCode", ""))
            except ValueError:
                self.errors.append(f"{node}: die of container {name!r} without a numeric exitCode "
                                   f"({attributes.get('exitCode')!r}); read as failed")
                code = None
            return self._state_events(tracked, exit_code=code, at_s=at_s)
        if action == "destroy":
            del self.containers[key]
            if tracked.finished or tracked.identity.ref in self.refs():
                return []  # housekeeping of a finished container, or another copy remains
            return self._emit(PodGone(ref=tracked.identity.ref, at_s=at_s))
        return []

    # --- shared ------------------------------------------------------------------------------
    def _state_events(self, t: Tracked, *, exit_code: int | None, at_s: float) -> list[WatchEvent]:
        ref = t.identity.ref
        current = self.current(ref)
        if current is not t:
            t.finished = True  # never the pod's state: its removal is housekeeping, not the pod gone
            if t.status == "running":
                self.stale.append((t.node, t.container_id))
            elif t.status == "exited":
                self.removable.append((t.node, t.container_id))
            return []
        if (ref, t.identity.attempt) in self._lost_attempts:
            t.finished = True  # its end was handed on (NodeLost) when its node was lost
            if t.status == "running":
                self.stale.append((t.node, t.container_id))
            return []
        if t.status == "running":
            return self._emit(PodRunning(ref=ref, node=t.node, at_s=at_s), attempt=t.identity.attempt)
        if t.status != "exited":
            return []
        t.finished = True
        self.removable.append((t.node, t.container_id))
        return self._emit(_finished(t, exit_code, at_s), attempt=t.identity.attempt)

    def _emit(self, event: WatchEvent, *, attempt: int = -1) -> list[WatchEvent]:
        """Drop an event that repeats the last one for its pod (a re-list after an event)."""
        ref = getattr(event, "ref", "")
        key = (*_dedup_key(event), attempt)
        if self._last.get(ref) == key:
            return []
        self._last[ref] = key
        return [event]


def _is_batch(attrs: Mapping[str, Any]) -> bool:
    labels = (attrs.get("Config") or {}).get("Labels") or {}
    return "kalena.naughtian.io/workload" in labels and labels.get("kalena.naughtian.io/tier") == "batch"


def _finished(t: Tracked, exit_code: int | None, at_s: float) -> PodFinished:
    ref, node = t.identity.ref, t.node
    if t.oom:
        numbers = f"memory limit {int(t.limit_bytes)} bytes, request {int(t.identity.request_bytes)} bytes"
        return PodFinished(ref=ref, node=node, outcome="oom", reason=f"OOMKilled: {numbers}", exit_code=exit_code,
                           at_s=at_s)
    if exit_code == 0:
        return PodFinished(ref=ref, node=node, outcome="succeeded", reason="Completed", exit_code=0, at_s=at_s)
    if t.killed_signal in ("EngineRestart", "Shutdown", "NodeLost", "Removed"):
        return PodFinished(ref=ref, node=node, outcome="evicted", reason=t.killed_signal, exit_code=exit_code,
                           at_s=at_s)
    if t.killed_signal:
        return PodFinished(ref=ref, node=node, outcome="evicted", reason=f"Killed (signal {t.killed_signal})",
                           exit_code=exit_code, at_s=at_s)
    return PodFinished(ref=ref, node=node, outcome="failed", reason="Error", exit_code=exit_code, at_s=at_s)


def _dedup_key(event: WatchEvent) -> tuple:
    if isinstance(event, PodRunning):
        return ("running", event.node)
    if isinstance(event, PodFinished):
        return ("finished", event.node)
    if isinstance(event, PodGone):
        return ("gone",)
    if isinstance(event, ProductionSeen):
        return ("production", event.node, event.requests, event.limits)
    return (type(event).__name__,)


def _exit_code(attrs: Mapping[str, Any]) -> int | None:
    code = (attrs.get("State") or {}).get("ExitCode")
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def _rfc3339_s(text: object) -> float:
    """Docker's RFC 3339 time (nanoseconds, ``Z``) → Unix s; 0 for the zero time or junk."""
    if not isinstance(text, str) or text.startswith("0001-"):
        return 0.0
    try:
        return unix_s_from_rfc3339(text, source="docker", field="State")
    except TelemetryError:
        return 0.0


def _event_time(message: Mapping[str, Any]) -> float:
    nano = message.get("timeNano")
    if isinstance(nano, int) and nano > 0:
        return nano / 1e9
    t = message.get("time")
    return float(t) if isinstance(t, int | float) and not isinstance(t, bool) else 0.0
