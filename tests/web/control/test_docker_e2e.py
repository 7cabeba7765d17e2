"""End to end on real engines with real agents: two private dockerd are two nodes (own cgroup
parents and cpusets cpu0 / cpu1, agents/bench/dockerd.py), each with a real ``kalena-agent run``
(Docker discovery on its engine, its own ``--capacity`` and its node's cgroup) streaming to a
real Daphne with a real Celery estimation worker (PostgreSQL, Redis); the watcher and the
reconciler run in this process, the scheduling and eviction-record loops are ticked here.

A production container on node-a bursts (a burner) → node-a's agent throttles the batch
container's real CFS quota; the production container then takes memory → the agent evicts the
batch container → its die event and the agent's report arrive → the pod is requeued, placed on
node-b, and completes there; the why-evicted record names the condition and its numbers; the
batch pod's samples and its eviction join the pod Kalena submitted; nothing is left behind.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from agents.bench.dockerd import agent_command
from agents.orchestrators.docker import DockerOrchestrator, Engine, EngineConfig
from kalena_engine.policy import Policy
from kalena_web.archive.evictions import evictions_record
from kalena_web.archive.models import EvictionRecord
from kalena_web.cli.benchenv import free_port
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass
from kalena_web.telemetry.models import MitigationEvent, Sample
from kalena_web.telemetry.services import agent_token_create
from tests.web.control.test_docker_engines import (  # noqa: F401 - the engines fixture
    NODE_MEMORY_MIB, engines, kalena_containers, start_watch, wait_until,
)
from tests.web.telemetry.conftest import services  # noqa: F401 - Daphne and Celery processes

pytestmark = [pytest.mark.docker, pytest.mark.cgroup, pytest.mark.django_db(transaction=True)]
MIB = 2**20
CAPACITY_MIB = NODE_MEMORY_MIB
BATCH = "batch/train-e2e"
#: burns its cpu for 40 s of wall time while holding 40 MiB (dd's buffer, blocked on a pipe)
BATCH_SCRIPT = ("dd if=/dev/zero bs=40M count=1 2>/dev/null | sleep 600 & "
                "end=$(( $(date +%s) + 40 )); while [ $(date +%s) -lt $end ]; do :; done")


def agent(engine, *, port: int, token: str, tmp_path: Path) -> subprocess.Popen:
    token_file = tmp_path / f"{engine.node}.token"
    token_file.write_text(token + "\n")
    argv = agent_command(node=engine.node, url=engine.url, node_cgroup=engine.node_cgroup,
                         capacity=f"cpu=1,memory={CAPACITY_MIB}Mi", link_url=f"ws://127.0.0.1:{port}/agent/v1/ws",
                         token_file=token_file, state_dir=tmp_path / f"state-{engine.node}",
                         actions_log=tmp_path / f"actions-{engine.node}.jsonl")
    return subprocess.Popen(argv, stdout=open(tmp_path / f"agent-{engine.node}.log", "w"),  # noqa: SIM115
                            stderr=subprocess.STDOUT)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def stop_services(services) -> None:  # noqa: F811
    """Stop the worker and Daphne at once: no task of a finished test is worth waiting for (a
    warm Celery shutdown waits its full 20 s here); the fixture's own stop finds nothing left."""
    services.procs.stop("estimation", sig=signal.SIGKILL)
    services.procs.stop("daphne", sig=signal.SIGINT)


def cpu_quota_us(engine, container) -> int:
    path = Path("/sys/fs/cgroup/cpu") / engine.node_cgroup / container.id / "cpu.cfs_quota_us"
    return int(path.read_text())


