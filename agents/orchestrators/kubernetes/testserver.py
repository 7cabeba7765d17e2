"""A Kubernetes API test server that speaks the real wire protocol to the real ``kubernetes``
Python client (no API server, kind or kwok can run on the development machines).

What it models (JSON shapes from the Kubernetes API reference; semantics from the API
concepts page):

* ``nodes``, ``pods``, ``events`` (core/v1 and events.k8s.io/v1 paths), ``leases``
  (coordination.k8s.io/v1), ``poddisruptionbudgets`` (policy/v1 and v1beta1): get, list, create, delete;
  one cluster-wide ``resourceVersion`` bumped by every write.
* list: ``labelSelector``, ``fieldSelector`` (``metadata.name``, ``metadata.namespace``,
  ``spec.nodeName``, ``spec.schedulerName``, ``status.phase``; events: ``involvedObject.kind``,
  ``.name``, ``.namespace``, ``.uid`` as ``kubectl describe`` selects them), ``limit`` + ``continue`` pages of
  one consistent snapshot; ``metadata.resourceVersion`` of the list.
* watch (``?watch=true``): an HTTP/1.1 chunked stream of ``{"type", "object"}`` lines —
  ADDED/MODIFIED/DELETED after the requested ``resourceVersion`` (none or ``"0"``: synthetic
  ADDED of the current state first); ``allowWatchBookmarks`` → BOOKMARK events every
  ``bookmark_interval_s`` (and on :meth:`bookmark`); ``timeoutSeconds`` ends the stream; a
  version older than the compacted one → one ``ERROR`` event with a 410 ``Expired`` Status, to
  every retry as well (:meth:`compact`); a version newer than the cluster's is waited for up to
  ``too_large_wait_s`` (the watch cache's 3 s), then answered with one ``ERROR`` event carrying a
  504 ``Timeout`` Status "Too large resource version" (cause ``ResourceVersionTooLarge``);
  :meth:`expire_watches` sends that ERROR to open
  watches, :meth:`drop_watches` ends them, :meth:`inject_watch_line` sends them a raw line.
* pods: create (``pod_create_hooks`` = admission: mutate or refuse), delete (immediately, or
  with ``graceful=True`` a ``deletionTimestamp`` and removal after the grace ×
  ``grace_scale``), PATCH of the object and of ``/status`` (JSON patch, merge patch, strategic
  merge patch with ``conditions`` merged by ``type``; the client's default content type is JSON
  patch, so a dict body sent as such is a 400 as on a real server; a patch carrying
  ``metadata.resourceVersion`` is a precondition: 409 Conflict when the object moved on),
  ``/binding`` (404 for a missing pod, 409 ``already assigned`` for a bound one, 409 "Precondition
  failed: UID in precondition" when the Binding's ``metadata.uid`` is not the pod's; ``bind_hooks`` may refuse; then
  ``bound_hooks`` run — by default a kubelet that sets ``Running`` when ``run_bound_pods``),
  ``/eviction`` (policy/v1 Eviction: 409 when ``deleteOptions.preconditions.uid`` is not the
  pod's; PodDisruptionBudgets evaluated, 429 with a Status naming the budget; else a
  ``DisruptionTarget`` condition and deletion with the given grace).
* nodes: create, PATCH of the object and ``/status``.
* leases: get, create (409 AlreadyExists), PUT with ``metadata.resourceVersion`` (409 Conflict
  when stale), PATCH.
* what kubectl asks besides objects (:mod:`~agents.orchestrators.kubernetes.testdiscovery`):
  ``/version``, legacy discovery (``/api``, ``/apis``, each group version's resource list),
  ``/openapi/v2`` (an empty protobuf document: client-side validation checks ``apiVersion`` and
  ``kind`` only) and ``meta.k8s.io/v1 Table`` answers (pods, nodes, events, jobs with kube-apiserver's
  columns; Name/Created At for the rest).
* namespaces, configmaps, secrets, services, serviceaccounts, deployments, replicasets,
  statefulsets, daemonsets, jobs, ingresses, RBAC roles and bindings, webhook configurations: stored
  generically (create, get, list, watch, delete, PATCH, PUT) so manifests apply.
* controller doubles (:mod:`~agents.orchestrators.kubernetes.testcontrollers`, on unless
  ``controllers=False``): Job → pods (replacements, ``backoffLimit``, ``podFailurePolicy`` Ignore),
  Deployment → ReplicaSet (``pod-template-hash``) → pods, StatefulSet ordinals, DaemonSet pod per
  node; the ``scale`` subresource.
* faults: :meth:`fault` answers matching requests with a code or delays them (timeouts).
* every request is recorded in ``requests`` as ``(verb, path, body)`` (and ``queries`` as
  ``(verb, path, query parameters)``; ``answers`` has ``(verb, path, status code)``) and counted
  in ``calls``.

What it does not model: authentication and authorization, admission plugins beyond the
hooks, validation of most fields (names, resource quantities are taken as given), defaulting
beyond uid/creationTimestamp/status.phase, server-side apply, field managers, dry run,
historical lists (a list is always served at the latest version; ``resourceVersionMatch`` is
ignored), watch cache windows (only :meth:`compact` expires versions), ``sendInitialEvents``,
generation/observedGeneration, finalizers, owner-reference garbage collection, controllers
beyond the doubles, the scheduler, real kubelets (nodes never heartbeat), aggregated
discovery, OpenAPI field schemas, HTTP/2, protobuf objects, CBOR, rate limiting (APF), and Event
aggregation.

Extending it (the kubelet and webhook of part 2): append to ``pod_create_hooks``
(``hook(pod) -> pod | None``, raise :class:`APIError` to refuse), ``create_hooks[resource]`` (the
same for another resource's POST, e.g. ``jobs``), ``bind_hooks``
(``hook(pod, node_name)``, raise to refuse the binding), ``bound_hooks`` (``hook(server,
key, node_name)`` after the binding is stored, outside the store lock; set a pod's phase with
:meth:`set_pod_phase`), or register a route with :meth:`route`.
"""

