"""Orchestrator port and adapters (ports and adapters): one protocol, with an
in-memory fake, Kubernetes, standalone Docker and Docker Swarm implementations."""

from agents.orchestrators.base import (
    BatchSpec, BindingUncertain, EvictionRefused, EvictionUncertain, Orchestrator, OrchestratorError, StaleBinding, WorkloadGone, WorkloadRef, drain_batch,
)
from agents.orchestrators.fake import FakeOrchestrator

__all__ = [
    "BatchSpec", "BindingUncertain", "EvictionRefused", "EvictionUncertain", "FakeOrchestrator", "Orchestrator", "OrchestratorError", "StaleBinding",
    "WorkloadGone", "WorkloadRef", "drain_batch",
]
