"""An in-memory orchestrator for the embedded default and tests (same contract as the real
adapters)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.orchestrators.base import BatchSpec, OrchestratorError, StaleBinding, WorkloadGone, WorkloadRef


@dataclass
class FakeOrchestrator:
    """Nodes and workloads in dictionaries; every call is recorded in ``log``."""

    node_names: list[str] = field(default_factory=list)
    running: dict[str, WorkloadRef] = field(default_factory=dict)
    log: list[tuple[str, str, str]] = field(default_factory=list)

    def nodes(self) -> list[str]:
        return list(self.node_names)

    def workloads(self, node: str | None = None) -> list[WorkloadRef]:
        return [w for w in self.running.values() if node is None or w.node == node]

    def add_service(self, workload_id: str, node: str) -> None:
        """Seed a production workload (the blueprint's)."""
        self.running[workload_id] = WorkloadRef(workload_id, node, "service")

    def bind(self, spec: BatchSpec, node: str) -> None:
        if node not in self.node_names:
            raise StaleBinding(f"bind {spec.id}: node {node!r} is gone")
        if spec.id in self.running:
            raise StaleBinding(f"bind {spec.id}: already bound to {self.running[spec.id].node}")
        self.running[spec.id] = WorkloadRef(spec.id, node, "batch", spec.priority)
        self.log.append(("bind", spec.id, node))

    def evict(self, workload_id: str, *, grace_s: float, reason: str) -> None:
        if workload_id not in self.running:
            raise WorkloadGone(f"evict {workload_id}: no such workload")
        del self.running[workload_id]
        self.log.append(("evict", workload_id, reason))
