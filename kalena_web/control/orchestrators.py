"""Which orchestrator the control plane talks to (``KALENA_ORCHESTRATOR``).

``fake`` (the embedded default) is rebuilt from the database for every pass: the cluster's
nodes, its production pods and its bound batch pods — so it holds no state of its own between
passes and the database stays the truth. ``kubernetes`` uses the in-cluster service account
(or ``KUBECONFIG``); ``docker`` uses every engine of ``KALENA_DOCKER_ENGINES`` as a node (else ``DOCKER_HOST``);
``swarm`` talks to the first engine of that list (a manager; another manager of the list stands in
when it does not answer) and follows every engine of the list (workers too) where it can reach it.
"""

from __future__ import annotations

from django.conf import settings

from agents.orchestrators import FakeOrchestrator, Orchestrator, WorkloadRef
from kalena_web.inventory.models import Cluster, Node, Workload

KINDS = ("fake", "kubernetes", "docker", "swarm")


class OrchestratorNotConfigured(RuntimeError):
    """``KALENA_ORCHESTRATOR`` names an unknown kind, or its client cannot be configured."""


def orchestrator_for(cluster: Cluster, *, direct: bool = False) -> Orchestrator:
    """The orchestrator adapter for ``cluster`` (see module doc). In a process with
    ``KALENA_ORCHESTRATOR_THROUGH_WORKERS`` (the console of the Compose and Swarm files, which
    mounts no ``docker.sock``), evictions are forwarded to the workers
    (:class:`~kalena_web.control.forwarding.ThroughWorkers`) unless ``direct``.

    Raises:
        OrchestratorNotConfigured: unknown kind or unusable client configuration.
    """
    kind = settings.KALENA_ORCHESTRATOR
    if settings.KALENA_ORCHESTRATOR_THROUGH_WORKERS and not direct and kind != "fake":
        from kalena_web.control.forwarding import ThroughWorkers

        return ThroughWorkers(cluster, timeout_s=settings.KALENA_FORWARDED_EVICT_TIMEOUT_S)
    if kind == "fake":
        return _fake_from_database(cluster)
    if kind == "kubernetes":
        from agents.orchestrators.kubernetes import KubernetesOrchestrator
        return KubernetesOrchestrator(kubernetes_api_client())
    if kind in ("docker", "swarm"):
        return docker_orchestrator(kind)
    raise OrchestratorNotConfigured(f"KALENA_ORCHESTRATOR={kind!r} is not one of {', '.join(KINDS)}")


def docker_engines() -> list:
    """The engines of ``KALENA_DOCKER_ENGINES`` (docs/docker.md), one per node.

    Raises:
        OrchestratorNotConfigured: a malformed engine list (the message names the entry).
    """
    import os

    from agents.orchestrators.docker import Engine
    from agents.orchestrators.docker.engines import EngineConfigError, parse_engines

    try:
        configs = parse_engines({**os.environ, "KALENA_DOCKER_ENGINES": settings.KALENA_DOCKER_ENGINES})
    except EngineConfigError as exc:
        raise OrchestratorNotConfigured(str(exc)) from None
    return [Engine(c) for c in configs]


def docker_orchestrator(kind: str) -> Orchestrator:
    """Standalone Docker over every configured engine, or Swarm through the first (a manager),
    following every configured engine's events."""
    from agents.orchestrators.docker import DockerOrchestrator, SwarmOrchestrator

    engines = docker_engines()
    return DockerOrchestrator(engines) if kind == "docker" else SwarmOrchestrator(engines[0], engines=engines)


BIND_POOL = 12  # connections: 8 concurrent Binding calls + 2 watches + the event sender + the Lease


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
    configuration = client.Configuration.get_default_copy()
    # room for the Binding calls a pass makes at once (KubernetesOrchestrator.bind_concurrency)
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, BIND_POOL)
    return client.ApiClient(configuration)



def _fake_from_database(cluster: Cluster) -> FakeOrchestrator:
    fake = FakeOrchestrator(node_names=list(Node.objects.filter(cluster=cluster).values_list("name", flat=True)))
    rows = Workload.objects.filter(cluster=cluster, node__isnull=False).values_list("name", "kind", "node__name", "priority")
    for name, kind, node, priority in rows:
        tier = "batch" if kind == Workload.BATCH else "service"
        fake.running[name] = WorkloadRef(name, node, tier, priority)
    return fake
