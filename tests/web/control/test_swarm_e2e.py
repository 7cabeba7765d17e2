"""End to end on a single-node Swarm (a private engine, listen port in this worktree's range)
with a real agent: a batch service carries Limits and no Reservations, a ``node.id``
constraint, ``container_labels`` with the tier, restart condition none and the pod's stop
grace; the agent reads its task container as batch — throttles its real CFS quota when
production bursts and evicts it under memory pressure; the die event requeues the pod exactly
once; nothing is left behind and the swarm is left. (Re-placement as a new service for the next
attempt: tests/agents/orchestrators/test_swarm_updates.py.)
"""

from __future__ import annotations

import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from agents.bench.dockerd import PrivateEngines
from agents.orchestrators.docker import Engine, EngineConfig, SwarmOrchestrator
from kalena_engine.policy import Policy
from kalena_web.archive.evictions import evictions_record
from kalena_web.cli.benchenv import free_port
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass
from kalena_web.telemetry.models import MitigationEvent
from kalena_web.telemetry.services import agent_token_create
from tests.web.control.test_docker_e2e import (
    BATCH_SCRIPT, CAPACITY_MIB, MIB, agent, cpu_quota_us, stop, stop_services,
)
from tests.web.control.test_docker_engines import ROOT, wait_until
from tests.web.telemetry.conftest import services  # noqa: F401 - Daphne and Celery processes

pytestmark = [pytest.mark.docker, pytest.mark.cgroup, pytest.mark.django_db(transaction=True)]
SWARM_PORT = 22377  # this worktree's port range (never 2377)
BATCH = "batch/swarm-e2e"


@contextmanager
def single_node_swarm(root: Path, name: str, *, memory: str, tag: str, port: int):
    """A private engine (``PrivateEngines``) as a one-node Swarm listening on ``port``; on exit its
    services are removed, it leaves the Swarm, and no cgroup of it is left (asserted)."""
    with PrivateEngines(root, (name,), ("0",), memory=memory, tag=tag) as pe:
        (engine,) = pe.engines
        client = engine.client()
        client.swarm.init(advertise_addr="127.0.0.1", listen_addr=f"127.0.0.1:{port}")
        try:
            yield engine
        finally:
            for service in client.services.list():
                service.remove()
            client.swarm.leave(force=True)
            client.close()
    shutil.rmtree(pe.root, ignore_errors=True)
    assert pe.cgroup_leftovers() == []


@pytest.fixture
def swarm_engine():
    tag = uuid.uuid4().hex[:6]
    with single_node_swarm(ROOT / f"e2e-{tag}", "swarm-a", memory=f"{CAPACITY_MIB}Mi", tag=tag,
                           port=SWARM_PORT) as engine:
        yield engine


