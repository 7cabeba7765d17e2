"""Why a node was rejected for a batch workload, as data (reasons are values, rendered
by the console, never strings assembled late).

Every reason has a ``kind`` — the key under which why-pending counts excluded nodes — and
``to_dict()``, a JSON-ready form with quantities in Kuberina IR units (cores, GiB, MB/s).
Rule kinds are the filter names; a resource shortage's kind is the dimension name (``"ram"``),
so a why-pending record's ``binding`` is a dimension or a rule in the same vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from kalena_engine.resources import DIM_INDEX, IR_TO_INTERNAL, IR_UNITS

NODE_NOT_READY = "node_not_ready"
TELEMETRY_STALE = "telemetry_stale"
SLACK_INELIGIBLE = "slack_ineligible"
COOLDOWN = "cooldown"
NODE_SELECTOR = "node_selector"
TAINT = "taint"
PRODUCTION_ANTI_AFFINITY = "production_anti_affinity"
BATCH_ANTI_AFFINITY = "batch_anti_affinity"
TOPOLOGY_SPREAD = "topology_spread"
NAMESPACE_CAP = "namespace_cap"
GANG = "gang"
STALE_BINDING = "stale_binding"
RELEASING = "releasing"
KUBELET_ALLOCATABLE = "kubelet_allocatable"
NO_NODES = "no_nodes"

#: Rule kinds in filter order (resources come after every rule).
RULE_KINDS: tuple[str, ...] = (
    NODE_NOT_READY, TELEMETRY_STALE, SLACK_INELIGIBLE, COOLDOWN, NODE_SELECTOR, TAINT,
    PRODUCTION_ANTI_AFFINITY, BATCH_ANTI_AFFINITY, TOPOLOGY_SPREAD, NAMESPACE_CAP,
)


def _ir(dim: str, value: float) -> float:
    return round(float(value) / IR_TO_INTERNAL[DIM_INDEX[dim]], 6)


@dataclass(frozen=True)
class Rejection:
    """Base of every reason: ``node`` is the node name (``""`` when no single node is meant)."""

    kind: ClassVar[str] = ""
    node: str

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class Insufficient(Rejection):
    """The reservation ledger lacks ``requested − free`` on ``dim`` (internal units)."""

    dim: str
    requested: float
    free: float

    @property
    def kind(self) -> str:  # type: ignore[override]
        return self.dim

    @property
    def shortfall(self) -> float:
        return self.requested - self.free

    def to_dict(self) -> dict[str, object]:
        unit = IR_UNITS[DIM_INDEX[self.dim]]
        return {"kind": self.kind, "node": self.node, "dim": self.dim, "unit": unit,
                "requested": _ir(self.dim, self.requested), "free": _ir(self.dim, self.free),
                "shortfall": _ir(self.dim, self.shortfall)}


@dataclass(frozen=True)
class NodeNotReady(Rejection):
    kind: ClassVar[str] = NODE_NOT_READY


@dataclass(frozen=True)
class TelemetryStale(Rejection):
    """The node's samples are older than T_stale: it takes no new batch (case C1)."""

    kind: ClassVar[str] = TELEMETRY_STALE


@dataclass(frozen=True)
class SlackIneligible(Rejection):
    """The node is outside the batch node set or in an escalation cooldown."""

    kind: ClassVar[str] = SLACK_INELIGIBLE


@dataclass(frozen=True)
class Cooldown(Rejection):
    """Batch of workload group ``owner`` was evicted from the node at ``evicted_s``."""

    kind: ClassVar[str] = COOLDOWN
    owner: str
    evicted_s: float
    until_s: float


@dataclass(frozen=True)
class SelectorMismatch(Rejection):
    """nodeSelector ``key: wanted`` against the node's ``found`` (``None``: label absent)."""

    kind: ClassVar[str] = NODE_SELECTOR
    key: str
    wanted: str
    found: str | None


@dataclass(frozen=True)
class NodeAffinityMismatch(Rejection):
    """The node matches none of the pod's required node affinity terms (``affinity``, their
    text: ``accelerator in (a100); gpu-count gt (3)``)."""

    kind: ClassVar[str] = NODE_SELECTOR
    affinity: str


@dataclass(frozen=True)
class UntoleratedTaint(Rejection):
    kind: ClassVar[str] = TAINT
    key: str
    value: str
    effect: str


@dataclass(frozen=True)
class AntiAffinity(Rejection):
    """Resident production pod ``pod`` has a required anti-affinity ``rule`` that matches the
    batch pod, on this node's ``topology_key`` domain (docs/design.md §9: binding on batch)."""

    kind: ClassVar[str] = PRODUCTION_ANTI_AFFINITY
    pod: str
    rule: str
    topology_key: str = "kubernetes.io/hostname"


@dataclass(frozen=True)
class BatchAntiAffinity(Rejection):
    """The batch pod's own required anti-affinity ``rule`` matches resident ``pod``."""

    kind: ClassVar[str] = BATCH_ANTI_AFFINITY
    pod: str
    rule: str
    topology_key: str = "kubernetes.io/hostname"


@dataclass(frozen=True)
class SpreadSkew(Rejection):
    """Placing here would make the skew ``count + 1 − min_count`` exceed ``max_skew``
    (batch pods only are counted)."""

    kind: ClassVar[str] = TOPOLOGY_SPREAD
    topology_key: str
    domain: str
    count: int
    min_count: int
    max_skew: int


@dataclass(frozen=True)
class NamespaceCap(Rejection):
    """The namespace already runs ``running`` batch pods of its ``cap`` (every node)."""

    kind: ClassVar[str] = NAMESPACE_CAP
    namespace: str
    running: int
    cap: int


@dataclass(frozen=True)
class GangIncomplete(Rejection):
    """Only ``placeable`` of the gang's ``min_member`` pods fit in this pass: none is placed."""

    kind: ClassVar[str] = GANG
    gang: str
    placeable: int
    min_member: int


@dataclass(frozen=True)
class StaleBinding(Rejection):
    """The node's ledger moved from ``expected_version`` to ``found_version`` between the
    scheduling pass and the bind: the binding is requeued."""

    kind: ClassVar[str] = STALE_BINDING
    expected_version: int
    found_version: int


@dataclass(frozen=True)
class KubeletAdmission(Rejection):
    """The reservation ledger has room but the node's own admission would refuse the pod
    (``Σ requests + requested > published allocatable`` on ``dim``, internal units; docs/design.md §14).
    ``releasing`` names the terminating pods the kubelet still counts and ``releasing_amount``
    their total on ``dim`` (case C11): kind ``releasing`` then, else ``kubelet_allocatable``
    (the published value has not been raised yet)."""

    dim: str
    requested: float
    free: float
    releasing: tuple[str, ...] = ()
    releasing_amount: float = 0.0

    @property
    def kind(self) -> str:  # type: ignore[override]
        return RELEASING if self.releasing else KUBELET_ALLOCATABLE

    def to_dict(self) -> dict[str, object]:
        unit = IR_UNITS[DIM_INDEX[self.dim]]
        return {"kind": self.kind, "node": self.node, "dim": self.dim, "unit": unit,
                "requested": _ir(self.dim, self.requested), "free": _ir(self.dim, self.free),
                "releasing": list(self.releasing), "releasing_amount": _ir(self.dim, self.releasing_amount)}
