"""deploy/kubernetes RBAC derived from the test API server's request log: the scheduler's, the
console's and the agent's every API call over their end-to-end paths (the scheduler and workers:
watch, lease, bind, Events, PodScheduled=False, eviction, published capacity, the extender's pod
read; the console: the agents' TokenReview; the agent: its own-node check, DisruptionTarget and
delete, its kubelet reads) map to exactly the rules each ServiceAccount is granted — nothing
missing, nothing unused."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from kubernetes import client as k8s

from agents.cgroups.backend import CgroupV2
from agents.collectors.kubelet import KubeletClient, KubeletTelemetry
from agents.discovery.kubelet import KubeletSource
from agents.enforcer import Enforcer, kube_api_client
from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.lease import LeaderElector
from agents.orchestrators.kubernetes.rbac import granted, kubelet_permission, required
from agents.orchestrators.kubernetes.testkubelet import token_reviews
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod
from kalena_web.control.leading import ClusterScheduler
from kalena_web.kubehooks.services import batch_capacity_publish
from kalena_web.scheduling.shards import ShareMember
from kalena_web.scheduling.models import BatchPod
from tests.agents.conftest import json_server, make_v2_tree  # noqa: F401 (json_server: a fixture)
from tests.agents.orchestrators.kubernetes.test_agent_evictions import workload

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
NODES = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]


def roles(path: Path, subject: str) -> set:
    """Every rule granted to service account ``subject`` by the (Cluster)Role(Binding)s of ``path``."""
    docs = list(yaml.safe_load_all(path.read_text()))
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in ("ClusterRole", "Role")}
    out = set()
    for b in (d for d in docs if d["kind"] in ("ClusterRoleBinding", "RoleBinding")):
        if any(s["name"] == subject for s in b["subjects"]):
            out |= granted(by_name[(b["roleRef"]["kind"], b["roleRef"]["name"])])
    return out


def wait_for(check, what, timeout_s=60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if got := check():
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.django_db(transaction=True)
def test_control_plane_rbac_is_exactly_what_it_calls(live, api_server):
    api = api_server
    orch = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)), request_timeout_s=5.0,
                                  identity="kalena-rbac")
    elector = LeaderElector(orch, identity="kalena-rbac", lease_duration_s=2.0, renew_deadline_s=1.5,
                            retry_period_s=0.2)
    s = ClusterScheduler(cluster=live, orchestrator=orch, elector=elector, pass_period_s=0.3,
                         rng=np.random.default_rng(0))
    s.start()
    try:
        batch_capacity_publish(cluster=live, orchestrator=orch, now_s=time.time(), buckets=(50.0, 2.0**27))
        api.create_pod(pod("batch", "fits-0", tier="batch", owner_kind="Job", owner_name="a", cpu="100m",
                           memory="64Mi", limit_cpu="100m", limit_memory="64Mi"))
        api.create_pod(pod("batch", "huge-0", tier="batch", owner_kind="Job", owner_name="b", cpu="500",
                           memory="1Gi", limit_cpu="500", limit_memory="1Gi"))
        wait_for(lambda: api.get("pods", "batch/fits-0")["spec"].get("nodeName"), "the binding")
        wait_for(lambda: BatchPod.objects.filter(workload__name="batch/huge-0", noticed_s__isnull=False).exists(),
                 "FailedScheduling noticed")
        orch.flush_events()
        wait_for(lambda: any(c.get("type") == "PodScheduled" and c.get("status") == "False"
                             for c in api.get("pods", "batch/huge-0")["status"].get("conditions") or []),
                 "PodScheduled=False")
        orch.evict("batch/fits-0", grace_s=0, reason="rbac")       # escalation drain / eviction retries
        orch.pod("batch/huge-0")                                    # the extender's bind reads the pod
        member = ShareMember(orch, cluster=live.name, identity="kalena-rbac", lease_duration_s=2.0,
                             renew_deadline_s=1.5, retry_period_s=0.2)
        assert member.step() and member.step()                      # a sharded instance: list, create, update
    finally:
        s.stop()
    need = required(api.request_log)
    have = roles(DEPLOY / "kubernetes/control-plane.yaml", "kalena-scheduler")
    assert need - have == set(), f"missing from deploy/kubernetes/control-plane.yaml: {sorted(need - have)}"
    assert have - need == set(), f"granted but never used: {sorted(have - need)}"


@pytest.mark.django_db(transaction=True)
def test_console_rbac_is_only_the_agents_tokenreview(live, api_server, settings, monkeypatch):
    """The console (its own ServiceAccount, kalena-console) calls the API for one thing: the agents'
    TokenReview. A batch pod it deletes is stopped by a worker (KALENA_ORCHESTRATOR_THROUGH_WORKERS,
    as its Deployment sets): it binds nothing, patches no node, evicts nothing itself."""
    from kalena_web.control import orchestrators
    from kalena_web.control.forwarding import ThroughWorkers
    from kalena_web.kubehooks.agent_auth import service_account_authenticate

    console = next(d for d in yaml.safe_load_all((DEPLOY / "kubernetes/control-plane.yaml").read_text())
                   if d["kind"] == "Deployment" and d["metadata"]["name"] == "kalena-console")
    env = {e["name"]: e.get("value") for e in console["spec"]["template"]["spec"]["containers"][0].get("env", [])}
    settings.KALENA_ORCHESTRATOR = "kubernetes"
    settings.KALENA_ORCHESTRATOR_THROUGH_WORKERS = env.get("KALENA_ORCHESTRATOR_THROUGH_WORKERS") == "1"
    settings.KALENA_AGENT_TOKENREVIEW_CLUSTER = live.name
    monkeypatch.setattr(orchestrators, "kubernetes_api_client",
                        lambda: k8s.ApiClient(k8s.Configuration(host=api_server.url)))
    token_reviews(api_server, {"sa-alpha": {"username": "system:serviceaccount:kalena-system:kalena-agent",
                                            "node": NODES[0], "audiences": ["kalena"]}})
    assert service_account_authenticate("sa-alpha").node_name == NODES[0]      # the agent link's TokenReview
    assert isinstance(orchestrators.orchestrator_for(live), ThroughWorkers)   # a delete's stop: the workers'
    need = required(api_server.request_log)
    have = roles(DEPLOY / "kubernetes/control-plane.yaml", "kalena-console")
    assert need == {("authentication.k8s.io", "tokenreviews", "create")}
    assert have == need, f"the console is granted {sorted(have - need)} it never uses"
    for right in (("", "pods/binding", "create"), ("", "nodes/status", "patch"), ("", "pods/eviction", "create"),
                  ("", "pods", "delete"), ("coordination.k8s.io", "leases", "update")):
        assert right not in have


def test_agent_rbac_is_exactly_what_it_calls(tmp_path, api_server, json_server):
    api = api_server
    api.create("pods", pod("batch", "mine-0", NODES[0], tier="batch"))
    api.create("pods", pod("batch", "mine-1", NODES[0], tier="batch"))
    token = tmp_path / "token"
    token.write_text("tok")
    client = kube_api_client(in_cluster=False, url=api.url, token_file=str(token), ca_file=None)
    enforcer = Enforcer(CgroupV2(make_v2_tree(tmp_path / "cg", {})), kube_api=client, node_name=NODES[0])
    assert enforcer.terminate(workload("batch/mine-0"), 30).ok      # own-node check, Eviction
    assert enforcer.kill(workload("batch/mine-1")).ok               # grace over: delete
    # the kubelet reads of discovery and kubelet telemetry
    json_server.routes["/pods"] = {"kind": "PodList", "items": []}
    json_server.routes["/stats/summary"] = {"node": {"nodeName": NODES[0]}, "pods": []}
    kubelet = KubeletClient(json_server.url)
    KubeletSource(kubelet).discover(0.0)
    KubeletTelemetry(kubelet).collect([], 0.0)
    kubelet_paths = {path.split("?")[0] for _, path, _, _ in json_server.requests}
    assert kubelet_paths == {"/pods", "/stats/summary"}
    need = required(api.request_log) | {kubelet_permission(p) for p in kubelet_paths}
    have = roles(DEPLOY / "agent/daemonset.yaml", "kalena-agent")
    assert need - have == set(), f"missing from deploy/agent/daemonset.yaml: {sorted(need - have)}"
    assert have - need == set(), f"granted but never used: {sorted(have - need)}"


@pytest.fixture
def api_server():
    with TestAPIServer(bookmark_interval_s=0.5) as server:
        for name in NODES:
            server.create("nodes", node(name, cpu="16", memory="64Gi"))
        yield server
