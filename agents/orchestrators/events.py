"""The watch part of the orchestrator port (docs/design.md §14): Kalena's own small events.

A watcher (Kubernetes list+watch, the Docker engine's events API, Swarm tasks, the fake) turns
its orchestrator's stream into these frozen dataclasses, keeping resourceVersion or event-time
bookkeeping to itself; the control plane's reconciler applies each one through services,
idempotently (the same event twice changes nothing). The watcher knows the orchestrator and not
Django; the reconciler knows Django and not the orchestrator.

Common fields:
    at_s: the orchestrator's time of the change, Unix seconds (a pod's creation or a container
        event's ``time``); the watcher's receive time only when the orchestrator gives none.
    ref: ``namespace/name`` (Kubernetes) or Kalena's workload id label (Docker, Swarm).
Vectors are 8-tuples in docs/design.md §2's order and internal units (mcpu, bytes, devices, bytes,
bytes/s × 4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

Vector = tuple[float, float, float, float, float, float, float, float]

#: Outcomes a finished pod can have (``PodFinished.outcome``).
OUTCOMES = ("succeeded", "failed", "oom", "evicted")


@dataclass(frozen=True)
class NodeSeen:
    """A node as the orchestrator reports it now (added or changed).

    ``ready``: its Ready condition (Kubernetes) or the engine answering (Docker);
    ``schedulable``: not cordoned (``spec.unschedulable`` false, Swarm availability active);
    ``allocatable``: 8-vector, internal units; ``taints``: ``{"key", "value", "effect"}`` dicts;
    ``images``: image names present on the node (image locality, docs/design.md §9).
    """

    name: str
    ready: bool
    schedulable: bool
    allocatable: Vector
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Mapping[str, str], ...] = ()
    images: tuple[str, ...] = ()
    at_s: float = 0.0
    image_bytes: Mapping[str, float] = field(default_factory=dict)
    """Size of each cached image in bytes where the orchestrator reports it (Kubernetes
    ``status.images[].sizeBytes``): kube-scheduler's ImageLocality weighs by size."""


@dataclass(frozen=True)
class NodeGone:
    """The node left the cluster (deleted, engine removed from the configuration)."""

    name: str
    at_s: float = 0.0


@dataclass(frozen=True)
class PodPending:
    """A batch pod waiting for Kalena to place it (Kubernetes: ``schedulerName: kalena`` and no
    node). ``owner`` is ``Kind/name`` of the controlling owner (``Job/train``), ``""`` for a bare
    pod: cooldowns and pairing blacklists key on it (docs/design.md §14). ``gang`` is the gang name or
    ``""``; ``priority`` the Kalena priority (docs/design.md §4).

    Added with defaults (placement needs them): ``image`` (the first container's image, image
    locality), ``constraints`` (the REST API's constraint shape: ``node_selector``,
    ``tolerations``, ``anti_affinity_terms``, ``spread``), ``grace_s`` (termination grace used
    when Kalena evicts it), ``min_member`` (gang size), ``uid`` (the object's ``metadata.uid``:
    a pod deleted and created again under its name is a new object, told apart by it).
    """

    ref: str
    requests: Vector
    limits: Vector
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0
    owner: str = ""
    gang: str = ""
    at_s: float = 0.0
    image: str = ""
    constraints: Mapping[str, object] = field(default_factory=dict)
    grace_s: float = 30.0
    min_member: int | None = None
    uid: str = ""


@dataclass(frozen=True)
class PodRunning:
    """A batch pod is on ``node``: bound there and, when ``admitted``, accepted by the node (its
    kubelet admitted it: Kubernetes ``phase: Running``, or ``Pending`` with ``status.startTime``,
    which the kubelet sets when it acknowledges the pod; Docker and Swarm report only started
    containers, always admitted). A bound pod the node has not admitted yet holds its request in
    Kalena's ledger but does not raise the published batch floor (docs/design.md §14)."""

    ref: str
    node: str
    at_s: float = 0.0
    admitted: bool = True


@dataclass(frozen=True)
class PodFinished:
    """A batch pod ended: ``outcome`` is one of :data:`OUTCOMES`; ``reason`` the orchestrator's
    words (``Completed``, ``Error``, ``OOMKilled``, ``Evicted``); ``exit_code`` None when unknown."""

    ref: str
    node: str
    outcome: str
    reason: str = ""
    exit_code: int | None = None
    at_s: float = 0.0


@dataclass(frozen=True)
class PodRefused:
    """The node refused the pod at admission (Kubernetes ``reason: OutOfcpu`` …): never a
    completion; the owner's replacement is a new pod (docs/design.md §14, case C11)."""

    ref: str
    node: str
    reason: str
    at_s: float = 0.0


@dataclass(frozen=True)
class PodGone:
    """The pod object no longer exists: it leaves every ledger at once."""

    ref: str
    at_s: float = 0.0


@dataclass(frozen=True)
class ProductionSeen:
    """A service-tier pod and where it actually runs (checked against the blueprint: fidelity
    and drift live). ``node`` is ``""`` while it is not placed.

    ``anti_affinity``: the pod's required pod anti-affinity terms in the constraint shape
    (``{"labelSelector": {matchLabels, matchExpressions}, "topologyKey": …, "namespaces": […]}``,
    ``namespaces`` empty = every namespace): binding on batch (docs/design.md §9).

    Added with defaults (production identity, docs/design.md §15, and the per-workload overrides):
    ``owner`` (``Kind/name`` of the controlling owner reference, ``""`` for none),
    ``owner_error`` (why the owner references could not be read: the pod is then an explained
    ``extra``), ``annotations`` (``kalena.naughtian.io/reclaim``, ``…/startup-grace-s`` are read
    from them over the labels), ``start_s`` (the pod's start, Kubernetes ``status.startTime``,
    Unix s; 0 = unknown: the startup grace runs from it).
    """

    ref: str
    node: str
    requests: Vector
    limits: Vector
    labels: Mapping[str, str] = field(default_factory=dict)
    at_s: float = 0.0
    owner: str = ""
    owner_error: str = ""
    annotations: Mapping[str, str] = field(default_factory=dict)
    start_s: float = 0.0
    anti_affinity: tuple[Mapping[str, object], ...] = ()


@dataclass(frozen=True)
class Resynced:
    """The watcher re-listed (a start, a reconnect, a 410): ``pods`` and ``nodes`` are every ref
    and node name the list holds; the reconciler drops what it knows and the list no longer holds.
    The list's own objects arrive as ordinary events just before this one."""

    pods: frozenset[str]
    nodes: frozenset[str]
    at_s: float = 0.0


WatchEvent = NodeSeen | NodeGone | PodPending | PodRunning | PodFinished | PodRefused | PodGone | ProductionSeen | Resynced
