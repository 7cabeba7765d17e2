"""Kubernetes adapter: binds pending batch pods (created with ``schedulerName: kalena``) through
the pods/binding subresource and evicts through the Eviction API (policy/v1), so
PodDisruptionBudgets are honoured.

Tested against real Kubernetes JSON shapes served over HTTP (no API server can run on the
development machines) — see tests/agents/orchestrators.
"""

from __future__ import annotations

import json

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from agents.orchestrators.base import (
    BatchSpec, OrchestratorError, StaleBinding, WorkloadGone, WorkloadRef, priority_of, tier_of,
)


class KubernetesOrchestrator:
    """The port over a ``kubernetes.client.ApiClient`` (in-cluster or kubeconfig configured
    by the caller)."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        self.core = k8s.CoreV1Api(api_client)

    def nodes(self) -> list[str]:
        nodes = self._call("list nodes", self.core.list_node)
        return [n.metadata.name for n in nodes.items if _ready(n)]

    def workloads(self, node: str | None = None) -> list[WorkloadRef]:
        selector = f"spec.nodeName={node}" if node else ""
        pods = self._call("list pods", self.core.list_pod_for_all_namespaces, field_selector=selector)
        out = []
        for pod in pods.items:
            if pod.status and pod.status.phase in ("Succeeded", "Failed"):
                continue  # terminal pods never count
            meta = pod.metadata
            owners = meta.owner_references or []
            tier = "daemonset" if any(o.kind == "DaemonSet" for o in owners) else tier_of(meta.labels)
            out.append(WorkloadRef(
                id=f"{meta.namespace}/{meta.name}", node=pod.spec.node_name or "", tier=tier,
                priority=priority_of(meta.annotations), phase=(pod.status.phase if pod.status else "Unknown"),
            ))
        return out

    def pod(self, ref: str) -> dict:
        """The pod ``namespace/name`` as API JSON.

        Raises:
            WorkloadGone: no such pod; OrchestratorError: any other refusal.
        """
        namespace, name = ref.split("/", 1)
        try:
            raw = self.core.read_namespaced_pod(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                raise WorkloadGone(f"pod {ref}: no such pod") from None
            raise OrchestratorError(f"read pod {ref}: {exc.status} {_reason(exc)}") from None
        return json.loads(raw.data)

    def publish_batch_capacity(self, node: str, *, cpu_mcpu: int, memory_bytes: int) -> None:
        """Patch the node's status (capacity and allocatable) with Kalena's extended resources
        ``kalena.naughtian.io/batch-cpu`` (millicores) and ``batch-memory`` (bytes), DESIGN §14 —
        a JSON patch on ``nodes/status``, the documented way to advertise extended resources.

        Raises:
            OrchestratorError: the API refused.
        """
        from agents.orchestrators.kubernetes.batch_resources import BATCH_CPU, BATCH_MEMORY

        ops = [{"op": "add", "path": f"/status/{part}/{name.replace('/', '~1')}", "value": str(value)}
               for part in ("capacity", "allocatable")
               for name, value in ((BATCH_CPU, cpu_mcpu), (BATCH_MEMORY, memory_bytes))]
        try:
            self.core.patch_node_status(node, ops, _preload_content=False).release_conn()
        except ApiException as exc:
            raise OrchestratorError(f"publish batch capacity on {node}: {exc.status} {_reason(exc)}") from None

    def token_review(self, token: str, audiences: list[str]) -> dict:
        """``TokenReview.status`` (authentication.k8s.io/v1) for ``token`` and ``audiences``.

        Raises:
            OrchestratorError: the API refused or failed the review.
        """
        body = k8s.V1TokenReview(api_version="authentication.k8s.io/v1", kind="TokenReview",
                                 spec=k8s.V1TokenReviewSpec(token=token, audiences=audiences))
        try:
            raw = k8s.AuthenticationV1Api(self.core.api_client).create_token_review(
                body, _preload_content=False, _request_timeout=5)
        except ApiException as exc:
            raise OrchestratorError(f"token review: {exc.status} {_reason(exc)}") from None
        return json.loads(raw.data).get("status") or {}

    def bind(self, spec: BatchSpec, node: str) -> None:
        body = k8s.V1Binding(
            api_version="v1", kind="Binding",
            metadata=k8s.V1ObjectMeta(name=spec.name, namespace=spec.namespace),
            target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        try:
            # _preload_content=False: the API answers with a Status the client cannot model as V1Binding
            self.core.create_namespaced_pod_binding(spec.name, spec.namespace, body, _preload_content=False)
        except ApiException as exc:
            if exc.status in (404, 409):
                raise StaleBinding(f"bind {spec.id} to {node}: {exc.status} {_reason(exc)}") from None
            raise OrchestratorError(f"bind {spec.id} to {node}: {exc.status} {_reason(exc)}") from None

    def evict(self, workload_id: str, *, grace_s: float, reason: str) -> None:
        namespace, name = workload_id.split("/", 1)
        body = k8s.V1Eviction(
            api_version="policy/v1", kind="Eviction",
            metadata=k8s.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=k8s.V1DeleteOptions(grace_period_seconds=int(round(grace_s))),
        )
        try:
            self.core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                raise WorkloadGone(f"evict {workload_id}: no such pod") from None
            hint = " (a PodDisruptionBudget refused it)" if exc.status == 429 else ""
            raise OrchestratorError(f"evict {workload_id} ({reason}): {exc.status} {_reason(exc)}{hint}") from None

    def _call(self, what: str, method, **kwargs):
        try:
            return method(**kwargs)
        except ApiException as exc:
            raise OrchestratorError(f"{what}: {exc.status} {_reason(exc)}") from None


def _ready(node: k8s.V1Node) -> bool:
    conditions = (node.status.conditions if node.status else None) or []
    ready = [c for c in conditions if c.type == "Ready"]
    unschedulable = bool(node.spec and node.spec.unschedulable)
    return bool(ready) and ready[0].status == "True" and not unschedulable


def _reason(exc: ApiException) -> str:
    try:
        return json.loads(exc.body or "{}").get("message") or exc.reason or ""
    except ValueError:
        return exc.reason or ""
