"""Reader for the Kuberina workloads document (IR v1 §3, docs/design.md §3).

Three shapes are accepted and give the same :class:`Workloads`:

* IR v0.2.0 / v1 ``namespaces: {ns: [declaration…]}`` — replicas are unrolled here.
* The legacy top-level ``pods:`` list (a documented Kalena extension): entries are already
  unrolled pods with a ``namespace`` key. Alone (``irina-186-3d``) each entry is a pod. Beside
  ``namespaces:`` (``irina-620-8d``) each entry is joined on ``namespace/name`` to the pod the
  declarations unrolled to and contributes its affinity lists; its ``replicas:`` is the
  declaration's count and is never unrolled again.
* Either, with the IR v1 header and ``groups:``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kalena_engine.kuberina.fields import (
    check_header, parse_int, parse_key_list, parse_resource_block, parse_string_map,
    parse_tolerations,
)
from kalena_engine.kuberina.model import Group, PodSpec, Toleration, TopologySpread, Workloads
from kalena_engine.kuberina.yamlio import Where, load_yaml

_TOP_KEYS = ("apiVersion", "kind", "namespaces", "groups", "pods")
_DECL_KEYS = (
    "name", "replicas", "requests", "nodeSelector", "tolerations", "affinity", "antiAffinity",
    "topologySpread", "gang", "observed",
)
_LEGACY_KEYS = (*_DECL_KEYS, "namespace")
_GROUP_KEYS = ("name", "members", "min_members", "colocate", "nodeSelector")
_OBSERVED_KEYS = ("window", "p50", "p95", "p99", "peak", "exceeded_request_fraction")
_REPLICA_SUFFIX = re.compile(r"^(?P<decl>.+)-(?P<index>\d+)$")


def unrolled_names(name: str, replicas: int) -> list[str]:
    """Pod names for a declaration: ``name-0`` when ``replicas == 1``, else ``name-0000`` …

    Example: ``unrolled_names("web", 3) == ["web-0000", "web-0001", "web-0002"]``.
    """
    if replicas == 1:
        return [f"{name}-0"]
    return [f"{name}-{i:04d}" for i in range(replicas)]


@dataclass
class _Draft:
    namespace: str
    name: str
    declaration: str
    replica_index: int
    requests: np.ndarray
    where: Where
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    affinity: list[str] = field(default_factory=list)
    anti_affinity: list[str] = field(default_factory=list)
    spread: TopologySpread | None = None
    gang: str | None = None

    @property
    def id(self) -> str:
        return f"{self.namespace}/{self.name}"


def load_workloads(path: str | Path) -> Workloads:
    """Read a workloads file into pods in canonical order.

    Raises:
        IRError: naming the file, line and field of the first problem; nothing half-loaded.
    """
    return parse_workloads(load_yaml(path), source=str(path))


def parse_workloads(doc: Any, *, source: str) -> Workloads:
    """Parse an already-loaded workloads document (see :func:`load_workloads`)."""
    where = Where(source)
    doc = where.expect_mapping(doc)
    where.expect_keys(doc, _TOP_KEYS)
    version = check_header(doc, where, "Workloads")
    if "namespaces" not in doc and "pods" not in doc:
        raise where.error("a workloads document needs namespaces: (or the legacy pods: list)",
                          accepted="namespaces: {ns: [declaration…]}")
    drafts: list[_Draft] = []
    if doc.get("namespaces") is not None:
        drafts = _parse_namespaces(doc["namespaces"], where.key(doc, "namespaces"))
    if doc.get("pods") is not None:
        legacy = _parse_legacy(doc["pods"], where.key(doc, "pods"))
        if "namespaces" in doc:
            _join_legacy(drafts, legacy)
        else:
            drafts = sorted(legacy, key=lambda d: d.namespace)  # stable: file order within a namespace
    by_id: dict[str, _Draft] = {}
    for draft in drafts:
        if draft.id in by_id:
            raise draft.where.error(f"duplicate pod {draft.id!r}")
        by_id[draft.id] = draft
    resolver = _TargetResolver(drafts)
    unresolved: list[str] = []
    groups = _build_groups(doc.get("groups"), where.key(doc, "groups"), drafts)
    gang_of = {member: group.name for group in groups for member in group.members}
    pods = []
    for draft in drafts:
        affinity = resolver.resolve_all(draft, draft.affinity, "affinity", unresolved)
        anti = resolver.resolve_all(draft, draft.anti_affinity, "antiAffinity", unresolved)
        pods.append(PodSpec(
            id=draft.id, namespace=draft.namespace, name=draft.name,
            declaration=draft.declaration, replica_index=draft.replica_index,
            requests=draft.requests, node_selector=draft.node_selector,
            tolerations=draft.tolerations, affinity=affinity, anti_affinity=anti,
            topology_spread=draft.spread, gang=gang_of.get(draft.id),
            labels={"app": draft.declaration},
        ))
    return Workloads(source=source, pods=tuple(pods), groups=tuple(groups),
                     unresolved=tuple(unresolved), api_version=version)


def _parse_namespaces(raw: Any, where: Where) -> list[_Draft]:
    namespaces = where.expect_mapping(raw)
    drafts: list[_Draft] = []
    for namespace in sorted(namespaces, key=str):
        ns_where = where.key(namespaces, namespace)
        declarations = ns_where.expect_list(namespaces[namespace])
        names_seen: set[str] = set()
        for i, raw_decl in enumerate(declarations):
            at = ns_where.item(declarations, i)
            decl = at.expect_mapping(raw_decl)
            name = at.key(decl, "name").expect_str(decl.get("name"))
            at = ns_where.item(declarations, i, name)
            at.expect_keys(decl, _DECL_KEYS)
            if name in names_seen:
                raise at.key(decl, "name").error(f"duplicate declaration {namespace}/{name}")
            names_seen.add(name)
            replicas = parse_int(decl.get("replicas", 1), at.key(decl, "replicas"))
            template = _parse_common(decl, at, str(namespace), name, name, 0)
            for index, pod_name in enumerate(unrolled_names(name, replicas)):
                pod = _Draft(**{**template.__dict__, "name": pod_name, "replica_index": index})
                pod.affinity = list(template.affinity)
                pod.anti_affinity = list(template.anti_affinity)
                drafts.append(pod)
    return drafts


def _parse_legacy(raw: Any, where: Where) -> list[_Draft]:
    entries = where.expect_list(raw)
    drafts = []
    for i, raw_pod in enumerate(entries):
        at = where.item(entries, i)
        pod = at.expect_mapping(raw_pod)
        name = at.key(pod, "name").expect_str(pod.get("name"))
        at = where.item(entries, i, name)
        at.expect_keys(pod, _LEGACY_KEYS)
        namespace = str(pod.get("namespace") or "default")
        if "replicas" in pod:
            parse_int(pod["replicas"], at.key(pod, "replicas"))  # informational only: never unrolled
        match = _REPLICA_SUFFIX.match(name)
        declaration, index = (match["decl"], int(match["index"])) if match else (name, 0)
        drafts.append(_parse_common(pod, at, namespace, name, declaration, index))
    return drafts


def _parse_common(raw: Mapping[str, Any], at: Where, namespace: str, name: str,
                  declaration: str, index: int) -> _Draft:
    spread = None
    if raw.get("topologySpread") is not None:
        sw = at.key(raw, "topologySpread")
        block = sw.expect_mapping(raw["topologySpread"])
        sw.expect_keys(block, ("maxSkew", "topologyKey"))
        key = block.get("topologyKey")
        if key not in ("zone", "rack"):
            raise sw.key(block, "topologyKey").error(f"topologyKey {key!r} is not supported", accepted="zone, rack")
        spread = TopologySpread(max_skew=parse_int(block.get("maxSkew", 1), sw.key(block, "maxSkew"), minimum=1),
                                topology_key=key)
    if raw.get("observed") is not None:
        _check_observed(raw["observed"], at.key(raw, "observed"))
    gang = raw.get("gang")
    if gang is not None:
        gang = at.key(raw, "gang").expect_str(gang)
    return _Draft(
        namespace=namespace, name=name, declaration=declaration, replica_index=index,
        requests=parse_resource_block(raw.get("requests"), at.key(raw, "requests"), capacity=False),
        where=at,
        node_selector=parse_string_map(raw.get("nodeSelector"), at.key(raw, "nodeSelector")),
        tolerations=parse_tolerations(raw.get("tolerations"), at.key(raw, "tolerations")),
        affinity=list(parse_key_list(raw.get("affinity"), at.key(raw, "affinity"))),
        anti_affinity=list(parse_key_list(raw.get("antiAffinity"), at.key(raw, "antiAffinity"))),
        spread=spread, gang=gang,
    )


def _check_observed(raw: Any, where: Where) -> None:
    block = where.expect_mapping(raw)
    where.expect_keys(block, _OBSERVED_KEYS)
    for key in ("p50", "p95", "p99", "peak"):
        if key in block:
            parse_resource_block(block[key], where.key(block, key), capacity=False)
    fraction = block.get("exceeded_request_fraction", 0.0)
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0.0 <= fraction <= 1.0:
        raise where.key(block, "exceeded_request_fraction").error(
            f"{fraction!r} is not a fraction", accepted="a number in [0, 1]")


def _join_legacy(drafts: list[_Draft], legacy: list[_Draft]) -> None:
    """Join legacy ``pods:`` entries onto unrolled declarations by ``namespace/name``."""
    by_id = {draft.id: draft for draft in drafts}
    for entry in legacy:
        target = by_id.get(entry.id)
        if target is None:
            raise entry.where.error(
                f"legacy pods entry {entry.id!r} matches no pod unrolled from namespaces:",
                accepted="an unrolled name such as <declaration>-0000 in the same namespace",
            )
        if not np.array_equal(entry.requests, target.requests):
            raise entry.where.error(
                f"requests differ from its declaration at line {target.where.line}")
        for name in ("node_selector", "tolerations", "spread", "gang"):
            mine, theirs = getattr(entry, name), getattr(target, name)
            if mine and theirs and mine != theirs:
                raise entry.where.error(f"{name} differs from its declaration at line {target.where.line}")
            if mine and not theirs:
                setattr(target, name, mine)
        target.affinity.extend(t for t in entry.affinity if t not in target.affinity)
        target.anti_affinity.extend(t for t in entry.anti_affinity if t not in target.anti_affinity)


class _TargetResolver:
    """Resolve affinity targets (docs/design.md §3), in order: a bare unrolled pod name, ``ns/pod``,
    a unique bare declaration name (all its replicas), ``ns/declaration``."""

    def __init__(self, drafts: list[_Draft]) -> None:
        self.pods = {d.id for d in drafts}
        self.bare: dict[str, list[str]] = {}
        self.decl: dict[str, list[str]] = {}
        self.ns_decl: dict[str, list[str]] = {}
        for d in drafts:
            self.bare.setdefault(d.name, []).append(d.id)
            self.ns_decl.setdefault(f"{d.namespace}/{d.declaration}", []).append(d.id)
        for key, ids in self.ns_decl.items():
            self.decl.setdefault(key.split("/", 1)[1], []).append(key)

    def resolve(self, namespace: str, target: str) -> list[str] | None:
        local = f"{namespace}/{target}"
        if local in self.pods:
            return [local]
        bare = self.bare.get(target, [])
        if len(bare) == 1:
            return bare
        if target in self.pods:
            return [target]
        if local in self.ns_decl:
            return list(self.ns_decl[local])
        decls = self.decl.get(target, [])
        if len(decls) == 1:
            return list(self.ns_decl[decls[0]])
        if target in self.ns_decl:
            return list(self.ns_decl[target])
        return None

    def resolve_all(self, draft: _Draft, targets: list[str], kind: str, unresolved: list[str]) -> tuple[str, ...]:
        out: list[str] = []
        for target in targets:
            ids = self.resolve(draft.namespace, target)
            if ids is None:
                unresolved.append(f"{draft.where.source}: pod {draft.id}: {kind} target {target!r} matches no pod or declaration")
                continue
            out.extend(i for i in ids if i != draft.id and i not in out)
        return tuple(out)


def _build_groups(raw: Any, where: Where, drafts: list[_Draft]) -> list[Group]:
    inline: dict[str, list[str]] = {}
    for draft in drafts:
        if draft.gang:
            inline.setdefault(draft.gang, []).append(draft.id)
    explicit: dict[str, Group] = {}
    if raw is not None:
        by_decl: dict[str, list[_Draft]] = {}
        for draft in drafts:
            by_decl.setdefault(f"{draft.namespace}/{draft.declaration}", []).append(draft)
        items = where.expect_list(raw)
        claimed: dict[str, str] = {}
        for i, item in enumerate(items):
            at = where.item(items, i)
            block = at.expect_mapping(item)
            at.expect_keys(block, _GROUP_KEYS)
            name = at.key(block, "name").expect_str(block.get("name"))
            members_where = at.key(block, "members")
            members_raw = parse_key_list(block.get("members"), members_where)
            if not members_raw:
                raise members_where.error("a group needs at least one member", accepted="[namespace/declaration, …]")
            members: list[str] = []
            for member in members_raw:
                pods = by_decl.get(member)
                if pods is None:
                    raise members_where.error(f"member {member!r} matches no declaration",
                                              accepted="namespace/declaration")
                for pod in pods:
                    if pod.gang and pod.gang != name:
                        raise members_where.error(f"pod {pod.id} is in gang {pod.gang!r} inline and in group {name!r}")
                    if pod.id in claimed:
                        raise members_where.error(f"pod {pod.id} is already in group {claimed[pod.id]!r}")
                    claimed[pod.id] = name
                    members.append(pod.id)
            min_members = parse_int(block.get("min_members", len(members)), at.key(block, "min_members"), minimum=1)
            if min_members > len(members):
                raise at.key(block, "min_members").error(
                    f"min_members {min_members} exceeds the {len(members)} member pods",
                    accepted=f"1..{len(members)}")
            colocate = block.get("colocate", False)
            if not isinstance(colocate, bool):
                raise at.key(block, "colocate").error(f"{colocate!r} is not a boolean", accepted="true, false")
            explicit[name] = Group(name=name, members=tuple(members), min_members=min_members,
                                   colocate=colocate,
                                   node_selector=parse_string_map(block.get("nodeSelector"), at.key(block, "nodeSelector")))
    groups = [Group(name=n, members=tuple(m), min_members=len(m)) for n, m in inline.items() if n not in explicit]
    return groups + list(explicit.values())
