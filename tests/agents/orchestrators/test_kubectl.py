"""Debian's kubectl (1.20, package kubernetes-client, extracted by ``scripts/services kubectl``)
drives the test API server as an operator would a cluster: what it prints is what a user sees.

Kalena's own Kubernetes client does what it does in production around it: publishes batch
capacity on a node, binds the Job's pod (recording the Scheduled Event with the pod's uid) —
so ``kubectl describe pod`` and ``kubectl get events`` show Kalena's Events.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from kubernetes import client as k8s

from agents.orchestrators.base import BatchSpec
from agents.orchestrators.kubernetes.client import KubernetesOrchestrator
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod

ROOT = Path(__file__).resolve().parents[3]
KUBECTL = ROOT / "var" / "tools" / "kubernetes-client" / "usr" / "bin" / "kubectl"

JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: crunch
  namespace: batch
spec:
  backoffLimit: 2
  podFailurePolicy:
    rules:
    - action: Ignore
      onPodConditions:
      - type: DisruptionTarget
  template:
    metadata:
      labels:
        kalena.naughtian.io/tier: batch
    spec:
      schedulerName: kalena
      restartPolicy: Never
      containers:
      - name: work
        image: kalena/busybox:test
        command: ["sh", "-c", "sleep 5"]
        resources:
          requests: {cpu: 250m, memory: 64Mi}
          limits: {cpu: 250m, memory: 64Mi}
"""


@pytest.fixture(scope="module")
def kubectl_bin() -> Path:
    if not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"Debian's kubectl is not at {KUBECTL}: run scripts/services kubectl (scripts/test does)")
    return KUBECTL


@pytest.fixture
def cluster(tmp_path, kubectl_bin):
    with TestAPIServer() as api:
        config = tmp_path / "kubeconfig"
        config.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: lab, cluster: {{server: '{api.url}'}}}}]\n"
            "users: [{name: operator, user: {}}]\n"
            "contexts: [{name: lab, context: {cluster: lab, user: operator}}]\ncurrent-context: lab\n")
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(config)}

        def kubectl(*args: str, ok: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess:
            done = subprocess.run([str(kubectl_bin), *args], env=env, capture_output=True, text=True, input=stdin,
                                  timeout=120)
            if ok:
                assert done.returncode == 0, \
                    f"kubectl {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
            return done

        api.create("nodes", node("node-a", cpu="4", memory="8Gi", address="127.0.10.1",
                                 labels={"node-role.kubernetes.io/worker": ""}))
        api.create("nodes", node("node-b", cpu="4", memory="8Gi", address="127.0.10.2"))
        orchestrator = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)))
        yield api, kubectl, orchestrator