def test_throttle_evict_requeue_replace_complete_on_two_engines(engines, services, tmp_path) -> None:  # noqa: F811
    a, b = engines.engines
    cluster = Cluster.objects.create(name="docker-e2e", kind=Cluster.LIVE)
    orchestrator = DockerOrchestrator([Engine(EngineConfig(url=e.url, node=e.node)) for e in engines.engines])
    watch, _ = start_watch(cluster, orchestrator)
    port = free_port()
    services.procs.daphne(port)
    services.procs.worker("estimation")
    agents = {}
    production = None
    policy = Policy()

    def tick() -> None:
        evictions_record(cluster=cluster, now_s=time.time() + 60)  # settled as soon as stored
        scheduling_pass(cluster=cluster, orchestrator=orchestrator, policy=policy, now_s=time.time(),
                        rng=np.random.default_rng(0))

    def batch() -> BatchPod:
        return BatchPod.objects.select_related("workload__node").get(workload__name=BATCH)

    try:
        tokens = {n.name: agent_token_create(node=n)[0] for n in Node.objects.filter(cluster=cluster)}
        client_a = a.client()
        production = client_a.containers.run(
            "kalena/busybox:test", ["sleep", "3600"], name="web-0", detach=True, init=True, network_mode="none",
            mem_limit="440m", nano_cpus=1_000_000_000, labels={"kalena.naughtian.io/tier": "service", "kalena.naughtian.io/request-cpu": "100m",
                                      "kalena.naughtian.io/request-memory": "64Mi"})
        agents[a.node] = agent(a, port=port, token=tokens[a.node], tmp_path=tmp_path)
        wait_until(lambda: not LiveNodeLedger.objects.get(node__cluster=cluster, node__name=a.node).stale,
                   timeout_s=90, what="node-a's agent reporting")
        # node-b's agent is not up yet, so its node is stale and the first placement is node-a
        batch_submit(cluster=cluster, name=BATCH, owner="job/train", request={"cpu": 300, "ram": 64 * MIB},
                     limit={"cpu": 1000, "ram": 128 * MIB}, image="kalena/busybox:test",
                     command=["sh", "-c", BATCH_SCRIPT], now_s=time.time())
        wait_until(lambda: (tick(), batch().state == BatchPod.BOUND)[1],
                   what="the first placement", why=lambda: getattr(batch(), "why_pending", None) and batch().why_pending.record)
        assert batch().workload.node.name == a.node
        wait_until(lambda: batch().running_s is not None, what="the batch container running")
        container = client_a.containers.get("kalena-batch-train-e2e-a0")
        assert container.attrs["HostConfig"]["CpuQuota"] == 100_000  # its limit, 1 core
        agents[b.node] = agent(b, port=port, token=tokens[b.node], tmp_path=tmp_path)

        # the agent's batch budget: B = C − Σ service r (production idle: r from its request)
        wait_until(lambda: cpu_quota_us(a, container) < 100_000, timeout_s=60, what="the first batch budget")
        idle = cpu_quota_us(a, container)
        # production bursts on node-a's one cpu: its reservation rises, the batch quota falls
        production.exec_run(["sh", "-c", "while :; do :; done"], detach=True)
        wait_until(lambda: cpu_quota_us(a, container) < idle, timeout_s=60, what="the batch quota lowered",
                   why=lambda: f"quota {cpu_quota_us(a, container)} µs, idle {idle} µs")
        throttled = cpu_quota_us(a, container)
        throttle = MitigationEvent.objects.filter(action="throttle", workload__name=BATCH)
        wait_until(throttle.exists, timeout_s=30, what="the throttle reported under the pod's own name")

        # production takes memory: working set ≥ 0.95 C and Σr > C → the agent evicts the batch pod
        production.exec_run(["sh", "-c", "dd if=/dev/zero bs=360M count=1 2>/dev/null | sleep 3600"], detach=True)
        wait_until(lambda: (tick(), batch().requeues >= 1)[1], timeout_s=90, what="the evicted pod requeued")
        wait_until(lambda: (tick(), batch().state == BatchPod.COMPLETED)[1], timeout_s=150,
                   what="the pod re-placed on node-b and completed there", why=lambda: (
                       batch().state, batch().workload.node_id, batch().reason,
                       getattr(batch(), "why_pending", None) and batch().why_pending.record,
                       list(LiveNodeLedger.objects.filter(node__cluster=cluster).values_list("node__name", "stale"))))
        done = batch()
        assert (done.outcome, done.requeues) == ("succeeded", 1)  # requeued exactly once
        assert client_a.containers.list(all=True, filters={"name": "kalena-batch-train-e2e-a1"}) == []

        agent_record = EvictionRecord.objects.filter(workload__name=BATCH).exclude(cause="orchestrator")
        wait_until(lambda: (tick(), agent_record.exists())[1], timeout_s=60, what="the agent's why-evicted record")
        record = agent_record.get()
        assert record.cause == "priority"  # not a limit breach: the lowest-priority batch went first
        detail = record.detail
        assert record.node.name == a.node and detail["dimension"] == "ram"
        assert detail["capacity"] == pytest.approx(CAPACITY_MIB * MIB)
        assert detail["working_set"] >= 0.95 * detail["capacity"] or detail["acute"]
        # the ledger was over capacity and the eviction took the victim's reservation off it (on a
        # loaded machine production's own reservation may already pass C: the only batch pod is
        # evicted and the ledger stays over, which is no reason to fail)
        assert detail["ledger_before"] > detail["capacity"] and detail["ledger_after"] < detail["ledger_before"]
        assert detail["ledger_before"] - detail["ledger_after"] == pytest.approx(detail["reservation"])
        evict = MitigationEvent.objects.get(action="evict", workload__name=BATCH)
        assert evict.node.name == a.node
        assert Sample.objects.filter(workload__name=BATCH, node__name=a.node).exists()   # samples joined
        assert Sample.objects.filter(workload__name=BATCH, node__name=b.node).exists()
        print(f"quota idle {idle} µs → throttled {throttled} µs; why-evicted {detail}")
    finally:
        for process in agents.values():
            stop(process)
        if production is not None:
            production.remove(force=True)
        watch.stop()
        stop_services(services)
    assert kalena_containers(engines) == {"node-a": [], "node-b": []}
