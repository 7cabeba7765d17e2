"""kube-scheduler extender wire format (k8s.io/kube-scheduler/extender/v1), pure: parse
``ExtenderArgs`` / ``ExtenderBindingArgs``, build ``ExtenderFilterResult``, ``HostPriorityList``
and ``ExtenderBindingResult``. For sites that keep kube-scheduler for batch (docs/design.md §14); the
thin views in :mod:`kalena_web.kubehooks` answer from Kalena's ledgers.

kube-scheduler encodes these Go structs without JSON tags, so keys arrive capitalised
(``Pod``, ``NodeNames``, ``PodNamespace``); Go decodes case-insensitively and so do we.
``nodeCacheCapable: true`` is Kalena's choice (deploy/kubernetes/scheduler-extender.yaml):
Kalena keeps its own node table from the watch, so kube-scheduler sends only ``NodeNames``;
when full ``Nodes`` arrive anyway, their names are used and the answer echoes ``Nodes``.
Scores are integers 0–10 (``MaxExtenderPriority``): ``round(score / 10)`` of Kalena's 0–100
placement score (so 39.58 → 4).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agents.discovery.labels import PRIORITY, TIER
from agents.orchestrators.kubernetes.batch_resources import BATCH_CPU, BATCH_MEMORY

MAX_EXTENDER_PRIORITY = 10
#: Reasons preemption on that node cannot fix (sent as FailedAndUnresolvableNodes).
UNRESOLVABLE = frozenset({"node_not_ready", "telemetry_stale", "slack_ineligible", "node_selector", "taint",
                          "production_anti_affinity", "cooldown", "unknown_node"})


class ExtenderInputError(ValueError):
    """The request body is not the extender JSON; ``field`` names where."""

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class ExtenderArgs:
    """The pod being scheduled (API JSON) and the candidate node names; ``nodes`` holds the
    full Node objects when kube-scheduler sent them (not node-cache-capable)."""

    pod: Mapping[str, Any]
    node_names: tuple[str, ...]
    nodes: tuple[Mapping[str, Any], ...] | None = None


@dataclass(frozen=True)
class BindingArgs:
    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str

    @property
    def ref(self) -> str:
        return f"{self.pod_namespace}/{self.pod_name}"


def _fold(doc: Any, field: str) -> dict[str, Any]:
    if not isinstance(doc, Mapping):
        raise ExtenderInputError(f"expected an object, got {type(doc).__name__}", field=field)
    return {str(k).lower(): v for k, v in doc.items()}


def _load(body: bytes | str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(body, Mapping):
        return _fold(body, "body")
    try:
        return _fold(json.loads(body), "body")
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ExtenderInputError(f"not JSON ({type(exc).__name__})", field="body") from None


def parse_args(body: bytes | str | Mapping[str, Any]) -> ExtenderArgs:
    """``ExtenderArgs`` → :class:`ExtenderArgs` (keys case-insensitive).

    Raises:
        ExtenderInputError: no pod object, or neither node names nor nodes, naming the field.
    """
    doc = _load(body)
    pod = doc.get("pod")
    if not isinstance(pod, Mapping):
        raise ExtenderInputError("missing or not an object", field="Pod")
    names, nodes = doc.get("nodenames"), None
    if names is None and doc.get("nodes") is not None:
        items = _fold(doc["nodes"], "Nodes").get("items")
        if not isinstance(items, list):
            raise ExtenderInputError("expected a NodeList with items", field="Nodes")
        nodes = tuple(items)
        names = []
        for i, node in enumerate(items):
            name = (node.get("metadata") or {}).get("name") if isinstance(node, Mapping) else None
            if not isinstance(name, str):
                raise ExtenderInputError("a node without metadata.name", field=f"Nodes.items[{i}]")
            names.append(name)
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ExtenderInputError("expected a list of node names (or Nodes)", field="NodeNames")
    return ExtenderArgs(pod=pod, node_names=tuple(names), nodes=nodes)


def parse_binding(body: bytes | str | Mapping[str, Any]) -> BindingArgs:
    """``ExtenderBindingArgs`` → :class:`BindingArgs`. ``PodUID`` is required: kube-scheduler always
    sends it, and a bind must name the exact pod object it was asked about.

    Raises:
        ExtenderInputError: a missing, empty or non-string field, naming it.
    """
    doc = _load(body)
    out = {}
    for key, name in (("podname", "PodName"), ("podnamespace", "PodNamespace"), ("poduid", "PodUID"), ("node", "Node")):
        value = doc.get(key)
        if not isinstance(value, str) or not value:
            raise ExtenderInputError("missing or not a string", field=name)
        out[key] = value
    return BindingArgs(out["podname"], out["podnamespace"], out["poduid"], out["node"])


def pod_ref(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def unmanaged_reason(pod: Mapping[str, Any]) -> str:
    """Why Kalena must not act on ``pod`` through the extender (``""`` when it may): Kalena manages
    a pod labelled ``kalena.naughtian.io/tier: batch`` or, without a tier label, one whose
    containers request Kalena's extended resources (what the webhook gives every batch pod).
    Anything else — a production pod, another team's pod, a pod labelled with another tier
    whatever it requests — is the default scheduler's alone."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") if isinstance(meta, Mapping) else None
    tier = labels.get(TIER) if isinstance(labels, Mapping) else None
    if tier == "batch":
        return ""
    if tier is not None:
        return f"pod {pod_ref(pod)} is not managed by Kalena (labelled {TIER}: {str(tier)[:40]}, not batch)"
    spec = pod.get("spec") or {}
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    for container in containers if isinstance(containers, list) else []:
        resources = container.get("resources") if isinstance(container, Mapping) else None
        requests = resources.get("requests") if isinstance(resources, Mapping) else None
        if isinstance(requests, Mapping) and (BATCH_CPU in requests or BATCH_MEMORY in requests):
            return ""
    return (f"pod {pod_ref(pod)} is not managed by Kalena (no {TIER}: batch label and no {BATCH_CPU} or "
            f"{BATCH_MEMORY} request)")


