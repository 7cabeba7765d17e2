"""Case C10 on the node: the agent reads a webhook-converted batch pod through the kubelet's pod
list (the kubelet sees it BestEffort: no cpu/memory), takes its real request and limit from the
kalena.naughtian.io/resources annotation, and writes its cgroups on a temp-dir cgroup v2 tree:
CFS quota 400,000 µs per 100,000 µs (cpu.max) and an 8 GiB memory limit."""

from __future__ import annotations

import base64
import copy
import json
import math
import subprocess
import sys

import jsonpatch
import numpy as np
import pytest

from agents.cgroups.backend import CgroupV2
from agents.collectors.cgroup import CgroupCollector, NodeCollector
from agents.collectors.kubelet import KubeletClient
from agents.collectors.telemetry import CgroupTelemetry
from agents.discovery.kubelet import KubeletSource, parse_pod_list
from agents.enforcer import Enforcer
from agents.loop import MitigationLoop
from agents.orchestrators.kubernetes.admission import review
from agents.settings import LoopSettings
from tests.agents.conftest import make_v2_tree, v2_files
from tests.agents.orchestrators.kubernetes.test_admission import admission_review, pod
from tests.worked import WORKED_POLICY

GIB = 2**30
SLEEPER = "import time\nprint('ready', flush=True)\nwhile True: time.sleep(60)"


def admitted_c10_pod(resources=None, annotations=None) -> dict:
    """The C10 batch pod (4 cores / 8 GiB, request = limit) as the webhook leaves it, running."""
    obj = pod(resources=resources, annotations=annotations)
    patch = json.loads(base64.b64decode(review(admission_review(obj))["response"]["patch"]))
    out = jsonpatch.apply_patch(copy.deepcopy(obj), patch)
    out["metadata"]["uid"] = "uid-b"
    out["spec"]["nodeName"] = "node-c10"
    out["status"] = {"phase": "Running", "qosClass": "BestEffort", "startTime": "2024-05-01T00:00:00Z"}
    return out


def production_pod() -> dict:
    return {"metadata": {"name": "p", "namespace": "prod", "uid": "uid-p", "labels": {}},
            "spec": {"nodeName": "node-c10", "containers": [{"name": "c", "resources": {
                "requests": {"cpu": "7", "memory": "24Gi"}, "limits": {"cpu": "7", "memory": "24Gi"}}}]},
            "status": {"phase": "Running", "qosClass": "Guaranteed", "startTime": "2024-05-01T00:00:00Z"}}


def test_discovery_reads_the_real_limits_from_the_annotation():
    (batch,) = parse_pod_list({"items": [admitted_c10_pod()]}, source="kubelet").workloads
    assert (batch.tier, batch.cgroup) == ("batch", "kubepods/besteffort/poduid-b")
    assert batch.request[:2].tolist() == [4000.0, 8 * GIB] and batch.limit[:2].tolist() == [4000.0, 8 * GIB]
    broken = admitted_c10_pod()
    broken["metadata"]["annotations"]["kalena.naughtian.io/resources"] = "{not json"
    result = parse_pod_list({"items": [broken]}, source="kubelet")
    assert result.workloads == [] and "kalena.naughtian.io/resources" in result.errors[0]


def run_node(tmp_path, json_server, batch_pod: dict, messages: list) -> object:
    """2 h of the C10 node (production steadily at 1 core / 8 GiB) with ``batch_pod`` beside it;
    returns the batch pod's cgroup directory."""
    json_server.routes["/pods"] = {"kind": "PodList", "items": [production_pod(), batch_pod]}
    procs = [subprocess.Popen([sys.executable, "-c", SLEEPER], stdout=subprocess.PIPE) for _ in range(2)]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == b"ready"
        root = make_v2_tree(tmp_path / "cgroup", {
            "kubepods": v2_files(), "kubepods/besteffort": v2_files(),
            "kubepods/poduid-p": v2_files(procs=f"{procs[0].pid}\n"),
            "kubepods/besteffort/poduid-b": v2_files(procs=f"{procs[1].pid}\n")})
        (tmp_path / "proc" / "pressure").mkdir(parents=True)
        for res in ("cpu", "memory", "io"):
            (tmp_path / "proc" / "pressure" / res).write_text(
                "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
        fs = CgroupV2(root)
        capacity = np.full(8, math.inf)
        capacity[:2] = (8000.0, 32 * GIB)  # C10: node allocatable 8 cores / 32 GiB
        loop = MitigationLoop(
            LoopSettings(node_name="node-c10", capacity=capacity, policy=WORKED_POLICY, sampling_interval_s=60.0),
            sources=[KubeletSource(KubeletClient(json_server.url))],
            telemetry=CgroupTelemetry(CgroupCollector(fs, tmp_path / "proc")), fs=fs, enforcer=Enforcer(fs),
            node_reader=NodeCollector(fs, tmp_path / "proc", node_cgroup="kubepods").read, emit=messages.append)
        t0 = 1714557600.0 + 86400  # a day after both pods started: grace long over
        usage_p = usage_b = 0
        # production uses 1 core / 8 GiB steadily for 2 h: r settles at 1.15 cores (7 − 1.15 decays with h = 600 s)
        for step in range(121):
            usage_p += 60 * 1_000_000
            usage_b += 60 * 4 * 1_000_000
            for rel, usage, memory in (("kubepods/poduid-p", usage_p, 8 * GIB),
                                       ("kubepods/besteffort/poduid-b", usage_b, 6 * GIB)):
                # only the counters move (what the agent writes — cpu.max, memory.* — stays as written)
                files = v2_files(usage_usec=usage, memory_bytes=memory)
                for name in ("cpu.stat", "memory.current", "memory.stat"):
                    (root / rel / name).write_text(files[name])
            loop.tick(t0 + 60 * step, 60.0 * step)
        return root / "kubepods/besteffort/poduid-b"
    finally:
        for p in procs:
            p.kill()
            p.wait(10)


def test_case_c10_agent_writes_quota_and_memory_limit(tmp_path, json_server):
    group = run_node(tmp_path, json_server, admitted_c10_pod(), [])
    # B = 8 − 1.15 = 6.85 cores ≥ the pod's 4-core limit (from the annotation) → 4 cores × 100,000 µs
    assert (group / "cpu.max").read_text().strip() == "400000 100000"
    # memory limit 8 GiB (slack-memory denied by default: memory.high = request = 8 GiB too)
    assert int((group / "memory.max").read_text()) == 8 * GIB
    assert int((group / "memory.high").read_text()) == 8 * GIB


@pytest.mark.parametrize("slack_cpu", ["allow", "deny"])
def test_without_a_limit_the_quota_is_the_slack_budget_or_the_request(tmp_path, json_server, slack_cpu):
    messages: list = []
    batch = admitted_c10_pod(resources={"requests": {"cpu": "4", "memory": "8Gi"}},
                             annotations={"kalena.naughtian.io/slack-cpu": slack_cpu})
    group = run_node(tmp_path, json_server, batch, messages)
    quota = int((group / "cpu.max").read_text().split()[0])
    budget = [m["numbers"]["budget_mcpu"] for m in messages if m.get("action") == "throttle"][-1]
    if slack_cpu == "allow":  # no declared limit: capped at the batch budget B = C − Σ service r (docs/design.md §7)
        assert quota == round(budget / 1000 * 100_000) and 680_000 < quota <= 685_000
    else:                     # slack-cpu denied: capped at its request
        assert quota == 400_000
    assert (group / "memory.max").read_text().strip() == "max"      # no memory limit declared
    assert int((group / "memory.high").read_text()) == 8 * GIB      # slack-memory denied: the request
