"""The test API server's state: objects by resource, one resourceVersion counter, the watch
event log, selectors, patches and PodDisruptionBudget evaluation (no HTTP here; see
:mod:`agents.orchestrators.kubernetes.testserver`).

Semantics follow the Kubernetes API concepts page
(https://kubernetes.io/docs/reference/using-api/api-concepts/): every write bumps one
cluster-wide resourceVersion; a watch from version ``R`` receives every change after ``R``; a
version older than the compacted one is answered with 410 Gone (``reason: Expired``).
"""

from __future__ import annotations

import bisect
import copy
import json
import math
import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone


@dataclass(frozen=True)
class Resource:
    """One REST resource: ``name`` as in URLs (``pods``), group version, kind, namespaced, the
    short names discovery advertises (``kubectl get po``) and whether it is in category ``all``."""

    name: str
    api_version: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    in_all: bool = False

    @property
    def group(self) -> str:
        return self.api_version.rsplit("/", 1)[0] if "/" in self.api_version else ""


RESOURCES = {r.name: r for r in (
    Resource("nodes", "v1", "Node", False, ("no",)),
    Resource("pods", "v1", "Pod", True, ("po",), True),
    Resource("events", "v1", "Event", True, ("ev",)),
    Resource("namespaces", "v1", "Namespace", False, ("ns",)),
    Resource("configmaps", "v1", "ConfigMap", True, ("cm",)),
    Resource("secrets", "v1", "Secret", True),
    Resource("services", "v1", "Service", True, ("svc",), True),
    Resource("serviceaccounts", "v1", "ServiceAccount", True, ("sa",)),
    Resource("leases", "coordination.k8s.io/v1", "Lease", True),
    Resource("poddisruptionbudgets", "policy/v1", "PodDisruptionBudget", True, ("pdb",)),
    Resource("jobs", "batch/v1", "Job", True, (), True),
    Resource("deployments", "apps/v1", "Deployment", True, ("deploy",), True),
    Resource("replicasets", "apps/v1", "ReplicaSet", True, ("rs",), True),
    Resource("statefulsets", "apps/v1", "StatefulSet", True, ("sts",), True),
    Resource("daemonsets", "apps/v1", "DaemonSet", True, ("ds",), True),
    Resource("roles", "rbac.authorization.k8s.io/v1", "Role", True),
    Resource("rolebindings", "rbac.authorization.k8s.io/v1", "RoleBinding", True),
    Resource("clusterroles", "rbac.authorization.k8s.io/v1", "ClusterRole", False),
    Resource("clusterrolebindings", "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", False),
    Resource("mutatingwebhookconfigurations", "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration",
             False),
    Resource("validatingwebhookconfigurations", "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration",
             False),
    Resource("ingresses", "networking.k8s.io/v1", "Ingress", True, ("ing",)),
    Resource("validatingadmissionpolicies", "admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", False),
    Resource("validatingadmissionpolicybindings", "admissionregistration.k8s.io/v1",
             "ValidatingAdmissionPolicyBinding", False),
    # cert-manager's custom resources, as on a cluster where cert-manager is installed (stored only:
    # the lab plays cert-manager, issuing the Secrets they name)
    Resource("issuers", "cert-manager.io/v1", "Issuer", True),
    Resource("certificates", "cert-manager.io/v1", "Certificate", True, ("cert",)),
)}


