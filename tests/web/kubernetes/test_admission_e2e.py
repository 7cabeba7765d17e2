"""Part 1's end-to-end flow with admission on (issue 11): a Job's pod created in the test API
server → the mutating webhook (`kalena serve` over TLS) converts it → watched, placed, bound →
the test server's kubelet-style admission accepts it against the batch-cpu/batch-memory the node
publishes → the agent (reading the kubelet's pod list) writes its cgroups on a temp-dir cgroupfs
→ Succeeded, ledgers freed. Then a bind past what a node really publishes is refused
(OutOfkalena.naughtian.io/batch-cpu) and Kalena counts it as a refusal, never a completion."""

from __future__ import annotations

import math
import time


import numpy as np
import pytest
from kubernetes import client as k8s

from agents.cgroups.backend import CgroupV2
from agents.collectors.cgroup import CgroupCollector, NodeCollector
from agents.collectors.kubelet import KubeletClient
from agents.collectors.telemetry import CgroupTelemetry
from agents.discovery.kubelet import KubeletSource
from agents.enforcer import Enforcer
from agents.loop import MitigationLoop
from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.lease import LeaderElector
from agents.orchestrators.kubernetes.testkubelet import MutatingWebhook, finish, kubelet_admission
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod
from agents.settings import LoopSettings
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU
from kalena_web.control.leading import ClusterScheduler
from kalena_web.kubehooks.models import PublishedBatch
from kalena_web.kubehooks.services import batch_capacity_publish
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from tests.agents.conftest import make_v2_tree, v2_files

NODES = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]
GIB = 2**30
BUCKETS = (50.0, 128.0 * 2**20)


def wait_for(check, what: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def api(kalena_webhook):
    with TestAPIServer(bookmark_interval_s=0.5) as server:
        for name in NODES:
            server.create("nodes", node(name, cpu="16", memory="64Gi"))
        webhook = MutatingWebhook(url=kalena_webhook.mutate_url, ca_file=kalena_webhook.ca, timeout_s=2.0,
                                  client_cert_file=kalena_webhook.client_cert, client_key_file=kalena_webhook.client_key,
                                  object_selector={"matchLabels": {"kalena.naughtian.io/tier": "batch"}})
        server.pod_create_hooks.append(webhook)
        server.bound_hooks[:] = [kubelet_admission]

        def kubelet_pods(groups, body):  # the kubelet's GET /pods: the pods bound to its node
            return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": {},
                         "items": [p for p in server.objects("pods") if p["spec"].get("nodeName") == server.kubelet_node]}
        server.kubelet_node = ""
        server.route("GET", r"^/pods$", kubelet_pods)
        server.webhook = webhook
        yield server


def job_pod(name: str) -> dict:
    return pod("batch", name, tier="batch", owner_kind="Job", owner_name="train", cpu="1", memory="1Gi",
               limit_cpu="2", limit_memory="2Gi")


