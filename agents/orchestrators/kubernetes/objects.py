"""Pure: Kubernetes API JSON (core/v1 Pod and Node, as dicts) → Kalena's watch events.

No I/O. Shapes from the Kubernetes API reference (workload-resources/pod-v1,
cluster-resources/node-v1). Units: cpu → millicores, memory and ephemeral-storage → bytes
(quantities parsed by the client library's ``kubernetes.utils.parse_quantity``).

Which pods become which events (docs/design.md §14):

* DaemonSet pods: production (below), with their ``DaemonSet/<name>`` controller: the control
  plane leaves those of a DaemonSet the infrastructure's Phase 0 deducted uncharged and charges
  any other DaemonSet's pod as an explained ``extra``.
* batch — tier label ``batch`` or ``schedulerName: kalena``: no node, ``schedulerName: kalena``,
  not terminating → :class:`PodPending`; on a node and Pending/Running → :class:`PodRunning`;
  Succeeded → ``PodFinished(succeeded)``; Failed with ``status.reason`` ``OutOf…`` or another
  kubelet admission refusal (``NodeAffinity`` …, :data:`KUBELET_REFUSALS`) → :class:`PodRefused`
  (an admission rejection, never a completion); Failed ``Evicted`` or with a
  ``DisruptionTarget`` condition → ``PodFinished(evicted)``; a container terminated
  ``OOMKilled`` → ``PodFinished(oom)``; other Failed → ``PodFinished(failed)`` with the exit code.
* production (everything else): on a node and not terminal → :class:`ProductionSeen` with
  its controller (the ``ownerReferences`` entry with ``controller: true``, as ``Kind/name``),
  labels (``pod-template-hash`` among them), annotations, ``status.startTime`` and its required
  pod anti-affinity terms (:func:`production_anti_affinity`): production identity
  (:mod:`kalena_engine.kuberina.identity`) joins it to its blueprint entry; owner references that
  cannot be read are carried as ``owner_error`` (the pod is an explained ``extra``), never a
  skipped pod; terminal → :class:`PodGone` (terminated workloads never count).
* DELETED → :class:`PodGone`.

A pod's requests are kube-scheduler's effective requests: ``max(Σ containers, max init
container) + overhead`` per resource, plus Kalena's batch extended resources
(``kalena.naughtian.io/batch-cpu`` in millicores, ``…/batch-memory`` in bytes) folded into cpu
and ram. Example: containers 500m + 250m, an init container 1 → cpu 1000 mcpu. A pod converted
by the admission webhook takes its cpu/memory request and limit from the
``kalena.naughtian.io/resources`` annotation (the extended resources carry only the request).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime, timezone

from kubernetes.utils import parse_quantity

from agents.orchestrators.base import TIER_LABEL, priority_of
from agents.orchestrators.events import (
    NodeSeen, PodFinished, PodGone, PodPending, PodRefused, PodRunning, ProductionSeen, Vector, WatchEvent,
)
from agents.orchestrators.kubernetes.batch_resources import QuantityError, read_annotation
from kalena_engine.errors import InputError
from kalena_engine.placement.selectors import anti_affinity_terms_of

SCHEDULER_NAME = "kalena"
BATCH_CPU = "kalena.naughtian.io/batch-cpu"
BATCH_MEMORY = "kalena.naughtian.io/batch-memory"
GANG_ANNOTATION = "kalena.naughtian.io/gang"
MIN_MEMBER_ANNOTATION = "kalena.naughtian.io/min-member"
UNREPORTED = math.inf  # a dimension Kubernetes does not report (disk and network bandwidth)
POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")  # core/v1 PodStatus.phase
#: Failed ``status.reason`` of the kubelet's admission besides ``OutOf<resource>``: refusals, never runs
KUBELET_REFUSALS = frozenset({"NodeAffinity", "NodeName", "NodePorts", "UnexpectedAdmissionError",
                              "TopologyAffinityError"})


class MalformedObject(ValueError):
    """An API object Kalena cannot read: ``name`` (``namespace/name`` or node name) and
    ``field`` (dotted path) say where; the watcher counts, logs and skips it."""

    def __init__(self, name: str, field: str, problem: str) -> None:
        self.name, self.field, self.problem = name, field, problem
        super().__init__(f"{name or '<unnamed>'}: {field}: {problem}")


# -- shapes: the fields Kalena reads, checked before they are read -------------------------------

#: A shape is ``Mapping`` / ``list`` (any mapping / list), ``_STR_MAP`` (a mapping of strings to
#: strings: labels, annotations, nodeSelector), a frozenset (one of these strings), a type or tuple
#: of types (a leaf), a dict (a mapping whose listed keys have those shapes) or a one-item list (a
#: list of that shape). ``None`` is accepted everywhere as "absent", as the API omits empty fields.
_STR, _NUMBER, _STR_MAP = str, (int, float), object()
_RESOURCES = {"requests": Mapping, "limits": Mapping}
_CONTAINER = {"name": _STR, "image": _STR, "resources": _RESOURCES}
_META = {"name": _STR, "namespace": _STR, "uid": _STR, "labels": _STR_MAP, "annotations": _STR_MAP,
         "creationTimestamp": _STR, "deletionTimestamp": _STR, "resourceVersion": _STR,
         "ownerReferences": [{"kind": _STR, "name": _STR, "controller": bool}]}
_REQUIREMENT = {"key": _STR, "operator": _STR, "values": [_STR]}
_EFFECTS = frozenset({"NoSchedule", "PreferNoSchedule", "NoExecute"})
_SELECTOR = {"matchLabels": _STR_MAP, "matchExpressions": [_REQUIREMENT]}
POD_SHAPE = {
    "metadata": _META,
    "spec": {"nodeName": _STR, "schedulerName": _STR, "containers": [_CONTAINER], "initContainers": [_CONTAINER],
             "overhead": Mapping, "nodeSelector": _STR_MAP,
             "tolerations": [{"key": _STR, "operator": frozenset({"Exists", "Equal"}), "value": _STR,
                              "effect": frozenset({"", *_EFFECTS}), "tolerationSeconds": int}],
             "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                 "nodeSelectorTerms": [{"matchExpressions": [_REQUIREMENT], "matchFields": [_REQUIREMENT]}]}},
                 "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                 {"labelSelector": _SELECTOR, "topologyKey": _STR, "namespaces": [_STR],
                  "namespaceSelector": _SELECTOR}]}},
             "topologySpreadConstraints": [{"maxSkew": int, "topologyKey": _STR, "labelSelector": _SELECTOR,
                                            "whenUnsatisfiable": frozenset({"DoNotSchedule", "ScheduleAnyway"})}],
             "terminationGracePeriodSeconds": int},
    "status": {"phase": frozenset(POD_PHASES), "reason": _STR, "startTime": _STR, "conditions": [{"type": _STR, "status": _STR}],
               "containerStatuses": [{"state": {"terminated": {"reason": _STR, "exitCode": int}}}]},
}
NODE_SHAPE = {
    "metadata": _META,
    "spec": {"taints": [{"key": _STR, "value": _STR, "effect": _EFFECTS}], "unschedulable": bool},
    "status": {"conditions": [{"type": _STR, "status": _STR}], "allocatable": Mapping,
               "images": [{"names": [_STR], "sizeBytes": _NUMBER}]},
}
_KIND = {Mapping: "a mapping", list: "a list", str: "a string", int: "an integer", (int, float): "a number",
         bool: "true or false"}


def check_shape(obj: object, shape: object, name: str, field: str = "") -> None:
    """Check that ``obj`` has ``shape`` (see :data:`POD_SHAPE`) where Kalena reads it.

    Raises:
        MalformedObject: naming ``name`` and the dotted field (``spec.containers[0].image``).
    """
    if obj is None:
        return
    if isinstance(shape, dict):
        if not isinstance(obj, Mapping):
            raise MalformedObject(name, field, f"expected a mapping, got {_got(obj)}")
        for key, inner in shape.items():
            check_shape(obj.get(key), inner, name, f"{field}.{key}" if field else key)
    elif isinstance(shape, list):
        if not isinstance(obj, list):
            raise MalformedObject(name, field, f"expected a list, got {_got(obj)}")
        for i, item in enumerate(obj):
            if item is None:
                raise MalformedObject(name, f"{field}[{i}]", "null in a list")
            check_shape(item, shape[0], name, f"{field}[{i}]")
    elif isinstance(shape, frozenset):
        if not isinstance(obj, str) or obj not in shape:
            raise MalformedObject(name, field, f"{obj!r} is not one of {', '.join(sorted(map(repr, shape)))}")
    elif shape is _STR_MAP:
        if not isinstance(obj, Mapping):
            raise MalformedObject(name, field, f"expected a mapping of strings, got {_got(obj)}")
        for key, value in obj.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise MalformedObject(name, f"{field}.{key}", f"expected a string, got {_got(value)}")
    elif shape is list:
        if not isinstance(obj, list):
            raise MalformedObject(name, field, f"expected a list, got {_got(obj)}")
    elif isinstance(obj, bool) and shape is not bool or not isinstance(obj, shape):  # type: ignore[arg-type]
        raise MalformedObject(name, field, f"expected {_KIND.get(shape, shape)}, got {_got(obj)}")


def _got(obj: object) -> str:
    text = repr(obj)
    return f"{type(obj).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _quantity(raw: object, name: str, field: str, *, milli: bool = False) -> float:
    if isinstance(raw, bool):
        raise MalformedObject(name, field, f"{raw!r} is not a Kubernetes quantity")
    try:
        value = float(parse_quantity(raw)) * (1000.0 if milli else 1.0)
    except (ValueError, TypeError, ArithmeticError):
        raise MalformedObject(name, field, f"{raw!r} is not a Kubernetes quantity") from None
    if not math.isfinite(value) or value < 0:
        raise MalformedObject(name, field, f"{raw!r} is negative or not finite")
    return value


def resource_vector(block: Mapping | None, name: str, field: str, *, node: bool = False) -> list[float]:
    """A ``resources.requests``-style mapping → 8-vector (internal units). ``node``: the
    dimensions Kubernetes does not report are ``+inf`` (unconstrained) instead of 0."""
    block = block or {}
    if not isinstance(block, Mapping):
        raise MalformedObject(name, field, "expected a mapping of resource name → quantity")
    fill = UNREPORTED if node else 0.0
    out = [0.0, 0.0, 0.0, UNREPORTED if node else 0.0, fill, fill, fill, fill]
    if "cpu" in block:
        out[0] = _quantity(block["cpu"], name, f"{field}.cpu", milli=True)
    if "memory" in block:
        out[1] = _quantity(block["memory"], name, f"{field}.memory")
    if "nvidia.com/gpu" in block:
        out[2] = _quantity(block["nvidia.com/gpu"], name, f"{field}.nvidia.com/gpu")
    if "ephemeral-storage" in block:
        out[3] = _quantity(block["ephemeral-storage"], name, f"{field}.ephemeral-storage")
    if not node:
        if BATCH_CPU in block:
            out[0] += _quantity(block[BATCH_CPU], name, f"{field}.{BATCH_CPU}")
        if BATCH_MEMORY in block:
            out[1] += _quantity(block[BATCH_MEMORY], name, f"{field}.{BATCH_MEMORY}")
    return out


def pod_resources(pod: Mapping, kind: str = "requests") -> Vector:
    """Effective ``requests`` or ``limits`` of a pod (see module doc), 8-vector."""
    name = pod_ref(pod)
    spec = pod.get("spec") or {}
    total = [0.0] * 8
    for i, c in enumerate(spec.get("containers") or []):
        v = resource_vector((c.get("resources") or {}).get(kind), name, f"spec.containers[{i}].resources.{kind}")
        total = [a + b for a, b in zip(total, v, strict=True)]
    for i, c in enumerate(spec.get("initContainers") or []):
        v = resource_vector((c.get("resources") or {}).get(kind), name, f"spec.initContainers[{i}].resources.{kind}")
        total = [max(a, b) for a, b in zip(total, v, strict=True)]
    overhead = resource_vector(spec.get("overhead"), name, "spec.overhead")
    out = [a + b for a, b in zip(total, overhead, strict=True)]
    try:  # a batch pod the webhook converted: its real cpu/memory travel in the annotation
        converted = read_annotation((pod.get("metadata") or {}).get("annotations"))
    except QuantityError as exc:
        raise MalformedObject(name, exc.field, str(exc).split(": ", 1)[1]) from None
    if converted is not None:
        if kind == "requests":
            out[0], out[1] = float(converted.request_mcpu), float(converted.request_bytes)
        else:  # an undefined limit is the request (docs/design.md §5: L = q)
            out[0] = float(converted.request_mcpu if converted.limit_mcpu is None else converted.limit_mcpu)
            out[1] = float(converted.request_bytes if converted.limit_bytes is None else converted.limit_bytes)
    return tuple(out)  # type: ignore[return-value]


def pod_ref(pod: Mapping) -> str:
    meta = pod.get("metadata") if isinstance(pod, Mapping) else None
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise MalformedObject("", "metadata.name", "a pod needs a name")
    return f"{meta.get('namespace') or 'default'}/{meta['name']}"


def timestamp_s(raw: object, name: str = "", field: str = "") -> float:
    """RFC 3339 (``2026-11-29T08:00:00Z``) → Unix seconds; 0.0 when absent."""
    if not raw:
        return 0.0
    try:
        when = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        raise MalformedObject(name, field, f"{raw!r} is not an RFC 3339 time") from None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()  # no offset: UTC, never local


def owner_of(meta: Mapping) -> str:
    """``Kind/name`` of the controlling owner reference (``Job/train``), ``""`` for a bare pod."""
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("kind") and o.get("name")]
    chosen = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    return f"{chosen['kind']}/{chosen['name']}" if chosen else ""


def normalize_image(name: str) -> str:
    """``busybox`` → ``docker.io/library/busybox:latest`` (kube-scheduler's ImageLocality
    normalisation), so a pod's image matches a node's ``status.images`` names."""
    if not name:
        return ""
    if "@" in name:
        return name if "/" in name.split("@")[0] else f"docker.io/library/{name}"
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = f"docker.io/library/{name}"
    elif "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    last = name.rsplit("/", 1)[-1]
    return name if ":" in last else f"{name}:latest"


def pod_constraints(spec: Mapping) -> dict:
    """nodeSelector, required node affinity, tolerations, required pod anti-affinity and hard
    topology spread → the constraint shape the scheduler stores (the REST API's
    ``constraints``). ``spec`` has passed :func:`check_shape` (:data:`POD_SHAPE`)."""
    out: dict = {}
    if spec.get("nodeSelector"):
        out["node_selector"] = {str(k): str(v) for k, v in spec["nodeSelector"].items()}
    tolerations = []
    for t in spec.get("tolerations") or []:
        tolerations.append({k: str(t[k]) for k in ("key", "operator", "value", "effect") if t.get(k) is not None})
    if tolerations:
        out["tolerations"] = tolerations
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {})
    if required.get("nodeSelectorTerms"):
        out["node_affinity"] = [{part: [dict(r) for r in term.get(part) or []]
                                 for part in ("matchExpressions", "matchFields") if term.get(part)}
                                for term in required["nodeSelectorTerms"]]
    anti = _required_anti_affinity(spec)
    if anti:
        out["anti_affinity_terms"] = [{"labelSelector": t.get("labelSelector") or {},
                                       "topologyKey": t.get("topologyKey", "kubernetes.io/hostname"),
                                       "namespaces": list(t.get("namespaces") or [])} for t in anti]
    spread = [s for s in spec.get("topologySpreadConstraints") or []
              if s.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"]
    if spread:
        out["spread"] = [{"maxSkew": int(s.get("maxSkew", 1)), "topologyKey": s.get("topologyKey", "zone"),
                          **({"labelSelector": s["labelSelector"]} if s.get("labelSelector") else {})} for s in spread]
    return out


#: Where a pod's required anti-affinity terms live (error messages name it)
ANTI_AFFINITY_FIELD = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def _required_anti_affinity(spec: Mapping) -> list:
    return ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or []


def production_anti_affinity(spec: Mapping, namespace: str, name: str) -> tuple[dict, ...]:
    """A production pod's required pod anti-affinity terms → the constraint shape
    (``{labelSelector, topologyKey, namespaces}``), which binds batch (docs/design.md §9).

    Namespaces as Kubernetes reads a term: neither ``namespaces`` nor ``namespaceSelector`` →
    the pod's own namespace; ``namespaces`` listed → those; a ``namespaceSelector`` → every
    namespace (``namespaces: []``). Kalena does not watch Namespace objects: an empty selector
    selects every namespace in Kubernetes too, a non-empty one is widened, so batch keeps away
    from more nodes, never fewer. A term without a ``labelSelector`` matches no pod (Kubernetes)
    and is left out; ``{}`` matches every pod. ``spec`` has passed :func:`check_shape`.
    Example: a pod in ``web`` with ``{labelSelector: {matchLabels: {app: noisy}}, topologyKey:
    kubernetes.io/hostname}`` → ``({"labelSelector": {"matchLabels": {"app": "noisy"}},
    "topologyKey": "kubernetes.io/hostname", "namespaces": ["web"]},)``.

    Raises:
        MalformedObject: naming the pod and the field (``…[0].topologyKey`` missing, an unknown
            ``matchExpressions`` operator, ``In`` without values — what the API server refuses).
    """
    raw = _required_anti_affinity(spec)
    out = []
    for i, term in enumerate(raw):
        if not term.get("topologyKey"):
            raise MalformedObject(name, f"{ANTI_AFFINITY_FIELD}[{i}].topologyKey",
                                  "a required anti-affinity term needs a topology key")
        namespaces = [] if term.get("namespaceSelector") is not None else list(term.get("namespaces") or [namespace])
        out.append({"labelSelector": dict(term.get("labelSelector") or {}), "topologyKey": term["topologyKey"],
                    "namespaces": namespaces})
    try:
        anti_affinity_terms_of(out, ANTI_AFFINITY_FIELD)
    except InputError as exc:
        raise MalformedObject(name, exc.field, exc.problem + (f" (accepted: {exc.accepted})" if exc.accepted
                                                              else "")) from None
    # Kubernetes: a term without a labelSelector matches no pod
    out = [t for t, term in zip(out, raw, strict=True) if term.get("labelSelector") is not None]
    return tuple(out)


def controller_of(meta: Mapping) -> tuple[str, str]:
    """``(Kind/name, problem)`` of the pod's controller: the ``ownerReferences`` entry with
    ``controller: true`` (Kubernetes allows one); ``("", "")`` when none. ``problem`` (owner
    ``""``) says what cannot be read — a malformed list, an entry without kind or name, two
    controllers — so the production pod becomes an explained ``extra``, never a skipped one."""
    refs = meta.get("ownerReferences")
    try:
        check_shape(refs, _META["ownerReferences"], "", "metadata.ownerReferences")
    except MalformedObject as exc:
        return "", f"{exc.field}: {exc.problem}"
    controllers = [(i, o) for i, o in enumerate(refs or []) if o.get("controller")]
    if len(controllers) > 1:
        return "", f"metadata.ownerReferences: {len(controllers)} controller references (Kubernetes allows one)"
    if not controllers:
        return "", ""
    i, chosen = controllers[0]
    if not chosen.get("kind") or not chosen.get("name"):
        return "", f"metadata.ownerReferences[{i}]: a controller reference needs a kind and a name"
    return f"{chosen['kind']}/{chosen['name']}", ""


def is_daemonset(meta: Mapping) -> bool:
    owners = meta.get("ownerReferences")
    return isinstance(owners, list) and any(isinstance(o, Mapping) and o.get("kind") == "DaemonSet" for o in owners)


def is_batch(pod: Mapping) -> bool:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    if is_daemonset(meta):
        return False  # a DaemonSet's pod is never batch (the node's own ballast)
    return (meta.get("labels") or {}).get(TIER_LABEL) == "batch" or spec.get("schedulerName") == SCHEDULER_NAME


def pod_events(event_type: str, pod: Mapping) -> list[WatchEvent]:
    """One pod watch event (``ADDED`` | ``MODIFIED`` | ``DELETED``, or ``LISTED`` for a list
    item) → Kalena's events (see module doc); ``[]`` for pods Kalena does not follow.

    Raises:
        MalformedObject: naming the pod and the field.
    """
    ref = pod_ref(pod)
    meta = pod.get("metadata") or {}
    if event_type == "DELETED":
        return [PodGone(ref)]  # only the name is read: a deletion is one whatever the rest holds
    owner, owner_error = controller_of(meta)
    # production: unreadable owner references make an explained extra (production identity), not a skipped pod
    check_shape({**pod, "metadata": {k: v for k, v in meta.items() if k != "ownerReferences"}} if owner_error
                else pod, POD_SHAPE, ref)
    production = not is_batch(pod)
    if owner_error and not production:
        check_shape(pod, POD_SHAPE, ref)  # a batch pod's owner keys its cooldowns: refused as before
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    node = spec.get("nodeName") or ""
    phase = status.get("phase") or "Pending"
    at_s = timestamp_s(meta.get("creationTimestamp"), ref, "metadata.creationTimestamp")
    deleting = timestamp_s(meta.get("deletionTimestamp"), ref, "metadata.deletionTimestamp") > 0
    if production:
        if phase in ("Succeeded", "Failed"):
            return [PodGone(ref, at_s=at_s)]
        return [ProductionSeen(ref, node, pod_resources(pod), pod_resources(pod, "limits"),
                               labels=dict(meta.get("labels") or {}), at_s=at_s, owner=owner,
                               owner_error=owner_error, annotations=dict(meta.get("annotations") or {}),
                               start_s=timestamp_s(status.get("startTime"), ref, "status.startTime"),
                               anti_affinity=production_anti_affinity(spec, ref.split("/", 1)[0], ref))]
    if not node:
        if spec.get("schedulerName") != SCHEDULER_NAME:
            return []  # another scheduler's pod (extender mode): not Kalena's queue
        if deleting or phase in ("Succeeded", "Failed"):
            return [PodGone(ref, at_s=at_s)]
        annotations = dict(meta.get("annotations") or {})
        containers = spec.get("containers") or []
        if not containers:
            raise MalformedObject(ref, "spec.containers", "a pod needs at least one container")
        raw_min = annotations.get(MIN_MEMBER_ANNOTATION)
        try:
            min_member = int(raw_min) if raw_min is not None else None
        except ValueError:
            min_member = 0
        if min_member is not None and min_member < 1:
            raise MalformedObject(ref, f"metadata.annotations.{MIN_MEMBER_ANNOTATION}",
                                  f"{raw_min!r} is not a positive integer")
        grace = spec.get("terminationGracePeriodSeconds", 30)
        if isinstance(grace, bool) or not isinstance(grace, int | float) or grace < 0:
            raise MalformedObject(ref, "spec.terminationGracePeriodSeconds", f"{grace!r} is not a number of seconds")
        return [PodPending(
            ref, pod_resources(pod), pod_resources(pod, "limits"), labels=dict(meta.get("labels") or {}),
            annotations=annotations, priority=priority_of(annotations), owner=owner_of(meta),
            gang=str(annotations.get(GANG_ANNOTATION, "")), at_s=at_s,
            image=normalize_image(str(containers[0].get("image") or "")), constraints=pod_constraints(spec),
            grace_s=float(grace), min_member=min_member, uid=str(meta.get("uid") or ""))]
    if phase in ("Pending", "Running", "Unknown"):
        started = timestamp_s(status.get("startTime"), ref, "status.startTime")
        # admitted by the kubelet: Running, or acknowledged (the kubelet sets startTime once it has
        # accepted the pod, before pulling images); a pod only bound has neither yet
        return [PodRunning(ref, node, at_s=started or at_s, admitted=phase == "Running" or started > 0)]
    reason = str(status.get("reason") or "")
    if phase == "Succeeded":
        return [PodFinished(ref, node, "succeeded", reason or "Completed", _exit_code(status), at_s=at_s)]
    if reason.startswith("OutOf") or reason in KUBELET_REFUSALS:
        return [PodRefused(ref, node, reason, at_s=at_s)]
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, Mapping)}
    if reason == "Evicted" or (conditions.get("DisruptionTarget") or {}).get("status") == "True":
        return [PodFinished(ref, node, "evicted", reason or "Evicted", _exit_code(status), at_s=at_s)]
    terminated = [(cs.get("state") or {}).get("terminated") or {} for cs in status.get("containerStatuses") or []]
    if any(t.get("reason") == "OOMKilled" for t in terminated):
        return [PodFinished(ref, node, "oom", "OOMKilled", _exit_code(status), at_s=at_s)]
    return [PodFinished(ref, node, "failed", reason or "Error", _exit_code(status), at_s=at_s)]


def _exit_code(status: Mapping) -> int | None:
    for cs in status.get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode") is not None:
            return int(terminated["exitCode"])
    return None


def node_event(node: Mapping) -> NodeSeen:
    """A Node → :class:`NodeSeen`: Ready condition, ``spec.unschedulable``, allocatable
    (cpu, memory, nvidia.com/gpu, ephemeral-storage; bandwidth ``+inf``), labels, taints,
    cached images with their sizes.

    Raises:
        MalformedObject: naming the node and the field.
    """
    meta = node.get("metadata") if isinstance(node, Mapping) else None
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise MalformedObject("", "metadata.name", "a node needs a name")
    name = str(meta["name"])
    check_shape(node, NODE_SHAPE, name)
    spec, status = node.get("spec") or {}, node.get("status") or {}
    conditions = [c for c in status.get("conditions") or [] if isinstance(c, Mapping)]
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    taints = []
    for i, t in enumerate(spec.get("taints") or []):
        if not isinstance(t, Mapping) or not t.get("key"):
            raise MalformedObject(name, f"spec.taints[{i}]", "a taint needs a key")
        taints.append({"key": str(t["key"]), "value": str(t.get("value") or ""),
                       "effect": str(t.get("effect") or "NoSchedule")})
    images: dict[str, float] = {}
    for i, image in enumerate(status.get("images") or []):
        size = float(image.get("sizeBytes") or 0) if isinstance(image, Mapping) else 0.0
        for image_name in (image.get("names") or []) if isinstance(image, Mapping) else []:
            images[normalize_image(str(image_name))] = size
    return NodeSeen(
        name=name, ready=ready, schedulable=not bool(spec.get("unschedulable")),
        allocatable=tuple(resource_vector(status.get("allocatable"), name, "status.allocatable", node=True)),
        labels=dict(meta.get("labels") or {}), taints=tuple(taints), images=tuple(images),
        at_s=timestamp_s(meta.get("creationTimestamp"), name, "metadata.creationTimestamp"), image_bytes=images)
