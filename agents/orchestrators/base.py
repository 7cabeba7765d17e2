"""The orchestrator port: what Kalena's control plane asks of Kubernetes, Docker or Swarm.

Kalena binds pending batch to the node the scheduler chose, evicts batch (graceful stop), and
drains a node's batch on escalation (docs/design.md §8). Everything else — admission, restarts, images —
stays the orchestrator's. Labels and annotations follow docs/design.md §4:
``kalena.naughtian.io/tier`` (service | batch; unlabelled = service) and
``kalena.naughtian.io/priority``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from agents.orchestrators.events import WatchEvent

TIER_LABEL = "kalena.naughtian.io/tier"
PRIORITY_ANNOTATION = "kalena.naughtian.io/priority"
ID_LABEL = "kalena.naughtian.io/workload"


class OrchestratorError(Exception):
    """The orchestrator refused or failed a request; the message says which and why."""


class WorkloadGone(OrchestratorError):
    """The workload an eviction named does not exist (any more): nothing is left to stop."""


class EvictionRefused(OrchestratorError):
    """The orchestrator refused an eviction for now (Kubernetes: a PodDisruptionBudget's 429):
    the workload still runs and keeps its reservation; retry later with backoff."""


class EvictionUncertain(OrchestratorError):
    """An eviction call that may or may not have landed (a timeout, a dropped connection): the
    workload keeps its reservation until the retry or the watch says what happened."""


class BindingUncertain(OrchestratorError):
    """A binding call that may or may not have landed (a timeout, a dropped connection): the
    caller must ask the orchestrator (or wait for its watch) before binding again."""


class StaleBinding(OrchestratorError):
    """A binding the orchestrator rejected because the world moved on (already bound,
    deleted, node gone): the scheduler requeues the workload, it is never lost."""


@dataclass(frozen=True)
class WorkloadRef:
    """A running or pending workload as the orchestrator reports it.

    ``id`` is ``namespace/name`` (Kubernetes) or the Kalena workload id label (Docker, Swarm);
    ``tier`` is ``service`` | ``batch`` | ``daemonset``; ``node`` is ``""`` while pending.
    """

    id: str
    node: str
    tier: str
    priority: int = 0
    phase: str = "Running"


@dataclass(frozen=True)
class BatchSpec:
    """What to start for one batch workload.

    Attributes:
        id: ``namespace/name``; must be unique while the workload exists.
        image: container image (Docker/Swarm); Kubernetes binds an existing pending pod.
        request_mcpu, request_bytes, limit_mcpu, limit_bytes: cpu and memory in internal units.
        priority: the Kalena priority annotation.
        command: container command (Docker/Swarm).
        attempt: which placement of the pod this is (0 first, +1 per requeue): Docker and Swarm
            name the container/service per attempt so a re-placement never collides with the
            stopped one it replaces.
        grace_s: the pod's stop grace (s), Kubernetes' default 30 (Docker and Swarm stop grace).
        uid: the pod object's ``metadata.uid`` the decision was made for (Kubernetes: the
            Binding's precondition, so a pod deleted and re-created under the same name is
            not bound with the old one's decision); ``""`` when not known.
    """

    id: str
    image: str = ""
    request_mcpu: float = 0.0
    request_bytes: float = 0.0
    limit_mcpu: float = 0.0
    limit_bytes: float = 0.0
    priority: int = 0
    command: tuple[str, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    attempt: int = 0
    grace_s: float = 30.0
    uid: str = ""

    @property
    def namespace(self) -> str:
        return self.id.split("/", 1)[0] if "/" in self.id else "default"

    @property
    def name(self) -> str:
        return self.id.split("/", 1)[1] if "/" in self.id else self.id


class Orchestrator(Protocol):
    """The port every adapter implements; a contract test suite runs against each."""

    def nodes(self) -> list[str]:
        """Names of the nodes that can run workloads."""

    def workloads(self, node: str | None = None) -> list[WorkloadRef]:
        """Workloads known to the orchestrator, optionally only those on ``node``."""

    def bind(self, spec: BatchSpec, node: str) -> None:
        """Start (Docker, Swarm) or bind (Kubernetes) batch workload ``spec`` on ``node``.

        Raises:
            StaleBinding: already bound or running, deleted, or the node is gone.
            OrchestratorError: any other refusal.
        """

    def evict(self, workload_id: str, *, grace_s: float, reason: str) -> None:
        """Stop a workload gracefully (SIGTERM, ``grace_s``, then SIGKILL).

        Raises:
            WorkloadGone: no such workload (any more).
            EvictionRefused: refused for now (a PodDisruptionBudget); it still runs.
            OrchestratorError: any other refusal.
        """

    def watch(self, stop: threading.Event) -> Iterator[WatchEvent]:
        """The watch part of the port (docs/design.md §14): the orchestrator's current state as events
        (``NodeSeen``, ``PodPending``, ``PodRunning``, ``ProductionSeen`` …) followed by
        ``Resynced``, then every change as it happens, until ``stop`` is set. A watcher re-lists
        on its own when it must (another ``Resynced`` follows) and reconnects with backoff; it
        raises only for a configuration error. Start one with
        ``Reconciler(cluster=…).run(orchestrator.watch(stop))`` on a thread
        (:func:`kalena_web.control.watching.watch_start`).
        """


def drain_batch(orchestrator: Orchestrator, node: str, *, grace_s: float, reason: str) -> list[str]:
    """Evict every batch workload on ``node`` (escalation, docs/design.md §8); returns their ids.

    Service workloads and DaemonSets are never touched.
    """
    evicted = []
    for ref in orchestrator.workloads(node):
        if ref.tier == "batch":
            orchestrator.evict(ref.id, grace_s=grace_s, reason=reason)
            evicted.append(ref.id)
    return evicted


def tier_of(labels: Mapping[str, str] | None) -> str:
    """docs/design.md §4: the tier label, ``service`` when absent or unknown."""
    value = (labels or {}).get(TIER_LABEL, "service")
    return value if value in ("service", "batch") else "service"


def priority_of(annotations: Mapping[str, str] | None) -> int:
    """docs/design.md §4: the non-negative priority annotation; 0 when absent or malformed."""
    raw = (annotations or {}).get(PRIORITY_ANNOTATION, "0")
    try:
        return max(0, int(raw))
    except (TypeError, ValueError):
        return 0
