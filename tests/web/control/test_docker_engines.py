"""Two private Docker engines are two nodes (agents/bench/dockerd.py: own sockets, data roots,
cgroup parents and cpusets cpu0 / cpu1): the watcher and the reconciler on real engines.

Batch pods submitted like the CLI does are placed by the real scheduling pass, started by
DockerOrchestrator with their identity and request in labels, and the engines' events drive
their lifecycle: exit 0 → completed, exit 3 → failed, a SIGTERM (what the agent's enforcer
sends) → evicted → requeued exactly once → re-placed on the other engine under a new container
name → completes there; an engine restarted mid-run (no live-restore: its containers die) →
each of its pods requeued exactly once; a control-plane restart rebuilds from labels. Nothing
is left behind. No agents here (tests/web/control/test_docker_e2e.py has them): each node's
ledger is marked fresh by hand, as an agent's report would.
"""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from agents.bench.dockerd import PrivateEngines
from agents.orchestrators.docker import DockerOrchestrator, Engine, EngineConfig
from kalena_engine.policy import Policy
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.models import NodeCondition
from kalena_web.control.reconciler import Reconciler
from kalena_web.control.watching import watch_start
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass

pytestmark = [pytest.mark.docker, pytest.mark.django_db(transaction=True)]
ROOT = Path(__file__).resolve().parents[3] / "var"
MIB = 2**20
NODE_MEMORY_MIB = 384  # each engine's node (its label kalena.naughtian.io/allocatable-memory)


