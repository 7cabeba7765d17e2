"""Kubernetes-shaped cluster import (docs/design.md §3, §14): Node, Deployment, StatefulSet, ReplicaSet and
DaemonSet manifests → Kalena's Kuberina types (:class:`Infrastructure`, :class:`Workloads`), with
Kubernetes' rules, not the IR's. Pure (parses documents; the CLI reads the files).

Kubernetes rules applied here:

* quantities (:mod:`~agents.orchestrators.kubernetes.batch_resources`): decimal and binary
  suffixes and exponents (``16000m``, ``2Ti``, ``1e3``), cpu rounded up to millicores;
* a pod's request sums its containers (init containers by the max rule); a container with only a
  limit requests its limit; a container without a limit leaves the pod's limit undefined
  (``PodSpec.limits`` None — Kalena then uses ``L = q × limit_ratio``, docs/design.md §5);
* node capacity is ``status.allocatable`` (``status.capacity`` when absent); an absent
  ``nvidia.com/gpu`` is 0 devices, an absent ``ephemeral-storage`` unconstrained; the ``pods``
  count is not a Kalena dimension and is ignored;
* DaemonSet eligibility follows the Kubernetes toleration rule (every NoSchedule/NoExecute taint
  tolerated; ``operator: Exists`` without a key tolerates all) — not Kuberina's taint-key list;
* required podAffinity / podAntiAffinity terms are hard (:class:`RequiredTerm`, verified as
  ``pod_affinity`` / ``pod_anti_affinity``); the IR's soft name lists stay for IR input;
* topology spread ``DoNotSchedule`` on a zone key becomes Kuberina's zone spread.

Accepted though a real API server would refuse: a Deployment/StatefulSet/ReplicaSet without
``spec.selector`` (its pods are selected by their template labels; a note says so). Refused:
a selector that does not match the template's labels, a duplicate object, a quantity that is not
one, a pod without containers. Services, ConfigMaps and other kinds are skipped with a note.
Pod ids are ``namespace/name-<i>`` as Kuberina unrolls replicas (``ai/trainer-0000``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.discovery.labels import PRIORITY, TIER
from agents.orchestrators.kubernetes.batch_resources import QuantityError, cpu_mcpu, memory_bytes, pod_values
from kalena_engine.errors import InputError
from kalena_engine.kuberina.model import (
    DaemonSetSpec, Infrastructure, NodeSpec, PodSpec, RequiredTerm, Taint, Toleration, TopologySpread, Workloads,
)
from kalena_engine.kuberina.workloads import unrolled_names
from kalena_engine.placement.selectors import LabelSelector, Requirement
from kalena_engine.resources import N_DIMS

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "ReplicaSet")
ZONE_KEYS = ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")


class ManifestError(InputError):
    """A manifest Kalena cannot import; nothing is imported."""


@dataclass(frozen=True)
class Manifests:
    """What the manifests hold as Kalena types, plus ``notes`` (accepted oddities, skipped kinds)."""

    infra: Infrastructure
    workloads: Workloads
    notes: tuple[str, ...]


def parse_manifests(documents: Sequence[tuple[str, Any]]) -> Manifests:
    """``documents`` = ``(source, parsed YAML document)`` pairs (``None`` documents are skipped).

    Raises:
        ManifestError: naming the source, the object (``Kind namespace/name``) and the field.
    """
    nodes: list[NodeSpec] = []
    daemonsets: list[DaemonSetSpec] = []
    drafts: list[dict[str, Any]] = []
    notes: list[str] = []
    seen: set[tuple[str, str, str]] = set()
    sources = sorted({s for s, _ in documents})
    for source, doc in documents:
        if doc is None:
            continue
        if not isinstance(doc, Mapping) or not isinstance(doc.get("kind"), str):
            raise ManifestError("not a Kubernetes object (no kind)", source=source, field="kind")
        kind = doc["kind"]
        meta = doc.get("metadata") or {}
        name, namespace = meta.get("name"), meta.get("namespace") or "default"
        if not isinstance(name, str) or not name:
            raise ManifestError(f"a {kind} without metadata.name", source=source, field="metadata.name")
        what = f"{kind} {name}" if kind == "Node" else f"{kind} {namespace}/{name}"
        key = (kind, "" if kind == "Node" else namespace, name)
        if key in seen:
            raise ManifestError(f"{what} appears twice", source=source, field="metadata.name")
        seen.add(key)
        try:
            if kind == "Node":
                nodes.append(_node(doc, name))
            elif kind == "DaemonSet":
                daemonsets.append(_daemonset(doc, namespace, name))
            elif kind in WORKLOAD_KINDS:
                drafts.extend(_pods(doc, namespace, name, notes, what))
            else:
                notes.append(f"{what}: skipped (Kalena imports Nodes, {', '.join(WORKLOAD_KINDS)} and DaemonSets)")
        except QuantityError as exc:
            raise ManifestError(str(exc).split(": ", 1)[1], source=source, field=f"{what}: {exc.field}") from None
        except ManifestError as exc:
            if exc.source:
                raise
            raise ManifestError(exc.problem, source=source, field=f"{what}: {exc.field}" if exc.field else what,
                                accepted=exc.accepted) from None
    pods = _resolve(drafts)
    label = ", ".join(sources)
    return Manifests(infra=Infrastructure(source=label, nodes=tuple(nodes), daemonsets=tuple(daemonsets)),
                     workloads=Workloads(source=label, pods=tuple(pods)), notes=tuple(notes))


# -- nodes and daemonsets --------------------------------------------------------------------------


def _node(doc: Mapping[str, Any], name: str) -> NodeSpec:
    meta, spec, status = doc.get("metadata") or {}, doc.get("spec") or {}, doc.get("status") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    block = status.get("allocatable") or status.get("capacity")
    field = "status.allocatable" if status.get("allocatable") else "status.capacity"
    if not isinstance(block, Mapping) or "cpu" not in block or "memory" not in block:
        raise ManifestError("a node needs cpu and memory in status.allocatable (or status.capacity)",
                            field="status.allocatable")
    allocatable = np.full(N_DIMS, math.inf)
    allocatable[0] = cpu_mcpu(block["cpu"], field=f"{field}.cpu")
    allocatable[1] = memory_bytes(block["memory"], field=f"{field}.memory")
    allocatable[2] = memory_bytes(block.get("nvidia.com/gpu", 0), field=f"{field}.nvidia.com/gpu")
    if "ephemeral-storage" in block:
        allocatable[3] = memory_bytes(block["ephemeral-storage"], field=f"{field}.ephemeral-storage")
    taints = []
    for i, t in enumerate(spec.get("taints") or []):
        if not isinstance(t, Mapping) or not isinstance(t.get("key"), str) or t.get("effect") not in (
                "NoSchedule", "PreferNoSchedule", "NoExecute"):
            raise ManifestError("a taint needs a key and effect NoSchedule, PreferNoSchedule or NoExecute",
                                field=f"spec.taints[{i}]")
        taints.append(Taint(t["key"], str(t.get("value") or ""), t["effect"]))
    zone = next((labels[k] for k in ZONE_KEYS if k in labels), "")
    return NodeSpec(name=name, zone=zone, rack=labels.get("topology.kubernetes.io/rack", ""), labels=labels,
                    taints=tuple(taints), allocatable=allocatable)


def _tolerations(raw: Any, field: str) -> tuple[Toleration, ...]:
    out = []
    for i, t in enumerate(raw or []):
        if not isinstance(t, Mapping):
            raise ManifestError("a toleration must be an object", field=f"{field}[{i}]")
        operator = str(t.get("operator") or "Equal")
        if operator not in ("Equal", "Exists"):
            raise ManifestError(f"operator {operator!r}", field=f"{field}[{i}].operator", accepted="Equal, Exists")
        out.append(Toleration(key=str(t.get("key") or ""), operator=operator, value=str(t.get("value") or ""),
                              effect=str(t.get("effect") or "")))
    return tuple(out)


def _template(doc: Mapping[str, Any]) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    template = (doc.get("spec") or {}).get("template")
    if not isinstance(template, Mapping) or not isinstance(template.get("spec"), Mapping):
        raise ManifestError("no pod template", field="spec.template.spec")
    if not template["spec"].get("containers"):
        raise ManifestError("a pod template needs at least one container", field="spec.template.spec.containers")
    return template.get("metadata") or {}, template["spec"]


def _daemonset(doc: Mapping[str, Any], namespace: str, name: str) -> DaemonSetSpec:
    _, spec = _template(doc)
    requests, _ = pod_values({"spec": spec})
    resources = np.array(requests, dtype=np.float64)
    return DaemonSetSpec(name=f"{namespace}/{name}", resources=resources,
                         node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
                         tolerations=(), k8s_tolerations=_tolerations(spec.get("tolerations"), "spec.template.spec.tolerations"))


# -- pods ------------------------------------------------------------------------------------------


def _selector(raw: Any, field: str) -> LabelSelector:
    if not isinstance(raw, Mapping):
        raise ManifestError("a label selector must be an object", field=field)
    expressions = []
    for i, e in enumerate(raw.get("matchExpressions") or []):
        try:
            expressions.append(Requirement(str(e["key"]), str(e["operator"]), tuple(str(v) for v in e.get("values") or ())))
        except (KeyError, TypeError, InputError) as exc:
            raise ManifestError(f"not a selector requirement ({exc})", field=f"{field}.matchExpressions[{i}]") from None
    return LabelSelector.of({str(k): str(v) for k, v in (raw.get("matchLabels") or {}).items()},
                            expressions=tuple(expressions))


def _pods(doc: Mapping[str, Any], namespace: str, name: str, notes: list[str], what: str) -> list[dict[str, Any]]:
    meta, spec = _template(doc)
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    selector = (doc.get("spec") or {}).get("selector")
    if selector is None:
        notes.append(f"{what}: spec.selector missing (a real API server refuses this for apps/v1); "
                     "accepted, its pods are selected by their template labels")
    elif not _selector(selector, "spec.selector").matches(labels):
        raise ManifestError("spec.selector does not match spec.template.metadata.labels", field="spec.selector")
    replicas = (doc.get("spec") or {}).get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
        raise ManifestError(f"replicas {replicas!r}", field="spec.replicas", accepted="an integer ≥ 0")
    requests, limits = pod_values({"spec": spec})
    request = np.array(requests, dtype=np.float64)
    limit = None
    if not (math.isnan(limits[0]) and math.isnan(limits[1])):
        limit = np.where(np.isnan(limits), request, np.maximum(np.nan_to_num(limits, nan=0.0), request))
    spread = None
    for i, c in enumerate(spec.get("topologySpreadConstraints") or []):
        if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule" and c.get("topologyKey") in ZONE_KEYS:
            spread = TopologySpread(int(c.get("maxSkew", 1)), "zone")
        elif c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule":
            notes.append(f"{what}: topologySpreadConstraints[{i}] on {c.get('topologyKey')!r} not modelled (zone only)")
    affinity = spec.get("affinity") or {}
    terms = []
    for kind, key in (("affinity", "podAffinity"), ("anti_affinity", "podAntiAffinity")):
        for i, t in enumerate((affinity.get(key) or {}).get("requiredDuringSchedulingIgnoredDuringExecution") or []):
            where = f"spec.template.spec.affinity.{key}.requiredDuringSchedulingIgnoredDuringExecution[{i}]"
            if not isinstance(t, Mapping) or not isinstance(t.get("topologyKey"), str):
                raise ManifestError("a required term needs a labelSelector and a topologyKey", field=where)
            terms.append((kind, t["topologyKey"], _selector(t.get("labelSelector") or {}, f"{where}.labelSelector"),
                          tuple(t.get("namespaces") or (namespace,))))
    annotations = meta.get("annotations") or {}
    try:
        priority = max(0, int(annotations.get(PRIORITY, 0)))
    except (TypeError, ValueError):
        raise ManifestError(f"{annotations.get(PRIORITY)!r} is not an integer ≥ 0",
                            field=f"spec.template.metadata.annotations.{PRIORITY}") from None
    return [{"id": f"{namespace}/{pod}", "namespace": namespace, "name": pod, "declaration": name, "replica": i,
             "requests": request, "limits": limit, "labels": labels,
             "node_selector": {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
             "tolerations": _tolerations(spec.get("tolerations"), "spec.template.spec.tolerations"),
             "spread": spread, "terms": terms, "tier": "batch" if labels.get(TIER) == "batch" else "service",
             "priority": priority}
            for i, pod in enumerate(unrolled_names(name, replicas))]


def _resolve(drafts: list[dict[str, Any]]) -> list[PodSpec]:
    """Required terms → the pod ids their selectors match (in the term's namespaces)."""
    pods = []
    for d in sorted(drafts, key=lambda d: (d["namespace"], drafts.index(d))):
        required = []
        for kind, key, selector, namespaces in d["terms"]:
            targets = tuple(o["id"] for o in drafts if o["namespace"] in namespaces and o["id"] != d["id"]
                            and selector.matches(o["labels"]))
            required.append(RequiredTerm(kind=kind, topology_key=key, targets=targets, selector=str(selector),
                                         self_match=selector.matches(d["labels"])))
        pods.append(PodSpec(id=d["id"], namespace=d["namespace"], name=d["name"], declaration=d["declaration"],
                            replica_index=d["replica"], requests=d["requests"], node_selector=d["node_selector"],
                            tolerations=d["tolerations"], topology_spread=d["spread"], limits=d["limits"],
                            labels=d["labels"], tier=d["tier"], priority=d["priority"], required=tuple(required)))
    return pods


def load_manifest_files(paths: Sequence[Any]) -> Manifests:
    """Read manifests from files and folders (every ``*.yaml`` / ``*.yml`` in a folder, sorted).

    Raises:
        ManifestError: a path that is not there, YAML that does not parse, or any
            :func:`parse_manifests` error.
    """
    from pathlib import Path

    import yaml

    files = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            files += sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        elif path.is_file():
            files.append(path)
        else:
            raise ManifestError("no such file or folder", source=str(path), field="--manifests")
    documents = []
    for path in files:
        try:
            documents += [(str(path), d) for d in yaml.safe_load_all(path.read_text(encoding="utf-8"))]
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ManifestError(f"not YAML ({exc})", source=str(path)) from None
    return parse_manifests(documents)


def node_counts(manifests: Manifests) -> Mapping[str, int]:
    """Nodes each DaemonSet runs on (Kubernetes rule), for the import summary."""
    from kalena_engine.kuberina.matching import daemonset_eligible

    return {ds.name: sum(daemonset_eligible(ds, n) for n in manifests.infra.nodes) for ds in manifests.infra.daemonsets}
