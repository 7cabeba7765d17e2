"""The standalone Docker watcher: each engine's events API drives the lifecycle (docs/design.md §14);
Swarm's is :mod:`agents.orchestrators.docker.swarm_watch`.

One thread per engine: connect → the node is seen (``NodeSeen``) → open the events stream from
the engine's clock → re-list every Kalena container (the engine keeps only a short event
history, so every (re)connect lists first) → apply each event. A stream that ends, or an engine
that does not answer, makes its node not ready and the thread retries with backoff (0.5 s
doubling to 10 s). A timer thread reschedules the pods of engines lost for long enough, no
faster than one node per 10 s (:class:`~agents.orchestrators.docker.lifecycle.Lifecycle`).
Copies found running for a pod now elsewhere (or declared lost) are stopped; finished
containers are removed once their event is handed on (nothing is left behind).

The watcher knows the engines and not Django: events go to ``emit`` (the control plane's
reconciler). ``emit`` is called from several threads, one event at a time, in each engine's
order. An engine error, malformed labels or an event for an unknown container are logged with
the container's name and skipped; nothing stops the watcher but :meth:`DockerWatcher.stop`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from agents.orchestrators.docker.client import Engine
from agents.orchestrators.docker.lifecycle import LOST_AFTER_S, RESCHEDULE_NODES_PER_S, Lifecycle
from agents.orchestrators.events import Resynced, WatchEvent

log = logging.getLogger(__name__)
BACKOFF_START_S = 0.5
BACKOFF_MAX_S = 10.0


class DockerWatcher:
    """Watch ``engines`` and hand every watch event to ``emit`` (see module doc).

    Args:
        engines: the engines (nodes) to watch.
        emit: receives each event; an exception it raises is logged and the event dropped
            only after the store moved on, so ``emit`` must be idempotent and durable itself.
        lost_after_s, reschedule_nodes_per_s: see :class:`Lifecycle`.
        clock: Unix seconds (tests pass their own).
    """

    def __init__(self, engines: Sequence[Engine], emit: Callable[[WatchEvent], None] | None = None, *,
                 lost_after_s: float = LOST_AFTER_S,
                 reschedule_nodes_per_s: float = RESCHEDULE_NODES_PER_S, clock: Callable[[], float] = time.time) -> None:
        self.engines = list(engines)
        self._queue: queue.Queue[WatchEvent] = queue.Queue()
        self.emit = emit or self._queue.put
        self._attempted: set[int] = set()
        self.clock = clock
        self.lifecycle = Lifecycle(lost_after_s=lost_after_s, reschedule_nodes_per_s=reschedule_nodes_per_s)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        #: per node: how many times its events stream was (re)connected and listed
        self.connects: dict[str, int] = {}

    # --- lifecycle of the watcher --------------------------------------------------------------
    def start(self) -> DockerWatcher:
        for i, engine in enumerate(self.engines):
            thread = threading.Thread(target=self._engine_loop, args=(engine,), daemon=True,
                                      name=f"kalena-docker-watch-{i}")
            thread.start()
            self._threads.append(thread)
        timer = threading.Thread(target=self._timer_loop, daemon=True, name="kalena-docker-watch-timer")
        timer.start()
        self._threads.append(timer)
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop every thread (waiting at most ``timeout_s`` in all: they are daemons, and an
        engine that hangs must not hold the caller)."""
        self._stop.set()
        for engine in self.engines:
            engine.close_stream()
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
        """Start and block until stopped (``kalena watch``)."""
        self.start()
        while not self._stop.wait(1.0):
            pass

    # --- one engine ------------------------------------------------------------------------------
    def _engine_loop(self, engine: Engine) -> None:
        index = self.engines.index(engine)
        backoff = BACKOFF_START_S
        name = engine.config.node or engine.config.url
        while not self._stop.is_set():
            try:
                name = engine.node
                seen = engine.node_seen(at_s=self.clock())
                since = engine.engine_time_s()
                stream = engine.events(since_s=since)
                with self._lock:
                    self._hand(self.lifecycle.node_up(seen))
                    listed = self.lifecycle.resync(name, engine.all_containers(), at_s=self.clock())
                    self._attempted.add(index)
                    self._hand(self._complete_lists_only(listed))
                    self.connects[name] = self.connects.get(name, 0) + 1
                self._act(engine)
                backoff = BACKOFF_START_S
                for message in stream:
                    if self._stop.is_set():
                        return
                    with self._lock:
                        try:
                            self._hand(self.lifecycle.event(name, message))
                        except Exception:  # noqa: BLE001 - a malformed event never stops the watcher
                            log.exception("docker watch %s: event %r skipped", name, str(message)[:200])
                    self._inspect_production(engine, name)
                    self._act(engine)
                if self._stop.is_set():
                    return
                raise ConnectionError("events stream ended")
            except Exception as exc:  # noqa: BLE001 - engine down, TLS refused, stream dropped
                if self._stop.is_set():
                    return
                log.warning("docker watch %s: %s; retrying in %.1f s", name, exc, backoff)
                with self._lock:
                    self._hand(self.lifecycle.node_down(name, at_s=self.clock(), reason=str(exc)))
                    if index not in self._attempted:
                        self._attempted.add(index)
                        self._hand(self._complete_lists_only([self.lifecycle.resynced(at_s=self.clock())]))
                self._stop.wait(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    def _inspect_production(self, engine: Engine, name: str) -> None:
        """A production container started: inspect it (its requests and limits) for the store."""
        with self._lock:
            wanted = [cid for n, cid in self.lifecycle.inspect_wanted if n == name]
            self.lifecycle.inspect_wanted = [(n, c) for n, c in self.lifecycle.inspect_wanted if n != name]
        for cid in wanted:
            try:
                attrs = engine.inspect(cid)
            except Exception as exc:  # noqa: BLE001 - the next re-list sees it
                log.warning("docker watch %s: cannot inspect %s: %s", name, cid[:12], exc)
                continue
            if attrs is not None and (attrs.get("State") or {}).get("Status") == "running":
                with self._lock:
                    self._hand(self.lifecycle.production_seen(name, attrs, at_s=self.clock()))

    def _complete_lists_only(self, events: list[WatchEvent]) -> list[WatchEvent]:
        """``Resynced`` says "the list holds every pod": hold it back until every engine was
        listed (or found down) once, so a pod on an engine not listed yet is never dropped."""
        if len(self._attempted) == len(self.engines):
            return events
        return [e for e in events if not isinstance(e, Resynced)]

    def _timer_loop(self) -> None:
        while not self._stop.wait(1.0):
            with self._lock:
                self._hand(self.lifecycle.due(self.clock()))
            for engine in self.engines:
                self._act(engine)

    # --- handing on and acting -------------------------------------------------------------------
    def _hand(self, events: list[WatchEvent]) -> None:
        for message in self.lifecycle.errors:
            log.warning("docker watch: %s", message)
        self.lifecycle.errors.clear()
        for event in events:
            try:
                self.emit(event)
            except Exception:  # noqa: BLE001 - the reconciler's failure is logged, the watcher goes on
                log.exception("docker watch: applying %r failed", event)

    def _act(self, engine: Engine) -> None:
        """Stop stale copies and remove finished containers on ``engine``."""
        try:
            node = engine.node
        except Exception:  # noqa: BLE001 - unreachable: later
            return
        with self._lock:
            stale = [cid for n, cid in self.lifecycle.stale if n == node]
            removable = [cid for n, cid in self.lifecycle.removable if n == node]
            self.lifecycle.stale = [(n, c) for n, c in self.lifecycle.stale if n != node]
            self.lifecycle.removable = [(n, c) for n, c in self.lifecycle.removable if n != node]
        for cid in stale:
            log.warning("docker watch %s: stopping container %s, a copy of a pod placed elsewhere", node, cid[:12])
        for cid in stale + removable:
            try:
                engine.stop_and_remove(cid, grace_s=0 if cid in removable else 10)
            except Exception as exc:  # noqa: BLE001 - retried on the next re-list
                log.warning("docker watch %s: cannot remove %s: %s", node, cid[:12], exc)
