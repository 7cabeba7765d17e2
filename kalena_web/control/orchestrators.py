"""Which orchestrator the control plane talks to (``KALENA_ORCHESTRATOR``).

``fake`` (the embedded default) is rebuilt from the database for every pass: the cluster's
nodes, its production pods and its bound batch pods — so it holds no state of its own between
passes and the database stays the truth. ``kubernetes`` uses the in-cluster service account
(or ``KUBECONFIG``); ``docker`` and ``swarm`` use the Docker environment (``DOCKER_HOST``).
"""

from __future__ import annotations

from django.conf import settings

from agents.orchestrators import FakeOrchestrator, Orchestrator, WorkloadRef
from kalena_web.inventory.models import Cluster, Node, Workload

KINDS = ("fake", "kubernetes", "docker", "swarm")


class OrchestratorNotConfigured(RuntimeError):
    """``KALENA_ORCHESTRATOR`` names an unknown kind, or its client cannot be configured."""


def orchestrator_for(cluster: Cluster) -> Orchestrator:
    """The orchestrator adapter for ``cluster`` (see module doc).

    Raises:
        OrchestratorNotConfigured: unknown kind or unusable client configuration.
    """
    kind = settings.KALENA_ORCHESTRATOR
    if kind == "fake":
        return _fake_from_database(cluster)
    if kind == "kubernetes":
        from agents.orchestrators.kubernetes import KubernetesOrchestrator
        return KubernetesOrchestrator(kubernetes_api_client())
    if kind in ("docker", "swarm"):
        import docker

        from agents.orchestrators.docker import DockerOrchestrator, SwarmOrchestrator
        try:
            engine = docker.from_env()
        except docker.errors.DockerException as exc:
            raise OrchestratorNotConfigured(f"{kind}: cannot reach the Docker engine ({exc})") from None
        return DockerOrchestrator(engine) if kind == "docker" else SwarmOrchestrator(engine)
    raise OrchestratorNotConfigured(f"KALENA_ORCHESTRATOR={kind!r} is not one of {', '.join(KINDS)}")


def kubernetes_api_client():
    """An ApiClient from the in-cluster service account, else ``KUBECONFIG`` / ~/.kube/config.

    Raises:
        OrchestratorNotConfigured: neither is usable.
    """
    from kubernetes import client, config

    try:
        config.load_incluster_config()
    except config.ConfigException:
        try:
            config.load_kube_config()
        except (config.ConfigException, OSError) as exc:
            raise OrchestratorNotConfigured(f"kubernetes: no in-cluster or kubeconfig credentials ({exc})") from None
    return client.ApiClient()


def _fake_from_database(cluster: Cluster) -> FakeOrchestrator:
    fake = FakeOrchestrator(node_names=list(Node.objects.filter(cluster=cluster).values_list("name", flat=True)))
    rows = Workload.objects.filter(cluster=cluster, node__isnull=False).values_list("name", "kind", "node__name", "priority")
    for name, kind, node, priority in rows:
        tier = "batch" if kind == Workload.BATCH else "service"
        fake.running[name] = WorkloadRef(name, node, tier, priority)
    return fake
