"""Kubernetes adapter — the only module that calls the API.

Binds pending batch pods (``schedulerName: kalena``) through the pods/binding subresource,
evicts through policy/v1 Eviction (PodDisruptionBudgets honoured: a 429 is
:class:`EvictionRefused`), tells users why a pod waits (a ``FailedScheduling`` Event, at most
as often as the scheduler asks, and ``PodScheduled=False, reason Unschedulable``), records
``Scheduled`` and eviction Events like kube-scheduler, lists and watches pods and nodes for
:mod:`agents.orchestrators.kubernetes.watch`, and reads and writes the scheduler's
``coordination.k8s.io`` Lease for :mod:`agents.orchestrators.kubernetes.lease`.

Every call has a timeout (``request_timeout_s``) and is made once (the client's urllib3
retries are turned off). Objects travel as raw JSON dicts
(``_preload_content=False``): :mod:`agents.orchestrators.kubernetes.objects` reads them, and a
response is always read and released so its connection returns to the pool. Events are sent
by one background thread from a bounded queue (kube-scheduler's event broadcaster does the
same); when the queue is full an event is dropped and counted in ``events_dropped``.

Tested against :mod:`agents.orchestrators.kubernetes.testserver` (no API server can run on
the development machines).
"""

from __future__ import annotations

import json
import logging
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

import urllib3
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from agents.orchestrators.base import (
    BatchSpec, BindingUncertain, EvictionRefused, EvictionUncertain, OrchestratorError, StaleBinding, WorkloadGone, WorkloadRef, priority_of, tier_of,
)
from agents.orchestrators.events import WatchEvent
from agents.orchestrators.kubernetes.watch import KubernetesWatcher, WatchExpired

log = logging.getLogger(__name__)
COMPONENT = "kalena"
#: distinct (pod, reason, message) Events remembered for counting repeats (client-go's
#: EventCorrelator keeps an LRU cache of 4,096)
EVENT_SERIES = 4096


class LeaseConflict(OrchestratorError):
    """The Lease changed since it was read (409) or was created by someone else first."""


