"""What the batch scheduler reads and writes (docs/design.md §9): the node table, one pass's cluster
snapshot, pending batch as equivalence classes, and bindings.

Everything is struct-of-arrays over ``n`` nodes (rows of :class:`NodeTable`) and ``k`` pending
entries; resource vectors are ``(…, 8)`` in internal units (:mod:`kalena_engine.resources`).
A *template* is what pods of one owner share (labels, selector, tolerations, anti-affinity,
spread, images); an *entry* is ``count`` identical pending pods of one template and request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from kalena_engine.errors import InputError
from kalena_engine.kuberina.model import BLOCKING_EFFECTS, Infrastructure, Taint, Toleration
from kalena_engine.placement.selectors import (
    HOSTNAME, RACK_KEYS, ZONE_KEYS, AntiAffinityTerm, Image, NodeSelectorTerm, SpreadConstraint,
)
from kalena_engine.resources import N_DIMS

#: Annotation carrying a batch workload's gang size (all-or-nothing, docs/design.md §9).
MIN_MEMBER_ANNOTATION = "kalena.naughtian.io/min-member"


def gang_pass_minimum(*, min_member: int | None, members: int, running: int = 0) -> int:
    """Pods of a gang one pass must place, or place none (docs/design.md §9: all-or-nothing).

    ``min_member`` defaults to the gang's size ``members`` (every pod, as IR v1 ``groups``
    default ``min_members`` to their member count); members already ``running`` count toward it,
    so a requeued member of a running gang is not held back by the others. At least 1. A
    ``min_member`` above the pods submitted so far waits for more members.
    Example: 4 pods, no min_member, none running → 4; min_member 3 with 2 running → 1.
    """
    wanted = members if min_member is None else int(min_member)
    return max(1, wanted - int(running))


def min_member_from_annotations(annotations: Mapping[str, str], *, source: str = "") -> int | None:
    """Read ``kalena.naughtian.io/min-member`` (a positive integer) or ``None`` when absent.

    Raises:
        InputError: the value is not a positive integer.
    """
    raw = annotations.get(MIN_MEMBER_ANNOTATION)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1 or str(raw).strip() != str(value):
        raise InputError(f"{raw!r} is not a positive integer", source=source,
                         field=f"annotations.{MIN_MEMBER_ANNOTATION}", accepted="1, 2, 3, …")
    return value


@dataclass(frozen=True, eq=False)
class NodeTable:
    """Static node facts of a cluster: ``n`` rows; ``capacity`` ``(n, 8)`` post-Phase-0.

    Derived masks (labels, taints, topology domains) are memoised on the instance.
    """

    names: tuple[str, ...]
    zone: tuple[str, ...]
    rack: tuple[str, ...]
    labels: tuple[Mapping[str, str], ...]
    taints: tuple[tuple[Taint, ...], ...]
    capacity: np.ndarray
    _memo: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_infrastructure(cls, infra: Infrastructure, capacity: np.ndarray) -> NodeTable:
        nodes = infra.nodes
        return cls(names=tuple(n.name for n in nodes), zone=tuple(n.zone for n in nodes),
                   rack=tuple(n.rack for n in nodes), labels=tuple(n.labels for n in nodes),
                   taints=tuple(n.taints for n in nodes), capacity=np.asarray(capacity, dtype=np.float64))

    def __len__(self) -> int:
        return len(self.names)

    @cached_property
    def index(self) -> dict[str, int]:
        """Node name → row."""
        return {name: i for i, name in enumerate(self.names)}

    def label_mask(self, key: str, value: str) -> np.ndarray:
        """``(n,)`` bool: nodes labelled ``key=value``."""
        memo = self._memo.setdefault("label", {})
        if (key, value) not in memo:
            memo[key, value] = np.array([labels.get(key) == value for labels in self.labels], dtype=bool)
        return memo[key, value]

    def affinity_mask(self, terms: tuple[NodeSelectorTerm, ...]) -> np.ndarray:
        """``(n,)`` bool: nodes matching a required node affinity (any of ``terms``; none given:
        every node). Each node is read once per distinct affinity per pass (memoised)."""
        if not terms:
            return np.ones(len(self), dtype=bool)
        memo = self._memo.setdefault("affinity", {})
        if terms not in memo:
            memo[terms] = np.fromiter((any(t.matches(labels, name) for t in terms)
                                       for labels, name in zip(self.labels, self.names, strict=True)),
                                      dtype=bool, count=len(self))
        return memo[terms]

    def selector_mask(self, selector: Mapping[str, str]) -> np.ndarray:
        """``(n,)`` bool: nodes whose labels match every nodeSelector pair."""
        mask = np.ones(len(self), dtype=bool)
        for key, value in selector.items():
            mask &= self.label_mask(key, value)
        return mask

    @cached_property
    def blocking_taints(self) -> tuple[tuple[Taint, np.ndarray], ...]:
        """Distinct NoSchedule/NoExecute taints with the ``(n,)`` mask of nodes carrying each."""
        rows: dict[Taint, list[int]] = {}
        for i, taints in enumerate(self.taints):
            for taint in taints:
                if taint.effect in BLOCKING_EFFECTS:
                    rows.setdefault(taint, []).append(i)
        out = []
        for taint, idx in rows.items():
            mask = np.zeros(len(self), dtype=bool)
            mask[idx] = True
            out.append((taint, mask))
        return tuple(out)

    def untolerated_mask(self, tolerations: tuple[Toleration, ...]) -> np.ndarray:
        """``(n,)`` bool: nodes with a blocking taint no toleration matches (Kubernetes rule)."""
        memo = self._memo.setdefault("taint", {})
        if tolerations not in memo:
            mask = np.zeros(len(self), dtype=bool)
            for taint, nodes in self.blocking_taints:
                if not any(t.tolerates(taint) for t in tolerations):
                    mask |= nodes
            memo[tolerations] = mask
        return memo[tolerations]

    def domains(self, topology_key: str) -> tuple[np.ndarray, tuple[str, ...]]:
        """``(codes (n,) int64, domain names)`` for a topology key; code −1 = no domain."""
        memo = self._memo.setdefault("domain", {})
        if topology_key not in memo:
            if topology_key == HOSTNAME:
                values: Sequence[str | None] = self.names
            elif topology_key in ZONE_KEYS:
                values = self.zone
            elif topology_key in RACK_KEYS:
                values = self.rack
            else:
                values = [labels.get(topology_key) for labels in self.labels]
            names = tuple(sorted({v for v in values if v not in (None, "")}))
            code = {v: i for i, v in enumerate(names)}
            memo[topology_key] = (np.array([code.get(v, -1) for v in values], dtype=np.int64), names)
        return memo[topology_key]


@dataclass(frozen=True, eq=False)
class BatchTemplate:
    """What every pod of one batch owner (a Job, a trace job, a Kuberina declaration) shares.

    Attributes:
        owner: the workload group — equivalence classes and the eviction cooldown key on it.
        namespace: for the per-namespace running-batch cap and anti-affinity namespaces.
        labels: pod labels (production anti-affinity terms and spread selectors match them).
        node_selector, tolerations: Kubernetes semantics (docs/design.md §3).
        node_affinity: a required node affinity (``nodeSelectorTerms``, ORed), read with the
            nodeSelector: the kubelet refuses a pod on a node that matches neither.
        anti_affinity: the pod's own required anti-affinity terms (against every resident pod).
        anti_affinity_pods: a Kuberina name list: pod ids the pod must not share a node with.
        spread: hard topology spread constraints counting batch pods only.
        images: container images (ImageLocality).
        member_ids: pod ids this template stands for, matched by production Kuberina name lists.
        min_member: gang size from the ``kalena.naughtian.io/min-member`` annotation: the
            template's pending pods in one pass form one all-or-nothing gang.
    """

    owner: str
    namespace: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    node_affinity: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    anti_affinity: tuple[AntiAffinityTerm, ...] = ()
    anti_affinity_pods: tuple[str, ...] = ()
    spread: tuple[SpreadConstraint, ...] = ()
    images: tuple[Image, ...] = ()
    member_ids: tuple[str, ...] = ()
    min_member: int | None = None

    @cached_property
    def rule_signature(self) -> tuple:
        """Everything the owner-independent static filters read: templates with equal
        signatures share one static mask per pass."""
        return (tuple(sorted(self.labels.items())), self.namespace, tuple(sorted(self.node_selector.items())),
                self.node_affinity, self.tolerations, self.member_ids)

    @property
    def dynamic(self) -> bool:
        """True when placing one pod changes this template's own feasibility elsewhere
        (own anti-affinity or spread): such pods are placed one decision at a time."""
        return bool(self.anti_affinity or self.spread or self.anti_affinity_pods)


@dataclass(frozen=True)
class Gang:
    """All-or-nothing group: at least ``min_member`` of its pods in one pass, or none.
    ``colocate``: every placed member on one node (IR v1 ``groups[].colocate``)."""

    name: str
    min_member: int
    colocate: bool = False


@dataclass(frozen=True, eq=False)
class PendingBatch:
    """``k`` pending entries in queue-independent order (the scheduler sorts by priority,
    then ``queued_s``, then row).

    Attributes:
        ids: ``(k,)`` caller identities (task or pod ids), echoed in bindings and why-pending.
        template: ``(k,)`` int row of :attr:`templates`.
        request: ``(k, 8)`` per-pod request.
        count: ``(k,)`` int ≥ 0 identical pods waiting.
        priority: ``(k,)`` int, higher first.
        queued_s: ``(k,)`` s, when the entry joined the queue.
        gang: ``(k,)`` int row of :attr:`gangs`, −1 for none.
    """

    ids: np.ndarray
    template: np.ndarray
    templates: tuple[BatchTemplate, ...]
    request: np.ndarray
    count: np.ndarray
    priority: np.ndarray
    queued_s: np.ndarray
    gang: np.ndarray | None = None
    gangs: tuple[Gang, ...] = ()

    def __post_init__(self) -> None:
        k = len(self.ids)
        if np.shape(self.request) != (k, N_DIMS):
            raise ValueError(f"PendingBatch.request has shape {np.shape(self.request)}, expected ({k}, {N_DIMS})")
        for name in ("template", "count", "priority", "queued_s"):
            if np.shape(getattr(self, name)) != (k,):
                raise ValueError(f"PendingBatch.{name} has shape {np.shape(getattr(self, name))}, expected ({k},)")
        if self.gang is None:
            object.__setattr__(self, "gang", np.full(k, -1, dtype=np.int64))
        if k and (self.template.min() < 0 or self.template.max() >= len(self.templates)):
            raise ValueError("PendingBatch.template points outside templates")
        if (np.asarray(self.count) < 0).any():
            raise ValueError("PendingBatch.count must be ≥ 0")

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, eq=False)
class ProductionPods:
    """Resident production pods: ``(p,)`` ``node`` rows and per-pod facts. Only pods with
    required anti-affinity (``terms`` or Kuberina ``names``) constrain batch; every pod's
    labels are visible to a batch pod's own anti-affinity."""

    ids: tuple[str, ...] = ()
    node: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    namespaces: tuple[str, ...] = ()
    labels: tuple[Mapping[str, str], ...] = ()
    terms: tuple[tuple[AntiAffinityTerm, ...], ...] = ()
    names: tuple[tuple[str, ...], ...] = ()

    @cached_property
    def rows_of(self) -> dict[str, list[int]]:
        """Pod id → rows (one, unless ids repeat)."""
        out: dict[str, list[int]] = {}
        for i, pod in enumerate(self.ids):
            out.setdefault(pod, []).append(i)
        return out

    @cached_property
    def term_rows(self) -> dict[AntiAffinityTerm, np.ndarray]:
        """Each distinct label-selector term → rows of the pods carrying it."""
        out: dict[AntiAffinityTerm, list[int]] = {}
        for i, terms in enumerate(self.terms):
            for term in terms:
                out.setdefault(term, []).append(i)
        return {t: np.array(r, dtype=np.int64) for t, r in out.items()}

    @cached_property
    def name_rows(self) -> dict[str, np.ndarray]:
        """Each pod id named in a Kuberina anti-affinity list → rows of the naming pods."""
        out: dict[str, list[int]] = {}
        for i, names in enumerate(self.names):
            for name in names:
                out.setdefault(name, []).append(i)
        return {n: np.array(r, dtype=np.int64) for n, r in out.items()}

    @cached_property
    def label_groups(self) -> tuple[tuple[Mapping[str, str], str, np.ndarray], ...]:
        """Distinct (labels, namespace) with the node rows of the pods that carry them."""
        out: dict[tuple, list[int]] = {}
        keep: dict[tuple, tuple[Mapping[str, str], str]] = {}
        for i, (labels, ns) in enumerate(zip(self.labels, self.namespaces, strict=True)):
            key = (tuple(sorted(labels.items())), ns)
            out.setdefault(key, []).append(int(self.node[i]))
            keep[key] = (labels, ns)
        return tuple((*keep[k], np.array(v, dtype=np.int64)) for k, v in out.items())