def _rows(text: str) -> list[list[str]]:
    """kubectl's table output, split on its column padding (two or more spaces)."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.strip().splitlines()]


def test_get_nodes_wide_and_a_node_with_kalenas_batch_allocatable(cluster) -> None:
    api, kubectl, orchestrator = cluster
    orchestrator.publish_batch_capacity("node-a", cpu_mcpu=1500, memory_bytes=2 * 2**30)

    rows = _rows(kubectl("get", "nodes", "-o", "wide").stdout)
    assert rows[0][:6] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP"]
    by_name = {r[0]: r for r in rows[1:]}
    assert by_name["node-a"][1:3] == ["Ready", "worker"]
    assert by_name["node-a"][5] == "127.0.10.1" and by_name["node-b"][5] == "127.0.10.2"

    shown = kubectl("get", "node", "node-a", "-o", "yaml").stdout
    assert "kalena.naughtian.io/batch-cpu: \"1500\"" in shown
    assert f"kalena.naughtian.io/batch-memory: \"{2 * 2**30}\"" in shown
    as_json = json.loads(kubectl("get", "node", "node-a", "-o", "json").stdout)
    assert as_json["status"]["allocatable"]["kalena.naughtian.io/batch-cpu"] == "1500"


def test_a_job_created_with_kubectl_gets_its_pod_bound_by_kalena_and_described_with_its_events(cluster,
                                                                                               tmp_path) -> None:
    api, kubectl, orchestrator = cluster
    manifest = tmp_path / "job.yaml"
    manifest.write_text(JOB)
    # validated client-side (no --validate=false)
    assert kubectl("create", "-f", str(manifest)).stdout.strip() == "job.batch/crunch created"

    pods = _wait_for_pods(kubectl, "batch", "job-name=crunch", 1)
    name = pods[0]
    assert name.startswith("crunch-")
    created = api.get("pods", f"batch/{name}")
    assert created["metadata"]["ownerReferences"][0]["kind"] == "Job"
    orchestrator.note_pending(f"batch/{name}", "0/2 nodes have batch capacity: node-a: batch-cpu 100m free < 250m")
    assert orchestrator.flush_events()
    waiting = kubectl("describe", "pod", "-n", "batch", name).stdout
    assert "PodScheduled   False" in waiting
    assert "FailedScheduling" in waiting.split("Events:", 1)[1]
    assert "node-a: batch-cpu 100m free < 250m" in waiting.split("Events:", 1)[1]
    orchestrator.bind(BatchSpec(id=f"batch/{name}", image="", request_mcpu=250, request_bytes=64 * 2**20,
                                limit_mcpu=250, limit_bytes=64 * 2**20, uid=created["metadata"]["uid"]), "node-a")
    assert orchestrator.flush_events()

    rows = _rows(kubectl("get", "pods", "-A", "-o", "wide").stdout)
    assert rows[0][:8] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    row = next(r for r in rows if r[1] == name)
    assert (row[0], row[3], row[7]) == ("batch", "Running", "node-a")

    described = kubectl("describe", "pod", "-n", "batch", name).stdout
    assert "Controlled By:  Job/crunch" in described
    events = described.split("Events:", 1)[1]
    assert "Scheduled" in events and f"Successfully assigned batch/{name} to node-a" in events

    listed = _rows(kubectl("get", "events", "-n", "batch").stdout)
    assert listed[0] == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert ["Normal", "Scheduled", f"pod/{name}", f"Successfully assigned batch/{name} to node-a"] in \
        [r[1:] for r in listed[1:]]

    jobs = _rows(kubectl("get", "jobs", "-n", "batch").stdout)
    assert jobs[0] == ["NAME", "COMPLETIONS", "DURATION", "AGE"] and jobs[1][:2] == ["crunch", "0/1"]

    orchestrator.evict(f"batch/{name}", grace_s=0, reason="node-a production usage rose")
    assert orchestrator.flush_events()
    evicted = [r[1:] for r in _rows(kubectl("get", "events", "-n", "batch").stdout)[1:]]
    assert ["Warning", "Evicted", f"pod/{name}", "Evicted by Kalena: node-a production usage rose"] in evicted
    replacement = _wait_for_pods(kubectl, "batch", "job-name=crunch", 1)[0]
    assert replacement != name  # the Job controller replaced the evicted pod


def test_delete_cordon_and_drain_evict_through_the_eviction_subresource(cluster, tmp_path) -> None:
    api, kubectl, orchestrator = cluster
    api.create_pod(pod("web", "api-0", "node-b"))
    kubectl("delete", "pod", "-n", "web", "api-0")
    assert "api-0" not in kubectl("get", "pods", "-A").stdout

    assert kubectl("cordon", "node-b").stdout.strip() == "node/node-b cordoned"
    assert api.get("nodes", "node-b")["spec"]["unschedulable"] is True
    assert ("PATCH", "/api/v1/nodes/node-b") in [(m, p) for m, p, _ in api.requests]
    status = {r[0]: r[1] for r in _rows(kubectl("get", "nodes").stdout)[1:]}
    assert status == {"node-a": "Ready", "node-b": "Ready,SchedulingDisabled"}

    # node-a: a production pod of a ReplicaSet, a DaemonSet's pod, and the Job's batch pod Kalena bound
    api.create_pod(pod("web", "web-7c9f-x2x4q", "node-a", owner_kind="ReplicaSet", owner_name="web-7c9f"))
    api.create("daemonsets", {"metadata": {"name": "kalena-agent", "namespace": "kalena-system"}, "spec": {
        "selector": {"matchLabels": {"app": "kalena-agent"}},
        "template": {"metadata": {"labels": {"app": "kalena-agent"}},
                     "spec": {"containers": [{"name": "agent", "image": "kalena/agent:test"}]}}}})
    agents = _wait_for_pods(kubectl, "kalena-system", "app=kalena-agent", 2)  # one per node, node-b cordoned too
    on_a = next(n for n in agents if api.get("pods", f"kalena-system/{n}")["spec"]["nodeName"] == "node-a")
    manifest = tmp_path / "job.yaml"
    manifest.write_text(JOB)
    kubectl("create", "-f", str(manifest))
    first = _wait_for_pods(kubectl, "batch", "job-name=crunch", 1)[0]
    uid = api.get("pods", f"batch/{first}")["metadata"]["uid"]
    orchestrator.bind(BatchSpec(id=f"batch/{first}", image="", request_mcpu=250, request_bytes=64 * 2**20,
                                limit_mcpu=250, limit_bytes=64 * 2**20, uid=uid), "node-a")

    refused = kubectl("drain", "node-a", ok=False)  # a DaemonSet's pod without --ignore-daemonsets
    assert refused.returncode != 0 and "DaemonSet-managed Pods" in refused.stderr

    drained = kubectl("drain", "node-a", "--ignore-daemonsets")
    assert drained.stdout.splitlines()[-1] == "node/node-a evicted"  # kubectl 1.20's word for a drain by eviction
    assert f"pod/{first} evicted" in drained.stdout and "pod/web-7c9f-x2x4q evicted" in drained.stdout
    assert f"kalena-system/{on_a}" in drained.stderr  # the ignored DaemonSet pod is named
    sent = [(p, b) for m, p, b in api.requests if m == "POST" and p.endswith("/eviction")]
    assert {b["apiVersion"] for _, b in sent} == {"policy/v1beta1"}  # kubectl 1.20's Eviction (Kalena sends v1)
    evictions = sorted(p for p, _ in sent)
    assert evictions == [f"/api/v1/namespaces/batch/pods/{first}/eviction",
                         "/api/v1/namespaces/web/pods/web-7c9f-x2x4q/eviction"]
    assert api.get("nodes", "node-a")["spec"]["unschedulable"] is True
    left = {r[1] for r in _rows(kubectl("get", "pods", "-A").stdout)[1:]}
    assert on_a in left and first not in left and "web-7c9f-x2x4q" not in left

    # the Job controller replaces the evicted pod; the eviction is not a failure (podFailurePolicy)
    replacement = _wait_for_pods(kubectl, "batch", "job-name=crunch", 1)[0]
    assert replacement != first
    assert kubectl("get", "job", "-n", "batch", "crunch", "-o", "jsonpath={.status.failed}").stdout == ""


def test_apply_stores_config_and_rbac_and_reapplies_a_change(cluster, tmp_path) -> None:
    api, kubectl, _ = cluster
    manifest = tmp_path / "config.yaml"
    objects = """\
