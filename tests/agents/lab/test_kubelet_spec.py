"""The kubelet double's decisions from a pod's spec (pure): QoS class, admission, cgroup values,
oom_score_adj and what a container runs — each case's arithmetic in its comment (the kubelet's
``cm/helpers_linux.go`` and ``qos/policy.go`` formulas)."""

from __future__ import annotations

import json

import pytest

from agents.lab.kubelet import spec
from agents.lab.kubelet.status import container_status, pod_phase


def pod(*containers: dict, annotations: dict | None = None) -> dict:
    return {"metadata": {"name": "p", "uid": "u1", "annotations": annotations or {}},
            "spec": {"containers": list(containers)}}


def c(requests: dict | None = None, limits: dict | None = None, **extra) -> dict:
    return {"name": extra.pop("name", "main"), "image": "x", "resources": {"requests": requests or {},
                                                                           "limits": limits or {}}, **extra}


@pytest.mark.parametrize(("case", "containers", "qos"), [
    ("nothing asked", [c()], "BestEffort"),
    ("limits only: requests default to them", [c(limits={"cpu": "1", "memory": "1Gi"})], "Guaranteed"),
    ("request below limit", [c({"cpu": "100m", "memory": "1Gi"}, {"cpu": "200m", "memory": "1Gi"})], "Burstable"),
    ("one of two containers unlimited", [c({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}),
                                         c({"cpu": "1"}, name="side")], "Burstable"),
    ("converted batch pod: only extended resources", [c({"kalena.naughtian.io/batch-cpu": "100"},
                                                        {"kalena.naughtian.io/batch-cpu": "100"})], "BestEffort"),
])
def test_qos_class(case: str, containers: list[dict], qos: str) -> None:
    assert spec.qos_class(pod(*containers)) == qos, case


@pytest.mark.parametrize(("mcpu", "shares"), [(0, 2), (1, 2), (100, 102), (250, 256), (1000, 1024)])
def test_cpu_shares(mcpu: int, shares: int) -> None:
    assert spec.cpu_shares(mcpu) == shares        # max(2, mcpu × 1024 / 1000)


@pytest.mark.parametrize(("limit", "quota"), [(None, -1), (5, 1000), (200, 20_000), (1500, 150_000)])
def test_cpu_quota(limit, quota: int) -> None:
    assert spec.cpu_quota_us(limit) == quota      # max(1000, mcpu × 100) over 100 000 µs


@pytest.mark.parametrize(("qos", "request_mib", "adj"), [
    ("Guaranteed", 64, -997), ("BestEffort", 0, 1000),
    ("Burstable", 32, 875),    # 1000 − 1000 × 32 / 256
    ("Burstable", 0, 999),     # 1000 − 0, capped at 999
    ("Burstable", 256, 2),     # 1000 − 1000 = 0, floored at 2
])
def test_oom_score_adj(qos: str, request_mib: int, adj: int) -> None:
    assert spec.oom_score_adj(qos, request_mib * 2**20, 256 * 2**20) == adj


def test_pod_plan_sums_containers_and_sets_pod_limits_only_when_every_container_has_one() -> None:
    both = spec.pod_plan(pod(c({"cpu": "100m", "memory": "32Mi"}, {"cpu": "200m", "memory": "64Mi"}),
                             c({"cpu": "50m"}, {"cpu": "100m"}, name="side")), memory_capacity_bytes=256 * 2**20)
    assert both.qos == "Burstable"
    assert both.cpu_shares == 153                 # (100 + 50) m × 1024 / 1000
    assert both.cpu_quota_us == 30_000            # (200 + 100) m × 100
    assert both.memory_limit_bytes == 0           # "side" has no memory limit: the pod has none
    assert [p.memory_limit_bytes for p in both.containers] == [64 * 2**20, 0]


@pytest.mark.parametrize(("case", "new", "admitted", "refused"), [
    ("fits exactly", {"cpu": "150m"}, [{"cpu": "250m"}], None),
    ("one millicore over", {"cpu": "151m"}, [{"cpu": "250m"}], "OutOfcpu"),
    ("memory", {"memory": "200Mi"}, [{"memory": "100Mi"}], "OutOfmemory"),
    ("extended resource the node does not publish", {"kalena.naughtian.io/batch-memory": "1"}, [],
     "OutOfkalena.naughtian.io/batch-memory"),
    ("extended resource within what is published", {"kalena.naughtian.io/batch-cpu": "100"},
     [{"kalena.naughtian.io/batch-cpu": "50"}], None),
])
def test_admission(case: str, new: dict, admitted: list[dict], refused: str | None) -> None:
    allocatable = spec.allocatable_amounts({"cpu": "400m", "memory": "256Mi", "pods": "110",
                                            "kalena.naughtian.io/batch-cpu": "150"})
    verdict = spec.admit(pod(c(new)), [pod(c(a)) for a in admitted], allocatable)
    assert (verdict.reason if verdict else None) == refused, case


def test_admission_message_is_the_kubelets() -> None:
    verdict = spec.admit(pod(c({"cpu": "300m"})), [pod(c({"cpu": "200m"}))], {"cpu": 400.0, "pods": 110.0})
    assert verdict.message == ("Pod was rejected: Node didn't have enough resource: cpu, requested: 300, used: 200, "
                               "capacity: 400")


