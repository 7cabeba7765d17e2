"""What the test API server answers kubectl besides objects: ``/version``, legacy discovery
(``/api``, ``/api/v1``, ``/apis``, ``/apis/{group}/{version}``), ``/openapi/v2`` and the
server-side ``Table`` rendering ``kubectl get`` asks for (no HTTP here; see
:mod:`agents.orchestrators.kubernetes.testserver`).

Shapes follow kube-apiserver's: ``APIVersions``, ``APIGroupList``, ``APIResourceList`` (API
concepts, "Discovery API"); ``meta.k8s.io/v1 Table`` with the columns kube-apiserver's printers
(``pkg/printers/internalversion``) define for pods, nodes, events and jobs, and its default
table (Name, Created At) for every other resource. Aggregated discovery (``Accept:
application/json;g=apidiscovery.k8s.io``) is not served: kubectl 1.20 predates it and newer
clients fall back to the legacy documents when the answer is a plain ``APIGroupList``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone

from agents.orchestrators.kubernetes.teststore import RESOURCES, APIError, apply_patch

VERSION = {"major": "1", "minor": "31", "gitVersion": "v1.31.0-kalena-test", "gitCommit": "", "gitTreeState": "clean",
           "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.22", "compiler": "gc", "platform": "linux/amd64"}
VERBS = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
#: extra group versions served with the same objects as the preferred one (policy/v1beta1: kubectl 1.20's drain)
EXTRA_VERSIONS = {"policy": ["v1beta1"]}
#: subresources listed in discovery: ``(parent, sub, kind, group, version, verbs)``
SUBRESOURCES = (
    ("pods", "status", "Pod", "", "", ["get", "patch", "update"]),
    ("pods", "binding", "Binding", "", "", ["create"]),
    ("pods", "eviction", "Eviction", "policy", "v1", ["create"]),
    ("nodes", "status", "Node", "", "", ["get", "patch", "update"]),
    *((name, "scale", "Scale", "autoscaling", "v1", ["get", "patch", "update"])
      for name in ("deployments", "replicasets", "statefulsets")),
)
SCALABLE = ("deployments", "replicasets", "statefulsets")


def scale_of(obj: Mapping) -> dict:
    """The autoscaling/v1 ``Scale`` of a Deployment, ReplicaSet or StatefulSet."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    selector = ",".join(f"{k}={v}" for k, v in sorted(((spec.get("selector") or {}).get("matchLabels") or {}).items()))
    return {"apiVersion": "autoscaling/v1", "kind": "Scale",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {"replicas": int(spec.get("replicas", 1))},
            "status": {"replicas": int(status.get("replicas") or 0), "selector": selector}}


def group_versions() -> dict[str, list[str]]:
    """``group → [preferred version, …]`` of every served group but the core one."""
    out: dict[str, list[str]] = {}
    for r in RESOURCES.values():
        if r.group:
            version = r.api_version.rsplit("/", 1)[1]
            if version not in out.setdefault(r.group, []):
                out[r.group].append(version)
    out.setdefault("events.k8s.io", ["v1"])
    for group, versions in EXTRA_VERSIONS.items():
        out[group] += versions
    return out


def api_versions(host: str) -> dict:
    """``GET /api``: the core group's versions."""
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}]}


def api_group_list() -> dict:
    """``GET /apis``: every named group with its versions, the first preferred."""
    groups = []
    for group, versions in sorted(group_versions().items()):
        listed = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        groups.append({"name": group, "versions": listed, "preferredVersion": listed[0]})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_resource_list(group: str, version: str) -> dict | None:
    """``GET /api/v1`` (``group=""``) or ``/apis/{group}/{version}``; ``None`` for a group
    version this server does not serve."""
    if group and version not in group_versions().get(group, []):
        return None
    if not group and version != "v1":
        return None
    served_group = "events.k8s.io" if group == "events.k8s.io" else group
    resources = []
    for r in RESOURCES.values():
        if group == "events.k8s.io":
            if r.name != "events":
                continue
        elif r.group != served_group:
            continue
        entry = {"name": r.name, "singularName": "", "namespaced": r.namespaced, "kind": r.kind, "verbs": VERBS}
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.in_all:
            entry["categories"] = ["all"]
        resources.append(entry)
        for parent, sub, kind, sub_group, sub_version, verbs in SUBRESOURCES:
            if parent == r.name:
                entry = {"name": f"{parent}/{sub}", "singularName": "", "namespaced": r.namespaced, "kind": kind,
                         "verbs": verbs}
                if sub_group:
                    entry |= {"group": sub_group, "version": sub_version}
                resources.append(entry)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources}


