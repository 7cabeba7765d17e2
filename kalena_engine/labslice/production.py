"""Production of the lab's slice: which blueprint nodes, which pods, at what scale (docs/design.md §15).

**Nodes.** The lab has ``n`` identical nodes (``<lab>-1`` … ``<lab>-n``, each ``cpu_m`` /
``memory_mib``). The slice takes ``n`` of the blueprint's *active* nodes (nodes with production
pods) that have no GPU (the lab has none), all of one allocatable shape — the shape with the most
such nodes — and at most ``max_pods_per_node`` production pods each (the lab runs every pod as a
real container). Among those candidates it picks greedily the node that brings the most
declarations not yet in the slice, ties broken by a permutation drawn from the seed, so a few
nodes show as many kinds of workload as they can. Blueprint node ``i`` of the pick becomes lab
node ``<lab>-i``, keeping its labels, zone and rack.

**Scale.** One factor per dimension maps the blueprint node's allocatable onto the lab node's
capacity, so every pod and DaemonSet keeps its share of its node::

    s_cpu = lab cpu (m) / blueprint allocatable cpu (m)
    s_ram = lab memory (B) / blueprint allocatable ram (B)
    lab request cpu = max(1, round(q_cpu · s_cpu)) m,  ram = max(1, round(q_ram · s_ram / MiB)) MiB

Worked example (Irina standard node 64 cores / 256 GiB onto 250 m / 256 MiB): s_cpu =
250 / 64 000 = 1/256, s_ram = 1/1024; an ``order-service`` pod of 4 cores / 10 GiB → 15.6 → 16 m
and 10 MiB; the DaemonSet ``calico-node`` (1 core, 1 GiB) → 4 m, 1 MiB. Rounding moves a share by
at most half a unit (1 m, 1 MiB floors); when rounding would overfill a lab node the requests are
rounded down instead.

**Kinds.** The IR declares no controller kind; the slice renders a declaration as a
**StatefulSet** when a ``-``-separated word of its name names state (:data:`STATEFUL_WORDS`:
``redis-cache``, ``session-store``, ``postgres-replica``…), as a **bare pod** when the slice holds
exactly one of its pods and it is not stateful, and as a **Deployment** otherwise. The
infrastructure's DaemonSets are DaemonSets.

**Names.** The slice is a cluster of its own: a declaration's pods in the slice are renumbered
``0 … r−1`` (ordered by lab node, then original replica) and unrolled as the IR unrolls
(``name-0`` for one, ``name-0000`` … for more), so StatefulSet ordinal ``i`` is slice pod
``name-000i`` and sits where the blueprint put it. Each slice pod keeps its production pod id
(``source_id``) and blueprint node.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.errors import InputError
from kalena_engine.kuberina.matching import daemonset_eligible
from kalena_engine.kuberina.model import Blueprint, Infrastructure, Taint, Toleration, TopologySpread, Workloads
from kalena_engine.kuberina.phase0 import phase0_capacity
from kalena_engine.kuberina.verify import verify_blueprint
from kalena_engine.kuberina.workloads import unrolled_names
from kalena_engine.resources import CPU, GPU, RAM

MIB = 2**20
#: Words of a declaration name (split on ``-``) that make it a StatefulSet.
STATEFUL_WORDS = frozenset({
    "postgres", "postgresql", "mysql", "mariadb", "redis", "kafka", "elasticsearch", "zookeeper", "etcd",
    "mongo", "mongodb", "cassandra", "rabbitmq", "vault", "prometheus", "loki", "minio", "db", "database",
    "store", "cache", "broker", "queue",
})
DEPLOYMENT, STATEFULSET, BARE_POD = "Deployment", "StatefulSet", "Pod"


@dataclass(frozen=True)
class LabShape:
    """The lab: ``nodes`` nodes named ``<name>-1`` … of ``cpu_m`` millicores and ``memory_mib``
    MiB each (the nodes' cgroup quota and limit)."""

    nodes: int = 4
    cpu_m: int = 250
    memory_mib: int = 256
    name: str = "lab"

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.cpu_m < 1 or self.memory_mib < 1:
            raise InputError(f"a lab of {self.nodes} nodes × {self.cpu_m} m / {self.memory_mib} MiB",
                             source="lab slice", field="--nodes/--cpu-m/--memory-mib",
                             accepted="at least one node of at least 1 m and 1 MiB")

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(f"{self.name}-{i}" for i in range(1, self.nodes + 1))


@dataclass(frozen=True)
class SlicePod:
    """One production pod of the slice: ``id`` ``namespace/name`` as the slice's IR unrolls it,
    its ``node`` (lab node), and where it came from (``source_id``, ``source_node``)."""

    id: str
    namespace: str
    name: str
    declaration: str
    replica_index: int
    node: str
    source_id: str
    source_node: str


@dataclass(frozen=True)
class SliceDeclaration:
    """A declaration of the slice, rendered as ``kind`` (:data:`DEPLOYMENT`,
    :data:`STATEFULSET`, :data:`BARE_POD`). Requests in lab units (``cpu_m`` m, ``memory_mib``
    MiB); ``source_cpu_m`` / ``source_ram_bytes`` are the production request. ``affinity`` and
    ``anti_affinity`` are slice pod ids (targets outside the slice are dropped); ``pods`` in
    replica order."""

    namespace: str
    name: str
    kind: str
    cpu_m: int
    memory_mib: int
    source_cpu_m: float
    source_ram_bytes: float
    pods: tuple[SlicePod, ...]
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[str, ...] = ()
    anti_affinity: tuple[str, ...] = ()
    topology_spread: TopologySpread | None = None

    @property
    def nodes(self) -> tuple[str, ...]:
        """The lab nodes its pods are on, sorted."""
        return tuple(sorted({p.node for p in self.pods}))


@dataclass(frozen=True)
class SliceDaemonSet:
    """An infrastructure DaemonSet scaled to the lab (``cpu_m`` m, ``memory_mib`` MiB per node)."""

    name: str
    cpu_m: int
    memory_mib: int
    source_cpu_m: float
    source_ram_bytes: float
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False)
class ProductionSlice:
    """The production side of a slice (module doc). ``node_map``: ``(lab node, blueprint node)``
    pairs; ``node_labels`` / ``zones`` / ``racks`` / ``node_taints`` per lab node (the blueprint
    node's); ``daemonsets_on``: the DaemonSets Phase 0 deducts on each lab node; ``cpu_scale`` and
    ``memory_scale`` the factors ``s_cpu``, ``s_ram``; ``dropped``: what was left out and why."""

    shape: LabShape
    node_map: tuple[tuple[str, str], ...]
    node_labels: Mapping[str, Mapping[str, str]]
    zones: Mapping[str, str]
    racks: Mapping[str, str]
    source_allocatable_mcpu: float
    source_allocatable_bytes: float
    cpu_scale: float
    memory_scale: float
    declarations: tuple[SliceDeclaration, ...]
    daemonsets: tuple[SliceDaemonSet, ...]
    candidates: int
    dropped: tuple[str, ...] = ()
    rounding: str = "nearest"
    node_taints: Mapping[str, tuple[Taint, ...]] = field(default_factory=dict)
    daemonsets_on: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def pods(self) -> tuple[SlicePod, ...]:
        """Every production pod in the slice IR's canonical order (namespaces sorted, then
        declaration order, then replica index) — the order a replay of the slice lists them."""
        return tuple(p for d in self.declarations for p in d.pods)

    def declaration_of(self, pod: SlicePod) -> SliceDeclaration:
        return next(d for d in self.declarations if d.namespace == pod.namespace and d.name == pod.declaration)