def agent_writes_cgroups(api, tmp_path, node_name: str, uid: str) -> tuple[str, int, int]:
    """One agent tick on ``node_name`` (4 cores, 16 GiB): its kubelet is the test server's /pods."""
    api.kubelet_node = node_name
    group = f"kubepods/besteffort/pod{uid}"
    root = make_v2_tree(tmp_path / "cgroup", {"kubepods": v2_files(), "kubepods/besteffort": v2_files(),
                                              group: v2_files(memory_bytes=GIB // 2)})
    (tmp_path / "proc" / "pressure").mkdir(parents=True, exist_ok=True)
    for res in ("cpu", "memory", "io"):
        (tmp_path / "proc" / "pressure" / res).write_text(
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    fs = CgroupV2(root)
    capacity = np.full(8, math.inf)
    capacity[:2] = (4000.0, 16 * GIB)
    loop = MitigationLoop(LoopSettings(node_name=node_name, capacity=capacity, policy=Policy()),
                          sources=[KubeletSource(KubeletClient(api.url))],
                          telemetry=CgroupTelemetry(CgroupCollector(fs, tmp_path / "proc")), fs=fs,
                          enforcer=Enforcer(fs), node_reader=NodeCollector(fs, tmp_path / "proc", "kubepods").read,
                          emit=lambda m: None)
    loop.tick(time.time(), 0.0)
    return ((root / group / "cpu.max").read_text().strip(), int((root / group / "memory.max").read_text()),
            int((root / group / "memory.high").read_text()))


def start_scheduler(cluster, api) -> ClusterScheduler:
    orch = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)), request_timeout_s=5.0,
                                  identity="kalena-e2e")
    elector = LeaderElector(orch, identity="kalena-e2e", lease_duration_s=2.0, renew_deadline_s=1.5,
                            retry_period_s=0.2)
    s = ClusterScheduler(cluster=cluster, orchestrator=orch, elector=elector, pass_period_s=0.3,
                         rng=np.random.default_rng(0))
    s.start()
    return s


@pytest.mark.django_db(transaction=True)
def test_job_pod_admitted_through_the_webhook_runs_under_its_real_limits(live, api, tmp_path):
    kube = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)))
    assert batch_capacity_publish(cluster=live, orchestrator=kube, now_s=time.time(), buckets=BUCKETS) == 3
    s = start_scheduler(live, api)
    try:
        api.create_pod(job_pod("train-0"))
        created = api.get("pods", "batch/train-0")
        assert (api.webhook.calls, api.webhook.failures) == (1, 0), api.webhook.last_error
        assert created["spec"]["schedulerName"] == "kalena"
        assert created["spec"]["containers"][0]["resources"]["requests"] == {
            "kalena.naughtian.io/batch-cpu": "1000", "kalena.naughtian.io/batch-memory": str(GIB)}
        where = wait_for(lambda: api.get("pods", "batch/train-0")["spec"].get("nodeName"), "the binding")
        running = wait_for(lambda: (p := api.get("pods", "batch/train-0"))["status"]["phase"] == "Running" and p,
                           "kubelet admission")
        assert running["status"]["qosClass"] == "BestEffort"
        published = PublishedBatch.objects.get(node__cluster=live, node__name=where)
        assert published.cpu_mcpu >= 1000  # the kubelet admitted 1000 of batch-cpu against it
        pod_row = wait_for(lambda: BatchPod.objects.filter(workload__name="batch/train-0", running_s__isnull=False)
                           .select_related("workload").first(), "Running seen by the watch")
        # the request and limit Kalena keeps are the pod's real ones, from the annotation
        assert pod_row.workload.request[:2] == [1000.0, GIB] and pod_row.workload.limit[:2] == [2000.0, 2 * GIB]
        # the agent on that node writes its cgroups from the annotation: limit 2 cores, 2 GiB (memory.high = request)
        assert agent_writes_cgroups(api, tmp_path, where, running["metadata"]["uid"]) == ("200000 100000", 2 * GIB, GIB)
        finish(api, "batch/train-0")
        wait_for(lambda: BatchPod.objects.filter(workload__name="batch/train-0", state="completed",
                                                 outcome="succeeded").exists(), "Succeeded seen")
        assert sum(led.batch_request[CPU] for led in LiveNodeLedger.objects.filter(node__cluster=live)) == 0

        # every node now really publishes 500 mcpu (behind Kalena's back: its rows still say more),
        # so Kalena's next bind goes past what the kubelet admits
        for name in NODES:
            api.store.mutate("nodes", name, lambda n: n["status"]["allocatable"].update(
                {"kalena.naughtian.io/batch-cpu": "500"}))
        api.create_pod(job_pod("train-1"))
        refused = wait_for(lambda: (p := api.get("pods", "batch/train-1"))["status"]["phase"] == "Failed" and p,
                           "the kubelet's refusal")
        assert refused["status"]["reason"] == "OutOfkalena.naughtian.io/batch-cpu"
        row = wait_for(lambda: BatchPod.objects.filter(workload__name="batch/train-1", state="refused").first(),
                       "the refusal seen")
        assert row.outcome != "succeeded" and row.reason.startswith("OutOf")
        assert BatchPod.objects.filter(state="completed").count() == 1  # train-0 only: a refusal never completes
    finally:
        s.stop()