#: ``/openapi/v2`` as kubectl asks for it (``Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf``):
#: an empty gnostic ``openapi_v2.Document`` (zero bytes is its protobuf encoding). kubectl's client-side
#: validation finds no schema for any kind and so checks only that ``apiVersion`` and ``kind`` are set;
#: field schemas (unknown or mistyped fields) are not modelled.
OPENAPI_V2_PROTOBUF = b""


def rescale(obj: dict, method: str, content_type: str, body) -> None:
    """Set ``obj``'s ``spec.replicas`` from a Scale sent by PUT or patched by PATCH (``kubectl scale``).

    Raises:
        APIError: 422 when the replicas are not a whole number ≥ 0; 415/422 for a bad patch.
    """
    wanted = apply_patch(content_type, scale_of(obj), body) if method == "PATCH" else body or {}
    replicas = (wanted.get("spec") or {}).get("replicas")
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
        raise APIError(422, "Invalid", f"Scale.spec.replicas: {replicas!r}: a whole number ≥ 0 is required")
    obj.setdefault("spec", {})["replicas"] = replicas


# -- Table (meta.k8s.io/v1) -------------------------------------------------------------------------


def human_duration(timestamp: str, now: datetime) -> str:
    """The AGE kube-apiserver prints (apimachinery's ``duration.HumanDuration``) of
    ``now − timestamp`` (RFC 3339, seconds): under 2 min in seconds (``42s``), under 10 min in
    minutes and seconds (``3m5s``, ``5m``), under 3 h in minutes (``95m``), under 8 h in hours
    and minutes (``3h20m``), under 2 d in hours (``30h``), under 8 d in days and hours (``2d3h``),
    then days; ``0s`` for a future time, ``<unknown>`` without a timestamp."""
    if not timestamp:
        return "<unknown>"
    then = datetime.strptime(timestamp[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    s = int((now - then).total_seconds())
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d{h % 24}h" if h % 24 else f"{h // 24}d"
    return f"{h // 24}d"


def _col(name: str, type_: str = "string", priority: int = 0, format_: str = "") -> dict:
    return {"name": name, "type": type_, "format": format_, "description": "", "priority": priority}


def _pod_cells(p: Mapping, now: datetime) -> list:
    meta, spec, status = p.get("metadata") or {}, p.get("spec") or {}, p.get("status") or {}
    containers = spec.get("containers") or []
    statuses = status.get("containerStatuses") or []
    ready = sum(1 for c in statuses if c.get("ready"))
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    reason = status.get("reason") or status.get("phase") or "Pending"
    for c in statuses:  # as the printer: a waiting or terminated container's reason names the pod's state
        state = c.get("state") or {}
        if (state.get("waiting") or {}).get("reason"):
            reason = state["waiting"]["reason"]
        elif (state.get("terminated") or {}).get("reason"):
            reason = state["terminated"]["reason"]
    if meta.get("deletionTimestamp"):
        reason = "Terminating"
    gates = spec.get("readinessGates") or []
    return [meta.get("name", ""), f"{ready}/{len(containers)}", reason, restarts,
            human_duration(meta.get("creationTimestamp", ""), now), status.get("podIP") or "<none>",
            spec.get("nodeName") or "<none>", status.get("nominatedNodeName") or "<none>",
            f"{len(gates)}/{len(gates)}" if gates else "<none>"]


def _node_cells(n: Mapping, now: datetime) -> list:
    meta, spec, status = n.get("metadata") or {}, n.get("spec") or {}, n.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    states = ["Ready" if ready and ready.get("status") == "True" else "NotReady" if ready else "Unknown"]
    if spec.get("unschedulable"):
        states.append("SchedulingDisabled")
    prefix = "node-role.kubernetes.io/"
    roles = sorted(k[len(prefix):] for k in meta.get("labels") or {} if k.startswith(prefix) and k[len(prefix):])
    info = status.get("nodeInfo") or {}
    addresses = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [meta.get("name", ""), ",".join(states), ",".join(roles) or "<none>",
            human_duration(meta.get("creationTimestamp", ""), now), info.get("kubeletVersion", ""),
            addresses.get("InternalIP") or "<none>", addresses.get("ExternalIP") or "<none>",
            info.get("osImage") or "<unknown>", info.get("kernelVersion") or "<unknown>",
            info.get("containerRuntimeVersion") or "<unknown>"]


def _event_cells(e: Mapping, now: datetime) -> list:
    meta, involved = e.get("metadata") or {}, e.get("involvedObject") or {}
    last = e.get("lastTimestamp") or e.get("eventTime") or meta.get("creationTimestamp", "")
    first = e.get("firstTimestamp") or e.get("eventTime") or meta.get("creationTimestamp", "")
    source = (e.get("source") or {}).get("component") or e.get("reportingComponent") or ""
    host = (e.get("source") or {}).get("host")
    return [human_duration(last, now), e.get("type", ""), e.get("reason", ""),
            f"{(involved.get('kind') or '').lower()}/{involved.get('name', '')}", involved.get("fieldPath", ""),
            f"{source}, {host}" if host else source, e.get("message", ""), human_duration(first, now),
            int(e.get("count") or 1), meta.get("name", "")]


def _job_cells(j: Mapping, now: datetime) -> list:
    meta, spec, status = j.get("metadata") or {}, j.get("spec") or {}, j.get("status") or {}
    completions = spec.get("completions")
    done = int(status.get("succeeded") or 0)
    started, finished = status.get("startTime", ""), status.get("completionTime", "")
    duration = ""
    if started:
        end = (datetime.strptime(finished[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
               if finished else now)
        duration = human_duration(started, end)
    template = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    selector = ",".join(f"{k}={v}" for k, v in sorted(((spec.get("selector") or {}).get("matchLabels") or {}).items()))
    return [meta.get("name", ""), f"{done}/{completions if completions is not None else 1}", duration,
            human_duration(meta.get("creationTimestamp", ""), now), ",".join(c.get("name", "") for c in template),
            ",".join(c.get("image", "") for c in template), selector or "<none>"]


def _deployment_cells(d: Mapping, now: datetime) -> list:
    meta, spec, status = d.get("metadata") or {}, d.get("spec") or {}, d.get("status") or {}
    return [meta.get("name", ""), f"{int(status.get('readyReplicas') or 0)}/{int(spec.get('replicas', 1))}",
            int(status.get("updatedReplicas") or 0), int(status.get("availableReplicas") or 0),
            human_duration(meta.get("creationTimestamp", ""), now)]


def _replicaset_cells(r: Mapping, now: datetime) -> list:
    meta, spec, status = r.get("metadata") or {}, r.get("spec") or {}, r.get("status") or {}
    return [meta.get("name", ""), int(spec.get("replicas", 1)), int(status.get("replicas") or 0),
            int(status.get("readyReplicas") or 0), human_duration(meta.get("creationTimestamp", ""), now)]


#: resource → (column definitions, cells function); priority-1 columns are ``-o wide``'s
TABLES = {
    "pods": ([_col("Name", format_="name"), _col("Ready"), _col("Status"), _col("Restarts", "integer"), _col("Age"),
              _col("IP", priority=1), _col("Node", priority=1), _col("Nominated Node", priority=1),
              _col("Readiness Gates", priority=1)], _pod_cells),
    "nodes": ([_col("Name", format_="name"), _col("Status"), _col("Roles"), _col("Age"), _col("Version"),
               _col("Internal-IP", priority=1), _col("External-IP", priority=1), _col("OS-Image", priority=1),
               _col("Kernel-Version", priority=1), _col("Container-Runtime", priority=1)], _node_cells),
    "events": ([_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Subobject", priority=1),
                _col("Source", priority=1), _col("Message"), _col("First Seen", priority=1),
                _col("Count", "integer", 1), _col("Name", priority=1, format_="name")], _event_cells),
    "jobs": ([_col("Name", format_="name"), _col("Completions"), _col("Duration"), _col("Age"),
              _col("Containers", priority=1), _col("Images", priority=1), _col("Selector", priority=1)], _job_cells),
    "deployments": ([_col("Name", format_="name"), _col("Ready"), _col("Up-to-date", "integer"),
                     _col("Available", "integer"), _col("Age")], _deployment_cells),
    "replicasets": ([_col("Name", format_="name"), _col("Desired", "integer"), _col("Current", "integer"),
                     _col("Ready", "integer"), _col("Age")], _replicaset_cells),
}


def wants_table(accept: str) -> bool:
    """Whether an ``Accept`` header asks for a ``meta.k8s.io`` Table (kubectl get's first choice)."""
    return any("as=Table" in part and "g=meta.k8s.io" in part for part in (accept or "").split(","))


def table(resource: str, objects: list[Mapping], resource_version: str, include_object: str = "Metadata",
          now: datetime | None = None) -> dict:
    """A ``meta.k8s.io/v1 Table`` of ``objects`` (already filtered): the resource's printer
    columns, each row's cells and, per ``includeObject`` (``None`` | ``Metadata`` (default) |
    ``Object``), its object — ``kubectl get -A`` reads each row's namespace from it."""
    now = now or datetime.now(timezone.utc)
    columns, cells = TABLES.get(resource, ([_col("Name", format_="name"), _col("Created At", "date")], None))
    rows = []
    for o in objects:
        meta = o.get("metadata") or {}
        row = {"cells": cells(o, now) if cells else [meta.get("name", ""), meta.get("creationTimestamp", "")]}
        if include_object == "Object":
            row["object"] = o
        elif include_object != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": meta}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": columns, "rows": rows}
