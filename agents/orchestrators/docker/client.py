"""Docker adapters: standalone Docker (one engine = one node) and Docker Swarm (services pinned
to a node by a placement constraint).

Kalena's batch containers carry the labels ``kalena.naughtian.io/tier=batch``,
``kalena.naughtian.io/workload=<id>`` and the priority; request and limit map to Docker's
``cpu_quota``/``mem_limit`` (standalone) and Swarm ``Resources`` reservations/limits. Swarm's
"reservations" are Kalena's *requests* (DESIGN §13), not Kalena reservations.
"""

from __future__ import annotations

import re

import docker
from docker.errors import APIError, NotFound
from docker.types import Resources, RestartPolicy

from agents.orchestrators.base import (
    ID_LABEL, PRIORITY_ANNOTATION, TIER_LABEL, BatchSpec, OrchestratorError, StaleBinding,
    WorkloadGone, WorkloadRef, priority_of, tier_of,
)

CFS_PERIOD_US = 100_000


def container_name(workload_id: str) -> str:
    """A Docker-safe name for a workload id: ``batch/job-1`` → ``kalena-batch-job-1``."""
    return "kalena-" + re.sub(r"[^a-zA-Z0-9_.-]", "-", workload_id)


def _labels(spec: BatchSpec) -> dict[str, str]:
    return {**spec.labels, TIER_LABEL: "batch", ID_LABEL: spec.id, PRIORITY_ANNOTATION: str(spec.priority)}


class DockerOrchestrator:
    """Standalone Docker: the engine's host is the single node."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.node = str(client.info().get("Name", "docker"))

    def nodes(self) -> list[str]:
        return [self.node]

    def workloads(self, node: str | None = None) -> list[WorkloadRef]:
        if node is not None and node != self.node:
            return []
        out = []
        for c in self.client.containers.list():
            labels = c.labels or {}
            out.append(WorkloadRef(id=labels.get(ID_LABEL, c.name), node=self.node, tier=tier_of(labels),
                                   priority=priority_of(labels), phase="Running"))
        return out

    def bind(self, spec: BatchSpec, node: str) -> None:
        if node != self.node:
            raise StaleBinding(f"bind {spec.id}: node {node!r} is not this engine ({self.node!r})")
        limits = {}
        if spec.limit_mcpu > 0:
            limits = {"cpu_period": CFS_PERIOD_US, "cpu_quota": int(spec.limit_mcpu / 1000 * CFS_PERIOD_US)}
        if spec.limit_bytes > 0:
            limits["mem_limit"] = int(spec.limit_bytes)
        try:
            self.client.containers.run(
                spec.image, list(spec.command) or None, name=container_name(spec.id), labels=_labels(spec),
                detach=True, init=True, network_mode="none", **limits,
            )
        except APIError as exc:
            if exc.status_code == 409:
                raise StaleBinding(f"bind {spec.id}: a container named {container_name(spec.id)} exists") from None
            raise OrchestratorError(f"bind {spec.id}: {exc.explanation or exc}") from None

    def evict(self, workload_id: str, *, grace_s: float, reason: str) -> None:
        try:
            container = self.client.containers.get(container_name(workload_id))
            container.stop(timeout=max(0, int(round(grace_s))))  # SIGTERM, grace, SIGKILL
            container.remove(force=True)
        except NotFound:
            raise WorkloadGone(f"evict {workload_id}: no such container") from None
        except APIError as exc:
            raise OrchestratorError(f"evict {workload_id} ({reason}): {exc.explanation or exc}") from None


class SwarmOrchestrator:
    """Docker Swarm: one replicated service (1 replica) per batch workload, pinned to the node
    by ``node.hostname==<node>``."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    def nodes(self) -> list[str]:
        return [n.attrs["Description"]["Hostname"] for n in self.client.nodes.list()
                if n.attrs["Status"]["State"] == "ready" and n.attrs["Spec"].get("Availability") == "active"]

    def workloads(self, node: str | None = None) -> list[WorkloadRef]:
        hostnames = {n.id: n.attrs["Description"]["Hostname"] for n in self.client.nodes.list()}
        out = []
        for service in self.client.services.list():
            labels = service.attrs["Spec"].get("Labels") or {}
            tasks = [t for t in service.tasks() if t.get("DesiredState") == "running"]
            where = hostnames.get(tasks[0].get("NodeID", ""), "") if tasks else ""
            if node is not None and where != node:
                continue
            out.append(WorkloadRef(id=labels.get(ID_LABEL, service.name), node=where, tier=tier_of(labels),
                                   priority=priority_of(labels),
                                   phase=tasks[0]["Status"]["State"] if tasks else "Pending"))
        return out

    def bind(self, spec: BatchSpec, node: str) -> None:
        if node not in self.nodes():
            raise StaleBinding(f"bind {spec.id}: node {node!r} is not a ready swarm node")
        resources = Resources(
            cpu_limit=int(spec.limit_mcpu * 1e6) or None, mem_limit=int(spec.limit_bytes) or None,
            cpu_reservation=int(spec.request_mcpu * 1e6) or None, mem_reservation=int(spec.request_bytes) or None,
        )
        try:
            self.client.services.create(
                spec.image, command=list(spec.command) or None, name=container_name(spec.id), labels=_labels(spec),
                constraints=[f"node.hostname=={node}"], resources=resources,
                restart_policy=RestartPolicy(condition="none"),
            )
        except APIError as exc:
            if exc.status_code == 409:
                raise StaleBinding(f"bind {spec.id}: service {container_name(spec.id)} exists") from None
            raise OrchestratorError(f"bind {spec.id}: {exc.explanation or exc}") from None

    def evict(self, workload_id: str, *, grace_s: float, reason: str) -> None:
        try:
            self.client.services.get(container_name(workload_id)).remove()
        except NotFound:
            raise WorkloadGone(f"evict {workload_id}: no such service") from None
        except APIError as exc:
            raise OrchestratorError(f"evict {workload_id} ({reason}): {exc.explanation or exc}") from None
