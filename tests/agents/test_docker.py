"""Real containers on the private Docker engine ``scripts/services up`` starts (busybox image
imported from busybox-static): discovery from labels and HostConfig, cpu throttling of a batch
container through its cgroup, eviction of the lowest-priority container under memory pressure
(restart policy switched to ``no`` first), and the Docker stats collector."""

from __future__ import annotations

import glob
import os
import time
import uuid

import docker
import pytest

from agents.collectors.docker_stats import DockerStatsCollector
from agents.discovery.docker import DockerSource
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU, RAM
from tests.agents.realagent import RunningAgent, wait_for
from tests.worked import WORKED_POLICY

pytestmark = pytest.mark.docker
MIB = 2**20
CPUS = os.cpu_count() or 1
IMAGE = "kalena/busybox:test"
SPIN = "while :; do :; done"


@pytest.fixture
def run(docker_client):
    """Start labelled containers under a private cgroup parent; remove them and the parent after."""
    run_id = uuid.uuid4().hex[:8]
    parent = f"kalena-test-docker-{run_id}"
    started = []

    def start(name: str, command: str, labels: dict[str, str], **kwargs):
        container = docker_client.containers.run(
            IMAGE, ["sh", "-c", command], name=f"kt-{run_id}-{name}", detach=True, init=True,
            network_mode="none", cgroup_parent=f"/{parent}", labels={"kalena.test.run": run_id, **labels}, **kwargs)
        started.append(container)
        # the node's pod parent runs at a high weight (as kubepods does), so that the other work on
        # this shared machine does not decide who gets the cpu inside it
        shares = f"/sys/fs/cgroup/cpu/{parent}/cpu.shares"
        if os.path.exists(shares):
            with open(shares, "w") as handle:
                handle.write("8192")
        return container

    start.run_id, start.parent = run_id, parent
    yield start
    for container in started:
        try:
            container.remove(force=True)
        except docker.errors.NotFound:
            pass
    remove_cgroup_parent(parent)


def remove_cgroup_parent(parent: str) -> None:
    """Remove the test's cgroup parent from every hierarchy (retrying while the engine empties it)."""
    for path in sorted(glob.glob(f"/sys/fs/cgroup/*/{parent}"), key=len, reverse=True):
        for _ in range(50):
            try:
                os.rmdir(path)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.1)


def source(docker_client, run) -> DockerSource:
    return DockerSource(docker_client, cgroup_version=1, label_filter=f"kalena.test.run={run.run_id}")


def test_discovery_reads_labels_limits_and_the_cgroup(docker_client, run) -> None:
    run("svc", "sleep 3600", {"kalena.naughtian.io/tier": "service", "kalena.naughtian.io/request-cpu": "250m"},
        mem_limit="64m", nano_cpus=500_000_000, mem_reservation="32m")
    run("job", "sleep 3600", {"kalena.naughtian.io/tier": "batch", "kalena.naughtian.io/priority": "3",
                              "kalena.naughtian.io/termination-grace-seconds": "5",
                              "kalena.naughtian.io/slack-cpu": "deny"})
    run("bad", "sleep 3600", {"kalena.naughtian.io/tier": "gold"})
    result = source(docker_client, run).discover(time.time())
    by_name = {w.name.split("-", 2)[-1]: w for w in result.workloads}
    svc, job = by_name["svc"], by_name["job"]
    assert (svc.tier, svc.request[CPU], svc.limit[CPU], svc.request[RAM], svc.limit[RAM]) == (
        "service", 250.0, 500.0, 32 * MIB, 64 * MIB)
    assert (job.tier, job.priority, job.grace_s, job.slack_cpu, job.kind) == ("batch", 3, 5.0, False, "docker")
    assert job.cgroup.startswith(f"{run.parent}/") and os.path.isdir(f"/sys/fs/cgroup/memory/{job.cgroup}")
    assert by_name["bad"].tier == "service" and any("gold" in e for e in result.errors)
    assert abs(svc.start_s - time.time()) < 120


