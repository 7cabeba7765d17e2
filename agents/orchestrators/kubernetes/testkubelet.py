"""Part 2's extensions of :class:`~agents.orchestrators.kubernetes.testserver.TestAPIServer` (hooks
and routes on the one test server, never a second one): what kube-apiserver and the kubelet do
that Kalena's batch admission depends on (docs/design.md §14).

* :class:`MutatingWebhook` — a ``pod_create_hooks`` entry doing what kube-apiserver does for one
  webhook of a MutatingWebhookConfiguration: ``objectSelector`` on the pod's labels, an
  AdmissionReview v1 POSTed over HTTPS (verified against the webhook's CA) with a timeout, the
  returned JSON Patch (RFC 6902) applied, a denial refused with the webhook's status and message;
  ``failurePolicy: Ignore`` — a timeout, a connection error or an unreadable answer leaves the pod
  as it was (counted in ``failures``); ``Fail`` refuses the create (500, as the API server).
* :func:`kubelet_admission` — a ``bound_hooks`` entry replacing the default kubelet: a pod bound
  to a node is admitted when, for every resource it requests, Σ requests of the node's
  non-terminal pods (terminating ones included — the kubelet counts a pod until it is terminal)
  plus its own fit the node's ``status.allocatable``; then it goes ``Running`` with its QoS class,
  else ``Failed`` with reason ``OutOf<resource>`` (``OutOfcpu``,
  ``OutOfkalena.naughtian.io/batch-cpu``) and the kubelet's message. :func:`finish` moves a
  running pod to ``Succeeded``/``Failed`` with an exit code.
* :func:`token_reviews` — ``POST /apis/authentication.k8s.io/v1/tokenreviews`` answering from a
  token table (a node's projected service-account token → its user, with the
  ``authentication.kubernetes.io/node-name`` extra the API server adds for bound tokens).

Not modelled: webhook reinvocation, ``namespaceSelector``, matchConditions, the webhook's
``sideEffects``/dryRun, admission of other kinds, the kubelet's pod-count (``pods``) and
hugepages checks, container restarts, static pods, token expiry and audiences beyond equality.
"""

from __future__ import annotations

import base64
import copy
import json
import ssl
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.orchestrators.kubernetes.batch_resources import cpu_mcpu, memory_bytes
from agents.orchestrators.kubernetes.teststore import APIError

TERMINAL = ("Succeeded", "Failed")


def _selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


@dataclass
class MutatingWebhook:
    """One webhook of a MutatingWebhookConfiguration, called for pod CREATE (see module doc), or
    for another kind's CREATE when ``group``/``version``/``kind``/``resource`` say so.

    ``url`` (https, ``ca_file`` verifies it; ``client_cert_file``/``client_key_file``: the client
    certificate the API server presents, from its AdmissionConfiguration's kubeconfig) or ``call`` (a function from the AdmissionReview dict
    to the answer dict, for tests that need no TLS server). ``calls``/``failures``/``denials``
    count what happened; ``latencies_s`` is not kept (tests assert on outcomes, not time)."""

    url: str = ""
    ca_file: str = ""
    client_cert_file: str = ""
    client_key_file: str = ""
    call: Callable[[dict], dict] | None = None
    object_selector: Mapping[str, Any] = field(default_factory=dict)
    failure_policy: str = "Ignore"
    timeout_s: float = 2.0
    name: str = "pods.batch.kalena.naughtian.io"
    #: the object the webhook is called for (a Pod unless told: ``batch``/``v1``/``Job``/``jobs``)
    group: str = ""
    version: str = "v1"
    kind: str = "Pod"
    resource: str = "pods"
    calls: int = 0
    failures: int = 0
    denials: int = 0
    last_error: str = ""

    def __call__(self, pod: dict) -> dict | None:
        if not _selector_matches(self.object_selector, (pod.get("metadata") or {}).get("labels") or {}):
            return None
        self.calls += 1
        namespace = (pod.get("metadata") or {}).get("namespace", "default")
        kind = {"group": self.group, "version": self.version, "kind": self.kind}
        resource = {"group": self.group, "version": self.version, "resource": self.resource}
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": str(uuid.uuid4()), "kind": kind, "resource": resource, "requestKind": kind,
            "requestResource": resource,
            "name": (pod.get("metadata") or {}).get("name", ""), "namespace": namespace, "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:job-controller"},
            "object": pod, "oldObject": None, "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}}}
        try:
            answer = self._post(review)
            response = answer["response"]
            if response.get("uid") != review["request"]["uid"]:
                raise ValueError(f"response uid {response.get('uid')!r} does not match the request's")
        except Exception as exc:  # noqa: BLE001 - any webhook failure is the failure policy's
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            if self.failure_policy == "Ignore":
                return None
            raise APIError(500, "InternalError", f'Internal error occurred: failed calling webhook "{self.name}": '
                                                 f"{exc}") from None
        if not response.get("allowed"):
            self.denials += 1
            status = response.get("status") or {}
            raise APIError(int(status.get("code") or 400), status.get("reason") or "BadRequest",
                           f'admission webhook "{self.name}" denied the request: {status.get("message", "")}')
        if response.get("patchType") == "JSONPatch" and response.get("patch"):
            import jsonpatch  # the test double's own dependency (dev extra)

            return jsonpatch.apply_patch(copy.deepcopy(pod), json.loads(base64.b64decode(response["patch"])))
        return None

    def _post(self, review: dict) -> dict:
        if self.call is not None:
            return self.call(review)
        import httpx

        context = ssl.create_default_context(cafile=self.ca_file or None)
        if self.client_cert_file:
            context.load_cert_chain(self.client_cert_file, self.client_key_file or None)
        response = httpx.post(self.url, json=review, verify=context, timeout=self.timeout_s)
        response.raise_for_status()
        return response.json()