def _now_rfc3339(micro: bool = False) -> str:
    now = datetime.now(timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if micro else now.strftime("%Y-%m-%dT%H:%M:%SZ")


class KubernetesOrchestrator:
    """The port over a ``kubernetes.client.ApiClient`` (in-cluster or kubeconfig configured by
    the caller). ``identity`` names this scheduler instance in Events and the Lease.

    ``bind_concurrency``: Binding calls a scheduling pass may have in flight at once (they are
    independent; kube-scheduler binds each pod asynchronously in its own goroutine), at most
    the client's connection pool size (``Configuration.connection_pool_maxsize``) less four
    connections kept for the two watches, the event sender and the Lease.

    The client's own retries are turned off unless the caller configured them
    (``Configuration.retries``), so no call outlives ``request_timeout_s``: the watch resumes
    with backoff, a pass retries at the next pass, the Lease at the next retry period."""

    def __init__(self, api_client: k8s.ApiClient, *, request_timeout_s: float = 10.0, identity: str = COMPONENT,
                 event_queue: int = 10000, bind_concurrency: int = 8) -> None:
        if api_client.configuration.retries is None:
            # urllib3's default retries a GET or PUT that timed out up to 3 times, each with the whole
            # timeout: a call would take 4 × request_timeout_s. Kalena retries in its own loops instead.
            api_client.configuration.retries = False
            api_client.rest_client = k8s.rest.RESTClientObject(api_client.configuration)
        self.api_client = api_client
        pool = int(getattr(api_client.configuration, "connection_pool_maxsize", None) or 4)
        self.bind_concurrency = max(1, min(int(bind_concurrency), pool - 4))
        self.core = k8s.CoreV1Api(api_client)
        self.coordination = k8s.CoordinationV1Api(api_client)
        self.timeout_s = request_timeout_s
        self.identity = identity
        self.events_sent = 0
        self.events_dropped = 0
        self.events_aggregated = 0  # repeats counted on an Event already sent instead of a new one
        self._series: dict[tuple, tuple[str, int]] = {}  # (pod, reason, message, type, uid) → (Event name, count)
        self.watchers: list[KubernetesWatcher] = []
        #: ``namespace/name → bool``: the pods the watches it starts translate (a sharded
        #: scheduler's share, issue 32; None: every pod) — :class:`KubernetesWatcher`'s ``wants_pod``
        self.watch_pods_of = None
        self._events: queue.Queue = queue.Queue(maxsize=event_queue)
        self._sender: threading.Thread | None = None
        self._sender_lock = threading.Lock()

    # -- the original port ----------------------------------------------------------------------

    def nodes(self) -> list[str]:
        items, _ = self.list_objects("nodes")
        from agents.orchestrators.kubernetes.objects import node_event
        return [n["metadata"]["name"] for n in items if (e := node_event(n)).ready and e.schedulable]

    def workloads(self, node: str | None = None) -> list[WorkloadRef]:
        items, _ = self.list_objects("pods", field_selector=f"spec.nodeName={node}" if node else "")
        out = []
        for pod in items:
            status = pod.get("status") or {}
            if status.get("phase") in ("Succeeded", "Failed"):
                continue  # terminal pods never count
            meta = pod.get("metadata") or {}
            owners = meta.get("ownerReferences") or []
            tier = "daemonset" if any(o.get("kind") == "DaemonSet" for o in owners) else tier_of(meta.get("labels"))
            out.append(WorkloadRef(id=f"{meta.get('namespace')}/{meta.get('name')}",
                                   node=(pod.get("spec") or {}).get("nodeName") or "", tier=tier,
                                   priority=priority_of(meta.get("annotations")), phase=status.get("phase", "Unknown")))
        return out

    def pod(self, ref: str) -> dict:
        """The pod ``namespace/name`` as API JSON.

        Raises:
            WorkloadGone: no such pod; OrchestratorError: any other refusal.
        """
        namespace, name = ref.split("/", 1)
        try:
            return self._raw(self.core.read_namespaced_pod, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise WorkloadGone(f"pod {ref}: no such pod") from None
            raise OrchestratorError(f"read pod {ref}: {exc.status} {_reason(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - a timeout or a dropped connection
            raise OrchestratorError(f"read pod {ref}: {type(exc).__name__}: {exc}") from None

    def publish_batch_capacity(self, node: str, *, cpu_mcpu: int, memory_bytes: int) -> None:
        """Patch the node's status (capacity and allocatable) with Kalena's extended resources
        ``kalena.naughtian.io/batch-cpu`` (millicores) and ``batch-memory`` (bytes), docs/design.md §14 —
        a JSON patch on ``nodes/status``, the documented way to advertise extended resources.

        Raises:
            OrchestratorError: the API refused.
        """
        from agents.orchestrators.kubernetes.batch_resources import BATCH_CPU, BATCH_MEMORY

        ops = [{"op": "add", "path": f"/status/{part}/{name.replace('/', '~1')}", "value": str(value)}
               for part in ("capacity", "allocatable")
               for name, value in ((BATCH_CPU, cpu_mcpu), (BATCH_MEMORY, memory_bytes))]
        try:
            self._raw(self.core.patch_node_status, node, ops)
        except ApiException as exc:
            raise OrchestratorError(f"publish batch capacity on {node}: {exc.status} {_reason(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - a timeout: published again at the next pass
            raise OrchestratorError(f"publish batch capacity on {node}: {type(exc).__name__}: {exc}") from None

    def token_review(self, token: str, audiences: list[str]) -> dict:
        """``TokenReview.status`` (authentication.k8s.io/v1) for ``token`` and ``audiences``.

        Raises:
            OrchestratorError: the API refused or failed the review.
        """
        body = k8s.V1TokenReview(api_version="authentication.k8s.io/v1", kind="TokenReview",
                                 spec=k8s.V1TokenReviewSpec(token=token, audiences=audiences))
        try:
            answer = self._raw(k8s.AuthenticationV1Api(self.core.api_client).create_token_review, body)
        except ApiException as exc:
            raise OrchestratorError(f"token review: {exc.status} {_reason(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - a timeout: the caller refuses the token
            raise OrchestratorError(f"token review: {type(exc).__name__}: {exc}") from None
        return answer.get("status") or {}

    def bind(self, spec: BatchSpec, node: str) -> None:
        """Bind the pending pod ``spec.id`` to ``node`` (pods/binding). With ``spec.uid`` the
        Binding carries ``metadata.uid``: a precondition the API server checks against the pod it
        holds, so a pod deleted and re-created under the same name since the decision is refused
        (409 Conflict, "Precondition failed: UID in precondition: …") instead of bound with the
        old pod's decision.

        Raises:
            StaleBinding: 404 (the pod is gone) or 409 (bound already, being deleted, another uid).
            BindingUncertain: no answer (it may have landed). OrchestratorError: any other refusal.
        """
        metadata = {"name": spec.name, "namespace": spec.namespace}
        if spec.uid:
            metadata["uid"] = spec.uid
        body = {"apiVersion": "v1", "kind": "Binding", "metadata": metadata,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}
        try:
            self._post(f"/api/v1/namespaces/{spec.namespace}/pods/{spec.name}/binding", body)
        except ApiException as exc:
            if exc.status in (404, 409):
                raise StaleBinding(f"bind {spec.id} to {node}: {exc.status} {_reason(exc)}") from None
            raise OrchestratorError(f"bind {spec.id} to {node}: {exc.status} {_reason(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - timeouts and connection errors: it may have landed
            raise BindingUncertain(f"bind {spec.id} to {node}: {type(exc).__name__}: {exc}") from None
        self.record_event(spec.id, "Scheduled", f"Successfully assigned {spec.id} to {node}", uid=spec.uid)

    def evict(self, workload_id: str, *, grace_s: float, reason: str) -> None:
        """Evict the pod through policy/v1 Eviction with ``grace_s``. When the watch knows the
        pod's uid, the Eviction carries it as a delete precondition: a pod deleted and
        re-created under the name since is another object, which the API server refuses to
        evict (409), and the one decided on is gone.

        Raises:
            WorkloadGone: 404, or 409 for a uid precondition (the pod decided on no longer exists).
            EvictionRefused: 429 (a PodDisruptionBudget).
            EvictionUncertain: no answer in time (it may have landed).
            OrchestratorError: any other refusal.
        """
        namespace, name = workload_id.split("/", 1)
        options: dict = {"gracePeriodSeconds": int(round(grace_s))}
        uid = self.watchers[-1].uids.get(workload_id, "") if self.watchers else ""
        if uid:
            options["preconditions"] = {"uid": uid}
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace},
                "deleteOptions": options}
        try:
            self._raw(self.core.create_namespaced_pod_eviction, name, namespace, body)
        except ApiException as exc:
            if exc.status == 404:
                raise WorkloadGone(f"evict {workload_id}: no such pod") from None
            if exc.status == 409 and uid:
                raise WorkloadGone(f"evict {workload_id}: the pod was re-created under its name "
                                   f"({_reason(exc)})") from None
            if exc.status == 429:
                raise EvictionRefused(f"evict {workload_id} ({reason}): 429 {_reason(exc)}"
                                      " (a PodDisruptionBudget refused it)") from None
            raise OrchestratorError(f"evict {workload_id} ({reason}): {exc.status} {_reason(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - timeouts: the caller keeps the pod and retries
            raise EvictionUncertain(f"evict {workload_id}: {type(exc).__name__}: {exc}") from None
        self.record_event(workload_id, "Evicted", f"Evicted by Kalena: {reason}", type_="Warning")

    def pod_node(self, workload_id: str) -> str | None:
        """Where the pod is bound now: its ``spec.nodeName`` (``""`` while pending), None when
        the pod does not exist.

        Raises:
            OrchestratorError: the API refused or did not answer in time.
        """
        namespace, name = workload_id.split("/", 1)
        try:
            body = self._raw(self.core.read_namespaced_pod, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise OrchestratorError(f"read pod {workload_id}: {exc.status} {_reason(exc)}") from None
        except Exception as exc:  # noqa: BLE001
            raise OrchestratorError(f"read pod {workload_id}: {type(exc).__name__}: {exc}") from None
        return (body.get("spec") or {}).get("nodeName") or ""

    def note_pending(self, workload_id: str, message: str) -> None:
        """Why a pod waits: a ``FailedScheduling`` Event and ``PodScheduled=False,
        reason Unschedulable`` in its status (sent by the event thread). The status patch
        carries the resourceVersion the watch last saw the pod pending at (or, with no watch,
        the one read just before), so a patch that reaches the API after the pod was bound is
        refused (409) instead of overwriting the binding's ``PodScheduled=True``."""
        self.record_event(workload_id, "FailedScheduling", message, type_="Warning")
        version = self.watchers[-1].pending_versions.get(workload_id, "") if self.watchers else ""
        self._enqueue(("condition", workload_id, message, version))

    def watch(self, stop: threading.Event) -> Iterator[WatchEvent]:
        """The watch part of the port: :class:`~agents.orchestrators.kubernetes.watch.KubernetesWatcher`
        (each one started is kept in ``watchers``: its counters say how often it listed,
        expired, reconnected and skipped a malformed object)."""
        watcher = KubernetesWatcher(self, wants_pod=self.watch_pods_of)
        self.watchers.append(watcher)
        return watcher.events(stop)

    # -- list / watch (raw JSON) ------------------------------------------------------------------

    def _list_call(self, resource: str):
        return {"pods": self.core.list_pod_for_all_namespaces, "nodes": self.core.list_node}[resource]

    def list_objects(self, resource: str, *, field_selector: str = "", page: int = 1000) -> tuple[list[dict], str]:
        """Every ``pods`` or ``nodes`` object (pages of ``page``) and the list's resourceVersion.

        Raises:
            OrchestratorError: the API refused or did not answer in time.
        """
        items: list[dict] = []
        token = None
        version = ""
        while True:
            kwargs = {"limit": page, "_continue": token} if token else {"limit": page}
            if field_selector:
                kwargs["field_selector"] = field_selector
            try:
                body = self._raw(self._list_call(resource), **kwargs)
            except ApiException as exc:
                raise OrchestratorError(f"list {resource}: {exc.status} {_reason(exc)}") from None
            except Exception as exc:  # noqa: BLE001 - a timeout or a dropped connection
                raise OrchestratorError(f"list {resource}: {type(exc).__name__}: {exc}") from None
            items.extend(body.get("items") or [])
            meta = body.get("metadata") or {}
            version = version or str(meta.get("resourceVersion") or "")
            token = meta.get("continue")
            if not token:
                return items, version

    def watch_objects(self, resource: str, resource_version: str, timeout_s: int,
                      stop: threading.Event, *, wants: Callable[[str], bool] | None = None
                      ) -> Iterator[tuple[str, dict]]:
        """``(type, object)`` of one watch stream from ``resource_version`` with bookmarks, for
        at most ``timeout_s`` (the server ends it; the caller resumes). The answer must start
        within the request timeout; the stream may then be quiet for ``timeout_s`` + 60 s.

        A line that is not a watch event comes as ``("MALFORMED", {"name", "field", "problem",
        "line"})`` and the stream goes on (:class:`_Watch`).

        ``wants(ref)`` (``namespace/name``; a sharded scheduler's share, issue 32; None: every
        object): an ADDED, MODIFIED or DELETED line of an object it answers False for is not
        decoded whole — only its ``metadata`` is, and the event comes as ``(type, {"metadata":
        …})`` (what the watcher keeps of a pod outside its share: ref, uid, resourceVersion).
        A line whose object does not open with at most ``kind`` and ``apiVersion`` before
        ``metadata`` is decoded whole, as without ``wants``.

        Raises:
            WatchExpired: 410 Gone (an ERROR event, or the client's exception after its retry), or
                504 "Too large resource version" (the version is newer than the server's, e.g.
                from a bookmark of a server that restarted behind it): both mean re-list.
        """
        if not resource_version or resource_version == "0":
            raise ValueError("a watch resumes from a list's resourceVersion, never from none or 0")
        call = self._list_call(resource)

        def listing(**kwargs):  # no return annotation: the client yields raw dicts, not models
            resp = call(**kwargs)  # the answer's headers came within request_timeout_s ...
            sock = getattr(getattr(resp, "connection", None), "sock", None)
            if sock is not None:  # ... the stream itself may stay quiet until the server ends it
                sock.settimeout(timeout_s + 60)
            return _LineChunks(resp)

        w = _Watch(wants=wants)
        done = threading.Event()
        threading.Thread(target=_stop_when, args=(stop, done, w), daemon=True).start()
        try:
            for event in w.stream(listing, resource_version=resource_version, allow_watch_bookmarks=True,
                                  timeout_seconds=int(timeout_s), _request_timeout=(self.timeout_s, self.timeout_s)):
                if event is None:
                    continue  # a blank line
                if event["type"] == "ERROR":
                    obj = event["raw_object"]
                    if obj["code"] == 410 or (obj["code"] == 504 and TOO_LARGE in str(obj.get("message"))):
                        raise WatchExpired(f"{obj['code']} {obj.get('message', '')}")
                    raise OrchestratorError(f"watch {resource}: {obj['code']} {obj.get('message')}")
                yield event["type"], event["raw_object"]
        except ApiException as exc:
            if exc.status == 410 or (exc.status == 504 and TOO_LARGE in str(exc.reason)):
                raise WatchExpired(f"{exc.status} {exc.reason}") from None
            raise OrchestratorError(f"watch {resource}: {exc.status} {_reason(exc)}") from None
        except Exception:
            if stop.is_set():
                return  # the stream was cut because the watch is stopping: it simply ends
            raise
        finally:
            done.set()

    # -- the Lease (coordination.k8s.io/v1) -------------------------------------------------------

    def lease_read(self, namespace: str, name: str) -> dict | None:
        """The Lease, or None when it does not exist.

        Raises:
            OrchestratorError: the API refused or did not answer in time.
        """
        try:
            return self._raw(self.coordination.read_namespaced_lease, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise OrchestratorError(f"read lease {namespace}/{name}: {exc.status} {_reason(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - a timeout is a failed renewal, not a crash of the elector
            raise OrchestratorError(f"read lease {namespace}/{name}: {type(exc).__name__}: {exc}") from None

    def lease_list(self, namespace: str, label_selector: str = "") -> list[dict]:
        """The Leases of ``namespace`` matching ``label_selector`` (the sharded schedulers'
        membership, :mod:`kalena_web.scheduling.shards`).

        Raises:
            OrchestratorError: the API refused or did not answer in time.
        """
        try:
            body = self._raw(self.coordination.list_namespaced_lease, namespace, label_selector=label_selector)
        except ApiException as exc:
            raise OrchestratorError(f"list leases in {namespace}: {exc.status} {_reason(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - a timeout is a missed round, not a crash
            raise OrchestratorError(f"list leases in {namespace}: {type(exc).__name__}: {exc}") from None
        return list(body.get("items") or [])

    def lease_write(self, namespace: str, lease: dict, *, create: bool) -> dict:
        """Create the Lease or replace it (optimistic: its ``metadata.resourceVersion``).

        Raises:
            LeaseConflict: 409 — someone else created or changed it first.
            OrchestratorError: any other refusal or a timeout.
        """
        name = lease["metadata"]["name"]
        try:
            if create:
                return self._raw(self.coordination.create_namespaced_lease, namespace, lease)
            return self._raw(self.coordination.replace_namespaced_lease, name, namespace, lease)
        except ApiException as exc:
            if exc.status == 409:
                raise LeaseConflict(f"lease {namespace}/{name}: {_reason(exc)}") from None
            raise OrchestratorError(f"lease {namespace}/{name}: {exc.status} {_reason(exc)}") from None
        except Exception as exc:  # noqa: BLE001 - a timeout is a failed renewal
            raise OrchestratorError(f"lease {namespace}/{name}: {type(exc).__name__}: {exc}") from None

    # -- Events -----------------------------------------------------------------------------------

    def record_event(self, workload_id: str, reason: str, message: str, *, type_: str = "Normal",
                     uid: str = "") -> None:
        """Queue a core/v1 Event about pod ``workload_id`` (sent by the event thread). Its
        ``involvedObject.uid`` (``kubectl describe pod`` selects a pod's Events by it) is ``uid``,
        else the uid the watch last saw under that name, else the pod's as read when it is sent."""
        if not uid and self.watchers:
            uid = self.watchers[-1].uids.get(workload_id, "")
        self._enqueue(("event", workload_id, reason, message, type_, uid))

    def flush_events(self, timeout_s: float = 10.0) -> bool:
        """Wait until every queued Event was sent (tests); returns whether it emptied in time."""
        deadline = time.monotonic() + timeout_s
        while self._events.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._events.unfinished_tasks

    def _enqueue(self, item: tuple) -> None:
        try:
            self._events.put_nowait(item)
        except queue.Full:
            self.events_dropped += 1
            return
        with self._sender_lock:
            if self._sender is None or not self._sender.is_alive():
                self._sender = threading.Thread(target=self._send_events, name="kalena-k8s-events", daemon=True)
                self._sender.start()

    def _send_events(self) -> None:
        """The event thread: drains the queue in batches (off every decision path) and sends
        each queued Event — a repeat of one already sent (same pod, reason, type and message,
        within the last :data:`EVENT_SERIES` distinct ones) raises that Event's ``count`` and
        ``lastTimestamp`` instead of creating another (kube-scheduler's broadcaster: its
        EventCorrelator counts repeats), and identical Events waiting together are sent once
        with their count."""
        while True:
            try:
                batch = [self._events.get(timeout=5.0)]
            except queue.Empty:
                return
            while len(batch) < 1000:
                try:
                    batch.append(self._events.get_nowait())
                except queue.Empty:
                    break
            repeats: dict[tuple, int] = {}
            for item in batch:
                if item[0] == "event":
                    repeats[item[1:]] = repeats.get(item[1:], 0) + 1
            for item in batch:
                try:
                    if item[0] != "event":
                        self._patch_unschedulable(*item[1:])
                    elif item[1:] in repeats:
                        self._post_event(*item[1:], times=repeats.pop(item[1:]))
                    else:
                        self.events_aggregated += 1  # counted in the first one's Event
                    self.events_sent += 1
                except Exception as exc:  # noqa: BLE001 - an Event is best effort; the pod's state is not
                    log.info("kubernetes event for %s not sent: %s", item[1], exc)
                finally:
                    self._events.task_done()

    def _post_event(self, workload_id: str, reason: str, message: str, type_: str, uid: str = "",
                    times: int = 1) -> None:
        namespace, name = workload_id.split("/", 1)
        key = (workload_id, reason, message, type_, uid)
        now = _now_rfc3339()
        seen = self._series.pop(key, None)
        if seen is not None:  # a repeat: count it on the Event already there (gone meanwhile: a new one)
            event_name, count = seen
            try:
                self._raw(self.core.patch_namespaced_event, event_name, namespace,
                          {"count": count + times, "lastTimestamp": now},
                          _content_type="application/strategic-merge-patch+json")
                self._series[key] = (event_name, count + times)
                self.events_aggregated += times
                return
            except ApiException as exc:
                if exc.status != 404:
                    raise
        if not uid:  # not known from the decision or the watch: the pod as it is now (gone: none)
            try:
                uid = str(((self._raw(self.core.read_namespaced_pod, name, namespace)).get("metadata") or {})
                          .get("uid") or "")
            except Exception:  # noqa: BLE001 - gone or no answer: the Event still names the pod
                uid = ""
        involved = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name}
        if uid:
            involved["uid"] = uid
        body = {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{name}.", "namespace": namespace},
                "involvedObject": involved,
                "reason": reason, "message": message[:1024], "type": type_, "count": times,
                "firstTimestamp": now, "lastTimestamp": now, "eventTime": _now_rfc3339(micro=True),
                "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
                "reportingInstance": self.identity, "action": "Scheduling" if reason != "Evicted" else "Evicting"}
        created = self._post(f"/api/v1/namespaces/{namespace}/events", body)
        event_name = str((created.get("metadata") or {}).get("name") or "")
        if reason != "Scheduled" and event_name:  # a pod is scheduled once: only Events that may repeat are kept
            self._series[key] = (event_name, times)
            while len(self._series) > EVENT_SERIES:
                self._series.pop(next(iter(self._series)))

    def _patch_unschedulable(self, workload_id: str, message: str, version: str) -> None:
        namespace, name = workload_id.split("/", 1)
        if not version:  # no watch saw it pending: read where it is now (a bound pod is left alone)
            pod = self._raw(self.core.read_namespaced_pod, name, namespace)
            if (pod.get("spec") or {}).get("nodeName"):
                return
            version = str((pod.get("metadata") or {}).get("resourceVersion") or "")
        patch: dict = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                  "message": message[:1024], "lastTransitionTime": _now_rfc3339()}]}}
        if version:  # a precondition: 409 if the pod changed (was bound) since the watch saw it pending
            patch["metadata"] = {"resourceVersion": version}
        self._raw(self.core.patch_namespaced_pod_status, name, namespace, patch,
                  _content_type="application/strategic-merge-patch+json")

    # -- plumbing ---------------------------------------------------------------------------------

    def _post(self, path: str, body: dict) -> dict:
        """POST ``body`` (JSON) to ``path`` over the client's keep-alive connection pool, with
        the client's headers and credentials but without its generated call machinery (request
        validation and serialisation, per call: the Binding and Event calls are made once per
        pod). Same timeout, deadline and errors as :meth:`_raw`.

        Raises:
            ApiException: the API refused (non-2xx). TimeoutError: no whole answer within the timeout.
        """
        client = self.api_client
        headers = {"Accept": "application/json", "Content-Type": "application/json",
                   "User-Agent": client.user_agent, **client.default_headers}
        client.update_params_for_auth(headers, [], ["BearerToken"], path, "POST", body)
        deadline = time.monotonic() + self.timeout_s
        resp = client.rest_client.pool_manager.request(
            "POST", client.configuration.host + path, body=json.dumps(body, separators=(",", ":")),
            headers=headers, timeout=urllib3.Timeout(total=self.timeout_s), preload_content=False)
        data = self._read_answer(resp, deadline)
        if not 200 <= resp.status <= 299:
            exc = ApiException(status=resp.status, reason=resp.reason)
            exc.body = data.decode("utf-8", "replace")
            raise exc
        return json.loads(data) if data else {}

    def _raw(self, method, *args, **kwargs) -> dict:
        """Call ``method`` with a timeout and raw content; read, release and parse the answer.
        urllib3's timeout bounds each socket read, so the body is also read against one deadline,
        checked after every socket read: a body that trickles in gives up at about
        ``request_timeout_s`` too (headers that trickle in are bounded per read only).

        Raises:
            ApiException: the API refused. TimeoutError: no whole answer within the timeout.
        """
        deadline = time.monotonic() + self.timeout_s
        resp = method(*args, _preload_content=False, _request_timeout=self.timeout_s, **kwargs)
        data = self._read_answer(resp, deadline)
        return json.loads(data) if data else {}

    def _read_answer(self, resp, deadline: float) -> bytes:
        """Read ``resp``'s whole body against ``deadline`` (module doc of :meth:`_raw`) and
        release its connection to the pool."""
        chunks = []
        try:
            while chunk := resp.read1(64 * 1024):  # what one socket read gave: the deadline is checked after each
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the answer took longer than {self.timeout_s:g} s")
        except BaseException:
            resp.close()  # half read: the connection must not go back to the pool with the rest in it
            raise
        finally:
            resp.release_conn()
        return b"".join(chunks)


#: The message of the apiserver's ResourceVersionTooLarge error (a 504 Timeout Status)
TOO_LARGE = "Too large resource version"
#: The watch event types of the API concepts page (``MALFORMED`` is Kalena's, see :class:`_Watch`).
WATCH_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})


#: The head of a watch line up to its object's ``metadata`` value, when nothing but ``kind`` and
#: ``apiVersion`` (plain strings) come before it — the API server's order, and the test server's
_HEAD = re.compile(r'\{"type":"(ADDED|MODIFIED|DELETED)","object":\{(?:"(?:kind|apiVersion)":"[^"\\]*",){0,2}'
                   r'"metadata":(?=\{)')
_DECODER = json.JSONDecoder()


class _Watch(k8s_watch.Watch):
    """The client's ``Watch`` with its line decoding made total: a line that is not a
    ``{"type", "object"}`` event (not JSON, not an object, an unknown ``type``, an ``object``
    that is not a mapping, an ERROR without an integer ``code``) becomes a ``MALFORMED`` event
    naming the field, instead of a ``KeyError`` that ends the stream (or a ``None`` event).
    Objects stay raw dicts (``raw_object``); nothing is deserialised into models.

    ``wants(ref)`` (issue 32): a line of an object outside it is decoded up to its metadata only
    (:meth:`KubernetesOrchestrator.watch_objects`): the other shards' pods cost a watch a third
    of their decoding."""

    def __init__(self, *, wants: Callable[[str], bool] | None = None) -> None:
        super().__init__()
        self.wants = wants

    def _unwanted(self, data: str) -> dict | None:
        """The event of a line whose object ``wants`` refuses, from its metadata alone; None:
        decode the line whole (wanted, or a head this does not read)."""
        head = _HEAD.match(data)
        if head is None:
            return None
        try:
            meta, _ = _DECODER.raw_decode(data, head.end())
        except ValueError:
            return None
        name, namespace = meta.get("name"), meta.get("namespace") or "default"
        if not isinstance(name, str) or not name or not isinstance(namespace, str) or self.wants(f"{namespace}/{name}"):
            return None
        obj = {"metadata": meta}
        return {"type": head.group(1), "object": obj, "raw_object": obj}

    def unmarshal_event(self, data: str, return_type) -> dict | None:
        if not data or data.isspace():
            return None
        if self.wants is not None:
            unwanted = self._unwanted(data)
            if unwanted is not None:
                return unwanted
        try:
            event = json.loads(data)
        except ValueError:
            return _malformed_line(data, None, "", "not JSON")
        if not isinstance(event, dict):
            return _malformed_line(data, None, "", f"a watch event is a JSON object, got {type(event).__name__}")
        obj = event.get("object")
        if event.get("type") not in WATCH_TYPES:
            return _malformed_line(data, obj, "type", f"{event.get('type')!r} is not one of {', '.join(sorted(WATCH_TYPES))}")
        if not isinstance(obj, dict):
            return _malformed_line(data, obj, "object", f"expected an object, got {type(obj).__name__}")
        if event["type"] == "ERROR" and (isinstance(obj.get("code"), bool) or not isinstance(obj.get("code"), int)):
            return _malformed_line(data, obj, "object.code", "an ERROR event carries a Status with an integer code")
        if event["type"] == "ERROR":  # the client formats the exception from both (reason is optional)
            obj = {**obj, "reason": obj.get("reason") or "", "message": obj.get("message") or ""}
        return {"type": event["type"], "object": obj, "raw_object": obj}


class _LineChunks:
    """A watch response whose ``stream`` yields one whole line (with its newline) per segment,
    whatever the server's chunks: the client's line splitter copies the rest of its buffer
    after every line it cuts, so a chunk of n events cost it n² bytes copied (a burst of pod
    events arrives as one chunk; every scheduler instance reads every pod's events). Every
    other attribute is the response's."""

    def __init__(self, resp) -> None:
        self._resp = resp

    def stream(self, amt=None, decode_content=False):
        rest = b""
        for segment in self._resp.stream(amt=amt, decode_content=decode_content):
            if isinstance(segment, str):
                segment = segment.encode("utf-8")
            if b"\n" not in segment:
                rest += segment
                continue
            lines = (rest + segment).split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield line + b"\n"
        if rest:
            yield rest

    def __getattr__(self, name):
        return getattr(self._resp, name)


def _malformed_line(line: str, obj: object, field: str, problem: str) -> dict:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = ""
    if isinstance(meta, dict) and meta.get("name"):
        name = f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])
    return {"type": "MALFORMED", "raw_object": {"name": name, "field": field, "problem": problem,
                                                "line": line if len(line) <= 200 else line[:197] + "..."}}


def _stop_when(stop: threading.Event, done: threading.Event, w: k8s_watch.Watch) -> None:
    """End watch ``w`` as soon as ``stop`` is set (a blocked read would wait for the timeout);
    while its answer has not come yet there is no stream to cut, so ask again until it ends."""
    while not done.is_set():
        if stop.wait(0.5):
            while not done.is_set():
                w.stop()
                done.wait(0.2)
            return


def _reason(exc: ApiException) -> str:
    try:
        body = json.loads(exc.body or "{}")
    except (ValueError, TypeError):
        return exc.reason or ""
    message = body.get("message") or exc.reason or ""
    causes = ((body.get("details") or {}).get("causes") or [])
    extra = "; ".join(str(c.get("message")) for c in causes if c.get("message"))
    return f"{message} ({extra})" if extra else message