apiVersion: v1
kind: Namespace
metadata: {name: kalena-system}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: kalena-policy, namespace: kalena-system}
data: {policy.yaml: "tiers: [production, batch]"}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: kalena-agent}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
"""
    manifest.write_text(objects)
    out = kubectl("apply", "-f", str(manifest)).stdout
    assert "namespace/kalena-system created" in out and "configmap/kalena-policy created" in out
    assert "clusterrole.rbac.authorization.k8s.io/kalena-agent created" in out

    manifest.write_text(objects.replace("tiers: [production, batch]", "tiers: [batch]"))
    out = kubectl("apply", "-f", str(manifest)).stdout
    assert "configmap/kalena-policy configured" in out and "namespace/kalena-system unchanged" in out
    assert api.get("configmaps", "kalena-system/kalena-policy")["data"] == {"policy.yaml": "tiers: [batch]"}
    assert kubectl("get", "clusterrole", "kalena-agent", "-o", "jsonpath={.rules[0].verbs}").stdout \
        .replace('"', "").replace(" ", "") in ("[get,list,watch]", "getlistwatch")
    assert "kalena-policy" in kubectl("get", "configmaps", "-n", "kalena-system").stdout


def _wait_for_pods(kubectl, namespace: str, selector: str, count: int, timeout_s: float = 60.0) -> list[str]:
    """Names of the ``count`` non-terminating pods ``selector`` lists (the Job controller runs on
    its own thread); fails after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    names: list[str] = []
    while time.monotonic() < deadline:
        names = kubectl("get", "pods", "-n", namespace, "-l", selector,
                        "-o", "jsonpath={.items[*].metadata.name}").stdout.split()
        if len(names) == count:
            return names
        time.sleep(0.1)
    raise AssertionError(f"pods {selector} in {namespace}: {names}, wanted {count}")


