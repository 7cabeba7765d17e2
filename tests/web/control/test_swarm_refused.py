"""A batch pod whose image its Swarm node cannot get, on a real single-node Swarm (a private
engine; images are imported, no registry): the task is rejected ("No such image"), the pod is
refused with the engine's words and the node, and the service of that attempt is removed —
nothing of a refused attempt stays listed on the Swarm (as standalone Docker leaves no
container: tests/web/control/test_docker_engines.py)."""

from __future__ import annotations

import time
import uuid

import numpy as np
import pytest

from agents.orchestrators.docker import Engine, EngineConfig, SwarmOrchestrator
from kalena_engine.policy import Policy
from kalena_web.cli.benchenv import free_port
from kalena_web.inventory.models import Cluster
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass
from tests.web.control.test_docker_engines import MIB, ROOT, fresh, wait_until
from tests.web.control.test_swarm_e2e import single_node_swarm, start_watch_one

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
WORKLOAD = "kalena.naughtian.io/workload"


@pytest.fixture
def swarm_engine():
    tag = f"wx{uuid.uuid4().hex[:4]}"
    with single_node_swarm(ROOT / f"swarm-{tag}", "swarm-r", memory="256Mi", tag=tag, port=free_port()) as engine:
        yield engine


def test_a_refused_pods_service_is_removed(swarm_engine) -> None:
    swarm = SwarmOrchestrator(Engine(EngineConfig(url=swarm_engine.url)))
    (node,) = swarm.nodes()
    cluster = Cluster.objects.create(name=f"swarm-{uuid.uuid4().hex[:6]}", kind=Cluster.LIVE)
    watch, _ = start_watch_one(cluster, swarm)
    client = swarm_engine.client()

    def pod() -> BatchPod:
        return BatchPod.objects.get(workload__name="batch/missing")

    def listed() -> list[str]:
        return [s.name for s in client.services.list(filters={"label": f"{WORKLOAD}=batch/missing"})]

    try:
        batch_submit(cluster=cluster, name="batch/missing", owner="job/missing", request={"cpu": 100, "ram": 16 * MIB},
                     limit={"cpu": 200, "ram": 32 * MIB}, image="kalena/none:missing", command=["true"],
                     now_s=time.time())
        fresh(cluster)
        scheduling_pass(cluster=cluster, orchestrator=swarm, policy=Policy(), now_s=time.time(),
                        rng=np.random.default_rng(0))
        assert pod().state == BatchPod.BOUND
        assert listed() == ["kalena-batch-missing-a0"]  # Swarm took the service; its node rejects the task

        wait_until(lambda: pod().state == BatchPod.REFUSED, what="the rejected task's pod refused")
        refused = pod()
        assert refused.outcome == "refused"
        assert "No such image: kalena/none:missing" in refused.reason and refused.reason.endswith(f" on {node}")
        wait_until(lambda: listed() == [], what="the refused attempt's service removed",
                   why=lambda: f"still listed: {listed()}")
        assert pod().state == BatchPod.REFUSED and pod().reason == refused.reason  # removal is not news
    finally:
        watch.stop()
        client.close()