def test_cpu_contention_throttles_the_batch_container(docker_client, run) -> None:
    burners = " & ".join([SPIN] * CPUS) + " & wait"
    run("batch", burners, {"kalena.naughtian.io/tier": "batch", "kalena.naughtian.io/request-cpu": str(CPUS)},
        cpu_shares=CPUS * 1024)
    svc = run("svc", SPIN, {"kalena.naughtian.io/tier": "service", "kalena.naughtian.io/request-cpu": "1"},
              nano_cpus=1_000_000_000, cpu_shares=1024)
    found = {w.name.split("-", 2)[-1]: w for w in source(docker_client, run).discover(time.time()).workloads}
    batch_cg, svc_cg = found["batch"].cgroup, found["svc"].cgroup

    def rate(cgroup: str, seconds: float) -> float:
        path = f"/sys/fs/cgroup/cpuacct/{cgroup}/cpuacct.usage"
        a, t = int(open(path).read()), time.monotonic()
        time.sleep(seconds)
        return (int(open(path).read()) - a) / (time.monotonic() - t) / 1e6

    def throttled() -> int:
        stat = dict(line.split() for line in open(f"/sys/fs/cgroup/cpu/{batch_cg}/cpu.stat").read().splitlines())
        return int(stat["nr_throttled"])

    time.sleep(1.0)
    before_svc, before_batch, before_throttled = rate(svc_cg, 2.0), rate(batch_cg, 1.0), throttled()
    capacity = CPUS * 1000.0 - 500.0                             # the machine less 0.5 core of system reserve
    agent = RunningAgent(sources=[source(docker_client, run)], node_cgroup=run.parent, cpu_mcpu=capacity,
                         policy=Policy().with_estimator(grace_s=0.0), docker_client=docker_client)
    try:
        expected = round((capacity - 1000.0) / 1000.0 * 100_000)   # C − the service's 1-core claim
        quota = f"/sys/fs/cgroup/cpu/{batch_cg}/cpu.cfs_quota_us"
        assert wait_for(lambda: int(open(quota).read()) == expected, 60), open(quota).read()
        time.sleep(1.0)
        after_svc, after_batch = rate(svc_cg, 2.0), rate(batch_cg, 1.0)
    finally:
        agent.stop()
    assert throttled() > before_throttled
    assert after_svc / (after_svc + after_batch) > 1.15 * before_svc / (before_svc + before_batch)
    assert agent.actions("evict") == [] and svc.reload() is None and svc.status == "running"


def test_memory_pressure_evicts_the_lowest_priority_container(docker_client, run) -> None:
    fill = "dd if=/dev/zero of=/dev/shm/fill bs=1M count=80 2>/dev/null; echo filled; exec sleep 3600"
    common = {"kalena.naughtian.io/tier": "batch", "kalena.naughtian.io/request-memory": "64Mi",
              "kalena.naughtian.io/termination-grace-seconds": "20"}
    low = run("low", fill, {**common, "kalena.naughtian.io/priority": "0"}, mem_limit="128m", shm_size="100m",
              restart_policy={"Name": "always"})
    high = run("high", fill, {**common, "kalena.naughtian.io/priority": "5"}, mem_limit="128m", shm_size="100m")
    svc = run("svc", "exec sleep 3600", {"kalena.naughtian.io/tier": "service", "kalena.naughtian.io/request-memory": "16Mi"},
              mem_limit="32m")
    for container in (low, high):
        assert wait_for(lambda c=container: b"filled" in c.logs(), 30)
    # working sets ≈ 80 MiB of shm each (+ a little), at the worked examples' μ 1.15 (tests/worked.py):
    # Σ r ≈ 1.15 × 82 × 2 + 16 ≈ 205 MiB > C = 160 MiB,
    # working set ≈ 165 ≥ 0.95 × 160: evict; after the priority-0 container Σ r ≈ 110 ≤ 160: one victim
    agent = RunningAgent(sources=[source(docker_client, run)], node_cgroup=run.parent, ram_bytes=160 * MIB,
                         policy=WORKED_POLICY.with_eviction(min_run_time_s=0.0), docker_client=docker_client)
    try:
        def exited(container) -> bool:
            container.reload()
            return container.status == "exited"

        assert wait_for(lambda: exited(low), 60), "the priority-0 container was not evicted"
        time.sleep(3.0)
        assert exited(low), "a restart policy brought the victim back"
        assert low.attrs["HostConfig"]["RestartPolicy"]["Name"] == "no"
        high.reload()
        svc.reload()
        assert high.status == "running" and svc.status == "running"
        evictions = agent.actions("evict")
        assert [a["workload"]["name"].split("-", 2)[-1] for a in evictions] == ["low"]
        assert evictions[0]["reason"] == "priority" and evictions[0]["result"]["ok"]
    finally:
        agent.stop()


def test_docker_stats_collector_on_a_real_container(docker_client, run) -> None:
    run("busy", SPIN, {"kalena.naughtian.io/tier": "batch"}, nano_cpus=500_000_000)
    (workload,) = source(docker_client, run).discover(time.time()).workloads
    collector = DockerStatsCollector(docker_client)
    try:
        result = collector.collect([workload], time.time())
    finally:
        collector.close()
    sample = result.samples[workload.id]
    assert not result.failures and abs(sample.ts_s - time.time()) < 30
    assert 100 < sample.usage[CPU] < 800                           # limited to 0.5 core by NanoCpus
    assert sample.usage[RAM] > 0 and sample.cpu_throttling is not None and sample.cpu_throttling.nr_periods > 0