def kind_of(name: str, pods_in_slice: int) -> str:
    """The controller kind a declaration is rendered as (module doc, **Kinds**).

    Examples: ``kind_of("redis-cache", 10) == "StatefulSet"``; ``kind_of("api-gateway", 1) ==
    "Pod"``; ``kind_of("order-service", 15) == "Deployment"``; ``kind_of("session-store", 1) ==
    "StatefulSet"``.
    """
    if STATEFUL_WORDS & set(name.lower().split("-")):
        return STATEFULSET
    return BARE_POD if pods_in_slice == 1 else DEPLOYMENT


def slice_production(infra: Infrastructure, workloads: Workloads, blueprint: Blueprint, shape: LabShape, *,
                     seed: int, max_pods_per_node: int = 16) -> ProductionSlice:
    """Choose the blueprint nodes, scale their production pods and DaemonSets (module doc).

    Raises:
        InputError: fewer than ``shape.nodes`` candidate nodes (the message gives how many there
            are and why others were left out), or a scaled node that cannot hold its pods.
    """
    if max_pods_per_node < 1:
        raise InputError(f"{max_pods_per_node} pods per node", source="lab slice", field="--max-pods-per-node",
                         accepted="an integer ≥ 1")
    report = verify_blueprint(infra, workloads, blueprint, phase0_capacity(infra))
    node_of_pod = report.node_of_pod
    n_nodes = len(infra.nodes)
    pods_on: list[list[int]] = [[] for _ in range(n_nodes)]
    for i, n in enumerate(node_of_pod.tolist()):
        if n >= 0:
            pods_on[n].append(i)
    alloc = infra.allocatable
    eligible = [n for n in range(n_nodes) if pods_on[n] and alloc[n, GPU] == 0
                and not any(workloads.pods[i].requests[GPU] > 0 for i in pods_on[n])]
    shapes: dict[tuple[float, float], list[int]] = {}
    for n in eligible:
        shapes.setdefault((float(alloc[n, CPU]), float(alloc[n, RAM])), []).append(n)
    if not shapes:
        raise InputError("the blueprint has no active node without GPUs", source=blueprint.source, field="solution",
                         accepted="a blueprint that puts production pods on CPU nodes")
    key = max(shapes, key=lambda s: (len(shapes[s]), s))
    candidates = [n for n in shapes[key] if len(pods_on[n]) <= max_pods_per_node]
    if len(candidates) < shape.nodes:
        raise InputError(
            f"{len(candidates)} blueprint nodes can be sliced ({len(shapes[key])} active nodes of the shape "
            f"{key[0] / 1000:g} cores / {key[1] / 2**30:g} GiB, of which {len(candidates)} hold at most "
            f"{max_pods_per_node} production pods); {shape.nodes} lab nodes asked", source=blueprint.source,
            field="--nodes/--max-pods-per-node", accepted=f"at most {len(candidates)} nodes, or a larger "
                                                           "--max-pods-per-node")
    order = np.random.default_rng([seed, 101]).permutation(len(candidates))
    chosen: list[int] = []
    seen: set[tuple[str, str]] = set()
    for _ in range(shape.nodes):
        best, best_gain = -1, -1
        for j in order.tolist():
            n = candidates[j]
            if n in chosen:
                continue
            gain = len({(workloads.pods[i].namespace, workloads.pods[i].declaration) for i in pods_on[n]} - seen)
            if gain > best_gain:
                best, best_gain = n, gain
        chosen.append(best)
        seen |= {(workloads.pods[i].namespace, workloads.pods[i].declaration) for i in pods_on[best]}
    lab_nodes = shape.node_names
    lab_of = {n: lab_nodes[k] for k, n in enumerate(chosen)}
    cpu_scale = shape.cpu_m / key[0]
    memory_scale = shape.memory_mib * MIB / key[1]
    dropped: list[str] = []
    n_other = sum(len(pods_on[n]) for n in range(n_nodes)) - sum(len(pods_on[n]) for n in chosen)
    dropped.append(f"{n_other} production pods on the {n_nodes - len(chosen)} blueprint nodes not in the slice")
    groups: dict[tuple[str, str], list[int]] = {}
    for n in chosen:
        for i in pods_on[n]:
            pod = workloads.pods[i]
            groups.setdefault((pod.namespace, pod.declaration), []).append(i)
    slice_ids: dict[str, str] = {}   # production id → slice id
    drafts = []
    for ns, decl in sorted(groups, key=lambda k: (k[0], min(groups[k]))):
        rows = sorted(groups[(ns, decl)], key=lambda i: (lab_nodes.index(lab_of[int(node_of_pod[i])]),
                                                         workloads.pods[i].replica_index, i))
        requests = {tuple(workloads.pods[i].requests[[CPU, RAM]]) for i in rows}
        if len(requests) > 1:
            common = max(requests, key=lambda r: sum(tuple(workloads.pods[i].requests[[CPU, RAM]]) == r for i in rows))
            gone = [workloads.pods[i].id for i in rows if tuple(workloads.pods[i].requests[[CPU, RAM]]) != common]
            dropped.append(f"{len(gone)} pods of {ns}/{decl} whose requests differ from its other replicas "
                           f"(a controller has one template): {', '.join(gone[:3])}")
            rows = [i for i in rows if tuple(workloads.pods[i].requests[[CPU, RAM]]) == common]
        names = unrolled_names(decl, len(rows))
        pods = tuple(SlicePod(id=f"{ns}/{names[k]}", namespace=ns, name=names[k], declaration=decl, replica_index=k,
                              node=lab_of[int(node_of_pod[i])], source_id=workloads.pods[i].id,
                              source_node=infra.nodes[int(node_of_pod[i])].name) for k, i in enumerate(rows))
        for i, pod in zip(rows, pods, strict=True):
            slice_ids[workloads.pods[i].id] = pod.id
        drafts.append((ns, decl, rows, pods))
    daemonsets_on = {lab_of[n]: tuple(ds.name for ds in infra.daemonsets if daemonset_eligible(ds, infra.nodes[n]))
                     for n in chosen}
    declarations, daemonsets, rounding = _scaled(infra, workloads, drafts, slice_ids, shape, daemonsets_on,
                                                 cpu_scale, memory_scale, dropped)
    labels = {lab_of[n]: dict(infra.nodes[n].labels) for n in chosen}
    return ProductionSlice(
        shape=shape, node_map=tuple((lab_of[n], infra.nodes[n].name) for n in chosen), node_labels=labels,
        zones={lab_of[n]: infra.nodes[n].zone for n in chosen}, racks={lab_of[n]: infra.nodes[n].rack for n in chosen},
        source_allocatable_mcpu=key[0], source_allocatable_bytes=key[1], cpu_scale=cpu_scale,
        memory_scale=memory_scale, declarations=declarations, daemonsets=daemonsets, candidates=len(candidates),
        dropped=tuple(dropped), rounding=rounding, node_taints={lab_of[n]: tuple(infra.nodes[n].taints) for n in chosen},
        daemonsets_on=daemonsets_on)