def test_a_deployment_applied_and_scaled_with_kubectl_runs_its_replicaset_s_pods(cluster, tmp_path) -> None:
    api, kubectl, _ = cluster
    manifest = tmp_path / "web.yaml"
    manifest.write_text("""\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: prod}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1", resources: {requests: {cpu: 100m, memory: 64Mi}}}]
""")
    assert kubectl("apply", "-f", str(manifest)).stdout.strip() == "deployment.apps/web created"
    pods = _wait_for_pods(kubectl, "prod", "app=web", 3)
    rs = _rows(kubectl("get", "rs", "-n", "prod").stdout)
    assert rs[0] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"] and len(rs) == 2
    assert all(p.startswith(rs[1][0] + "-") for p in pods)  # web-<pod-template-hash>-<suffix>
    scaled = kubectl("scale", "deployment/web", "-n", "prod", "--replicas=1").stdout.strip()
    assert scaled == "deployment.apps/web scaled"
    assert len(_wait_for_pods(kubectl, "prod", "app=web", 1)) == 1
    deploy = _rows(kubectl("get", "deployment", "web", "-n", "prod").stdout)
    assert deploy[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"] and deploy[1][0] == "web"


def test_the_deploy_files_apply_except_what_is_not_an_api_object_or_is_cert_managers(cluster) -> None:
    api, kubectl, _ = cluster
    applied = kubectl("apply", "-f", str(ROOT / "deploy" / "kubernetes"), ok=False)
    refused = {line.rsplit('no matches for kind "', 1)[1].split('"', 1)[0]
               for line in applied.stderr.splitlines() if "no matches for kind" in line}
    # configuration files of kube-apiserver and kube-scheduler, kustomize's, and cert-manager's custom resources
    assert refused <= {"AdmissionConfiguration", "Config", "KubeSchedulerConfiguration", "Issuer", "Certificate",
                       "Kustomization"}
    assert [line for line in applied.stderr.splitlines() if "no matches for kind" not in line] == []
    created = [line for line in applied.stdout.splitlines() if line.endswith(" created")]
    assert "namespace/kalena created" in created
    assert any(line.startswith("mutatingwebhookconfiguration.admissionregistration.k8s.io/") for line in created)
    assert any(line.startswith("clusterrolebinding.rbac.authorization.k8s.io/") for line in created)
    assert any(line.startswith("ingress.networking.k8s.io/") for line in created)
    again = kubectl("apply", "-f", str(ROOT / "deploy" / "kubernetes"), ok=False)
    assert [line for line in again.stdout.splitlines() if not line.endswith(" unchanged")] == []