class APIError(Exception):
    """A request the server answers with a ``Status`` (code, reason, message, details)."""

    def __init__(self, code: int, reason: str, message: str, details: Mapping | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, dict(details or {})

    def status(self) -> dict:
        return status_body(self.code, self.reason, self.message, self.details)


def status_body(code: int, reason: str, message: str, details: Mapping | None = None) -> dict:
    """A ``meta/v1 Status`` (API reference: common-definitions/status)."""
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success" if code < 400 else "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = dict(details)
    return body


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def key_of(obj: Mapping) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name", ""))


# -- selectors (labelSelector and fieldSelector query strings) ------------------------------------


def _split_terms(text: str) -> list[str]:
    terms, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        terms.append(current.strip())
    return terms


def label_matcher(text: str) -> Callable[[Mapping[str, str]], bool]:
    """``app=web,tier!=batch,env in (a,b),!legacy,gpu`` → predicate over a label mapping.

    Raises:
        APIError: 400 for a term this server cannot parse.
    """
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for term in _split_terms(text or ""):
        if " notin " in term or " in " in term:
            op = " notin " if " notin " in term else " in "
            key, values = term.split(op, 1)
            wanted = {v.strip() for v in values.strip().strip("()").split(",")}
            key = key.strip()
            if op == " in ":
                tests.append(lambda labels, k=key, w=wanted: labels.get(k) in w)
            else:
                tests.append(lambda labels, k=key, w=wanted: labels.get(k) not in w)
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            tests.append(lambda labels, k=key, v=value: labels.get(k) != v)
        elif "=" in term:
            key, value = (s.strip() for s in term.replace("==", "=").split("=", 1))
            tests.append(lambda labels, k=key, v=value: labels.get(k) == v)
        elif term.startswith("!"):
            tests.append(lambda labels, k=term[1:].strip(): k not in labels)
        elif term.replace("/", "").replace(".", "").replace("-", "").replace("_", "").isalnum():
            tests.append(lambda labels, k=term: k in labels)
        else:
            raise APIError(400, "BadRequest", f"unable to parse requirement: {term!r}")
    return lambda labels: all(t(labels) for t in tests)


FIELDS = {
    "metadata.name": lambda o: (o.get("metadata") or {}).get("name", ""),
    "metadata.namespace": lambda o: (o.get("metadata") or {}).get("namespace", ""),
    "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName", "") or "",
    "spec.schedulerName": lambda o: (o.get("spec") or {}).get("schedulerName", "default-scheduler"),
    "status.phase": lambda o: (o.get("status") or {}).get("phase", ""),
    "spec.unschedulable": lambda o: str(bool((o.get("spec") or {}).get("unschedulable"))).lower(),
    **{f"involvedObject.{part}": (lambda o, p=part: str((o.get("involvedObject") or {}).get(p) or ""))
       for part in ("kind", "name", "namespace", "uid")},
}


def field_matcher(text: str) -> Callable[[Mapping], bool]:
    """``spec.schedulerName=kalena,spec.nodeName=`` → predicate over an object (the fields pods
    and nodes support for selection; others are a 400 as on a real server)."""
    tests = []
    for term in _split_terms(text or ""):
        negate = "!=" in term
        name, value = term.split("!=" if negate else "=", 1)
        name = name.strip()
        if name not in FIELDS:
            raise APIError(400, "BadRequest", f'field label not supported: {name}')
        read = FIELDS[name]
        tests.append(lambda o, r=read, v=value.strip().lstrip("="), n=negate: (r(o) != v) if n else (r(o) == v))
    return lambda o: all(t(o) for t in tests)


# -- patches ------------------------------------------------------------------------------------


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


MERGE_KEYS = {"conditions": "type", "containers": "name", "initContainers": "name", "taints": "key",
              "addresses": "type", "env": "name", "volumes": "name", "volumeMounts": "mountPath"}