from __future__ import annotations

import copy
import json
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

from agents.orchestrators.kubernetes.testcontrollers import Controllers
from agents.orchestrators.kubernetes.testdiscovery import (
    OPENAPI_V2_PROTOBUF, SCALABLE, VERSION, api_group_list, api_resource_list, api_versions, rescale, scale_of,
    table, wants_table,
)
from agents.orchestrators.kubernetes.testkubelet import qos_class
from agents.orchestrators.kubernetes.testobjects import node, pod
from agents.orchestrators.kubernetes.teststore import (
    RESOURCES, APIError, Store, apply_patch, disruptions_allowed, field_matcher, label_matcher, now_rfc3339,
    selects, status_body,
)

__all__ = ["APIError", "TestAPIServer", "node", "pod", "status_body"]

PREFIXES = {name: "/api/v1" if r.api_version == "v1" else f"/apis/{r.api_version}" for name, r in RESOURCES.items()}
_ROUTE = re.compile(r"^/(?:api/v1|apis/(?P<group>[a-z0-9.-]+)/(?P<version>v1|v1beta1))"
                    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<resource>[a-z]+)(?:/(?P<name>[^/]+))?(?:/(?P<sub>[a-z]+))?$")
_DISCOVERY = re.compile(r"^/(?:api/(?P<core>v1)|apis/(?P<group>[a-z0-9.-]+)/(?P<version>[a-z0-9]+))/?$")
_GROUPS = {name: r.group for name, r in RESOURCES.items()}
#: a resource also served under another group version: events.k8s.io/v1 events, policy/v1beta1 budgets
_ALSO_SERVED = {("events", "events.k8s.io"), ("poddisruptionbudgets", "policy")}