@dataclass(frozen=True, eq=False)
class BatchResidents:
    """Running (and in-flight) batch: ``(r,)`` rows of ``count`` pods of a template on a node.
    Terminated pods are not here (they never count)."""

    node: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    count: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    template: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    templates: tuple[BatchTemplate, ...] = ()
    ids: tuple[str, ...] | None = None

    def running_in(self, namespace: str) -> int:
        """Batch pods running in ``namespace``."""
        if len(self.node) == 0:
            return 0
        match = np.array([t.namespace == namespace for t in self.templates], dtype=bool)
        return int(self.count[match[self.template]].sum())


@dataclass(frozen=True, eq=False)
class Evictions:
    """Recent batch evictions: ``(c,)`` owner, node row and time (s). A (owner, node) pair
    evicted at ``t`` is closed to that owner until ``t + cooldown_s`` (docs/design.md §9)."""

    owner: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=object))
    node: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    time_s: np.ndarray = field(default_factory=lambda: np.zeros(0))


@dataclass(frozen=True, eq=False)
class KubeletRoom:
    """What the orchestrator's node-side admission still admits (Kubernetes: the kubelet checks
    Σ requests ≤ allocatable of the published extended resources, counting a terminating pod
    until it is terminal — docs/design.md §14, case C11).

    Attributes:
        room: ``(n, 8)`` published allocatable − Σ requests of bound non-terminal batch pods,
            internal units; ``+inf`` on dimensions (or nodes) nothing is published for.
        releasing: node row → ``((pod id, request (8,) tuple), …)``, the terminating batch pods
            still held there (why-pending names them).
    """

    room: np.ndarray
    releasing: Mapping[int, tuple[tuple[str, tuple[float, ...]], ...]] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class ClusterSnapshot:
    """One scheduling pass's view of the cluster (all per-node arrays ``(n,)`` unless noted).

    Attributes:
        nodes: the static node table.
        slack: ``(n, 8)`` reservation-ledger slack ``C − Σ r`` (GPU: ``C − Σ q``), with
            in-flight workloads at their request and terminated ones absent (see
            :func:`kalena_engine.placement.ledger_view.reservation_slack`).
        version: ``(n,)`` int64 ledger version of each node when read; a binding is accepted
            only while its node still has this version (optimistic concurrency).
        ready, telemetry_fresh, slack_eligible: node conditions (docs/design.md §8, §9).
        has_production, has_batch: the node hosts service-tier / batch pods (co-location).
        volatility: ``(n,)`` σ of the node's production reservation over capacity (ratio).
        images: image name → ``(n,)`` bool, nodes with the image cached.
        now_s: pass time (s); the eviction cooldown is measured against it.
        kubelet: node-side admission room (:class:`KubeletRoom`), ``None`` where the
            orchestrator re-checks nothing (Docker): a node is feasible only where both the
            reservation ledger and this room fit.
    """

    nodes: NodeTable
    slack: np.ndarray
    version: np.ndarray
    ready: np.ndarray
    telemetry_fresh: np.ndarray
    slack_eligible: np.ndarray
    has_production: np.ndarray
    has_batch: np.ndarray
    volatility: np.ndarray
    now_s: float
    production: ProductionPods = field(default_factory=ProductionPods)
    batch: BatchResidents = field(default_factory=BatchResidents)
    evictions: Evictions = field(default_factory=Evictions)
    images: Mapping[str, np.ndarray] = field(default_factory=dict)
    kubelet: KubeletRoom | None = None

    def __post_init__(self) -> None:
        n = len(self.nodes)
        if np.shape(self.slack) != (n, N_DIMS):
            raise ValueError(f"slack has shape {np.shape(self.slack)}, expected ({n}, {N_DIMS})")
        if self.kubelet is not None and np.shape(self.kubelet.room) != (n, N_DIMS):
            raise ValueError(f"kubelet.room has shape {np.shape(self.kubelet.room)}, expected ({n}, {N_DIMS})")
        for name in ("version", "ready", "telemetry_fresh", "slack_eligible", "has_production",
                     "has_batch", "volatility"):
            if np.shape(getattr(self, name)) != (n,):
                raise ValueError(f"{name} has shape {np.shape(getattr(self, name))}, expected ({n},)")


@dataclass(frozen=True, eq=False)
class Bindings:
    """Placements decided by one pass: ``(b,)`` rows of ``count`` pods of pending ``entry``
    on ``node``, decided against ledger ``version`` of that node; ``request`` ``(b, 8)`` is
    per pod."""

    entry: np.ndarray
    node: np.ndarray
    count: np.ndarray
    version: np.ndarray
    request: np.ndarray

    def __len__(self) -> int:
        return len(self.entry)

    def take(self, rows: np.ndarray) -> Bindings:
        return Bindings(self.entry[rows], self.node[rows], self.count[rows], self.version[rows], self.request[rows])

    @staticmethod
    def empty() -> Bindings:
        z = np.zeros(0, dtype=np.int64)
        return Bindings(z, z.copy(), z.copy(), z.copy(), np.zeros((0, N_DIMS)))
