"""The only place scheduling rows become engine placement types (and back).

Rows → :class:`~kalena_engine.placement.ClusterSnapshot` (nodes, slack, versions, conditions,
residents, recent evictions) and :class:`~kalena_engine.placement.PendingBatch` (pending pods
grouped into entries of identical pods: same owner, template and request).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import orjson

from kalena_engine.errors import InputError
from kalena_engine.kuberina.model import Taint, Toleration
from kalena_engine.placement import (
    BatchResidents, BatchTemplate, ClusterSnapshot, Evictions, Gang, Image, NodeRequirement, NodeSelectorTerm,
    NodeTable, PendingBatch, ProductionPods, SpreadConstraint, gang_pass_minimum,
)
from kalena_engine.placement.selectors import AntiAffinityTerm, anti_affinity_terms_of
from kalena_engine.placement.selectors import label_selector_of as label_selector
from kalena_engine.resources import GPU
from kalena_web.inventory.mappers import vector

# -- constraints (JSON) → engine types ------------------------------------------------------------


def node_affinity(raw: Sequence[Any] | None, field: str) -> tuple[NodeSelectorTerm, ...]:
    """A required node affinity's ``nodeSelectorTerms`` (``[{matchExpressions, matchFields}]``)
    → :class:`~kalena_engine.placement.selectors.NodeSelectorTerm` tuple (ORed).

    Raises:
        InputError: a malformed term or requirement, naming ``field[i]…``.
    """
    terms = []
    for i, term in enumerate(raw or []):
        where = f"{field}[{i}]"
        if not isinstance(term, Mapping):
            raise InputError("a node selector term must be a mapping", field=where,
                             accepted="{matchExpressions, matchFields}")
        requirements = []
        for part, is_field in (("matchExpressions", False), ("matchFields", True)):
            items = term.get(part) or []
            if not isinstance(items, list):
                raise InputError("expected a list", field=f"{where}.{part}")
            for k, item in enumerate(items):
                values = item.get("values") if isinstance(item, Mapping) else None
                if not isinstance(item, Mapping) or not isinstance(item.get("key"), str) or \
                        not isinstance(item.get("operator"), str) or not isinstance(values or [], list) or \
                        not all(isinstance(v, str) for v in values or []):
                    raise InputError("a requirement needs a string key and operator and a list of string values",
                                     field=f"{where}.{part}[{k}]", accepted="{key, operator, values}")
                try:
                    requirements.append(NodeRequirement(item["key"], item["operator"], tuple(values or ()), is_field))
                except InputError as exc:
                    raise InputError(exc.problem, field=f"{where}.{part}[{k}]", accepted=exc.accepted) from None
        terms.append(NodeSelectorTerm(tuple(requirements)))
    return tuple(terms)


CONSTRAINT_SHAPES = {  # key → (JSON type, what one is)
    "node_selector": (Mapping, "a mapping of label → value"),
    "node_affinity": (list, "a required node affinity's nodeSelectorTerms: [{matchExpressions, matchFields}]"),
    "tolerations": (list, "a list of taint keys or {key, operator, value, effect}"),
    "anti_affinity_terms": (list, "a list of {labelSelector, topologyKey, namespaces}"),
    "anti_affinity": (list, "a list of Kuberina workload names"),
    "spread": (list, "a list of {maxSkew, topologyKey, labelSelector}"),
}


def constraints_check(constraints: Any) -> None:
    """Refuse a constraints object that is not exactly of the accepted shape (a closed mapping,
    as the IR's are): unknown keys, wrong container types, wrong item types.

    Raises:
        InputError: naming ``constraints.<key>[i]`` and what is accepted.
    """
    if not isinstance(constraints, Mapping):
        raise InputError("constraints must be a mapping", field="constraints", accepted=", ".join(CONSTRAINT_SHAPES))
    for key, value in constraints.items():
        if key not in CONSTRAINT_SHAPES:
            raise InputError(f"unknown key {key!r}", field=f"constraints.{key}", accepted=", ".join(CONSTRAINT_SHAPES))
        kind, what = CONSTRAINT_SHAPES[key]
        if value is not None and not isinstance(value, kind):
            raise InputError(f"expected {what}, got {type(value).__name__}", field=f"constraints.{key}")
    for k, v in (constraints.get("node_selector") or {}).items():
        if not isinstance(v, str):
            raise InputError(f"expected a string, got {type(v).__name__}", field=f"constraints.node_selector.{k}")
    for key in ("anti_affinity_terms", "spread"):
        for i, item in enumerate(constraints.get(key) or []):
            if not isinstance(item, Mapping):
                raise InputError("expected a mapping", field=f"constraints.{key}[{i}]", accepted=CONSTRAINT_SHAPES[key][1])
    for i, item in enumerate(constraints.get("spread") or []):
        skew = item.get("maxSkew", 1)
        if isinstance(skew, bool) or not isinstance(skew, int) or skew < 1:
            raise InputError(f"maxSkew {skew!r}", field=f"constraints.spread[{i}].maxSkew", accepted="an integer ≥ 1")
    for i, name in enumerate(constraints.get("anti_affinity") or []):
        if not isinstance(name, str):
            raise InputError("expected a workload name", field=f"constraints.anti_affinity[{i}]")


def resident_template(owner: str, namespace: str, labels: Mapping[str, str] | None,
                      constraints: Mapping[str, Any] | None, name: str) -> tuple[tuple, tuple]:
    """A bound batch pod's template key — pods alike in owner, namespace, labels and constraints
    share one template in the engine's residents — and the keyword values :func:`template_of`
    makes it from (``name`` the member id): ``(key, (owner, namespace, labels, constraints, name))``."""
    labels, constraints = labels or {}, constraints or {}
    return ((owner, namespace, repr(sorted(labels.items())), repr(constraints)),
            (owner, namespace, labels, constraints, name))


def template_of(*, owner: str, namespace: str, labels: Mapping[str, str], constraints: Mapping[str, Any],
                min_member: int | None, member_id: str | None = None, image: str = "") -> BatchTemplate:
    """A batch pod's :class:`BatchTemplate` from its stored labels and constraints.

    Raises:
        InputError: malformed constraints (the submit API rejects them before anything is stored).
    """
    constraints_check(constraints)
    tolerations = []
    for i, t in enumerate(constraints.get("tolerations") or []):
        if isinstance(t, str):
            tolerations.append(Toleration(key=t))
        elif isinstance(t, Mapping):
            if not all(isinstance(t.get(k, ""), str) for k in ("key", "operator", "value", "effect")):
                raise InputError("a toleration's key, operator, value and effect are strings",
                                 field=f"constraints.tolerations[{i}]")
            tolerations.append(Toleration(key=t.get("key", ""), operator=t.get("operator", "Exists"),
                                          value=t.get("value", ""), effect=t.get("effect", "")))
        else:
            raise InputError("a toleration is a key or a mapping", field=f"constraints.tolerations[{i}]")
    for i, item in enumerate(constraints.get("spread") or []):
        if not isinstance(item.get("topologyKey", ""), str):
            raise InputError("expected a string", field=f"constraints.spread[{i}].topologyKey",
                             accepted="a topology key")
    terms = anti_affinity_terms_of(constraints.get("anti_affinity_terms"), "constraints.anti_affinity_terms")
    spread = tuple(
        SpreadConstraint(int(s.get("maxSkew", 1)), s.get("topologyKey", "zone"),
                         label_selector(s["labelSelector"], f"constraints.spread[{i}].labelSelector")
                         if s.get("labelSelector") else None)
        for i, s in enumerate(constraints.get("spread") or [])
    )
    return BatchTemplate(
        owner=owner, namespace=namespace, labels=dict(labels),
        node_selector={str(k): str(v) for k, v in (constraints.get("node_selector") or {}).items()},
        node_affinity=node_affinity(constraints.get("node_affinity"), "constraints.node_affinity"),
        tolerations=tuple(tolerations), anti_affinity=terms,
        anti_affinity_pods=tuple(constraints.get("anti_affinity") or ()), spread=spread,
        member_ids=(member_id,) if member_id else (), min_member=min_member,
    )


def production_terms(texts: Sequence[str | None], ids: Sequence[str]) -> tuple[tuple[AntiAffinityTerm, ...], ...]:
    """Resident production pods' stored ``constraints.anti_affinity_terms`` (JSON text each,
    ``None`` for none) → their :class:`AntiAffinityTerm` tuples. Each distinct text is parsed
    once: the replicas of one Deployment share their terms.

    Raises:
        InputError: a stored term that does not parse, naming the pod ``ids[i]``.
    """
    parsed: dict[str, tuple[AntiAffinityTerm, ...]] = {}
    out = []
    for text, pod in zip(texts, ids, strict=True):
        if not text:
            out.append(())
            continue
        if text not in parsed:
            parsed[text] = anti_affinity_terms_of(orjson.loads(text), f"{pod}: constraints.anti_affinity_terms")
        out.append(parsed[text])
    return tuple(out)


# -- rows → snapshot ------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeRow:
    """What the snapshot needs of one live node (read by a selector in one query)."""

    id: int
    name: str
    zone: str
    rack: str
    labels: Mapping[str, str]
    taints: Sequence[Mapping[str, str]]
    takes_batch: bool
    capacity: Sequence[float]
    prod_request: Sequence[float]
    prod_reservation: Sequence[float]
    batch_request: Sequence[float]
    batch_reservation: Sequence[float]
    version: int
    stale: bool
    ready: bool
    ineligible_until_s: float
    volatility: float
    images: Mapping[str, float] = field(default_factory=dict)

    @cached_property
    def table_entry(self) -> tuple[str, str, str, dict[str, str], tuple[Taint, ...]]:
        """``(name, zone, rack, labels, taints)`` as the engine's :class:`NodeTable` holds them,
        made once per row read: the scheduler's cache keeps the row of a node whose key did not
        move, so a pass over 5,000 nodes builds them only for the nodes that changed."""
        return (self.name, self.zone, self.rack, dict(self.labels),
                tuple(Taint(t["key"], t.get("value", ""), t.get("effect", "NoSchedule")) for t in self.taints))


def node_table(rows: Sequence[NodeRow]) -> NodeTable:
    entries = [r.table_entry for r in rows]
    return NodeTable(
        names=tuple(e[0] for e in entries), zone=tuple(e[1] for e in entries), rack=tuple(e[2] for e in entries),
        labels=tuple(e[3] for e in entries), taints=tuple(e[4] for e in entries),
        capacity=_stack([r.capacity for r in rows]),
    )


def _stack(values: Sequence) -> np.ndarray:
    """``(n, 8)`` from ``n`` stored vectors. The selector's rows hold ``(8,)`` arrays: converted at
    once (a conversion per row was most of a 5,000-node snapshot); a ``None`` among them (no ledger
    yet) reads as zeros."""
    try:
        return np.array(values, dtype=np.float64).reshape(len(values), 8)
    except (TypeError, ValueError):
        return np.array([vector(v) for v in values]).reshape(len(values), 8)


def snapshot(rows: Sequence[NodeRow], *, now_s: float, production: ProductionPods, batch: BatchResidents,
             evictions: Evictions, images: Mapping[str, np.ndarray] | None = None) -> ClusterSnapshot:
    """The pass's :class:`ClusterSnapshot`: slack ``C − Σ r`` (GPU ``C − Σ q``) from the live
    ledgers; a node is slack-eligible when it takes batch and no escalation cooldown runs."""
    table = node_table(rows)
    n = len(rows)

    def stack(name: str) -> np.ndarray:
        return _stack([getattr(r, name) for r in rows])

    batch_request = stack("batch_request")
    reserved = stack("prod_reservation") + stack("batch_reservation")
    requested = stack("prod_request") + batch_request
    slack = table.capacity - reserved
    slack[:, GPU] = table.capacity[:, GPU] - requested[:, GPU]
    return ClusterSnapshot(
        nodes=table, slack=slack, version=np.array([r.version for r in rows], dtype=np.int64),
        ready=np.array([r.ready for r in rows], dtype=bool),
        telemetry_fresh=np.array([not r.stale for r in rows], dtype=bool),
        slack_eligible=np.array([r.takes_batch and now_s >= r.ineligible_until_s for r in rows], dtype=bool),
        has_production=requested[:, 0] > batch_request[:, 0],
        has_batch=batch_request.any(axis=1),
        volatility=np.array([r.volatility for r in rows], dtype=np.float64),
        now_s=now_s, production=production, batch=batch, evictions=evictions, images=dict(images or {}),
    )


@dataclass(frozen=True)
class PendingRow:
    """One pending batch pod as the queue reads it."""

    pod_id: int
    name: str
    namespace: str
    owner: str
    labels: Mapping[str, str]
    constraints: Mapping[str, Any]
    request: Sequence[float]
    priority: int
    queued_s: float
    gang: str
    min_member: int | None
    #: pods of the same gang already bound (they count toward its minimum)
    gang_running: int = 0
    image: str = ""
    #: nodes that refused to run it: ``((node name, until Unix s), …)`` (:func:`prefer_other_nodes`)
    avoid: tuple[tuple[str, float], ...] = ()


def prefer_other_nodes(rows: Sequence[PendingRow], names: Sequence[str], free: np.ndarray,
                       now_s: float) -> list[PendingRow]:
    """Keep each pod off the nodes that refused to run it (``avoid`` entries still running at
    ``now_s``) while another node fits it: that pod gets a required ``metadata.name NotIn``
    match added to each of its node affinity terms. ``names`` are the snapshot's nodes and
    ``free`` their free slack ``(n, 8)`` in IR units (``-inf`` on a node that takes no batch
    now); a node fits a pod when its slack covers the pod's request in every dimension. A pod
    no other node fits keeps every node (it is retried where it was refused)."""
    out = []
    for row in rows:
        avoid = sorted({name for name, until in row.avoid if until > now_s})
        if not avoid:
            out.append(row)
            continue
        takes = np.all(free >= vector(row.request)[None, :] - 1e-9, axis=1) if len(names) else np.zeros(0, bool)
        if not any(ok and name not in avoid for name, ok in zip(names, takes, strict=True)):
            out.append(row)
            continue
        match = {"key": "metadata.name", "operator": "NotIn", "values": avoid}
        terms = [dict(t) for t in (row.constraints.get("node_affinity") or [{}])]
        for t in terms:
            t["matchFields"] = [*(t.get("matchFields") or []), match]
        out.append(dataclasses.replace(row, constraints={**row.constraints, "node_affinity": terms}))
    return out


def node_images(rows: Sequence[NodeRow]) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Images cached on nodes (from the orchestrator's watch): name → ``(n,)`` bool, and name →
    size in bytes (the largest any node reports; kube-scheduler's ImageLocality weighs by it)."""
    cached: dict[str, np.ndarray] = {}
    sizes: dict[str, float] = {}
    for i, row in enumerate(rows):
        for name, size in (row.images or {}).items():
            cached.setdefault(name, np.zeros(len(rows), dtype=bool))[i] = True
            sizes[name] = max(sizes.get(name, 0.0), float(size or 0.0))
    return cached, sizes