def test_what_a_container_runs() -> None:
    usage = {"step_s": 30, "cpu_m": [120.4, 80], "memory_mib": [40, 44], "repeat": False}
    assert spec.container_command(pod(c(), annotations={spec.USAGE_ANNOTATION: json.dumps(usage)}), c()) == (
        "kalena/lab-burner:test", ["/bin/burner", "series", "30", "0", "120,80", "40,44"])
    work = {"cpu_m": 200, "memory_mib": 64, "duration_s": 120}
    assert spec.container_command(pod(c(), annotations={spec.WORK_ANNOTATION: json.dumps(work)}), c()) == (
        "kalena/lab-burner:test", ["/bin/burner", "work", "200", "64", "120"])
    assert spec.container_command(pod(c()), c(command=["sh", "-c"], args=["echo hi"])) == (
        "kalena/busybox:test", ["sh", "-c", "echo hi"])
    assert spec.container_command(pod(c()), c())[1][0] == "sleep"


@pytest.mark.parametrize(("doc", "says"), [
    ("{", "not JSON"),
    (json.dumps({"step_s": 0, "cpu_m": [1], "memory_mib": [1]}), "step_s"),
    (json.dumps({"step_s": 5, "cpu_m": [1, 2], "memory_mib": [1]}), "must be equal"),
    (json.dumps({"step_s": 5, "cpu_m": [-1], "memory_mib": [1]}), "cpu_m"),
])
def test_a_bad_usage_annotation_is_named(doc: str, says: str) -> None:
    with pytest.raises(spec.SpecError, match=says) as raised:
        spec.pod_plan(pod(c(), annotations={spec.USAGE_ANNOTATION: doc}), memory_capacity_bytes=1)
    assert raised.value.field == f"metadata.annotations.{spec.USAGE_ANNOTATION}"


def _inspect(running: bool, code: int = 0, oom: bool = False) -> dict:
    return {"Id": "abc", "Image": "sha256:1", "State": {"Running": running, "Status": "running" if running else "exited",
                                                        "ExitCode": code, "OOMKilled": oom,
                                                        "StartedAt": "2026-12-02T12:40:01.123456789Z",
                                                        "FinishedAt": "2026-12-02T12:41:00.5Z"}}


@pytest.mark.parametrize(("case", "states", "policy", "phase"), [
    ("one running", [(True, 0)], "Never", "Running"),
    ("all exited 0", [(False, 0), (False, 0)], "Never", "Succeeded"),
    ("one failed, Never", [(False, 0), (False, 1)], "Never", "Failed"),
    ("one failed, OnFailure: restarted", [(False, 1)], "OnFailure", "Running"),
    ("all exited 0, Always: restarted", [(False, 0)], "Always", "Running"),
])
def test_pod_phase(case: str, states: list, policy: str, phase: str) -> None:
    statuses = [container_status(f"c{i}", "x", _inspect(r, code), restarts=0) for i, (r, code) in enumerate(states)]
    assert pod_phase(statuses, policy) == phase, case


def test_an_oom_kill_is_reported_as_oomkilled() -> None:
    status = container_status("main", "x", _inspect(False, 137, oom=True), restarts=0)
    assert status["state"]["terminated"] == {"exitCode": 137, "reason": "OOMKilled", "startedAt": "2026-12-02T12:40:01Z",
                                             "finishedAt": "2026-12-02T12:41:00Z", "containerID": "docker://abc"}


def test_a_series_is_held_below_the_containers_memory_limit_by_the_burners_own_overhead() -> None:
    from agents.lab.kubelet.spec import BURNER, BURNER_OVERHEAD_MIB, within_limit

    series = [BURNER, "series", "6", "1", "10,20,30", "10,12,16"]
    assert within_limit(series, 16 * 2**20) == [*series[:5], f"10,12,{16 - BURNER_OVERHEAD_MIB}"]
    assert within_limit([BURNER, "work", "100", "64", "30"], 32 * 2**20) == [BURNER, "work", "100", "29", "30"]
    assert within_limit(series, None) == series                     # no limit: the series as written
    assert within_limit(["sleep", "5"], 2**20) == ["sleep", "5"]    # not the burner: unchanged


def test_a_converted_batch_pods_work_is_held_below_the_limit_kalenas_agent_enforces() -> None:
    # the webhook moves the pod's limits into kalena.naughtian.io/resources (the agent enforces
    # them on the pod's cgroup); work holding exactly that limit was OOM-killed for the burner's pages
    from agents.lab.kubelet.spec import BURNER_OVERHEAD_MIB, pod_plan

    extended = {"kalena.naughtian.io/batch-cpu": "66", "kalena.naughtian.io/batch-memory": "99614720"}
    pod = {"metadata": {"annotations": {
        "lab.kalena.naughtian.io/work": '{"cpu_m":66,"memory_mib":95,"duration_s":10.0}',
        "kalena.naughtian.io/resources": json.dumps({"containers": {"work": {
            "limits": {"cpu": "66m", "memory": "95Mi"}, "requests": {"cpu": "66m", "memory": "95Mi"}}}})}},
        "spec": {"containers": [{"name": "work", "image": "kalena/busybox:test",
                                 "resources": {"requests": extended, "limits": extended}}]}}
    plan = pod_plan(pod, memory_capacity_bytes=512 * 2**20)
    assert plan.qos == "BestEffort" and plan.containers[0].memory_limit_bytes == 0   # the kubelet sets none
    assert plan.containers[0].command[3] == str(95 - BURNER_OVERHEAD_MIB)