def pod_uid(pod: Mapping[str, Any]) -> str:
    """The pod object's ``metadata.uid`` (``""`` when absent or not a string)."""
    meta = pod.get("metadata") or {}
    uid = meta.get("uid") if isinstance(meta, Mapping) else None
    return uid if isinstance(uid, str) else ""


def pod_priority(pod: Mapping[str, Any]) -> int:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(PRIORITY, "0")
    try:
        return max(0, int(raw))
    except (TypeError, ValueError):
        return 0


def pod_constraints(pod: Mapping[str, Any]) -> dict[str, Any]:
    """The pod's scheduling constraints in Kalena's constraint shape (``node_selector``,
    ``tolerations``, ``anti_affinity_terms`` from required podAntiAffinity, ``spread`` from
    ``whenUnsatisfiable: DoNotSchedule`` topology spread constraints)."""
    spec = pod.get("spec") or {}
    out: dict[str, Any] = {}
    if spec.get("nodeSelector"):
        out["node_selector"] = dict(spec["nodeSelector"])
    if spec.get("tolerations"):
        out["tolerations"] = [{k: t[k] for k in ("key", "operator", "value", "effect") if k in t}
                              for t in spec["tolerations"] if isinstance(t, Mapping)]
    anti = ((spec.get("affinity") or {}).get("podAntiAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or []
    if anti:
        out["anti_affinity_terms"] = [{"labelSelector": t.get("labelSelector") or {},
                                       "topologyKey": t.get("topologyKey", "kubernetes.io/hostname"),
                                       "namespaces": t.get("namespaces") or []} for t in anti if isinstance(t, Mapping)]
    spread = [c for c in spec.get("topologySpreadConstraints") or []
              if isinstance(c, Mapping) and c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"]
    if spread:
        out["spread"] = [{"maxSkew": c.get("maxSkew", 1), "topologyKey": c.get("topologyKey", "zone"),
                          **({"labelSelector": c["labelSelector"]} if c.get("labelSelector") else {})} for c in spread]
    return out


def extender_score(score: float) -> int:
    """Kalena's 0–100 score → the extender's integer 0–10: ``round(score / 10)`` clipped."""
    return int(min(MAX_EXTENDER_PRIORITY, max(0, round(float(score) / 10.0))))


def filter_result(args: ExtenderArgs, failed: Mapping[str, tuple[str, str]], error: str = "") -> dict[str, Any]:
    """``ExtenderFilterResult``: ``failed`` maps node name → ``(kind, message)``; the nodes not in
    it pass. Unresolvable kinds (:data:`UNRESOLVABLE`) go to ``FailedAndUnresolvableNodes``."""
    passing = [n for n in args.node_names if n not in failed]
    out: dict[str, Any] = {
        "NodeNames": passing,
        "FailedNodes": {n: m for n, (k, m) in failed.items() if k not in UNRESOLVABLE},
        "FailedAndUnresolvableNodes": {n: m for n, (k, m) in failed.items() if k in UNRESOLVABLE},
        "Error": error,
    }
    if args.nodes is not None:
        keep = set(passing)
        out["Nodes"] = {"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                        "items": [n for n in args.nodes if (n.get("metadata") or {}).get("name") in keep]}
        out["NodeNames"] = None
    return out


def error_filter_result(message: str) -> dict[str, Any]:
    """A filter answer kube-scheduler reads as an extender error (the pod is retried)."""
    return {"NodeNames": None, "FailedNodes": {}, "FailedAndUnresolvableNodes": {}, "Error": message}


def priorities(node_names: Sequence[str], scores: Mapping[str, float]) -> list[dict[str, Any]]:
    """``HostPriorityList`` in the order of ``node_names`` (a node without a score gets 0)."""
    return [{"Host": n, "Score": extender_score(scores.get(n, 0.0))} for n in node_names]
