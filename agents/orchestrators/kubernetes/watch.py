"""The Kubernetes watcher: list + watch of pods and nodes → Kalena's watch events (docs/design.md §14).

A reflector per resource (client-go's Reflector, in small): list, emit every item, remember
the list's ``resourceVersion``, then watch from it, advancing the version with every event and
BOOKMARK. On ``410 Gone`` (an ERROR event with ``reason: Expired``, or the client's
``ApiException(410)`` after its one retry), and on "Too large resource version" (a version
the server has not reached, e.g. a bookmark from before the server restarted), it re-lists and restarts from the new list's
version — never from an empty, ``None`` or ``0`` version (case C9). A stream that ends is
resumed from the last version; a failed connection, or a stream that ended within a second
without an event, is retried with exponential backoff
(``backoff_s`` doubling to ``max_backoff_s``, with jitter), then the same rule. Every list
ends with :class:`Resynced` carrying every pod ref and node name the watcher holds, so the
reconciler drops what vanished while the watch was away.

A malformed object (or watch line: the adapter's ``MALFORMED`` events) is counted in ``malformed``
and logged with its name and field; it changes nothing, never stops the watch and is not a
reconnect (the stream goes on past it).

Only :mod:`agents.orchestrators.kubernetes.client` calls the API; this module decides.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator

from agents.orchestrators.events import NodeGone, PodPending, Resynced, WatchEvent
from agents.orchestrators.kubernetes.objects import MalformedObject, node_event, pod_events

log = logging.getLogger(__name__)


#: seconds: a watch stream that ends sooner without a single event is a failure (backed off)
SHORT_WATCH_S = 1.0


class ShortWatch(Exception):
    """A watch stream ended within :data:`SHORT_WATCH_S` without an event (client-go's "very short
    watch"): retried with backoff like a failed connection."""


class WatchExpired(Exception):
    """The watch's version is unusable — 410 Gone (too old) or 504 "Too large resource version"
    (newer than the server's): re-list, as client-go's reflector does."""


class KubernetesWatcher:
    """Pods and nodes of one cluster as watch events (see module doc).

    ``api`` has ``list_objects(resource) -> (items, resource_version)`` and
    ``watch_objects(resource, resource_version, timeout_s, stop) -> Iterator[(type, object)]``
    (raising :class:`WatchExpired` on 410; a line that was not a watch event comes as type
    ``MALFORMED`` with ``{"name", "field", "problem", "line"}``); :class:`~agents.orchestrators.kubernetes.client.
    KubernetesOrchestrator` provides both. ``sleep(seconds, stop)`` is injectable for tests.
    """

    def __init__(self, api, *, watch_timeout_s: int = 300, backoff_s: float = 0.5, max_backoff_s: float = 30.0,
                 sleep: Callable[[float, threading.Event], None] | None = None,
                 rng: random.Random | None = None, wants_pod: Callable[[str], bool] | None = None) -> None:
        """``wants_pod(ref)`` (``namespace/name``; None: every pod): a sharded scheduler's share —
        a pod it answers False for is listed (its ref is in the ``Resynced`` sets, its uid kept)
        but not translated: it gives no event, is not checked and is not counted malformed."""
        self.api = api
        self.wants_pod = wants_pod
        self.watch_timeout_s = watch_timeout_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.sleep = sleep or (lambda s, stop: stop.wait(s))
        self.rng = rng or random.Random()
        self.pods: set[str] = set()
        self.nodes: set[str] = set()
        self.versions: dict[str, str] = {}
        #: ``namespace/name`` → resourceVersion of each pod last seen pending for Kalena (the
        #: precondition of its ``PodScheduled=False`` patch: a pod bound meanwhile is not overwritten)
        self.pending_versions: dict[str, str] = {}
        #: ``namespace/name`` → ``metadata.uid`` of each pod last seen (its Events' ``involvedObject.uid``)
        self.uids: dict[str, str] = {}
        self.malformed: Counter = Counter()
        #: (resource, namespace, name) → (resourceVersion, uid, events) of the last translation
        self._translated: dict[tuple, tuple] = {}
        self.lists: Counter = Counter()
        self.expired: Counter = Counter()
        self.reconnects: Counter = Counter()
        self._lock = threading.Lock()
        #: held while an object's events are translated and handed on, and while a re-list's
        #: ``Resynced`` takes the other resource's set and is handed on: a pod the pod stream
        #: reports is either in a nodes re-list's ``Resynced`` or reported after it — never
        #: reported before a ``Resynced`` that lacks it (which would mark it gone)
        self._emitting = threading.Lock()

    # -- translating ----------------------------------------------------------------------------

    def emit(self, resource: str, event_type: str, obj: dict, out: Callable[[WatchEvent], None]) -> None:
        """Translate one watched object and hand its events to ``out``, as one step against a
        re-list's ``Resynced`` (``_emitting``)."""
        with self._emitting:
            for event in self._translate(resource, event_type, obj):
                out(event)

    def _translate(self, resource: str, event_type: str, obj: dict) -> list[WatchEvent]:
        """``obj`` as Kalena's events. An object at the same ``resourceVersion`` as when it was
        last translated (a re-list repeats every object) gives the same events without being
        read again (the informer's indexer holds it as it was)."""
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        version = meta.get("resourceVersion") if isinstance(meta, dict) else None
        key = (resource, meta.get("namespace") or "", meta.get("name") or "") if isinstance(meta, dict) else None
        if resource == "pods" and self.wants_pod is not None and key is not None and key[2]:
            ref = f"{key[1] or 'default'}/{key[2]}"
            # metadata alone: the client found it outside the share and decoded no more of it (its
            # ``wants``); skipped as such even if the share moved since, which a re-list covers
            if len(obj) == 1 or not self.wants_pod(ref):
                self._skip_pod(ref, event_type, meta)
                return []
        if event_type != "DELETED" and version and key is not None:
            memo = self._translated.get(key)
            if memo is not None and memo[0] == version and memo[1] == meta.get("uid"):
                events = memo[2]
                self._note(resource, event_type, obj, events)
                return list(events)
        events = self._translate_fresh(resource, event_type, obj)
        if key is not None:
            if event_type == "DELETED":
                self._translated.pop(key, None)
            elif version and events:
                self._translated[key] = (version, meta.get("uid"), tuple(events))
        return events

    def _skip_pod(self, ref: str, event_type: str, meta: dict) -> None:
        """The bookkeeping of a pod not wanted (``wants_pod``): held as listed, its uid kept."""
        with self._lock:
            if event_type == "DELETED":
                self.pods.discard(ref)
            else:
                self.pods.add(ref)
        uid = meta.get("uid")
        if event_type == "DELETED" or not uid:
            self.uids.pop(ref, None)
        else:
            self.uids[ref] = str(uid)
        self.pending_versions.pop(ref, None)
        if event_type == "DELETED":
            self._translated.pop(("pods", meta.get("namespace") or "", meta.get("name") or ""), None)

    def _note(self, resource: str, event_type: str, obj: dict, events) -> None:
        """The bookkeeping :meth:`_translate_fresh` does for a well-formed object."""
        if resource == "nodes":
            with self._lock:
                for e in events:
                    if isinstance(e, NodeGone):
                        self.nodes.discard(e.name)
                    else:
                        self.nodes.add(e.name)
            return
        meta = obj["metadata"]
        ref = f"{meta.get('namespace') or 'default'}/{meta['name']}"
        with self._lock:
            self.pods.add(ref)
        uid = meta.get("uid")
        if uid:
            self.uids[ref] = str(uid)
        else:
            self.uids.pop(ref, None)
        if any(isinstance(e, PodPending) for e in events):
            self.pending_versions[ref] = str(meta.get("resourceVersion"))
        else:
            self.pending_versions.pop(ref, None)

    def _translate_fresh(self, resource: str, event_type: str, obj: dict) -> list[WatchEvent]:
        try:
            if resource == "nodes":
                name = str(_metadata(obj).get("name") or "")
                if event_type == "DELETED":
                    if not name:
                        raise MalformedObject("", "metadata.name", "a node needs a name")
                    with self._lock:
                        self.nodes.discard(name)
                    return [NodeGone(name)]
                seen = node_event(obj)
                with self._lock:
                    self.nodes.add(seen.name)
                return [seen]
            events = pod_events(event_type, obj)
            ref = f"{(obj.get('metadata') or {}).get('namespace') or 'default'}/{obj['metadata']['name']}"
            with self._lock:
                if event_type == "DELETED":
                    self.pods.discard(ref)
                elif events:
                    self.pods.add(ref)
            uid = _metadata(obj).get("uid")
            if event_type == "DELETED" or not uid:
                self.uids.pop(ref, None)
            else:
                self.uids[ref] = str(uid)
            version = _metadata(obj).get("resourceVersion")
            if version and any(isinstance(e, PodPending) for e in events):
                self.pending_versions[ref] = str(version)
            else:
                self.pending_versions.pop(ref, None)
            return events
        except (MalformedObject, KeyError, TypeError, AttributeError, ValueError) as exc:
            self.malformed[resource] += 1
            if isinstance(exc, MalformedObject):
                where = str(exc)
            else:  # a shape check_shape does not know yet: name the object at least
                where = f"{_metadata(obj).get('name') or '<unnamed>'}: field unknown: {type(exc).__name__}: {exc}"
            log.warning("watch %s: malformed %s object skipped: %s", resource, event_type, where)
            if isinstance(exc, MalformedObject) and exc.name and event_type != "DELETED":
                with self._lock:  # keep what Kalena holds of it: a bad version is not a deletion
                    (self.nodes if resource == "nodes" else self.pods).add(exc.name)
            return []

    def _relist(self, resource: str, out: Callable[[WatchEvent], None], *, resynced: bool = True) -> str:
        items, version = self.api.list_objects(resource)
        if not version or str(version) == "0":
            raise RuntimeError(f"list {resource} answered no resourceVersion")
        self.lists[resource] += 1
        listed: set[str] = set()
        for obj in items:
            for event in self._translate(resource, "LISTED", obj):
                out(event)
            meta = _metadata(obj)
            if meta.get("name"):
                listed.add(f"{meta.get('namespace') or 'default'}/{meta['name']}" if resource == "pods" else meta["name"])
        with self._emitting:  # the other resource's set as handed on (``_emitting``)
            with self._lock:
                if resource == "pods":
                    self.pods = listed
                    self.pending_versions = {ref: v for ref, v in self.pending_versions.items() if ref in listed}
                    self.uids = {ref: v for ref, v in self.uids.items() if ref in listed}
                else:
                    self.nodes = listed
                pods, nodes = frozenset(self.pods), frozenset(self.nodes)
            if resynced:
                out(Resynced(pods=pods, nodes=nodes))
        self.versions[resource] = str(version)
        return str(version)

    # -- the reflector loop ---------------------------------------------------------------------

    def reflect(self, resource: str, out: Callable[[WatchEvent], None], stop: threading.Event,
                listed: bool = False) -> None:
        """List (unless ``listed``) and watch ``resource`` until ``stop`` (see module doc)."""
        delay = self.backoff_s
        need_list = not listed
        while not stop.is_set():
            try:
                if need_list:
                    self._relist(resource, out)
                    need_list = False
                version = self.versions[resource]
                started, received = time.monotonic(), 0
                # the pods outside a share are decoded up to their metadata only (the client's ``wants``)
                wants = {"wants": self.wants_pod} if resource == "pods" and self.wants_pod is not None else {}
                for event_type, obj in self.api.watch_objects(resource, version, self.watch_timeout_s, stop, **wants):
                    received += 1
                    if event_type == "MALFORMED":  # a line that was not a watch event: the stream goes on
                        self.malformed[resource] += 1
                        log.warning("watch %s: malformed watch line skipped: %s: %s: %s (line %r)", resource,
                                    obj.get("name") or "<unnamed>", obj.get("field") or "<line>", obj.get("problem"),
                                    obj.get("line"))
                        continue
                    if event_type == "BOOKMARK":
                        meta = obj.get("metadata") if isinstance(obj, dict) else None
                        if meta is not None and not isinstance(meta, dict):
                            self.malformed[resource] += 1
                            log.warning("watch %s: malformed BOOKMARK skipped: metadata: expected a mapping, got %s",
                                        resource, type(meta).__name__)
                            continue
                        bookmark = _metadata(obj).get("resourceVersion")
                        if bookmark:
                            self.versions[resource] = str(bookmark)
                        continue
                    if not isinstance(obj, dict):
                        self.malformed[resource] += 1
                        log.warning("watch %s: an event without an object skipped (%s)", resource, event_type)
                        continue
                    self.emit(resource, event_type, obj, out)
                    new = _metadata(obj).get("resourceVersion")
                    if new:
                        self.versions[resource] = str(new)
                    if stop.is_set():
                        return
                if not received and time.monotonic() - started < SHORT_WATCH_S and not stop.is_set():
                    # client-go's "very short watch": a server or proxy answering every watch at once
                    # with nothing would otherwise be asked again in a tight loop
                    raise ShortWatch(f"the stream ended after {time.monotonic() - started:.2f} s without an event")
                delay = self.backoff_s  # a stream that ended normally: resume at once
            except WatchExpired as exc:
                self.expired[resource] += 1
                log.info("watch %s: %s at resourceVersion %s, re-listing", resource, exc, self.versions.get(resource))
                need_list = True
            except Exception as exc:  # noqa: BLE001 - any transport failure: back off and resume
                if stop.is_set():
                    return  # the stream was cut because the watch is stopping
                self.reconnects[resource] += 1
                log.warning("watch %s: %s; retrying in %.1f s", resource, exc, delay)
                self.sleep(delay * (0.5 + self.rng.random()), stop)
                delay = min(self.max_backoff_s, delay * 2)
                if resource not in self.versions:
                    need_list = True

    def events(self, stop: threading.Event) -> Iterator[WatchEvent]:
        """The port's ``watch``: nodes then pods listed, one ``Resynced`` with both sets, then
        the changes of both (a later re-list of one resource ends with a ``Resynced`` carrying
        its new set and the other's current one), until ``stop`` is set."""
        q: queue.Queue = queue.Queue()
        for resource in ("nodes", "pods"):  # both lists before the first Resynced: it needs both sets whole
            delay = self.backoff_s
            while not stop.is_set():
                try:
                    self._relist(resource, q.put, resynced=resource == "pods")
                    break
                except Exception as exc:  # noqa: BLE001 - the API may not be up yet
                    self.reconnects[resource] += 1
                    log.warning("list %s: %s; retrying in %.1f s", resource, exc, delay)
                    self.sleep(delay * (0.5 + self.rng.random()), stop)
                    delay = min(self.max_backoff_s, delay * 2)
        threads = [threading.Thread(target=self.reflect, args=(r, q.put, stop, True), name=f"kalena-watch-{r}",
                                    daemon=True) for r in ("nodes", "pods")]
        for t in threads:
            t.start()
        while not stop.is_set() or not q.empty():
            try:
                yield q.get(timeout=0.1)
            except queue.Empty:
                if stop.is_set():
                    break
        for t in threads:
            t.join(timeout=5)


def _metadata(obj: object) -> dict:
    """``obj["metadata"]`` when both are mappings, else ``{}`` (a malformed object is counted
    where it is translated; reading its version or name must not fail a stream or a list)."""
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return meta if isinstance(meta, dict) else {}