def _scaled(infra, workloads, drafts, slice_ids, shape, daemonsets_on, cpu_scale, memory_scale, dropped):
    """Scale requests with ``round`` (min 1); fall back to ``floor`` when a lab node overfills."""
    targets_dropped = 0
    for rounding in ("nearest", "down"):
        rnd = (lambda x: max(1, int(math.floor(x + 0.5)))) if rounding == "nearest" else (lambda x: max(1, int(x)))
        daemonsets = tuple(SliceDaemonSet(
            name=ds.name, cpu_m=rnd(ds.resources[CPU] * cpu_scale), memory_mib=rnd(ds.resources[RAM] * memory_scale / MIB),
            source_cpu_m=float(ds.resources[CPU]), source_ram_bytes=float(ds.resources[RAM]),
            node_selector=dict(ds.node_selector), tolerations=tuple(ds.tolerations)) for ds in infra.daemonsets)
        declarations = []
        targets_dropped = 0
        for ns, decl, rows, pods in drafts:
            first = workloads.pods[rows[0]]
            affinity: list[str] = []
            anti: list[str] = []
            for i in rows:
                for targets, out in ((workloads.pods[i].affinity, affinity), (workloads.pods[i].anti_affinity, anti)):
                    for t in targets:
                        if t in slice_ids:
                            if slice_ids[t] not in out:
                                out.append(slice_ids[t])
                        else:
                            targets_dropped += 1
            declarations.append(SliceDeclaration(
                namespace=ns, name=decl, kind=kind_of(decl, len(pods)),
                cpu_m=rnd(first.requests[CPU] * cpu_scale), memory_mib=rnd(first.requests[RAM] * memory_scale / MIB),
                source_cpu_m=float(first.requests[CPU]), source_ram_bytes=float(first.requests[RAM]), pods=pods,
                node_selector=dict(first.node_selector), tolerations=tuple(first.tolerations),
                affinity=tuple(affinity), anti_affinity=tuple(anti), topology_spread=first.topology_spread))
        over = _overfilled(declarations, daemonsets, shape, daemonsets_on)
        if not over:
            break
    else:
        raise InputError(f"scaled to {shape.cpu_m} m / {shape.memory_mib} MiB, lab node {over[0]} holds "
                         f"{over[1]} m / {over[2]} MiB of requests", source="lab slice", field="--cpu-m/--memory-mib",
                         accepted="a larger node (the 1 m / 1 MiB floors of many small pods overfill it)")
    if targets_dropped:
        dropped.append(f"{targets_dropped} affinity/anti-affinity terms naming pods outside the slice")
    return tuple(declarations), daemonsets, rounding


def _overfilled(declarations, daemonsets, shape, daemonsets_on):
    """The first lab node whose requests (its Phase 0 DaemonSets and its pods) exceed its
    capacity, as ``(node, cpu m, memory MiB)``; None when every node holds its pods."""
    scaled = {ds.name: ds for ds in daemonsets}
    cpu = {node: sum(scaled[n].cpu_m for n in names) for node, names in daemonsets_on.items()}
    mem = {node: sum(scaled[n].memory_mib for n in names) for node, names in daemonsets_on.items()}
    for d in declarations:
        for p in d.pods:
            cpu[p.node] += d.cpu_m
            mem[p.node] += d.memory_mib
    for node in sorted(cpu):
        if cpu[node] > shape.cpu_m or mem[node] > shape.memory_mib:
            return node, cpu[node], mem[node]
    return None