def strategic_merge_patch(target, patch):
    """Strategic merge patch for the lists that matter here (``MERGE_KEYS``: ``conditions`` by
    ``type``, ``containers`` by ``name``, ``taints`` by ``key``, …; an item ``{"$patch": "delete"}``
    removes its match); other lists are replaced; other ``$`` directives (element order, retained
    keys) are dropped, as ``kubectl apply`` sends them alongside the change."""
    if not isinstance(patch, dict) or not isinstance(target, dict):
        return merge_patch(target, patch)
    out = dict(target)
    for k, v in patch.items():
        if k.startswith("$"):  # directives ($setElementOrder/…, $retainKeys, $patch): order and retention not modelled
            continue
        if v is None:
            out.pop(k, None)
        elif k in MERGE_KEYS and isinstance(v, list) and isinstance(out.get(k), list):
            merged = [dict(x) for x in out[k]]
            mk = MERGE_KEYS[k]
            for item in v:
                hit = next((i for i, x in enumerate(merged) if x.get(mk) == item.get(mk)), None)
                if isinstance(item, dict) and item.get("$patch") == "delete":
                    if hit is not None:
                        del merged[hit]
                elif hit is None:
                    merged.append(item)
                else:
                    merged[hit] = strategic_merge_patch(merged[hit], item)
            out[k] = merged
        elif isinstance(v, dict):
            out[k] = strategic_merge_patch(out.get(k) or {}, v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def json_patch(target, ops):
    """RFC 6902 JSON patch: add, replace, remove, test.

    Raises:
        APIError: 422 for an operation that does not apply.
    """
    if not isinstance(ops, list):
        raise APIError(400, "BadRequest", "json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op.get("path", "")).split("/")[1:]]
        parent = doc
        for p in parts[:-1]:
            parent = parent[int(p)] if isinstance(parent, list) else parent.setdefault(p, {})
        last = parts[-1] if parts else ""
        kind = op.get("op")
        try:
            if kind in ("add", "replace"):
                if isinstance(parent, list):
                    idx = len(parent) if last == "-" else int(last)
                    parent.insert(idx, op["value"]) if kind == "add" else parent.__setitem__(idx, op["value"])
                else:
                    parent[last] = op["value"]
            elif kind == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif kind == "test":
                if (parent[int(last)] if isinstance(parent, list) else parent.get(last)) != op.get("value"):
                    raise APIError(422, "Invalid", f"test operation failed at {op.get('path')}")
            else:
                raise APIError(422, "Invalid", f"unsupported json patch operation {kind!r}")
        except (KeyError, IndexError, ValueError) as exc:
            raise APIError(422, "Invalid", f"json patch {kind} {op.get('path')}: {exc}") from None
    return doc


def apply_patch(content_type: str, target: dict, body) -> dict:
    kind = (content_type or "").split(";")[0].strip()
    if kind == "application/json-patch+json":
        return json_patch(target, body)
    if kind == "application/merge-patch+json":
        return merge_patch(target, body)
    if kind == "application/strategic-merge-patch+json":
        return strategic_merge_patch(target, body)
    raise APIError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted "
                   "media types include: application/json-patch+json, application/merge-patch+json, "
                   "application/strategic-merge-patch+json")


# -- PodDisruptionBudget ------------------------------------------------------------------------


def _int_or_percent(value, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        x = float(value[:-1]) * total / 100.0
        return math.ceil(x) if round_up else math.floor(x)
    return int(value)


def disruptions_allowed(pdb: Mapping, pods: list[Mapping]) -> tuple[int, int, int]:
    """``(allowed, desired_healthy, current_healthy)`` of a budget over the pods it selects
    (policy/v1; healthy = Running and not terminating). Worked example: 3 selected pods, all
    Running, ``maxUnavailable: 0`` → desired 3, allowed 3 − 3 = 0; ``minAvailable: 2`` → 1."""
    spec = pdb.get("spec") or {}
    expected = len(pods)
    healthy = sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running"
                  and not (p.get("metadata") or {}).get("deletionTimestamp"))
    if "minAvailable" in spec:
        desired = _int_or_percent(spec["minAvailable"], expected, True)
    else:
        desired = expected - _int_or_percent(spec.get("maxUnavailable", 0), expected, True)
    return max(0, healthy - desired), desired, healthy


def selects(pdb: Mapping, pod: Mapping) -> bool:
    meta_p, meta_b = pod.get("metadata") or {}, pdb.get("metadata") or {}
    if meta_p.get("namespace") != meta_b.get("namespace"):
        return False
    selector = (pdb.get("spec") or {}).get("selector") or {}
    labels = meta_p.get("labels") or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), set(expr.get("values") or ())
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values) or \
                (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return bool(selector)


# -- the store ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    """One watch event in the log: ``rv``, resource name, ``ADDED|MODIFIED|DELETED``, the
    object as it was then, and its serialized JSON."""

    rv: int
    resource: str
    type: str
    obj: dict
    line: bytes


class Store:
    """Objects per resource with one resourceVersion counter and the change log watches read.

    Thread-safe: every method takes ``lock``; ``changed`` is notified on every write.
    ``compacted_rv``: watches from an older version get 410 (see :meth:`compact`).
    """

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.objects: dict[str, dict[str, dict]] = {name: {} for name in RESOURCES}
        self.rv = 1
        self.compacted_rv = 1
        self.log: list[Change] = []
        self._log_rv: list[int] = []

    def _bump(self, resource: str, type_: str, obj: dict) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        line = json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"
        self.log.append(Change(self.rv, resource, type_, json.loads(line)["object"], line))
        self._log_rv.append(self.rv)
        self.changed.notify_all()

    def create(self, resource: str, obj: dict) -> dict:
        """Store a new object (uid, creationTimestamp, resourceVersion set); returns it.

        Raises:
            APIError: 409 AlreadyExists.
        """
        r = RESOURCES[resource]
        with self.lock:
            obj = copy.deepcopy(obj)
            obj.setdefault("apiVersion", r.api_version)
            obj.setdefault("kind", r.kind)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            key = key_of(obj)
            if key in self.objects[resource]:
                raise APIError(409, "AlreadyExists", f'{resource} "{meta.get("name")}" already exists',
                               {"name": meta.get("name"), "kind": resource})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now_rfc3339())
            self.objects[resource][key] = obj
            self._bump(resource, "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, resource: str, key: str) -> dict:
        """A copy of one object.

        Raises:
            APIError: 404 NotFound.
        """
        with self.lock:
            obj = self.objects[resource].get(key)
            if obj is None:
                raise APIError(404, "NotFound", f'{resource} "{key.rsplit("/", 1)[-1]}" not found',
                               {"name": key.rsplit("/", 1)[-1], "kind": resource})
            return copy.deepcopy(obj)

    def mutate(self, resource: str, key: str, change: Callable[[dict], dict | None]) -> dict:
        """Apply ``change`` to the stored object (it may edit in place or return a new one),
        bump its version and emit MODIFIED; returns a copy.

        Raises:
            APIError: 404 NotFound, or what ``change`` raises.
        """
        with self.lock:
            current = self.objects[resource].get(key)
            if current is None:
                self.get(resource, key)
            draft = copy.deepcopy(current)
            result = change(draft)
            new = result if result is not None else draft
            new["metadata"]["uid"] = current["metadata"]["uid"]
            new["metadata"]["creationTimestamp"] = current["metadata"].get("creationTimestamp")
            self.objects[resource][key] = new
            self._bump(resource, "MODIFIED", new)
            return copy.deepcopy(new)

    def delete(self, resource: str, key: str) -> dict:
        """Remove an object and emit DELETED (with a final version); returns it.

        Raises:
            APIError: 404 NotFound.
        """
        with self.lock:
            obj = self.objects[resource].pop(key, None)
            if obj is None:
                self.get(resource, key)
            self._bump(resource, "DELETED", obj)
            return copy.deepcopy(obj)

    def list(self, resource: str, predicate: Callable[[dict], bool] | None = None) -> tuple[list[dict], int]:
        """Current objects (live references: serialize, do not keep) and the list version."""
        with self.lock:
            items = [o for o in self.objects[resource].values() if predicate is None or predicate(o)]
            return items, self.rv

    def changes_after(self, rv: int) -> list[Change]:
        """Log entries with a version greater than ``rv`` (caller holds ``lock``)."""
        return self.log[bisect.bisect_right(self._log_rv, rv):]

    def compact(self, keep_after_rv: int | None = None) -> int:
        """Forget changes up to ``keep_after_rv`` (default: all up to now): a watch from an
        older version is then answered 410 Expired; returns the compacted version."""
        with self.lock:
            self.compacted_rv = self.rv if keep_after_rv is None else keep_after_rv
            cut = bisect.bisect_right(self._log_rv, self.compacted_rv)
            del self.log[:cut]
            del self._log_rv[:cut]
            return self.compacted_rv

    def wait(self, timeout_s: float) -> None:
        """Block (holding ``lock``) until a write or ``timeout_s``."""
        self.changed.wait(timeout=timeout_s)