def pending_batch(rows: Sequence[PendingRow], image_sizes: Mapping[str, float] | None = None,
                  ) -> tuple[PendingBatch, list[list[int]]]:
    """Group identical pending pods into entries; returns the batch and, per entry, the pod
    ids in queue order (bindings of ``count`` pods take the first ``count``). A gang's minimum
    is :func:`~kalena_engine.placement.gang_pass_minimum` (``min_member``, by default the gang's
    size — its pending and bound pods — less those bound), taken from its first pod. A pod's
    image takes part in image locality when some node reports it cached (``image_sizes``)."""
    image_sizes = image_sizes or {}
    templates: dict[tuple, int] = {}
    template_list: list[BatchTemplate] = []
    gangs: dict[str, int] = {}
    gang_list: list[Gang] = []
    entries: dict[tuple, int] = {}
    pods: list[list[int]] = []
    ids, tmpl, req, prio, queued, gang = [], [], [], [], [], []
    pending_members = Counter(row.gang for row in rows if row.gang)
    for row in rows:
        image = row.image if row.image in image_sizes else ""
        key_t = (row.owner, row.namespace, repr(sorted(row.labels.items())), repr(row.constraints), row.min_member,
                 row.name if row.constraints.get("anti_affinity") else None, image)
        if key_t not in templates:
            templates[key_t] = len(template_list)
            template = template_of(owner=row.owner, namespace=row.namespace, labels=row.labels,
                                   constraints=row.constraints, min_member=None if row.gang else row.min_member)
            if image:
                template = dataclasses.replace(template, images=(Image(image, image_sizes[image]),))
            template_list.append(template)
        g = -1
        if row.gang:
            if row.gang not in gangs:
                gangs[row.gang] = len(gang_list)
                members = pending_members[row.gang] + row.gang_running
                gang_list.append(Gang(row.gang, gang_pass_minimum(min_member=row.min_member, members=members,
                                                                  running=row.gang_running)))
            g = gangs[row.gang]
        key_e = (templates[key_t], tuple(row.request), row.priority, g)
        if key_e not in entries:
            entries[key_e] = len(ids)
            ids.append(row.name)
            tmpl.append(templates[key_t])
            req.append(vector(row.request))
            prio.append(row.priority)
            queued.append(row.queued_s)
            gang.append(g)
            pods.append([])
        pods[entries[key_e]].append(row.pod_id)
    k = len(ids)
    batch = PendingBatch(
        ids=np.array(ids, dtype=object), template=np.array(tmpl, dtype=np.int64), templates=tuple(template_list),
        request=np.array(req).reshape(k, 8), count=np.array([len(p) for p in pods], dtype=np.int64),
        priority=np.array(prio, dtype=np.int64), queued_s=np.array(queued, dtype=np.float64),
        gang=np.array(gang, dtype=np.int64), gangs=tuple(gang_list),
    )
    return batch, pods
