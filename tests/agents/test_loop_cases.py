"""The mitigation loop against a temp-dir cgroup v2 tree with real processes, time driven by
hand: cases C6 (exact quota, throttle never evicts), C4 (one eviction, the victim credited
through its grace, SIGKILL at its end), C1 (stale samples never start an eviction), the
limit-breach override, memory.high, anti-starvation and DaemonSets."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kubernetes import client as k8s

from agents.cgroups.backend import CgroupV2
from agents.collectors.kubelet import KubeletClient, KubeletTelemetry
from agents.discovery.kubelet import KubeletSource
from agents.enforcer import Enforcer
from agents.link.protocol import validate_agent_message
from agents.loop import MitigationLoop
from agents.settings import LoopSettings
from tests.agents.conftest import make_v2_tree
from tests.agents.rig import GIB, STUBBORN, Rig
from tests.worked import WORKED_POLICY

T0 = 1_000_000.0


@pytest.fixture
def rig(tmp_path):
    r = Rig(tmp_path, capacity={"cpu": 4000.0, "ram": 64 * GIB})
    yield r
    r.close()




def _batch_throttled_to_40000(rig, annotations: dict | None = None):
    """A 3.6-core service and a 1-core batch pod on 4 cores; after 10 s the service used 3.2 cores:
    r_S = min(3.6, 1.15 × 3.2 = 3.68) = 3.6 → B = max(0.1, 4 − 3.6) = 0.4 core, quota 40,000 µs."""
    rig.add("s", tier="service", requests={"cpu": "3600m"}, limits={"cpu": "3600m"}, start_time=T0 - 10_000)
    rig.add("b", tier="batch", requests={"cpu": "1"}, limits={"cpu": "1"}, start_time=T0 - 10_000,
            annotations=annotations)
    loop = rig.build()
    loop.tick(T0, 0.0)
    rig.set_files("s", usage_usec=32_000_000, procs=f"{rig.procs['s'].pid}\n")
    rig.set_files("b", usage_usec=10_000_000, procs=f"{rig.procs['b'].pid}\n", cpu_max=rig.file("b", "cpu.max"))
    loop.tick(T0 + 10, 10.0)
    assert rig.file("b", "cpu.max") == "40000 100000"
    return loop


@pytest.mark.parametrize(("slack", "final_quota"), [
    pytest.param("deny", 100_000, id="C6: quota rises with the budget up to B's 1-core limit"),
    pytest.param("allow", 100_000, id="C6 as written (slack-cpu allowed): the declared 1-core limit still binds"),
])
def test_case_c6_cpu_contention_throttles_with_the_exact_quota_and_never_evicts(rig, slack: str, final_quota: int) -> None:
    loop = _batch_throttled_to_40000(rig, {"kalena.naughtian.io/slack-cpu": slack})
    assert rig.file("b", "cpu.max") == "40000 100000"
    quotas = [40_000]
    # S falls back to 1 core: r_S decays with h = 600 s toward 1.15 cores, B's quota rises with the budget
    usage_s, usage_b = 32_000_000, 10_000_000
    for step in range(1, 61):
        usage_s += 60 * 1_000_000
        usage_b += 60 * 1_000_000
        rig.set_files("s", usage_usec=usage_s, procs=f"{rig.procs['s'].pid}\n")
        rig.set_files("b", usage_usec=usage_b, procs=f"{rig.procs['b'].pid}\n", cpu_max=rig.file("b", "cpu.max"))
        loop.tick(T0 + 10 + 60 * step, 10.0 + 60 * step)
        quotas.append(int(rig.file("b", "cpu.max").split()[0]))
        if step == 1:
            # r_S = 1.15 + (3.6 − 1.15) · 2^(−60/600) = 3.436 → B = 0.564 core → 56,400 µs
            assert quotas[-1] == round((4000 - (1150 + 2450 * 2 ** (-0.1))) * 100)
    assert quotas == sorted(quotas)
    # increases smaller than the 2 % hysteresis wait; reaching the limit is written exactly
    assert quotas[-1] == final_quota  # reaching the limit is written exactly
    assert rig.actions("evict") == [] and rig.alive("b")
    for message in rig.messages:
        validate_agent_message({**message, "batch_id": "node-t:1"})


def test_a_batch_pod_whose_group_is_gone_is_not_throttled_again_every_tick(rig, monkeypatch) -> None:
    from agents.enforcer import Applied

    # the pod ended and the runtime removed its group while the kubelet still lists it (the lab saw
    # 473 failed quota writes, a failed "throttle" every tick for 4–13 s after a pod finished)
    loop = _batch_throttled_to_40000(rig)
    assert rig.file("b", "cpu.max") == "40000 100000"
    before = len(rig.actions("throttle"))
    # from here b's group is gone for the writer (ENOENT) though its row is still listed
    exists, write = rig.fs.exists, rig.enforcer.set_cpu_quota
    writes = []

    def gone_write(workload, quota_us, period_us):
        if workload.id != "b":
            return write(workload, quota_us, period_us)
        writes.append(quota_us)
        return Applied(False, "cpu_quota", (), "kubepods/b/cpu.max: No such file or directory", 0.0, 0.0)

    monkeypatch.setattr(rig.fs, "exists", lambda rel: False if rel == "kubepods/b" else exists(rel))
    monkeypatch.setattr(rig.enforcer, "set_cpu_quota", gone_write)
    usage_s, usage_b = 32_000_000, 10_000_000
    for step in range(1, 6):            # production falls back: b's share rises each tick
        usage_s += 60 * 1_000_000
        usage_b += 60 * 1_000_000
        rig.set_files("s", usage_usec=usage_s, procs=f"{rig.procs['s'].pid}\n")
        rig.set_files("b", usage_usec=usage_b, procs=f"{rig.procs['b'].pid}\n")
        loop.tick(T0 + 10 + 60 * step, 10.0 + 60 * step)
    assert len(writes) >= 2                                   # a new share is still tried when it changes
    assert [a for a in rig.actions("throttle")[before:] if a["workload"]["id"] == "b"] == []


def test_case_c4_terminating_victim_is_credited_exactly_one_eviction(rig) -> None:
    # C = 64 GiB; P 59.25 (its limit; 1.15 × 53.75 = 61.8) + V 5.75 (= 1.15 × 5 working set) + W 3 = 68 GiB
    # of reservations; the node's working set 53.75 + 5 + 3 = 61.75 GiB ≥ 0.95 × 64 = 60.8 (pressure, not
    # acute: < 0.99 × 64 = 63.36, so V keeps its full 30 s grace)
    rig.set_files("", memory_bytes=int(61.75 * GIB))
    rig.add("p", tier="service", requests={"memory": f"{int(59.25 * 1024)}Mi"}, limits={"memory": f"{int(59.25 * 1024)}Mi"},
            start_time=T0 - 10_000, memory_bytes=int(53.75 * GIB))
    rig.add("v", tier="batch", priority=0, requests={"memory": "5Gi"}, limits={"memory": "8Gi"}, grace_s=30,
            start_time=T0 - 10_000, code=STUBBORN, memory_bytes=5 * GIB)
    rig.add("w", tier="batch", priority=1, requests={"memory": "3Gi"}, limits={"memory": "3Gi"},
            start_time=T0 - 10_000, memory_bytes=3 * GIB)
    loop = rig.build()
    for second in range(31):                                   # the loop runs every 1 s while pressure persists
        loop.tick(T0 + second, float(second))
        if second < 30:
            assert rig.alive("v"), "V ignores SIGTERM and stays alive through its 30 s grace"
    (evict,) = rig.actions("evict")
    assert evict["workload"]["id"] == "v" and evict["reason"] == "priority"
    assert evict["numbers"]["ledger_before"] == pytest.approx(68 * GIB)
    assert evict["numbers"]["ledger_after"] == pytest.approx(62.25 * GIB)   # 68 − 5.75 ≤ 64: W is covered
    (kill,) = rig.actions("kill")
    assert kill["workload"]["id"] == "v" and kill["ts"] == T0 + 30
    rig.procs["v"].wait(10)
    assert not rig.alive("v") and rig.alive("w") and rig.alive("p")


def test_limit_breach_override_takes_the_service_first(tmp_path) -> None:
    rig = Rig(tmp_path, capacity={"cpu": 4000.0, "ram": 2.5 * GIB})
    try:
        rig.set_files("", memory_bytes=int(2.5 * GIB))
        # S declares a 1 GiB limit (not enforced by a cgroup limit) and uses 1.5 GiB: limit breach
        rig.add("s", tier="service", requests={"memory": "1Gi"}, limits={"memory": "1Gi"}, start_time=T0 - 10_000,
                memory_bytes=int(1.5 * GIB))
        rig.add("b0", tier="batch", priority=0, requests={"memory": "1Gi"}, limits={"memory": "1Gi"},
                start_time=T0 - 10_000, memory_bytes=GIB // 2)
        rig.add("b5", tier="batch", priority=5, requests={"memory": "1Gi"}, limits={"memory": "1Gi"},
                start_time=T0 - 10_000, memory_bytes=GIB // 2)
        loop = rig.build()
        loop.tick(T0, 0.0)
        # Σ r = 1 (S, capped at its limit) + 1 + 1 = 3 GiB > 2.5: S goes first and 3 − 1 = 2 ≤ 2.5 stops
        (evict,) = rig.actions("evict")
        assert (evict["workload"]["id"], evict["reason"]) == ("s", "limit_breach")
        rig.procs["s"].wait(10)
        assert rig.alive("b0") and rig.alive("b5")
    finally:
        rig.close()


@pytest.mark.parametrize("limit_ratio", [
    pytest.param(1.0, id="no limit declared: L = q"),
    pytest.param(1.25, id="no limit declared: L = 1.25 × q (policy limit ratio)"),
])
def test_limit_breach_override_uses_the_estimators_limit_when_none_is_declared(tmp_path, limit_ratio: float) -> None:
    rig = Rig(tmp_path, capacity={"cpu": 4000.0, "ram": 2.95 * GIB},
              policy=WORKED_POLICY.with_estimator(limit_ratio=limit_ratio))
    try:
        rig.set_files("", memory_bytes=int(2.85 * GIB))          # ≥ 0.95 × C: pressure (not acute)
        # S1 requests 1 GiB, declares no limit and uses 1.5 GiB > L (1 or 1.25 GiB): a breach;
        # S2 requests 1 GiB, no limit, uses 0.9 GiB: within L
        rig.add("s1", tier="service", requests={"memory": "1Gi"}, start_time=T0 - 10_000, memory_bytes=int(1.5 * GIB))
        rig.add("s2", tier="service", requests={"memory": "1Gi"}, start_time=T0 - 10_000, memory_bytes=int(0.9 * GIB))
        rig.add("b0", tier="batch", priority=0, requests={"memory": "1Gi"}, limits={"memory": "1Gi"},
                start_time=T0 - 10_000, memory_bytes=GIB // 2)
        loop = rig.build()
        loop.tick(T0, 0.0)
        # Σ r = L_S1 (τ = 1.15 × 1.5 capped at L) + min(L, 1.15 × 0.9) (S2) + 1 (B0, r = q on its first sample)
        #     = 3 or 3.285 GiB > 2.95: S1 goes first, and then Σ r ≤ 2.95 stops
        (evict,) = rig.actions("evict")
        assert (evict["workload"]["id"], evict["reason"]) == ("s1", "limit_breach")
        assert evict["numbers"]["limit"] == pytest.approx(limit_ratio * GIB)
        rig.procs["s1"].wait(10)
        assert rig.alive("s2") and rig.alive("b0")
    finally:
        rig.close()


def test_one_stale_workload_does_not_disarm_the_node(tmp_path) -> None:
    # C = 10 GiB, T_stale = max(60 s, 3 × 10 s) = 60 s. P (service, 6 GiB request) uses 5.8 → r = 6 (its L);
    # B1 (priority 1, 3 GiB) uses 3 → r = 3; B2 (priority 0, 2 GiB) reports 1 GiB at t = 0 and then its
    # samples stop (its memory.stat turns unreadable), so at t = 90 it reads max(r, q) = 2
    rig = Rig(tmp_path, capacity={"cpu": 4000.0, "ram": 10 * GIB})
    try:
        rig.set_files("", memory_bytes=int(8.0 * GIB))
        rig.add("p", tier="service", requests={"memory": "6Gi"}, start_time=T0 - 10_000, memory_bytes=int(5.8 * GIB))
        rig.add("b1", tier="batch", priority=1, requests={"memory": "3Gi"}, limits={"memory": "3Gi"},
                start_time=T0 - 10_000, memory_bytes=3 * GIB)
        rig.add("b2", tier="batch", priority=0, requests={"memory": "2Gi"}, limits={"memory": "2Gi"},
                start_time=T0 - 10_000, memory_bytes=GIB)
        loop = rig.build()
        loop.tick(T0, 0.0)                                 # 8 GiB in use < 0.95 × C: no pressure yet
        assert rig.actions("evict") == []
        rig.set_file("b2", "memory.stat", "anon not-a-number\n")
        rig.set_files("", memory_bytes=int(9.8 * GIB))      # fresh pressure: 9.8 ≥ 0.95 × 10, not acute
        loop.tick(T0 + 90, 90.0)
        # Σ r = 6 + 3 + 2 (B2 held at max(r, q)) = 11 > 10: decided on the fresh workloads — B2, stale, is
        # never chosen even though its priority is lowest; B1 goes and 11 − 3 = 8 ≤ 10 stops
        (evict,) = rig.actions("evict")
        assert (evict["workload"]["id"], evict["reason"]) == ("b1", "priority")
        assert evict["numbers"]["ledger_before"] == pytest.approx(11 * GIB)
        assert evict["numbers"]["held_stale"] == ["b2"] and evict["numbers"]["sample_age_s"] <= 60
        assert rig.actions("hold") == []
        rig.procs["b1"].wait(10)
        assert rig.alive("b2") and rig.alive("p")
    finally:
        rig.close()


def test_batch_memory_caps_on_cgroup_v2(rig) -> None:
    rig.add("b", tier="batch", requests={"memory": "64Mi"}, limits={"memory": "128Mi"})
    rig.add("b-slack", tier="batch", requests={"memory": "64Mi"}, limits={"memory": "128Mi"},
            annotations={"kalena.naughtian.io/slack-memory": "allow"})
    rig.add("s", tier="service", requests={"memory": "64Mi"}, limits={"memory": "128Mi"})
    rig.build().tick(T0, 0.0)
    assert (rig.file("b", "memory.high"), rig.file("b", "memory.max")) == (str(64 * 2**20), str(128 * 2**20))
    assert (rig.file("b-slack", "memory.high"), rig.file("b-slack", "memory.max")) == (str(128 * 2**20),) * 2
    assert (rig.file("s", "memory.high"), rig.file("s", "memory.max")) == ("max", "max")   # services untouched


def test_daemonsets_are_never_touched(rig) -> None:
    rig.set_files("", memory_bytes=63 * GIB)
    rig.add("ds", tier="batch", daemonset=True, requests={"memory": "1Gi", "cpu": "1"}, limits={"memory": "1Gi"},
            start_time=T0 - 10_000, memory_bytes=20 * GIB)
    rig.add("s", tier="service", requests={"memory": "60Gi"}, limits={"memory": "60Gi"}, start_time=T0 - 10_000,
            memory_bytes=43 * GIB)
    rig.add("b", tier="batch", requests={"memory": "10Gi", "cpu": "1"}, start_time=T0 - 10_000)
    rig.build().tick(T0, 0.0)
    touched = {a["workload"]["id"] for a in rig.actions() if a["workload"]}
    assert "ds" not in touched and rig.file("ds", "cpu.max") == "max 100000" and rig.alive("ds")
    assert [a["workload"]["id"] for a in rig.actions("evict")] == ["b"]


def test_a_daemonsets_request_is_taken_from_the_capacity_the_eviction_ledger_reads(rig) -> None:
    # 64 GiB node, --reserved 0; a DaemonSet requests and uses 8 GiB, production 40 of 40, batch
    # requests 18 and uses 14: Σ r = 58 GiB fits 64 but not C = 64 − 8 = 56, the capacity the
    # console's ledger placed against. The node reads 62 GiB; less the DaemonSet's 8 inside its
    # request that is 54 GiB ≥ 0.95 × 56: batch goes now, not once production has grown 2 GiB more
    # and the kernel kills at 64.
    rig.set_files("", memory_bytes=62 * GIB)
    rig.add("ds", tier="service", daemonset=True, requests={"memory": "8Gi"}, limits={"memory": "8Gi"},
            start_time=T0 - 10_000, memory_bytes=8 * GIB)
    rig.add("s", tier="service", requests={"memory": "40Gi"}, limits={"memory": "40Gi"}, start_time=T0 - 10_000,
            memory_bytes=40 * GIB)
    rig.add("b", tier="batch", requests={"memory": "18Gi"}, start_time=T0 - 10_000, memory_bytes=14 * GIB)
    loop = rig.build()
    loop.tick(T0, 0.0)
    assert loop.node_capacity()[1] == 56 * GIB
    evicted = rig.actions("evict")
    assert [a["workload"]["id"] for a in evicted] == ["b"]
    numbers = evicted[0]["numbers"]
    assert (numbers["capacity"], numbers["working_set"], numbers["node_working_set"]) == (56 * GIB, 54 * GIB, 62 * GIB)
    assert (numbers["ledger_before"], numbers["ledger_after"]) == (58 * GIB, 40 * GIB)
    assert rig.alive("ds") and rig.alive("s")


def _cap_mcpu(cpu_max: str) -> float:
    quota, period = cpu_max.split()
    return math.inf if quota == "max" else int(quota) / int(period) * 1000.0


@pytest.mark.parametrize("throttled_periods_per_s", [
    pytest.param(4, id="few long throttled periods (40 % of periods, 80 % of the time)"),
    pytest.param(8, id="many throttled periods (80 % of periods and of the time)"),
])
def test_anti_starvation_caps_a_service_above_its_request_and_holds_the_cap_while_batch_starves(
        tmp_path, throttled_periods_per_s: int) -> None:
    # C = 2 cores; S requests 0.5 core and wants 1.5 cores (its reservation follows at once: 1.15 × 1.5
    # > 1.5, so S is never "above its reservation"); B is throttled 0.8 s of every second for 600 s
    rig = Rig(tmp_path, capacity={"cpu": 2000.0})
    try:
        rig.add("s", tier="service", requests={"cpu": "500m"}, limits={"cpu": "2"}, start_time=T0 - 10_000)
        rig.add("b", tier="batch", requests={"cpu": "500m"}, start_time=T0 - 10_000)
        loop = rig.build()
        usage_s = usage_b = 0
        caps: list[float] = []
        for second in range(601):
            cap = _cap_mcpu(rig.file("s", "cpu.max"))
            usage_s += int(min(1500.0, cap) * 1000)            # S gets what its quota lets it have
            usage_b += 200_000
            rig.set_files("s", usage_usec=usage_s, procs=f"{rig.procs['s'].pid}\n", cpu_max=rig.file("s", "cpu.max"))
            rig.set_files("b", usage_usec=usage_b, nr_periods=10 * second, nr_throttled=throttled_periods_per_s * second,
                          throttled_usec=800_000 * second, procs=f"{rig.procs['b'].pid}\n",
                          cpu_max=rig.file("b", "cpu.max"))
            loop.tick(T0 + second, float(second))
            caps.append(_cap_mcpu(rig.file("s", "cpu.max")))
        decisions = rig.actions("starvation_cap")
        assert decisions, "80 % of the window throttled (> θ = 50 %) must cap the service above its request"
        first = decisions[0]
        # throttled time 0.8 s/s passes θ × 60 s = 30 s at t = 38 s (38 × 0.8 = 30.4 s); usage 1.5 > q = 0.5:
        # release min_batch_cpu = 0.1 core → cap 1.4 cores
        assert first["ts"] == T0 + 38 and first["workload"]["id"] == "s"
        assert first["numbers"]["quota_us"] == 140_000 and first["numbers"]["request_mcpu"] == 500.0
        # the cap is held from then on: never released while B starves, re-decided once per 60 s window
        assert rig.actions("starvation_release") == []
        assert all(math.isfinite(c) for c in caps[38:]), "the cap lapsed while batch was still starving"
        times = [a["ts"] for a in decisions]
        assert all(b - a >= 60 for a, b in zip(times, times[1:], strict=False))
        # each re-decision releases another 0.1 core, never below S's request of 0.5 core
        assert [a["numbers"]["cap_mcpu"] for a in decisions] == pytest.approx(
            [1400.0 - 100.0 * i for i in range(len(decisions))][:len(decisions)])
        assert min(caps[38:]) >= 500.0 and len(decisions) == 10       # 1.4 … 0.5 core, t = 38 … 578
        # B stops being throttled: a window later (and after the hold) the cap is lifted
        for second in range(601, 760):
            usage_s += int(min(1500.0, _cap_mcpu(rig.file("s", "cpu.max"))) * 1000)
            rig.set_files("s", usage_usec=usage_s, procs=f"{rig.procs['s'].pid}\n", cpu_max=rig.file("s", "cpu.max"))
            rig.set_files("b", usage_usec=usage_b, nr_periods=6000, nr_throttled=600 * throttled_periods_per_s,
                          throttled_usec=800_000 * 600, procs=f"{rig.procs['b'].pid}\n",
                          cpu_max=rig.file("b", "cpu.max"))
            loop.tick(T0 + second, float(second))
        (release,) = rig.actions("starvation_release")
        assert release["numbers"]["quota_us"] is None and rig.file("s", "cpu.max") == "max 100000"
    finally:
        rig.close()


def test_anti_starvation_never_caps_a_service_within_its_request(tmp_path) -> None:
    rig = Rig(tmp_path, capacity={"cpu": 2000.0})
    try:
        rig.add("s", tier="service", requests={"cpu": "1500m"}, limits={"cpu": "2"}, start_time=T0 - 10_000)
        rig.add("b", tier="batch", requests={"cpu": "500m"}, start_time=T0 - 10_000)
        loop = rig.build()
        for second in range(120):                   # S uses 1.5 cores = its request; B throttled 80 % of the time
            rig.set_files("s", usage_usec=1_500_000 * second, procs=f"{rig.procs['s'].pid}\n")
            rig.set_files("b", usage_usec=200_000 * second, throttled_usec=800_000 * second, nr_periods=10 * second,
                          nr_throttled=8 * second, procs=f"{rig.procs['b'].pid}\n", cpu_max=rig.file("b", "cpu.max"))
            loop.tick(T0 + second, float(second))
        assert rig.actions("starvation_cap") == [] and rig.file("s", "cpu.max") == "max 100000"
    finally:
        rig.close()


def test_case_c1_stale_sample_never_starts_an_eviction(tmp_path, json_server) -> None:
    # kubelet reports the C1 node at t = 0 and then stops updating; C_ram = 128 GiB
    pods = {"kind": "PodList", "items": []}
    summary = {"node": {"nodeName": "node-c1", "memory": {"time": "", "workingSetBytes": 132 * GIB,
                                                          "psi": {"some": {"total": 1, "avg10": 30.0, "avg60": 5.0, "avg300": 1.0}}}},
               "pods": []}
    for name, tier, prio, gib_request, gib_used in (("p", "service", 0, 64, 62), ("b1", "batch", 0, 40, 40),
                                                    ("b2", "batch", 1, 30, 30)):
        pods["items"].append({
            "metadata": {"name": name, "namespace": "c1", "uid": f"uid-{name}",
                         "labels": {"kalena.naughtian.io/tier": tier},
                         "annotations": {"kalena.naughtian.io/priority": str(prio)}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": f"{gib_request}Gi"},
                                                                "limits": {"memory": f"{gib_request}Gi"}}}]},
            "status": {"phase": "Running", "qosClass": "Guaranteed", "startTime": "2024-05-01T00:00:00Z"}})
        summary["pods"].append({"podRef": {"namespace": "c1", "name": name, "uid": f"uid-{name}"},
                                "memory": {"time": "", "workingSetBytes": gib_used * GIB}})
    t_sample = 1714557600.0                                        # 2024-05-01T10:00:00Z
    stamp = "2024-05-01T10:00:00Z"
    summary["node"]["memory"]["time"] = stamp
    for pod in summary["pods"]:
        pod["memory"]["time"] = stamp
    # a pending pod (priority 5, 1 GiB) has no stats yet: it counts at its request and never makes
    # the ledger look stale
    pods["items"].append({
        "metadata": {"name": "pending", "namespace": "c1", "uid": "uid-pending",
                     "labels": {"kalena.naughtian.io/tier": "batch"}, "annotations": {"kalena.naughtian.io/priority": "5"}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"memory": "1Gi"}}}]},
        "status": {"phase": "Pending", "qosClass": "Burstable"}})
    json_server.routes["/pods"] = pods
    json_server.routes["/stats/summary"] = summary
    b1 = next(p for p in pods["items"] if p["metadata"]["name"] == "b1")
    json_server.routes["/api/v1/namespaces/c1/pods/b1/status"] = b1      # the DisruptionTarget patch
    json_server.routes["/api/v1/namespaces/c1/pods/b1"] = b1             # the delete with the grace
    capacity = [math.inf] * 8
    capacity[1] = 128 * GIB

    def make_loop(messages: list) -> MitigationLoop:
        client = KubeletClient(json_server.url)
        telemetry = KubeletTelemetry(client)
        fs = CgroupV2(make_v2_tree(tmp_path / f"cg{id(messages)}", {}))
        settings = LoopSettings(node_name="node-c1", capacity=np.array(capacity), policy=WORKED_POLICY)
        return MitigationLoop(settings, sources=[KubeletSource(client)], telemetry=telemetry, fs=fs,
                              enforcer=Enforcer(fs, kube_api=k8s.ApiClient(k8s.Configuration(host=json_server.url))),
                              node_reader=lambda now_s: telemetry.last_node, emit=messages.append)

    stale: list = []
    make_loop(stale).tick(t_sample + 90, 0.0)                     # T_stale = 60 s: the t = 0 sample is 90 s old
    assert [m for m in stale if m["type"] == "action" and m["action"] == "evict"] == []
    (hold,) = [m for m in stale if m["type"] == "action" and m["action"] == "hold"]
    assert (hold["action"], hold["reason"], hold["numbers"]["sample_age_s"]) == ("hold", "stale_sample", 90.0)
    assert not any(r[0] in ("POST", "PATCH", "DELETE") for r in json_server.requests)
    samples = [m for m in stale if m["type"] == "samples"]
    assert samples and all(s["stale"] for s in samples[0]["samples"])
    # the same sample when fresh (t = 30 s): Σ r = 64 + 40 + 30 + 1 = 135 > 128 → B1 (priority 0) alone is evicted
    fresh: list = []
    make_loop(fresh).tick(t_sample + 30, 0.0)
    evictions = [m for m in fresh if m["type"] == "action" and m["action"] == "evict"]
    assert [e["workload"]["id"] for e in evictions] == ["c1/b1"]
    assert evictions[0]["numbers"]["ledger_after"] == pytest.approx(95 * GIB)
    writes = [r for r in json_server.requests if r[0] in ("POST", "PATCH", "DELETE")]
    assert [(r[0], r[1].split("?")[0]) for r in writes] == [("PATCH", "/api/v1/namespaces/c1/pods/b1/status"),
                                                          ("DELETE", "/api/v1/namespaces/c1/pods/b1")]
    assert b'"DisruptionTarget"' in writes[0][3] and "gracePeriodSeconds=" in writes[1][1] + writes[1][3].decode()


def test_a_stalled_service_keeps_batch_held_back_while_it_stays_busy(rig) -> None:
    """Fallback for a group with an armed trigger (its PSI files are never read): the run-queue
    wait of its tasks marks it contended; batch drops to its budget and the minimum weight, and
    stays there while the service keeps using its claim; once the service quiets down batch gets
    its room and weight back."""
    rig.add("s", tier="service", requests={"cpu": "2"}, limits={"cpu": "2"}, start_time=T0 - 10_000)
    rig.add("b", tier="batch", requests={"cpu": "1"}, start_time=T0 - 10_000)
    loop = rig.build()
    loop.telemetry.exclude_psi({"s"})                    # as if a trigger were armed on s
    tid = rig.procs["s"].pid
    task = rig.proc_root / str(tid) / "task" / str(tid)
    task.mkdir(parents=True)
    usage = wait = 0

    def step(second: int, cpu_s: float, wait_s: float) -> None:
        nonlocal usage, wait
        usage, wait = usage + int(cpu_s * 1e6), wait + int(wait_s * 1e9)
        task.joinpath("schedstat").write_text(f"{usage * 1000} {wait} 10\n")
        rig.set_files("s", usage_usec=usage, procs=f"{tid}\n", cpu_max=rig.file("s", "cpu.max"))
        loop.tick(T0 + second, float(second))

    step(0, 0.1, 0.0)
    step(1, 0.1, 0.0)
    assert rig.file("b", "cpu.weight") == "100"
    step(2, 1.2, 0.4)                                    # s waits 40 % of the second: contended
    # claim max(r, q) = 2 cores → B = 4 − 2 = 2 cores; batch at the minimum weight
    assert rig.file("b", "cpu.max") == "200000 100000" and rig.file("b", "cpu.weight") == "1"
    for second in range(3, 12):
        step(second, 2.0, 0.0)                           # relieved and busy: the mark holds
    assert rig.file("b", "cpu.weight") == "1"
    for second in range(12, 16):
        step(second, 0.0, 0.0)                           # quiet: batch gets its weight back
    assert rig.file("b", "cpu.weight") == "100"
    weights = [(a["numbers"]["weight"], a["reason"], a["trigger"]["source"]) for a in rig.actions("cpu_weight")]
    assert weights == [(1, "cpu_contention", "poll"), (100, "contention_cleared", "periodic")]


def test_an_agent_without_workloads_still_reports_its_node(rig) -> None:
    """No workload on the node: every report still carries the node reading, so the control
    plane sees current telemetry and may place batch here."""
    loop = rig.build()
    loop.tick(T0, 0.0)
    (message,) = [m for m in rig.messages if m["type"] == "samples"]
    assert message["samples"] == [] and message["node_sample"] is not None
    assert message["node_sample"]["ts"] == T0


def test_the_agent_estimate_honours_the_startup_grace_override(rig) -> None:
    """docs/design.md §5: ``kalena.naughtian.io/startup-grace-s`` replaces the policy's grace g for one
    workload, in the agent's own estimate as in the control plane's (one reading:
    :func:`kalena_engine.overrides.workload_overrides`)."""
    start = T0 - 60.0          # 60 s old at the first tick: inside the policy's 300 s grace
    for name, annotations in (("policy-grace", {}), ("no-grace", {"kalena.naughtian.io/startup-grace-s": "0"}),
                              ("grace-90", {"kalena.naughtian.io/startup-grace-s": "90"})):
        rig.add(name, tier="service", requests={"memory": "2Gi"}, limits={"memory": "4Gi"}, start_time=start,
                annotations=annotations, memory_bytes=GIB // 2)
    loop = rig.build()
    for step in range(5):      # samples at T0 … T0 + 40 s, 10 s apart
        loop.tick(T0 + 10.0 * step, 10.0 * step)
    r = {wid: loop.table.res.value[row, 1] for row, wid in enumerate(loop.table.ids)}
    q, tau = 2.0 * GIB, 1.15 * 0.5 * GIB                    # τ = μ·u = 1.15 × 0.5 GiB
    h = rig.settings.policy.estimator.half_life_s
    # in the policy's grace (g = 300 s, 100 s old): r = max(q, τ) = q
    assert r["policy-grace"] == pytest.approx(q)
    # g = 0: no grace, r decays from q since the first sample at T0: Δt = 40 s
    assert r["no-grace"] == pytest.approx(tau + (q - tau) * 2 ** (-40.0 / h))
    # g = 90 s: grace ended at T0 + 30 s, the decay runs from there: Δt = 10 s
    assert r["grace-90"] == pytest.approx(tau + (q - tau) * 2 ** (-10.0 / h))
    reported = {s["workload"]: s["reservation"]["ram_bytes"]
                for s in [m for m in rig.messages if m["type"] == "samples"][-1]["samples"]}
    assert reported == pytest.approx(r)     # what the agent reports is this estimate


def test_a_bad_startup_grace_override_is_reported_and_the_policy_grace_kept(rig) -> None:
    rig.add("w", tier="service", requests={"memory": "2Gi"}, start_time=T0 - 60.0,
            annotations={"kalena.naughtian.io/startup-grace-s": "soon"}, memory_bytes=GIB // 2)
    loop = rig.build()
    loop.tick(T0, 0.0)
    assert loop.table.res.value[0, 1] == pytest.approx(2.0 * GIB)     # still in the policy's grace: r = q
    (workload,) = [t.workload for t in loop.table.rows()]
    assert workload.startup_grace_s is None


def test_memory_a_row_does_not_reserve_counts_and_batch_yields_to_it(rig) -> None:
    # the node's working set 62 GiB ≥ 0.95 × 64: S uses 40 (r 46), B 4, and a DaemonSet that
    # reserves nothing (no request, no limit) uses 16 — Σ r ≈ 50.6 alone fits, but 18 GiB of the
    # reading is counted by no row's r, so the ledger is ≈ 68.6 > 64: B is evicted, the DaemonSet
    # (counted, never chosen) and S are not
    rig.set_files("", memory_bytes=62 * GIB)
    rig.add("ds", tier="batch", daemonset=True, start_time=T0 - 10_000, memory_bytes=16 * GIB)
    rig.add("s", tier="service", requests={"memory": "46Gi"}, limits={"memory": "46Gi"}, start_time=T0 - 10_000,
            memory_bytes=40 * GIB)
    rig.add("b", tier="batch", requests={"memory": "4Gi", "cpu": "1"}, start_time=T0 - 10_000, memory_bytes=4 * GIB)
    rig.build().tick(T0, 0.0)
    (evict,) = rig.actions("evict")
    assert evict["workload"]["id"] == "b" and evict["numbers"]["unaccounted"] == pytest.approx(18 * GIB)
    assert evict["numbers"]["ledger_before"] > 64 * GIB and rig.alive("ds") and rig.alive("s")
