"""Real processes in real cgroup v1 groups on this kernel (PSI from the v2 hierarchy beside
them): cpu contention is throttled (nr_throttled grows, the service's share recovers), memory
pressure kills the right real process (limit breach, then priority; one victim when it frees
enough), and the kernel's PSI triggers and eventfd thresholds fire. Assertions are relative or
exact decisions, with generous timeouts for a busy 2-cpu machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from agents.bench.harness import BURNER, SPINNER, memory_hog
from agents.cgroups.backend import detect
from agents.enforcer import Enforcer
from agents.model import KIND_PROCESS, Workload
from agents.pressure.arming import SignalArming
from agents.pressure.monitor import MemoryThreshold, PressureMonitor, PsiTrigger
from agents.settings import LoopSettings
from kalena_engine.resources import zeros
from tests.agents.realagent import RunningAgent, wait_for, write_workloads
from tests.worked import WORKED_POLICY

pytestmark = pytest.mark.cgroup
MIB = 2**20
CPUS = os.cpu_count() or 1


def throttling(harness, name: str) -> tuple[int, int]:
    stat = dict(line.split() for line in harness.read("cpu", name, "cpu.stat").splitlines())
    return int(stat["nr_periods"]), int(stat["nr_throttled"])


def rate_mcpu(harness, name: str, seconds: float) -> float:
    a, t = harness.cpu_usage_ns(name), time.monotonic()
    time.sleep(seconds)
    return (harness.cpu_usage_ns(name) - a) / (time.monotonic() - t) / 1e6


def test_cpu_contention_throttles_batch_and_the_service_share_recovers(harness, tmp_path) -> None:
    harness.create("", cpu_shares=8192)
    # cpu.shares from requests as the kubelet sets them: batch placed into slack asks for the whole node
    harness.create("batch", cpu_shares=CPUS * 1024)
    harness.create("service", cpu_shares=1024)
    service = harness.spawn("service", SPINNER)
    for _ in range(CPUS):
        harness.spawn("batch", BURNER)
    time.sleep(0.5)
    service.send_signal(signal.SIGUSR1)                            # the service wants one full cpu
    time.sleep(1.0)
    contended = rate_mcpu(harness, "service", 2.0)
    contended_batch = rate_mcpu(harness, "batch", 1.0)
    before = throttling(harness, "batch")
    source = write_workloads(tmp_path / "w.json", [
        {"id": "svc", "cgroup": harness.rel("service"), "labels": {"kalena.naughtian.io/tier": "service"},
         "requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
        {"id": "job", "cgroup": harness.rel("batch"), "labels": {"kalena.naughtian.io/tier": "batch"},
         "requests": {"cpu": f"{CPUS}"}}])
    # C = the machine less 0.5 core of system reserve (post-Phase-0 capacity)
    capacity = CPUS * 1000.0 - 500.0
    agent = RunningAgent(sources=[source], node_cgroup=harness.rel(""), cpu_mcpu=capacity,
                         policy=WORKED_POLICY.with_estimator(grace_s=0.0))
    try:
        # the service's claim is its 1-core request/limit: batch gets C − 1 core (0.5 core on 2 cpus),
        # less than the cpu the service leaves free, so CFS must throttle it
        expected = round((capacity - 1000.0) / 1000.0 * 100_000)
        assert wait_for(lambda: int(harness.read("cpu", "batch", "cpu.cfs_quota_us")) == expected, 60), \
            f"batch quota {harness.read('cpu', 'batch', 'cpu.cfs_quota_us').strip()} != {expected}"
        time.sleep(1.0)
        relieved = rate_mcpu(harness, "service", 2.0)
        relieved_batch = rate_mcpu(harness, "batch", 1.0)
    finally:
        agent.stop()
    periods, throttled = throttling(harness, "batch")
    assert throttled > before[1] and periods > before[0]            # CFS throttled the batch group
    share_before = contended / (contended + contended_batch)
    share_after = relieved / (relieved + relieved_batch)
    assert share_after > share_before * 1.15, (contended, contended_batch, relieved, relieved_batch)
    throttles = agent.actions("throttle")
    assert throttles and all(a["workload"]["id"] == "job" for a in throttles)
    assert agent.actions("evict") == []                             # cpu contention never evicts (C6)


def throttled_time_ns(harness, name: str) -> int:
    stat = dict(line.split() for line in harness.read("cpu", name, "cpu.stat").splitlines())
    return int(stat["throttled_time"])


def test_anti_starvation_caps_the_service_from_real_throttled_time_and_holds_the_cap(harness, tmp_path) -> None:
    window_s = 8.0
    # the largest cpu weight v1 allows for the test's groups, so both burners get cpu on a loaded machine
    # (at load 12 a group of weight 2 never ran and was never throttled)
    harness.create("", cpu_shares=262144)
    harness.create("batch", cpu_shares=262144)
    harness.create("service", cpu_shares=262144)
    for _ in range(2):
        harness.spawn("batch", BURNER)       # batch wants two cpus; its quota is min_batch_cpu (0.1 core)
    harness.spawn("service", BURNER)         # the service wants a whole cpu and requests 0.05 core
    source = write_workloads(tmp_path / "w.json", [
        {"id": "svc", "cgroup": harness.rel("service"), "labels": {"kalena.naughtian.io/tier": "service"},
         "requests": {"cpu": "50m"}, "limits": {"cpu": "2"}},
        {"id": "job", "cgroup": harness.rel("batch"), "labels": {"kalena.naughtian.io/tier": "batch"},
         "requests": {"cpu": "500m"}}])
    # C = 0.3 core: once the service's reservation passes 0.2 core, B = min_batch_cpu = 0.1 core whatever
    # else the machine runs, so CFS throttles batch. Contention marks (which exempt a stalled service from
    # caps) are off: this test is about the cap
    agent = RunningAgent(sources=[source], node_cgroup=harness.rel(""), cpu_mcpu=300.0, pressure_source="eventfd",
                         cpu_poll=False, policy=WORKED_POLICY.with_estimator(grace_s=0.0).with_eviction(
                             starvation_window_s=window_s))
    try:
        before = throttled_time_ns(harness, "batch")
        assert wait_for(lambda: agent.actions("starvation_cap"), 90), \
            f"no cap; batch throttled {(throttled_time_ns(harness, 'batch') - before) / 1e9:.1f} s"
        (cap,) = agent.actions("starvation_cap")[:1]
        numbers = cap["numbers"]
        # the decision came from throttled time the kernel counted: more than θ = 50 % of the window
        assert numbers["throttled_ratio"]["job"] > 0.5 and numbers["starving_batch"] == ["job"]
        assert (throttled_time_ns(harness, "batch") - before) / 1e9 > 0.5 * window_s
        assert cap["workload"]["id"] == "svc" and numbers["cap_mcpu"] >= 50.0
        assert numbers["cap_mcpu"] == pytest.approx(numbers["usage_mcpu"] - 100.0)   # releases min_batch_cpu
        # held for at least the window: the real quota stays written (or deepens), never back to -1
        end = time.monotonic() + window_s
        while time.monotonic() < end:
            quota = int(harness.read("cpu", "service", "cpu.cfs_quota_us"))
            assert quota != -1 and quota <= numbers["quota_us"], quota
            time.sleep(0.25)
        assert agent.actions("starvation_release") == []
        # CFS enforces it: the service never gets more than its cap (an upper bound, whatever the load)
        quota = int(harness.read("cpu", "service", "cpu.cfs_quota_us"))
        assert rate_mcpu(harness, "service", 2.0) <= quota / 100.0 * 1.1 + 20.0
    finally:
        agent.stop()
    assert agent.actions("evict") == []


def test_memory_pressure_kills_the_limit_breach_first_then_the_lowest_priority(harness, tmp_path) -> None:
    # node capacity 200 MiB; every hog touches 64 MiB (+ its interpreter, ~70-80 MiB working set)
    def entry(name: str, tier: str, prio: int, requests: dict, limits: dict, slack: str = "deny") -> dict:
        return {"id": name, "cgroup": harness.rel(name), "labels": {"kalena.naughtian.io/tier": tier},
                "annotations": {"kalena.naughtian.io/priority": str(prio), "kalena.naughtian.io/slack-memory": slack},
                "requests": requests, "limits": limits, "termination_grace_period_seconds": 5}

    procs = {}
    entries = [entry("svc", "service", 0, {"memory": "40Mi"}, {"memory": "40Mi"}),       # uses ~74 > 40: breach
               entry("b0", "batch", 0, {"memory": "80Mi"}, {"memory": "128Mi"}, "allow"),
               entry("b5", "batch", 5, {"memory": "96Mi"}, {"memory": "128Mi"})]
    for e in entries:
        harness.create(e["id"])
        procs[e["id"]] = harness.spawn(e["id"], memory_hog(64), stdout=subprocess.PIPE)
    for proc in procs.values():
        assert proc.stdout.readline().strip() == b"ready"
    path = tmp_path / "w.json"
    source = write_workloads(path, entries)
    agent = RunningAgent(sources=[source], node_cgroup=harness.rel(""), ram_bytes=200 * MIB,
                         policy=WORKED_POLICY.with_eviction(min_run_time_s=0.0))
    try:
        # Σ r ≈ 40 (svc, capped at its limit) + 85 + 96 > 200 with ≈ 220 MiB in use: the breach goes first
        assert wait_for(lambda: procs["svc"].poll() is not None, 60), "the limit-breaching service was not evicted"
        first = agent.actions("evict")
        assert [(a["workload"]["id"], a["reason"]) for a in first] == [("svc", "limit_breach")]
        # after svc, Σ r ≈ 181 ≤ 200: a single victim was enough
        time.sleep(2.0)
        assert procs["b0"].poll() is None and procs["b5"].poll() is None and len(agent.actions("evict")) == 1
        # v1 caps: b5 (slack-memory denied) at its request, b0 (allowed) at its limit
        assert int(harness.read("memory", "b5", "memory.limit_in_bytes")) == 96 * MIB
        assert int(harness.read("memory", "b0", "memory.limit_in_bytes")) == 128 * MIB
        # a new batch workload (priority 9) brings pressure back: the lowest priority goes, even though older
        harness.create("b9")
        procs["b9"] = harness.spawn("b9", memory_hog(64), stdout=subprocess.PIPE)
        assert procs["b9"].stdout.readline().strip() == b"ready"
        entries = [e for e in entries if e["id"] != "svc"] + [entry("b9", "batch", 9, {"memory": "80Mi"},
                                                                    {"memory": "128Mi"}, "allow")]
        path.write_text(json.dumps({"workloads": entries}))
        os.utime(path, ns=(time.time_ns() + 10**9,) * 2)
        assert wait_for(lambda: procs["b0"].poll() is not None, 60), "the lowest-priority batch was not evicted"
        time.sleep(2.0)
        evictions = agent.actions("evict")
        assert [(a["workload"]["id"], a["reason"]) for a in evictions] == [("svc", "limit_breach"), ("b0", "priority")]
        assert procs["b5"].poll() is None and procs["b9"].poll() is None
    finally:
        agent.stop()


def test_psi_trigger_fires_on_real_cpu_stall(harness) -> None:
    harness.create("burn", cpu_shares=4096)
    harness.create("victim", cpu_shares=2)
    victim = harness.spawn("victim", SPINNER)
    fs = detect("/sys/fs/cgroup")
    monitor = PressureMonitor()
    try:
        trigger = PsiTrigger(fs.pressure_file(harness.rel("victim"), "cpu"), resource="cpu", scope="victim",
                             stall="some", threshold_us=100_000, window_us=2_000_000, arm=Enforcer(fs))
        monitor.add("cpu:victim", trigger)
        assert monitor.wait(3.0) == []                             # a quiet group: no event (and a settled trigger)
        for _ in range(CPUS + 1):
            harness.spawn("burn", BURNER)
        victim.send_signal(signal.SIGUSR1)
        events = []
        end = time.monotonic() + 20
        while not events and time.monotonic() < end:
            events = monitor.wait(1.0)
        assert events and events[0].source == "psi-trigger" and events[0].scope == "victim"
        assert trigger.ignored == 1                                 # the first event of a fresh trigger is dropped
    finally:
        monitor.close()


def test_psi_window_the_kernel_refuses_falls_back_to_poll(harness) -> None:
    fs = detect("/sys/fs/cgroup")
    harness.create("svc")
    settings = LoopSettings(node_name="n", capacity=np.full(8, np.inf), psi_window_s=1.5)
    monitor = PressureMonitor()
    try:
        w = Workload("svc", "svc", KIND_PROCESS, "service", 0, zeros(), zeros(), 0.0, 30.0, harness.rel("svc"))
        arming = SignalArming(settings, monitor, Enforcer(fs), fs)
        arming.sync([w])
        assert arming.in_use["cpu"] == ["poll"]                     # 1.5 s is not a multiple of 2 s here
        assert any("EINVAL" in f or "Invalid argument" in f for f in arming.failures)
    finally:
        monitor.close()


def test_eventfd_threshold_fires_at_the_crossing(harness) -> None:
    harness.create("mem")
    fs = detect("/sys/fs/cgroup")
    files = fs.memory_threshold_files(harness.rel("mem"))
    usage = int(files[0].read_text())
    threshold = usage + 32 * MIB
    monitor = PressureMonitor()
    try:
        monitor.add("t", MemoryThreshold(files[0], files[1], threshold, scope="mem", arm=Enforcer(fs)))
        assert monitor.wait(0.5) == []
        hog = harness.spawn("mem", memory_hog(64), stdout=subprocess.PIPE)
        events = []
        end = time.monotonic() + 20
        while not events and time.monotonic() < end:
            events = monitor.wait(1.0)
        assert events and events[0].source == "eventfd-threshold"
        assert events[0].detail["usage_bytes"] >= threshold
        assert hog.stdout.readline().strip() == b"ready"
    finally:
        monitor.close()