class TestAPIServer:
    """State, hooks, faults, the request log and the HTTP server; a context manager.

    ``port=0`` picks a free port on ``host`` (loopback); ``url`` is what ``kubernetes.client.Configuration``
    takes as ``host``.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, *, port: int = 0, bookmark_interval_s: float = 1.0, graceful: bool = False,
                 grace_scale: float = 1.0, run_bound_pods: bool = True, record_bodies: bool = True,
                 too_large_wait_s: float = 3.0, controllers: bool = True, host: str = "127.0.0.1") -> None:
        self.store = Store()
        #: the controller doubles (Job, Deployment, ReplicaSet, StatefulSet, DaemonSet) on one thread while it runs
        self.controllers = [Controllers(self)] if controllers else []
        self.bookmark_interval_s = bookmark_interval_s
        self.too_large_wait_s = too_large_wait_s
        self.graceful = graceful
        self.grace_scale = grace_scale
        self.run_bound_pods = run_bound_pods
        self.record_bodies = record_bodies
        self.requests: list[tuple[str, str, object]] = []
        #: ``(verb, path, query)`` of every request (the query tells a watch from a list: RBAC)
        self.request_log: list[tuple[str, str, dict]] = []
        self.queries: list[tuple[str, str, dict]] = []
        self.answers: list[tuple[str, str, int]] = []
        self.calls: Counter = Counter()
        self.pod_create_hooks: list[Callable[[dict], dict | None]] = []
        #: resource → admission hooks for a POST of another resource (``hook(obj) -> obj | None``)
        self.create_hooks: dict[str, list[Callable[[dict], dict | None]]] = {}
        self.bind_hooks: list[Callable[[dict, str], None]] = []
        self.bound_hooks: list[Callable[[TestAPIServer, str, str], None]] = [_kubelet_runs]
        self._routes: list[tuple[str, re.Pattern, Callable]] = []
        self._faults: list[dict] = []
        self._pages: dict[str, tuple[list[bytes], int, float]] = {}
        self._watch_generation = 0
        self._expire_generation = 0
        self._bookmark_generation = 0
        self._injected: list[tuple[str, bytes]] = []
        #: resource → watch streams open now (started: they get what is injected or bookmarked from now on)
        self.open_watches: Counter = Counter()
        self._closing = threading.Event()
        self._timers: list[threading.Timer] = []
        self.server = _Server((host, port), self._handler())
        self.server.daemon_threads = True
        self.server.request_queue_size = 128

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"

    def kubeconfig(self, path):
        """Write a kubeconfig (JSON, which YAML readers take) whose current context is this
        server, with a bearer token, to ``path``; returns ``path``."""
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "test",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "kalena"}}],
            "users": [{"name": "kalena", "user": {"token": "t"}}]}))
        return path

    def __enter__(self) -> TestAPIServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        threading.Thread(target=self.server.serve_forever, name="kube-test-api", daemon=True).start()
        for controller in self.controllers:
            controller.start()

    def stop(self) -> None:
        self._closing.set()
        for controller in self.controllers:
            controller.stop()
        with self.store.lock:
            self.store.changed.notify_all()
        for t in self._timers:
            t.cancel()
        self.server.shutdown()
        self.server.server_close()

    # -- state helpers (tests, benchmarks and hooks) ---------------------------------------------

    def create(self, resource: str, obj: dict) -> dict:
        return self.store.create(resource, obj)

    def get(self, resource: str, key: str) -> dict:
        return self.store.get(resource, key)

    def objects(self, resource: str) -> list[dict]:
        with self.store.lock:
            return copy.deepcopy(list(self.store.objects[resource].values()))

    def create_pod(self, obj: dict) -> dict:
        """Create a pod as the API would (admission hooks run)."""
        return self._pod_create(obj)

    def delete_pod(self, key: str) -> dict:
        return self.store.delete("pods", key)

    def set_pod_phase(self, key: str, phase: str, *, reason: str = "", message: str = "",
                      exit_code: int | None = None) -> dict:
        """What a kubelet reports: ``Running``, ``Succeeded``, ``Failed`` (``reason`` e.g.
        ``OutOfcpu`` for an admission refusal, ``Evicted``, ``OOMKilled`` in the container)."""
        def change(p: dict) -> None:
            status = p.setdefault("status", {})
            status["phase"] = phase
            status.pop("reason", None)
            status.pop("message", None)
            if reason and (phase != "Failed" or exit_code is None):
                status["reason"] = reason
            if message:
                status["message"] = message
            if phase == "Running":
                status.setdefault("startTime", now_rfc3339())
                state = {"running": {"startedAt": now_rfc3339()}}
            elif phase in ("Succeeded", "Failed") and exit_code is not None:
                state = {"terminated": {"exitCode": exit_code, "reason": reason or ("Completed" if exit_code == 0
                                                                                     else "Error"),
                                        "finishedAt": now_rfc3339()}}
            else:
                state = None
            if state:
                status["containerStatuses"] = [{"name": c["name"], "image": c.get("image", ""),
                                                "imageID": f"docker-pullable://{c.get('image', '')}",
                                                "containerID": f"containerd://{uuid.uuid4().hex}",
                                                "ready": phase == "Running", "started": phase == "Running",
                                                "restartCount": 0, "state": state}
                                               for c in (p.get("spec") or {}).get("containers") or []]
        return self.store.mutate("pods", key, change)

    def add_pdb(self, namespace: str, name: str, match_labels: dict, *, max_unavailable=None,
                min_available=None) -> dict:
        spec: dict = {"selector": {"matchLabels": dict(match_labels)}}
        if min_available is not None:
            spec["minAvailable"] = min_available
        else:
            spec["maxUnavailable"] = 0 if max_unavailable is None else max_unavailable
        return self.store.create("poddisruptionbudgets", {"metadata": {"name": name, "namespace": namespace},
                                                           "spec": spec})

    def compact(self) -> int:
        """Expire every resourceVersion up to now: watches from them get ERROR 410."""
        return self.store.compact()

    def expire_watches(self) -> None:
        """Compact and send ERROR 410 to every open watch (then end it)."""
        self.compact()
        with self.store.lock:
            self._expire_generation += 1
            self.store.changed.notify_all()

    def drop_watches(self) -> None:
        """End every open watch stream (a network blip or an API server restart)."""
        with self.store.lock:
            self._watch_generation += 1
            self.store.changed.notify_all()

    def bookmark(self) -> None:
        """Send a BOOKMARK now to every watch that allowed them."""
        with self.store.lock:
            self._bookmark_generation += 1
            self.store.changed.notify_all()

    def inject_watch_line(self, resource: str, line: bytes) -> None:
        """Send ``line`` (a newline is added) as it is to every open watch of ``resource`` — a
        line that is not a watch event, as a faulty proxy or server might send. A watch is open
        once ``open_watches[resource]`` counts it (its request may be logged earlier)."""
        with self.store.lock:
            self._injected.append((resource, line.rstrip(b"\n") + b"\n"))
            self.store.changed.notify_all()

    def fault(self, method: str, path_regex: str, *, code: int | None = None, delay_s: float = 0.0,
              times: int = 1, reason: str = "InternalError", message: str = "injected fault") -> None:
        """Answer the next ``times`` requests matching ``method`` and ``path_regex`` with
        ``code`` (a Status), after ``delay_s`` (a delay alone then serves normally)."""
        self._faults.append({"method": method, "re": re.compile(path_regex), "code": code, "delay_s": delay_s,
                             "times": times, "reason": reason, "message": message})

    def route(self, method: str, path_regex: str, handler: Callable[[dict, dict], tuple[int, dict]]) -> None:
        """Serve ``method`` on ``path_regex`` with ``handler(match groups, body) -> (code, body)``
        before the built-in routes (e.g. an admission review endpoint)."""
        self._routes.append((method, re.compile(path_regex), handler))

    def later(self, delay_s: float, fn: Callable[[], None]) -> None:
        timer = threading.Timer(delay_s, fn)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    # -- pods -------------------------------------------------------------------------------------

    def _pod_create(self, obj: dict) -> dict:
        obj = copy.deepcopy(obj)
        for hook in self.pod_create_hooks:
            obj = hook(obj) or obj
        spec = obj.setdefault("spec", {})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        try:
            status.setdefault("qosClass", qos_class(obj))  # as kube-apiserver, after the webhooks
        except (AttributeError, TypeError):
            pass  # a malformed spec: kube-apiserver refuses it at decode; the double stores it for the watch's tests
        return self.store.create("pods", obj)

    def _bind(self, key: str, body: dict) -> dict:
        if (body.get("apiVersion"), body.get("kind")) != ("v1", "Binding"):
            raise APIError(400, "BadRequest", "Binding: apiVersion v1 and kind Binding are required")
        target = (body.get("target") or {}).get("name")
        if not target or (body.get("target") or {}).get("kind", "Node") != "Node":
            raise APIError(422, "Invalid", "Binding.target: a Node name is required")
        name = key.rsplit("/", 1)[-1]
        want_uid = str((body.get("metadata") or {}).get("uid") or "")

        def change(p: dict) -> None:
            held_uid = str((p.get("metadata") or {}).get("uid") or "")
            if want_uid and want_uid != held_uid:  # as kube-apiserver's storage precondition
                raise APIError(409, "Conflict", f'Operation cannot be fulfilled on pods "{name}": Precondition '
                               f'failed: UID in precondition: {want_uid}, UID in object meta: {held_uid}')
            bound = (p.get("spec") or {}).get("nodeName")
            if bound:
                raise APIError(409, "Conflict", f'Operation cannot be fulfilled on pods/binding "{name}": '
                               f'pod {name} is already assigned to node "{bound}"')
            if (p.get("metadata") or {}).get("deletionTimestamp"):
                raise APIError(409, "Conflict", f'pod {name} is being deleted, cannot be assigned to a host')
            for hook in self.bind_hooks:
                hook(p, target)
            p["spec"]["nodeName"] = target
            conditions = [c for c in p.setdefault("status", {}).get("conditions") or [] if c.get("type") != "PodScheduled"]
            conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": now_rfc3339()})
            p["status"]["conditions"] = conditions

        self.store.mutate("pods", key, change)
        for hook in self.bound_hooks:
            hook(self, key, target)
        return status_body(201, "", "") | {"status": "Success"}

    def _evict(self, key: str, body: dict) -> dict:
        if (body.get("apiVersion"), body.get("kind")) not in (("policy/v1", "Eviction"), ("policy/v1beta1", "Eviction")):
            raise APIError(400, "BadRequest", "Eviction: apiVersion policy/v1 and kind Eviction are required")
        with self.store.lock:
            target = self.store.get("pods", key)
            want_uid = str(((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid") or "")
            held_uid = str((target.get("metadata") or {}).get("uid") or "")
            if want_uid and want_uid != held_uid:  # as kube-apiserver's eviction REST checks it
                raise APIError(409, "Conflict", f'Operation cannot be fulfilled on Pod "{key.split("/", 1)[1]}": '
                               f"the UID in the precondition ({want_uid}) does not match the UID in record "
                               f"({held_uid}). The object might have been deleted and then recreated")
            budgets = [b for b in self.store.objects["poddisruptionbudgets"].values() if selects(b, target)]
            for budget in budgets:
                covered = [p for p in self.store.objects["pods"].values() if selects(budget, p)]
                allowed, desired, healthy = disruptions_allowed(budget, covered)
                running = (target.get("status") or {}).get("phase") == "Running"
                if allowed < 1 and running:
                    bname = budget["metadata"]["name"]
                    raise APIError(429, "TooManyRequests",
                                   "Cannot evict pod as it would violate the pod's disruption budget.",
                                   {"causes": [{"reason": "DisruptionBudget",
                                                "message": f"The disruption budget {bname} needs {desired} healthy "
                                                           f"pods and has {healthy} currently"}]})
            grace = (body.get("deleteOptions") or {}).get("gracePeriodSeconds")

            def mark(p: dict) -> None:
                conditions = [c for c in p.setdefault("status", {}).get("conditions") or []
                              if c.get("type") != "DisruptionTarget"]
                conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                                   "message": "Eviction API: evicting", "lastTransitionTime": now_rfc3339()})
                p["status"]["conditions"] = conditions

            self.store.mutate("pods", key, mark)
            self._delete_pod(key, grace)
        return status_body(201, "", "") | {"status": "Success"}

    def _delete_pod(self, key: str, grace: int | None) -> dict:
        current = self.store.get("pods", key)
        grace_s = float(grace if grace is not None else (current.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
        if not self.graceful or grace_s <= 0 or not (current.get("spec") or {}).get("nodeName"):
            return self.store.delete("pods", key)

        def terminating(p: dict) -> None:
            p["metadata"]["deletionTimestamp"] = now_rfc3339()
            p["metadata"]["deletionGracePeriodSeconds"] = int(grace_s)

        out = self.store.mutate("pods", key, terminating)

        def finish() -> None:
            try:
                self.store.delete("pods", key)
            except APIError:
                pass
        self.later(grace_s * self.grace_scale, finish)
        return out

    # -- HTTP -------------------------------------------------------------------------------------

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no 40 ms delayed-ACK stalls

            def log_message(self, *args) -> None:  # quiet
                return

            def _send(self, code: int, body, content_type: str = "application/json") -> None:
                api.answers.append((self.command, self.path.split("?", 1)[0], code))
                data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if not raw:
                    return None
                try:
                    return json.loads(raw)
                except ValueError:
                    raise APIError(400, "BadRequest", "the request body is not JSON") from None

            def _serve(self, method: str) -> None:
                url = urlparse(self.path)
                try:
                    body = self._body() if method in ("POST", "PUT", "PATCH", "DELETE") else None
                except APIError as exc:
                    return self._send(exc.code, exc.status())
                api.requests.append((method, url.path, body if api.record_bodies else None))
                query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
                api.request_log.append((method, url.path, query))
                api.queries.append((method, url.path, query))
                try:
                    for fault in api._faults:
                        if fault["times"] > 0 and fault["method"] == method and fault["re"].search(url.path):
                            fault["times"] -= 1
                            if fault["delay_s"]:
                                time.sleep(fault["delay_s"])
                            if fault["code"]:
                                raise APIError(fault["code"], fault["reason"], fault["message"])
                            break
                    for m, pattern, handler in api._routes:
                        match = pattern.match(url.path)
                        if m == method and match:
                            code, out = handler(match.groupdict(), body)
                            return self._send(code, out)
                    api._dispatch(self, method, url.path, query, body)
                except APIError as exc:
                    self._send(exc.code, exc.status())
                except (BrokenPipeError, ConnectionResetError, socket.timeout):
                    self.close_connection = True

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def do_PUT(self) -> None:
                self._serve("PUT")

            def do_PATCH(self) -> None:
                self._serve("PATCH")

            def do_DELETE(self) -> None:
                self._serve("DELETE")

        return Handler

    def _dispatch(self, h, method: str, path: str, query: dict, body) -> None:
        m = _ROUTE.match(path)
        if method == "GET" and m is None and self._discovery(h, path):
            return None
        if m is None or m["resource"] not in RESOURCES or (
                (m["group"] or "") != _GROUPS[m["resource"]] and (m["resource"], m["group"]) not in _ALSO_SERVED) or (
                m["version"] == "v1beta1" and m["group"] != "policy"):
            raise APIError(404, "NotFound", f"the server could not find the requested resource ({method} {path})")
        resource, ns, name, sub = m["resource"], m["ns"], m["name"], m["sub"]
        self.calls[(method, resource + (f"/{sub}" if sub else "") + ("" if name else "(list)"))] += 1
        key = f"{ns}/{name}" if ns and name else (name or "")
        if RESOURCES[resource].namespaced and name and not ns:
            raise APIError(404, "NotFound", f"{resource} is namespaced: use /namespaces/{{ns}}/{resource}/{name}")
        if name is None:
            if method == "GET":
                return self._list_or_watch(h, resource, ns, query)
            if method == "POST":
                obj = dict(body or {})
                meta = obj.setdefault("metadata", {})
                if ns:
                    if meta.get("namespace") not in (None, ns):
                        raise APIError(400, "BadRequest", "the namespace of the object does not match the request")
                    meta["namespace"] = ns
                for hook in self.create_hooks.get(resource, []) if resource != "pods" else []:
                    obj = hook(obj) or obj
                created = self._pod_create(obj) if resource == "pods" else self.store.create(resource, obj)
                return h._send(201, created)
            raise APIError(405, "MethodNotAllowed", f"{method} is not supported on a {resource} collection")
        if sub is None:
            if method == "GET":
                obj = self.store.get(resource, key)
                if wants_table(h.headers.get("Accept", "")):
                    return h._send(200, table(resource, [obj], obj["metadata"]["resourceVersion"],
                                              query.get("includeObject", "Metadata")))
                return h._send(200, obj)
            if method == "DELETE":
                grace = (body or {}).get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
                if resource == "pods":
                    out = self._delete_pod(key, None if grace in (None, "") else int(grace))
                else:
                    out = self.store.delete(resource, key)
                return h._send(200, out)
            if method == "PATCH":
                ctype = h.headers.get("Content-Type", "")

                def patch(o: dict) -> dict:
                    _precondition(resource, key, o, body)
                    return apply_patch(ctype, o, body)
                return h._send(200, self.store.mutate(resource, key, patch))
            if method == "PUT":
                return h._send(200, self._replace(resource, key, body or {}))
        elif sub == "status" and resource in ("pods", "nodes"):
            if method == "GET":
                return h._send(200, self.store.get(resource, key))
            if method == "PATCH":
                ctype = h.headers.get("Content-Type", "")

                def patch_status(o: dict) -> dict:
                    _precondition(resource, key, o, body)
                    patched = apply_patch(ctype, o, body)
                    o["status"] = patched.get("status", o.get("status"))  # the status subresource changes status only
                    return o
                return h._send(200, self.store.mutate(resource, key, patch_status))
        elif sub == "scale" and resource in SCALABLE and method in ("GET", "PATCH", "PUT"):
            return h._send(200, self._scale(resource, key, method, h.headers.get("Content-Type", ""), body))
        elif sub == "binding" and resource == "pods" and method == "POST":
            return h._send(201, self._bind(key, body or {}))
        elif sub == "eviction" and resource == "pods" and method == "POST":
            return h._send(201, self._evict(key, body or {}))
        raise APIError(405, "MethodNotAllowed", f"{method} {path} is not supported")

    def _scale(self, resource: str, key: str, method: str, content_type: str, body) -> dict:
        """The ``scale`` subresource: GET reads it, PATCH or PUT sets ``spec.replicas``."""
        if method != "GET":
            self.store.mutate(resource, key, lambda o: rescale(o, method, content_type, body))
        return scale_of(self.store.get(resource, key))

    def _discovery(self, h, path: str) -> bool:
        """Answer ``/version``, ``/api``, ``/apis``, a group version's resource list and
        ``/openapi/v2``; ``False`` for any other path."""
        if path == "/version":
            h._send(200, VERSION)
        elif path in ("/api", "/api/"):
            h._send(200, api_versions(h.headers.get("Host", "")))
        elif path in ("/apis", "/apis/"):
            h._send(200, api_group_list())
        elif path == "/openapi/v2":
            # not its own media type: Go's mime parser (client-go) refuses the "@" in it
            h._send(200, OPENAPI_V2_PROTOBUF, "application/octet-stream")
        elif (m := _DISCOVERY.match(path)) and (body := api_resource_list(m["group"] or "", m["core"] or m["version"])):
            h._send(200, body)
        else:
            return False
        return True

    def _replace(self, resource: str, key: str, body: dict) -> dict:
        """PUT: optimistic concurrency on ``metadata.resourceVersion`` (409 Conflict when stale)."""
        with self.store.lock:
            _precondition(resource, key, self.store.get(resource, key), body)

            def put(o: dict) -> dict:
                new = copy.deepcopy(body)
                new.setdefault("apiVersion", o["apiVersion"])
                new.setdefault("kind", o["kind"])
                new.setdefault("metadata", {}).update({k: o["metadata"][k] for k in ("name", "namespace")
                                                       if k in o["metadata"]})
                return new
            return self.store.mutate(resource, key, put)

    def _predicate(self, ns: str | None, query: dict):
        labels = label_matcher(query.get("labelSelector", ""))
        fields = field_matcher(query.get("fieldSelector", ""))
        return lambda o: ((not ns or (o.get("metadata") or {}).get("namespace") == ns)
                          and labels((o.get("metadata") or {}).get("labels") or {}) and fields(o))

    def _list_or_watch(self, h, resource: str, ns: str | None, query: dict) -> None:
        predicate = self._predicate(ns, query)
        r = RESOURCES[resource]
        if query.get("watch") in ("true", "1"):
            return self._watch(h, resource, predicate, query)
        token = query.get("continue")
        limit = int(query.get("limit") or 0)
        if token:
            page = self._pages.get(token)
            if page is None:
                raise APIError(410, "Expired", "The provided continue parameter is too old to display a consistent "
                               "list result. You can start a new list without the continue parameter.")
            lines, rv, _ = page
        else:
            as_table = wants_table(h.headers.get("Accept", ""))
            with self.store.lock:
                items, rv = self.store.list(resource, predicate)
                if as_table:  # kubectl get: every row at once (no pages)
                    answer = table(resource, copy.deepcopy(items), str(rv), query.get("includeObject", "Metadata"))
                lines = [] if as_table else [json.dumps(o, separators=(",", ":")).encode() for o in items]
            if as_table:
                return h._send(200, answer)
        start = int(token.split(":", 1)[1]) if token else 0
        end = start + limit if limit else len(lines)
        meta: dict = {"resourceVersion": str(rv)}
        if end < len(lines):
            new_token = f"{uuid.uuid4().hex}:{end}"
            self._pages[new_token] = (lines, rv, time.time())
            meta["continue"] = new_token
            meta["remainingItemCount"] = len(lines) - end
        head = json.dumps({"kind": f"{r.kind}List", "apiVersion": r.api_version, "metadata": meta}).encode()[:-1]
        h._send(200, head + b',"items":[' + b",".join(lines[start:end]) + b"]}")

    def _watch(self, h, resource: str, predicate, query: dict) -> None:
        r = RESOURCES[resource]
        raw_rv = query.get("resourceVersion", "")
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        timeout_s = float(query.get("timeoutSeconds") or 0) or None
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def chunk(data: bytes) -> None:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()

        def expired(rv_text: str) -> bytes:
            status = status_body(410, "Expired", f"too old resource version: {rv_text} ({self.store.rv})")
            return json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"

        def too_large(rv_text: str) -> bytes:  # the apiserver's storage.NewTooLargeResourceVersionError
            status = status_body(504, "Timeout", f"Too large resource version: {rv_text}, current: {self.store.rv}",
                                 {"causes": [{"reason": "ResourceVersionTooLarge",
                                              "message": "Too large resource version"}], "retryAfterSeconds": 1})
            return json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"

        started = time.monotonic()
        with self.store.lock:
            generation, expire_gen, bookmark_gen = self._watch_generation, self._expire_generation, self._bookmark_generation
            injected = len(self._injected)
            self.open_watches[resource] += 1
            if raw_rv in ("", "0"):
                pending = [json.dumps({"type": "ADDED", "object": o}, separators=(",", ":")).encode() + b"\n"
                           for o in self.store.objects[resource].values() if predicate(o)]
                sent_rv = self.store.rv
            else:
                try:
                    sent_rv = int(raw_rv)
                except ValueError:
                    sent_rv = -1
                if sent_rv < self.store.compacted_rv:
                    pending = None
                else:
                    pending = []
                    deadline = time.monotonic() + self.too_large_wait_s
                    while sent_rv > self.store.rv and time.monotonic() < deadline:  # the watch cache waits to catch up
                        self.store.wait(max(0.0, deadline - time.monotonic()))
                    if sent_rv > self.store.rv:
                        pending = "too large"
        try:
            if pending is None:
                chunk(expired(raw_rv))
                return
            if pending == "too large":
                chunk(too_large(raw_rv))
                return
            if pending:
                chunk(b"".join(pending))
            last_bookmark = time.monotonic()
            while not self._closing.is_set():
                with self.store.lock:
                    if self._watch_generation != generation:
                        break
                    if self._expire_generation != expire_gen:
                        out = [expired(str(sent_rv))]
                        done = True
                    else:
                        done = False
                        changes = self.store.changes_after(sent_rv)
                        if not changes:
                            wait = self.bookmark_interval_s if bookmarks else 1.0
                            if timeout_s:
                                wait = min(wait, max(0.0, started + timeout_s - time.monotonic()))
                            self.store.wait(wait)
                            changes = self.store.changes_after(sent_rv)
                        if sent_rv < self.store.compacted_rv:  # its changes were compacted away
                            out, done = [expired(str(sent_rv))], True
                        else:
                            out = [c.line for c in changes if c.resource == resource and predicate(c.obj)]
                            if changes:
                                sent_rv = changes[-1].rv
                        out += [line for r_, line in self._injected[injected:] if r_ == resource]
                        injected = len(self._injected)
                        current_rv = self.store.rv
                        bookmark_now = self._bookmark_generation != bookmark_gen
                        bookmark_gen = self._bookmark_generation
                if out:
                    chunk(b"".join(out))
                if done:
                    break
                now = time.monotonic()
                if bookmarks and (bookmark_now or now - last_bookmark >= self.bookmark_interval_s):
                    sent_rv = max(sent_rv, current_rv)
                    chunk(json.dumps({"type": "BOOKMARK", "object": {
                        "kind": r.kind, "apiVersion": r.api_version,
                        "metadata": {"resourceVersion": str(sent_rv)}}}).encode() + b"\n")
                    last_bookmark = now
                if timeout_s and now - started >= timeout_s:
                    break
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            h.close_connection = True
            return
        finally:
            with self.store.lock:
                self.open_watches[resource] -= 1
        h.close_connection = True


def _precondition(resource: str, key: str, current: dict, body: object) -> None:
    """Optimistic concurrency: a PUT or an object patch carrying ``metadata.resourceVersion`` is
    refused with 409 Conflict unless it is the stored object's (API concepts, "Resource versions").

    Raises:
        APIError: 409 Conflict.
    """
    sent = ((body.get("metadata") or {}).get("resourceVersion")) if isinstance(body, dict) else None
    if sent and sent != current["metadata"]["resourceVersion"]:
        short = f"{resource}.{_GROUPS[resource]}" if _GROUPS[resource] else resource
        raise APIError(409, "Conflict", f'Operation cannot be fulfilled on {short} "{key.rsplit("/", 1)[-1]}": '
                       "the object has been modified; please apply your changes to the latest version and try again")


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A client that closes its connection is not an error worth a traceback."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError | socket.timeout):
            super().handle_error(request, client_address)


def _kubelet_runs(server: TestAPIServer, key: str, node_name: str) -> None:
    """The default bound hook: a kubelet that admits every pod and starts it."""
    if server.run_bound_pods:
        server.set_pod_phase(key, "Running")
