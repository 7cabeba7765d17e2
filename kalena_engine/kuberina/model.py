"""Frozen types for what Kalena reads from Kuberina: infrastructure, workloads, blueprint.

All resource vectors are ``(8,)`` float64 arrays in internal units (see
:mod:`kalena_engine.resources`); stacked forms are ``(n, 8)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

#: Taint effects that a pod must tolerate to be placed (the Kubernetes rule).
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True)
class Taint:
    """A node taint. An IR taint without an effect is read as ``NoSchedule`` (hard)."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    """A pod toleration with Kubernetes semantics.

    An IR toleration written as a bare key means ``operator: Exists`` for that key; an empty
    key with ``Exists`` tolerates every taint; an empty effect matches every effect.
    """

    key: str = ""
    operator: str = "Exists"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """True when this toleration matches ``taint`` (Kubernetes ``ToleratesTaint``)."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


@dataclass(frozen=True, eq=False)
class NodeSpec:
    """One node of the infrastructure file; ``allocatable`` is ``(8,)``, +inf = unconstrained."""

    name: str
    zone: str
    rack: str
    labels: Mapping[str, str]
    taints: tuple[Taint, ...]
    allocatable: np.ndarray


@dataclass(frozen=True, eq=False)
class DaemonSetSpec:
    """A DaemonSet: ballast deducted in Phase 0. ``tolerations`` are taint keys; empty = all
    (Kuberina's rule). ``k8s_tolerations`` set (Kubernetes-shaped input): the Kubernetes rule
    instead — every NoSchedule/NoExecute taint must be tolerated, none tolerates nothing."""

    name: str
    resources: np.ndarray
    node_selector: Mapping[str, str]
    tolerations: tuple[str, ...]
    k8s_tolerations: tuple[Toleration, ...] | None = None


@dataclass(frozen=True, eq=False)
class Infrastructure:
    """A parsed infrastructure document."""

    source: str
    nodes: tuple[NodeSpec, ...]
    daemonsets: tuple[DaemonSetSpec, ...]
    api_version: str = ""

    @cached_property
    def node_index(self) -> dict[str, int]:
        """Node name → row in :attr:`allocatable`."""
        return {node.name: i for i, node in enumerate(self.nodes)}

    @cached_property
    def allocatable(self) -> np.ndarray:
        """``(n_nodes, 8)`` allocatable before Phase 0."""
        if not self.nodes:
            return np.zeros((0, 8))
        return np.stack([node.allocatable for node in self.nodes])


@dataclass(frozen=True)
class TopologySpread:
    """Kuberina's soft topology spread: at most ``max_skew`` between domains of ``topology_key``."""

    max_skew: int
    topology_key: str  # "zone" or "rack"


@dataclass(frozen=True)
class RequiredTerm:
    """A required (hard) pod affinity or anti-affinity term of Kubernetes-shaped input:
    ``kind`` ``affinity`` (some pod of ``targets`` in the same ``topology_key`` domain) or
    ``anti_affinity`` (none of them there). ``self_match``: the pod matches its own selector
    (Kubernetes then lets the first such pod go anywhere when no target exists yet)."""

    kind: str
    topology_key: str
    targets: tuple[str, ...]
    selector: str = ""
    self_match: bool = False


@dataclass(frozen=True, eq=False)
class PodSpec:
    """One unrolled pod. ``id`` is ``namespace/name``; targets in ``affinity`` and
    ``anti_affinity`` are resolved pod ids. ``limits`` is ``None`` when undeclared (the IR
    declares none; policy then sets ``L = q`` or a ratio of it)."""

    id: str
    namespace: str
    name: str
    declaration: str
    replica_index: int
    requests: np.ndarray
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()
    affinity: tuple[str, ...] = ()
    anti_affinity: tuple[str, ...] = ()
    topology_spread: TopologySpread | None = None
    gang: str | None = None
    limits: np.ndarray | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    tier: str = "service"
    priority: int = 0
    required: tuple[RequiredTerm, ...] = ()


@dataclass(frozen=True)
class Group:
    """A gang: placed all-or-nothing with at least ``min_members`` of ``members`` (pod ids)."""

    name: str
    members: tuple[str, ...]
    min_members: int
    colocate: bool = False
    node_selector: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class Workloads:
    """A parsed workloads document: pods in canonical order (namespaces sorted, then
    declaration order, then replica index), gangs, and the affinity targets that did not
    resolve (soft constraints: reported, never fatal)."""

    source: str
    pods: tuple[PodSpec, ...]
    groups: tuple[Group, ...] = ()
    unresolved: tuple[str, ...] = ()
    api_version: str = ""

    @cached_property
    def index(self) -> dict[str, int]:
        """Pod id → row in :attr:`requests`."""
        return {pod.id: i for i, pod in enumerate(self.pods)}

    @cached_property
    def requests(self) -> np.ndarray:
        """``(n_pods, 8)`` requests in internal units."""
        if not self.pods:
            return np.zeros((0, 8))
        return np.stack([pod.requests for pod in self.pods])


@dataclass(frozen=True)
class Blueprint:
    """A Kuberina solution: ``assignment`` maps pod id (``ns/pod``) to node name."""

    source: str
    assignment: Mapping[str, str]
    metadata: Mapping[str, object] = field(default_factory=dict)
    unknown_pods: tuple[str, ...] = ()