def wait_until(predicate, *, timeout_s: float = 60.0, what: str, why=None) -> None:
    """Wait for a condition (generous deadlines; ``why()`` explains a timeout)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    assert predicate(), f"timed out after {timeout_s:.0f} s waiting for {what}" + (f": {why()}" if why else "")


@pytest.fixture
def engines():
    tag = uuid.uuid4().hex[:6]
    with PrivateEngines(ROOT / f"e2e-{tag}", ("node-a", "node-b"), ("0", "1"), memory=f"{NODE_MEMORY_MIB}Mi", tag=tag) as pe:
        yield pe
    shutil.rmtree(pe.root, ignore_errors=True)
    assert pe.cgroup_leftovers() == []


def fresh(cluster: Cluster) -> None:
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=time.time())


def submit(cluster: Cluster, name: str, script: str) -> BatchPod:
    return batch_submit(cluster=cluster, name=f"batch/{name}", owner=f"job/{name}",
                        request={"cpu": 200, "ram": 32 * MIB}, limit={"cpu": 500, "ram": 64 * MIB},
                        image="kalena/busybox:test", command=["sh", "-c", script], now_s=time.time())


def place(cluster: Cluster, orchestrator, expected: int) -> None:
    """Scheduling passes until ``expected`` pods were placed (the periodic loop's job: a binding
    the watch made stale — a ledger version bumped meanwhile — is retried by the next pass)."""
    placed = []

    def passes() -> bool:
        fresh(cluster)
        report = scheduling_pass(cluster=cluster, orchestrator=orchestrator, policy=Policy(), now_s=time.time(),
                                 rng=np.random.default_rng(0))
        assert report.errors == []
        placed.append(report.placed)
        return sum(placed) >= expected

    wait_until(passes, timeout_s=30, what=f"{expected} pods placed")
    assert sum(placed) == expected


def pod(name: str) -> BatchPod:
    return BatchPod.objects.select_related("workload__node").get(workload__name=f"batch/{name}")


def kalena_containers(pe: PrivateEngines) -> dict[str, list[str]]:
    out = {}
    for e in pe.engines:
        client = e.client()
        out[e.node] = sorted(c.name for c in client.containers.list(all=True, filters={"label": "kalena.naughtian.io/workload"}))
        client.close()
    return out


def start_watch(cluster, orchestrator):
    reconciler = Reconciler(cluster=cluster)
    watch = watch_start(cluster=cluster, orchestrator=orchestrator, reconciler=reconciler)
    wait_until(lambda: Node.objects.filter(cluster=cluster).count() == 2, what="both engines seen as nodes")
    return watch, reconciler


def test_two_engines_lifecycle_replacement_and_engine_restart(engines: PrivateEngines) -> None:
    cluster = Cluster.objects.create(name=f"docker-{uuid.uuid4().hex[:6]}", kind=Cluster.LIVE)
    orchestrator = DockerOrchestrator([Engine(EngineConfig(url=e.url, node=e.node)) for e in engines.engines])
    watch, reconciler = start_watch(cluster, orchestrator)
    try:
        nodes = {n.name: n for n in Node.objects.filter(cluster=cluster)}
        assert nodes["node-a"].capacity[0] == 1000 and nodes["node-a"].capacity[1] == NODE_MEMORY_MIB * MIB  # its cpuset

        submit(cluster, "done", "sleep 1; exit 0")
        submit(cluster, "fails", "sleep 1; exit 3")
        submit(cluster, "victim", "sleep 6; exit 0")
        place(cluster, orchestrator, 3)
        client = {e.node: e.client() for e in engines.engines}
        victim = pod("victim")
        first_node = victim.workload.node.name
        name = "kalena-batch-victim-a0"
        labels = client[first_node].containers.get(name).labels
        assert labels["kalena.naughtian.io/workload"] == "batch/victim"
        assert labels["kalena.naughtian.io/request-cpu"] == "200m"
        host = client[first_node].containers.get(name).attrs["HostConfig"]
        assert (host["CpuShares"], host["MemoryReservation"], host["Memory"], host["CpuQuota"]) == (
            205, 32 * MIB, 64 * MIB, 50_000)  # shares = 200 × 1024 / 1000; quota = 0.5 × 100 000 µs

        wait_until(lambda: pod("victim").running_s is not None, what="the victim running")
        client[first_node].containers.get(name).kill(signal="SIGTERM")  # what the agent's enforcer does
        wait_until(lambda: pod("victim").requeues == 1 and pod("victim").state == BatchPod.PENDING,
                   what="the evicted pod requeued")
        record = EvictionRecord.objects.get(workload__name="batch/victim")
        assert record.node.name == first_node and "signal 15" in record.detail["why"]

        place(cluster, orchestrator, 1)
        victim = pod("victim")
        assert victim.workload.node.name != first_node  # the cooldown keeps it off the node that evicted it
        wait_until(lambda: pod("victim").state == BatchPod.COMPLETED, timeout_s=90, what="the re-placed pod completing")
        assert pod("victim").outcome == "succeeded" and pod("victim").requeues == 1
        assert (pod("done").state, pod("done").outcome) == (BatchPod.COMPLETED, "succeeded")
        assert (pod("fails").state, pod("fails").outcome) == (BatchPod.COMPLETED, "failed")
        assert "exit 3" in pod("fails").reason
        wait_until(lambda: kalena_containers(engines) == {"node-a": [], "node-b": []},
                   what="every finished container removed")

        # an engine restarted mid-run: its containers die with it, each pod requeued exactly once
        for i in range(2):
            submit(cluster, f"long-{i}", "sleep 600")
        place(cluster, orchestrator, 2)
        wait_until(lambda: all(pod(f"long-{i}").running_s for i in range(2)), what="both long pods running")
        on = {pod(f"long-{i}").workload.node.name for i in range(2)}
        target = next(e for e in engines.engines if e.node in on)
        hit = [f"long-{i}" for i in range(2) if pod(f"long-{i}").workload.node.name == target.node]
        engines.kill(target)
        condition = NodeCondition.objects.filter(node__cluster=cluster, node__name=target.node)
        wait_until(lambda: not condition.get().ready, what="the unreachable engine's node not ready")
        assert "unreachable" in " ".join(Node.objects.get(cluster=cluster, name=target.node).labels)  # shown so
        engines.launch(target)
        wait_until(lambda: all(pod(n).state == BatchPod.PENDING and pod(n).requeues == 1 for n in hit),
                   timeout_s=90, what="the restarted engine's pods requeued")
        time.sleep(2)  # later events (destroy, re-list) must not requeue again
        assert [pod(n).requeues for n in hit] == [1] * len(hit)

        # a control-plane restart: a new watcher rebuilds from labels, nothing doubled
        watch.stop()
        place(cluster, orchestrator, len(hit))
        before = {n: (pod(n).state, pod(n).requeues) for n in ("long-0", "long-1")}
        watch, reconciler = start_watch(cluster, orchestrator)
        wait_until(lambda: reconciler.counts.get("Resynced"), what="the new watcher's first full list")
        assert {n: (pod(n).state, pod(n).requeues) for n in ("long-0", "long-1")} == before
    finally:
        watch.stop()
    for name in ("long-0", "long-1"):
        orchestrator.evict(f"batch/{name}", grace_s=1, reason="test over")
    assert kalena_containers(engines) == {"node-a": [], "node-b": []}


def test_kalena_watch_runs_the_docker_watcher_over_the_configured_engines(engines: PrivateEngines, settings) -> None:
    from kalena_web.cli import watch

    cluster = Cluster.objects.create(name="docker-watch", kind=Cluster.LIVE)
    settings.KALENA_ORCHESTRATOR = "docker"
    settings.KALENA_DOCKER_ENGINES = ",".join(f"{e.node}={e.url}" for e in engines.engines)
    submit(cluster, "seen", "sleep 30")
    handle = watch.start(watch.defaults())  # what `kalena watch` and `kalena serve` start
    try:
        wait_until(lambda: Node.objects.filter(cluster=cluster).count() == 2, what="both engines seen as nodes")
        from kalena_web.control.orchestrators import orchestrator_for

        place(cluster, orchestrator_for(cluster), 1)
        wait_until(lambda: pod("seen").running_s is not None, what="the engine's start event applied")
    finally:
        handle.stop()
    orchestrator_for(cluster).evict("batch/seen", grace_s=0, reason="test over")
    bad = watch.defaults()
    settings.KALENA_DOCKER_ENGINES = "node-a=http://nowhere"
    with pytest.raises(Exception, match="KALENA_DOCKER_ENGINES entry 1"):
        watch.start(bad)


def test_an_image_no_engine_has_backs_off_says_why_and_tries_the_other_engine(engines: PrivateEngines) -> None:
    """``kalena/nope:1`` is on neither engine and no registry is reachable: the engine's error
    is the pod's reason and why-pending, the attempts are 10 s then 20 s apart (not every pass),
    and the second attempt is on the other engine."""
    from kalena_web.scheduling.whypending import pending_message

    cluster = Cluster.objects.create(name=f"docker-{uuid.uuid4().hex[:6]}", kind=Cluster.LIVE)
    orchestrator = DockerOrchestrator([Engine(EngineConfig(url=e.url, node=e.node)) for e in engines.engines])
    watch, _ = start_watch(cluster, orchestrator)
    try:
        batch_submit(cluster=cluster, name="batch/nope", owner="job/nope", request={"cpu": 200, "ram": 32 * MIB},
                     limit={"cpu": 500, "ram": 64 * MIB}, image="kalena/nope:1", command=["true"], now_s=time.time())
        start = time.time()
        tried, attempts = [], []
        for step in range(12):  # one pass every 5 s of the scheduler's clock, as the Celery loop
            now = start + 5.0 * step
            fresh(cluster)
            report = scheduling_pass(cluster=cluster, orchestrator=orchestrator, policy=Policy(), now_s=now,
                                     rng=np.random.default_rng(0))
            if report.failed:
                attempts.append(now - start)
                tried.append(pod("nope").reason)
        assert attempts == [0.0, 10.0, 30.0], attempts
        nope = BatchPod.objects.select_related("why_pending").get(workload__name="batch/nope")
        assert nope.state == BatchPod.PENDING and nope.requeues == 3 and "no such host" in nope.reason
        # the engine's own words name the node; the second attempt went to the other engine
        nodes = [next(n for n in ("node-a", "node-b") if f"({n}) run:" in reason) for reason in tried]
        assert nodes[0] != nodes[1], nodes
        assert {r["node"] for r in nope.why_pending.record["refused"]} == {"node-a", "node-b"}
        assert "refused to run it:" in pending_message(nope.why_pending.record)
        assert kalena_containers(engines) == {"node-a": [], "node-b": []}
    finally:
        watch.stop()