# -- the kubelet ---------------------------------------------------------------------------------

def pod_requests(pod: Mapping[str, Any]) -> dict[str, float]:
    """Σ requests per resource name (init containers by the max rule; cpu in mcpu, everything
    else in its base unit), as the kubelet's admission sums them."""
    spec = pod.get("spec") or {}

    def parse(name: str, raw: Any) -> float:
        return float(cpu_mcpu(raw, field=name) if name == "cpu" else memory_bytes(raw, field=name))

    total: dict[str, float] = {}
    for c in spec.get("containers") or []:
        resources = c.get("resources") or {}
        requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, raw in requests.items():
            total[name] = total.get(name, 0.0) + parse(name, raw)
    for c in spec.get("initContainers") or []:
        resources = c.get("resources") or {}
        for name, raw in {**(resources.get("limits") or {}), **(resources.get("requests") or {})}.items():
            total[name] = max(total.get(name, 0.0), parse(name, raw))
    return total


def qos_class(pod: Mapping[str, Any]) -> str:
    """Kubernetes QoS: BestEffort without any cpu/memory request or limit, Guaranteed when every
    container's cpu and memory requests equal their limits, else Burstable."""
    containers = [*((pod.get("spec") or {}).get("containers") or []), *((pod.get("spec") or {}).get("initContainers") or [])]
    seen = False
    guaranteed = True
    for c in containers:
        resources = c.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for name in ("cpu", "memory"):
            if name in requests or name in limits:
                seen = True
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
    return "BestEffort" if not seen else ("Guaranteed" if guaranteed else "Burstable")


def kubelet_admission(server, key: str, node_name: str) -> None:
    """A ``bound_hooks`` entry: the kubelet's resource admission (see module doc)."""
    pod = server.get("pods", key)
    node = server.get("nodes", node_name)
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    mine = pod_requests(pod)
    used: dict[str, float] = {}
    for other in server.objects("pods"):
        meta = other.get("metadata") or {}
        if (other.get("spec") or {}).get("nodeName") != node_name or f"{meta.get('namespace')}/{meta.get('name')}" == key:
            continue
        if (other.get("status") or {}).get("phase") in TERMINAL:
            continue
        for name, value in pod_requests(other).items():
            used[name] = used.get(name, 0.0) + value
    for name, value in sorted(mine.items()):
        if value <= 0:
            continue
        capacity = float(cpu_mcpu(allocatable[name], field=name) if name == "cpu" else
                         memory_bytes(allocatable[name], field=name)) if name in allocatable else 0.0
        if used.get(name, 0.0) + value > capacity + 1e-9:
            server.set_pod_phase(key, "Failed", reason=f"OutOf{name}", message=(
                f"Pod was rejected: Node didn't have enough resource: {name}, requested: {value:.0f}, "
                f"used: {used.get(name, 0.0):.0f}, capacity: {capacity:.0f}"))
            return
    qos = qos_class(pod)
    server.store.mutate("pods", key, lambda p: p.setdefault("status", {}).update({"qosClass": qos}))
    server.set_pod_phase(key, "Running")


def finish(server, key: str, *, exit_code: int = 0) -> dict:
    """The pod's containers exited: ``Succeeded`` (0) or ``Failed`` (otherwise)."""
    return server.set_pod_phase(key, "Succeeded" if exit_code == 0 else "Failed", exit_code=exit_code)


# -- TokenReview ---------------------------------------------------------------------------------

def token_reviews(server, tokens: Mapping[str, Mapping[str, Any]]) -> None:
    """Register ``POST /apis/authentication.k8s.io/v1/tokenreviews`` on ``server``: a token in
    ``tokens`` (token → ``{"username", "uid", "groups", "node"}``) is authenticated, with
    ``extra["authentication.kubernetes.io/node-name"] = [node]`` when ``node`` is set (a bound
    projected token of a pod on that node); any other token is not."""
    def review(groups: dict, body: dict) -> tuple[int, dict]:
        # as kube-apiserver: type meta may be omitted (the path gives it), a different one is refused
        if not isinstance(body, Mapping) or body.get("apiVersion", "authentication.k8s.io/v1") != \
                "authentication.k8s.io/v1" or body.get("kind", "TokenReview") != "TokenReview":
            raise APIError(400, "BadRequest", "TokenReview: apiVersion authentication.k8s.io/v1 is required")
        token = (body.get("spec") or {}).get("token") or ""
        who = tokens.get(token)
        status: dict[str, Any] = {"authenticated": False, "error": "invalid bearer token"}
        if who is not None:
            user = {"username": who["username"], "uid": who.get("uid", ""), "groups": list(who.get("groups", []))}
            if who.get("node"):
                user["extra"] = {"authentication.kubernetes.io/node-name": [who["node"]]}
            status = {"authenticated": True, "user": user, "audiences": list(who.get("audiences", []))}
        return 201, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                     "metadata": {"creationTimestamp": None}, "spec": body.get("spec") or {}, "status": status}
    server.route("POST", r"^/apis/authentication\.k8s\.io/v1/tokenreviews$", review)

