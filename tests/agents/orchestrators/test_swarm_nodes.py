"""Every node of a real three-node Swarm in Kalena's view: three private engines (own sockets,
data roots, containerd namespaces, cgroup parents; agents/bench/dockerd.py) joined into one
Swarm on their own loopback addresses — one manager, two workers.

Batch pinned to a worker runs and completes (or fails) in Kalena's view and leaves the ledger,
whether the watcher follows the workers' engines or only the managers' task lists; a drained
worker is unschedulable; workers that stop answering (their engine frozen with SIGSTOP: the
containers keep running, as on a machine cut off from the managers) have their batch declared
lost no faster than one node per 10 s, requeued exactly once and placed again, and the copy
still running when a worker comes back is stopped — one copy per pod. No agents here: each
node's ledger is marked fresh by hand, as an agent's report would.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
import uuid
from dataclasses import replace

import numpy as np
import pytest

from agents.bench.dockerd import PrivateEngines, mounts_under
from agents.orchestrators.docker import Engine, EngineConfig, SwarmOrchestrator
from kalena_engine.policy import Policy
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.models import NodeCondition
from kalena_web.control.reconciler import Reconciler
from kalena_web.control.watching import watch_start
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass
from tests.web.control.test_docker_engines import ROOT, wait_until

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
MIB = 2**20
SUBNET = os.environ.get("KALENA_TEST_LAB_SUBNET", "127.0.0")
SWARM_PORT = 22378  # never 2377: a lab's swarm on the same addresses uses that
NAMES = ("sw-m", "sw-w1", "sw-w2")
WORKLOAD = "kalena.naughtian.io/workload"


@pytest.fixture(scope="module")
def swarm3():
    tag = uuid.uuid4().hex[:6]
    pe = PrivateEngines(ROOT / f"sw-{tag}", NAMES, ("0", "1", "0"), memory="384Mi", tag=tag)
    try:
        pe.start()
        pe.swarm_form([(f"{SUBNET}.{i + 2}", SWARM_PORT) for i in range(len(NAMES))])
        yield pe
    finally:
        for engine in pe.engines:  # a test that failed half-way may leave one frozen
            if engine.process is not None and engine.process.poll() is None:
                engine.process.send_signal(signal.SIGCONT)
        pe.swarm_leave()
        pe.stop()
        left = mounts_under(pe.root)  # a Swarm node's network namespaces are unmounted too
        shutil.rmtree(pe.root, ignore_errors=True)
    assert pe.cgroup_leftovers() == [] and left == []


def manager(pe: PrivateEngines):
    return pe.engines[0].client()


def engine_of(pe: PrivateEngines, name: str):
    return next(e for e in pe.engines if e.node == name)


def running_copies(pe: PrivateEngines, ref: str) -> dict[str, int]:
    """Node → running containers of ``ref`` on its engine (engines that answer)."""
    out = {}
    for e in pe.engines:
        try:
            client = e.client(timeout_s=3)
            out[e.node] = len(client.containers.list(filters={"label": f"{WORKLOAD}={ref}"}))
            client.close()
        except Exception:  # noqa: BLE001 - frozen engine: not counted
            continue
    return out


def submit(cluster: Cluster, name: str, script: str, *, node: str | None = None) -> None:
    constraints = {"node_selector": {"kalena.naughtian.io/node": node}} if node else None
    batch_submit(cluster=cluster, name=f"batch/{name}", owner=f"job/{name}", request={"cpu": 100, "ram": 16 * MIB},
                 limit={"cpu": 300, "ram": 32 * MIB}, image="kalena/busybox:test", command=["sh", "-c", script],
                 constraints=constraints, now_s=time.time())


def pod(name: str) -> BatchPod:
    return BatchPod.objects.select_related("workload__node").get(workload__name=f"batch/{name}")


POLICY = Policy(eviction=replace(Policy().eviction, cooldown_s=1.0))


def place(cluster: Cluster, orchestrator, expected: int, timeout_s: float = 60) -> None:
    placed = []

    def passes() -> bool:
        LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=time.time())
        report = scheduling_pass(cluster=cluster, orchestrator=orchestrator, policy=POLICY, now_s=time.time(),
                                 rng=np.random.default_rng(0))
        placed.append(report.placed)
        return sum(placed) >= expected

    wait_until(passes, timeout_s=timeout_s, what=f"{expected} pods placed")


def start(cluster: Cluster, orchestrator: SwarmOrchestrator):
    watch = watch_start(cluster=cluster, orchestrator=orchestrator, reconciler=Reconciler(cluster=cluster))
    wait_until(lambda: set(Node.objects.filter(cluster=cluster).values_list("name", flat=True)) == set(NAMES),
               what="the three swarm nodes seen under their labels")
    return watch


def availability(pe: PrivateEngines, name: str, value: str) -> None:
    client = manager(pe)
    node = client.nodes.get(pe.swarm_ids[name])
    spec = dict(node.attrs["Spec"])
    spec["Availability"] = value
    node.update(spec)
    client.close()


def condition(cluster: Cluster, name: str) -> NodeCondition:
    return NodeCondition.objects.get(node__cluster=cluster, node__name=name)


def batch_charge(cluster: Cluster, name: str) -> float:
    return LiveNodeLedger.objects.get(node__cluster=cluster, node__name=name).batch_request[0]


@pytest.mark.parametrize("follow", ["every engine", "managers only"])
def test_batch_on_workers_runs_completes_and_fails_in_kalenas_view(swarm3: PrivateEngines, follow: str) -> None:
    cluster = Cluster.objects.create(name=f"swarm-{uuid.uuid4().hex[:6]}", kind=Cluster.LIVE)
    engines = [Engine(EngineConfig(url=e.url)) for e in swarm3.engines] if follow == "every engine" else []
    orchestrator = SwarmOrchestrator(Engine(EngineConfig(url=swarm3.engines[0].url)), engines=engines)
    watch = start(cluster, orchestrator)
    try:
        assert condition(cluster, "sw-w1").ready and condition(cluster, "sw-w1").schedulable
        submit(cluster, "done", "sleep 3; exit 0", node="sw-w1")
        submit(cluster, "fails", "sleep 3; exit 3", node="sw-w2")
        place(cluster, orchestrator, 2)
        assert (pod("done").workload.node.name, pod("fails").workload.node.name) == ("sw-w1", "sw-w2")
        assert batch_charge(cluster, "sw-w1") == 100 and batch_charge(cluster, "sw-w2") == 100
        wait_until(lambda: pod("done").running_s is not None and pod("fails").running_s is not None,
                   what="both task containers running on their workers")
        assert running_copies(swarm3, "batch/done")["sw-w1"] == 1  # on the worker's own engine
        wait_until(lambda: pod("done").state == pod("fails").state == BatchPod.COMPLETED, timeout_s=60,
                   what="both pods finished in Kalena's view")
        assert (pod("done").outcome, pod("fails").outcome) == ("succeeded", "failed")
        assert "exit 3" in pod("fails").reason
        assert batch_charge(cluster, "sw-w1") == 0 and batch_charge(cluster, "sw-w2") == 0  # the ledger freed
        client = manager(swarm3)
        wait_until(lambda: client.services.list(filters={"label": WORKLOAD}) == [],
                   what="the finished pods' services removed (nothing left behind)")
        client.close()
    finally:
        watch.stop()


def test_drained_worker_is_unschedulable_and_lost_workers_are_rescheduled_at_the_rate(swarm3: PrivateEngines) -> None:
    cluster = Cluster.objects.create(name=f"swarm-{uuid.uuid4().hex[:6]}", kind=Cluster.LIVE)
    orchestrator = SwarmOrchestrator(Engine(EngineConfig(url=swarm3.engines[0].url)),
                                     engines=[Engine(EngineConfig(url=e.url, timeout_s=5)) for e in swarm3.engines],
                                     lost_after_s=4.0)
    watch = start(cluster, orchestrator)
    frozen = []
    try:
        # drain → unschedulable (pause too); active again → schedulable
        for value in ("drain", "pause"):
            availability(swarm3, "sw-w1", value)
            wait_until(lambda: not condition(cluster, "sw-w1").schedulable, what=f"the {value} worker unschedulable")
            assert condition(cluster, "sw-w1").ready
            availability(swarm3, "sw-w1", "active")
            wait_until(lambda: condition(cluster, "sw-w1").schedulable, what="the worker active again")

        # one long pod on each worker
        submit(cluster, "long-1", "sleep 600", node="sw-w1")
        submit(cluster, "long-2", "sleep 600", node="sw-w2")
        place(cluster, orchestrator, 2)
        wait_until(lambda: pod("long-1").running_s is not None and pod("long-2").running_s is not None,
                   what="both long pods running")
        # both workers stop answering at once: their containers keep running
        for name in ("sw-w1", "sw-w2"):
            engine = engine_of(swarm3, name)
            engine.process.send_signal(signal.SIGSTOP)
            frozen.append(engine)
        wait_until(lambda: not condition(cluster, "sw-w1").ready and not condition(cluster, "sw-w2").ready,
                   timeout_s=90, what="the managers reporting both workers down")
        assert not condition(cluster, "sw-w1").schedulable
        wait_until(lambda: pod("long-1").requeues == 1 and pod("long-2").requeues == 1, timeout_s=90,
                   what="both lost pods requeued")
        lost = sorted(EvictionRecord.objects.filter(workload__name__in=["batch/long-1", "batch/long-2"])
                      .values_list("time_s", flat=True))
        assert len(lost) == 2 and all("NodeLost" in r.detail["why"] for r in EvictionRecord.objects.all())
        assert lost[1] - lost[0] >= 1 / 0.1 - 0.5  # one node per 10 s (DESIGN's 0.1 node/s)
        assert batch_charge(cluster, "sw-w1") == 0 and batch_charge(cluster, "sw-w2") == 0

        # the workers come back with the old copies still running: each pod ends up with one copy
        for engine in frozen:
            engine.process.send_signal(signal.SIGCONT)
        frozen.clear()
        wait_until(lambda: condition(cluster, "sw-w1").ready and condition(cluster, "sw-w2").ready, timeout_s=90,
                   what="both workers ready again")
        place(cluster, orchestrator, 2)
        wait_until(lambda: all(pod(n).running_s is not None for n in ("long-1", "long-2")), timeout_s=90,
                   what="both pods running again")
        wait_until(lambda: all(sum(running_copies(swarm3, f"batch/{n}").values()) == 1 for n in ("long-1", "long-2")),
                   timeout_s=60, what="one running copy per pod",
                   why=lambda: {n: running_copies(swarm3, f"batch/{n}") for n in ("long-1", "long-2")})
        client = engine_of(swarm3, "sw-w1").client()
        (copy,) = client.containers.list(filters={"label": f"{WORKLOAD}=batch/long-1"})
        assert copy.labels["kalena.naughtian.io/attempt"] == "1"  # the copy left is the new placement
        client.close()
        time.sleep(3)  # later lists and events must not requeue again
        assert [pod(n).requeues for n in ("long-1", "long-2")] == [1, 1], (
            [(pod(n).state, pod(n).reason) for n in ("long-1", "long-2")],
            list(EvictionRecord.objects.values_list("workload_name", "detail")))
        assert [pod(n).state for n in ("long-1", "long-2")] == [BatchPod.BOUND] * 2
    finally:
        for engine in frozen:
            engine.process.send_signal(signal.SIGCONT)
        watch.stop()
        for name in ("long-1", "long-2"):
            try:
                orchestrator.evict(f"batch/{name}", grace_s=1, reason="test over")
            except Exception:  # noqa: BLE001 - already gone
                pass


def test_a_worker_leaving_is_down_then_gone_and_joining_again_is_the_same_node(swarm3: PrivateEngines) -> None:
    cluster = Cluster.objects.create(name=f"swarm-{uuid.uuid4().hex[:6]}", kind=Cluster.LIVE)
    orchestrator = SwarmOrchestrator(Engine(EngineConfig(url=swarm3.engines[0].url)),
                                     engines=[Engine(EngineConfig(url=e.url, timeout_s=5)) for e in swarm3.engines])
    watch = start(cluster, orchestrator)
    worker = engine_of(swarm3, "sw-w2")
    client, boss = worker.client(), manager(swarm3)
    try:
        client.swarm.leave()
        wait_until(lambda: not condition(cluster, "sw-w2").ready, timeout_s=90, what="the departed worker down")
        boss.nodes.get(swarm3.swarm_ids["sw-w2"]).remove(force=True)  # docker node rm
        wait_until(lambda: condition(cluster, "sw-w2").gone, what="the removed node gone")
        assert condition(cluster, "sw-w1").ready and not condition(cluster, "sw-w1").gone

        boss.swarm.reload()
        client.swarm.join(remote_addrs=[f"{SUBNET}.2:{SWARM_PORT}"], join_token=boss.swarm.attrs["JoinTokens"]["Worker"],
                          advertise_addr=f"{SUBNET}.4:{SWARM_PORT}", listen_addr=f"{SUBNET}.4:{SWARM_PORT}")
        swarm3.swarm_ids["sw-w2"] = client.info()["Swarm"]["NodeID"]  # a new node id, its engine label the same
        wait_until(lambda: condition(cluster, "sw-w2").ready and not condition(cluster, "sw-w2").gone, timeout_s=90,
                   what="the worker joining again under its name")
        assert Node.objects.filter(cluster=cluster).count() == 3
    finally:
        client.close()
        boss.close()
        watch.stop()