def test_swarm_batch_is_throttled_and_evicted_as_batch(swarm_engine, services, tmp_path) -> None:  # noqa: F811
    engine = Engine(EngineConfig(url=swarm_engine.url))  # node named by the engine (= the swarm hostname)
    swarm = SwarmOrchestrator(engine)
    (node,) = swarm.nodes()
    cluster = Cluster.objects.create(name="swarm-e2e", kind=Cluster.LIVE)
    watch, _ = start_watch_one(cluster, swarm)
    port = free_port()
    services.procs.daphne(port)
    services.procs.worker("estimation")
    client = swarm_engine.client()
    policy = Policy()
    proc = None
    production = None

    def tick() -> None:
        evictions_record(cluster=cluster, now_s=time.time() + 60)
        scheduling_pass(cluster=cluster, orchestrator=swarm, policy=policy, now_s=time.time(),
                        rng=np.random.default_rng(0))

    def batch() -> BatchPod:
        return BatchPod.objects.select_related("workload__node").get(workload__name=BATCH)

    try:
        production = client.containers.run(
            "kalena/busybox:test", ["sleep", "3600"], name="web-0", detach=True, init=True, network_mode="none",
            mem_limit="440m", nano_cpus=1_000_000_000,
            labels={"kalena.naughtian.io/tier": "service", "kalena.naughtian.io/request-cpu": "100m",
                    "kalena.naughtian.io/request-memory": "64Mi"})
        token = agent_token_create(node=Node.objects.get(cluster=cluster, name=node))[0]

        # the agent runs on the swarm node, under the engine's own name
        proc = agent(SimpleNamespace(node=node, url=swarm_engine.url, node_cgroup=swarm_engine.node_cgroup),
                     port=port, token=token, tmp_path=tmp_path)
        wait_until(lambda: not LiveNodeLedger.objects.get(node__cluster=cluster, node__name=node).stale,
                   timeout_s=90, what="the agent reporting")
        batch_submit(cluster=cluster, name=BATCH, owner="job/swarm", request={"cpu": 300, "ram": 64 * MIB},
                     limit={"cpu": 1000, "ram": 128 * MIB}, image="kalena/busybox:test",
                     command=["sh", "-c", BATCH_SCRIPT], labels={
                         "kalena.naughtian.io/termination-grace-seconds": "7"}, now_s=time.time())
        wait_until(lambda: (tick(), batch().state == BatchPod.BOUND)[1], what="the placement")
        (service,) = client.services.list(filters={"label": f"kalena.naughtian.io/workload={BATCH}"})
        spec = service.attrs["Spec"]["TaskTemplate"]
        assert spec["Resources"]["Limits"] == {"NanoCPUs": 1_000_000_000, "MemoryBytes": 128 * MIB}
        assert not spec["Resources"].get("Reservations")  # Kalena's ledger holds the request
        assert spec["Placement"]["Constraints"] == [f"node.id=={swarm.node_ids()[node]}"]
        assert spec["RestartPolicy"]["Condition"] == "none"
        assert spec["ContainerSpec"]["StopGracePeriod"] == 7 * 10**9
        assert spec["ContainerSpec"]["Labels"]["kalena.naughtian.io/tier"] == "batch"
        assert spec["ContainerSpec"]["Labels"]["kalena.naughtian.io/request-cpu"] == "300m"
        wait_until(lambda: batch().running_s is not None, what="the task container running")
        (container,) = client.containers.list(filters={"label": f"kalena.naughtian.io/workload={BATCH}"})

        wait_until(lambda: cpu_quota_us(swarm_engine, container) < 100_000, timeout_s=60, what="the batch budget")
        idle = cpu_quota_us(swarm_engine, container)
        production.exec_run(["sh", "-c", "while :; do :; done"], detach=True)
        wait_until(lambda: cpu_quota_us(swarm_engine, container) < idle, timeout_s=60,
                   what="the batch task throttled as batch")
        production.exec_run(["sh", "-c", "dd if=/dev/zero bs=360M count=1 2>/dev/null | sleep 3600"], detach=True)
        wait_until(lambda: (tick(), batch().requeues >= 1)[1], timeout_s=90, what="the evicted task's pod requeued")
        # the engine's die event may requeue the pod before the agent's report of the eviction is stored
        wait_until(lambda: MitigationEvent.objects.filter(action="evict", workload__name=BATCH).exists(),
                   timeout_s=60, what="the agent's eviction report stored")
        assert batch().requeues == 1

        # re-placement as a new service for the next attempt: tests/agents/orchestrators/test_swarm_updates.py
        wait_until(lambda: client.services.list(filters={"label": "kalena.naughtian.io/workload"}) == [],
                   what="the evicted task's service removed by the watcher (nothing left behind)")
    finally:
        if proc is not None:
            stop(proc)
        if production is not None:
            production.remove(force=True)
        watch.stop()
        stop_services(services)


def start_watch_one(cluster, orchestrator):
    from kalena_web.control.reconciler import Reconciler
    from kalena_web.control.watching import watch_start

    reconciler = Reconciler(cluster=cluster)
    watch = watch_start(cluster=cluster, orchestrator=orchestrator, reconciler=reconciler)
    wait_until(lambda: Node.objects.filter(cluster=cluster).exists(), what="the swarm node seen")
    return watch, reconciler

