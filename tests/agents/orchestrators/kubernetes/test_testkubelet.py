"""The test server's part-2 extensions against the real kubernetes client: pod CREATE through the
mutating webhook (JSON Patch applied, failurePolicy Ignore), kubelet-style admission against the
published extended resources (cases C10 and C11: OutOf… when a bind goes past them), TokenReview."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from agents.orchestrators.base import BatchSpec
from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.admission import review
from agents.orchestrators.kubernetes.testkubelet import MutatingWebhook, finish, kubelet_admission, token_reviews
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod

GIB = 2**30
BATCH = {"matchLabels": {"kalena.naughtian.io/tier": "batch"}}


@pytest.fixture
def api():
    with TestAPIServer(graceful=True, grace_scale=1.0) as server:
        server.bound_hooks[:] = [kubelet_admission]
        server.create("nodes", node("n1", cpu="8", memory="32Gi"))
        # C10's production: 7 cores / 24 GiB requested, bound and running
        server.create("pods", pod("prod", "web-0", "n1", cpu="7", memory="24Gi", limit_cpu="7", limit_memory="24Gi"))
        yield server


def kube(api) -> KubernetesOrchestrator:
    return KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)))


def c10_pod(name="train-0", cpu="4", memory="8Gi"):
    return pod("batch", name, tier="batch", owner_kind="Job", owner_name="train", cpu=cpu, memory=memory,
               limit_cpu=cpu, limit_memory=memory)


def test_c10_admitted_through_extended_resources(api):
    webhook = MutatingWebhook(call=review, object_selector=BATCH)
    api.pod_create_hooks.append(webhook)
    kube(api).publish_batch_capacity("n1", cpu_mcpu=6850, memory_bytes=24_481_313_587)
    status = api.get("nodes", "n1")["status"]
    assert status["allocatable"]["kalena.naughtian.io/batch-cpu"] == "6850"
    assert status["capacity"]["kalena.naughtian.io/batch-memory"] == "24481313587"
    api.create_pod(c10_pod())
    created = api.get("pods", "batch/train-0")
    assert created["spec"]["containers"][0]["resources"]["requests"] == {
        "kalena.naughtian.io/batch-cpu": "4000", "kalena.naughtian.io/batch-memory": str(8 * GIB)}
    assert created["spec"]["schedulerName"] == "kalena" and webhook.calls == 1
    kube(api).bind(BatchSpec(id="batch/train-0"), "n1")
    bound = api.get("pods", "batch/train-0")
    assert (bound["status"]["phase"], bound["status"]["qosClass"]) == ("Running", "BestEffort")
    finish(api, "batch/train-0")
    assert api.get("pods", "batch/train-0")["status"]["phase"] == "Succeeded"


def test_without_the_webhook_the_kubelet_refuses_out_of_cpu(api):
    broken = MutatingWebhook(url="https://127.0.0.1:21999/nowhere", timeout_s=0.5, object_selector=BATCH)
    api.pod_create_hooks.append(broken)  # failurePolicy Ignore: the pod is created as it was
    api.create_pod(c10_pod())
    assert broken.failures == 1
    kube(api).bind(BatchSpec(id="batch/train-0"), "n1")
    refused = api.get("pods", "batch/train-0")["status"]
    # 7 + 4 = 11 > 8 cores
    assert (refused["phase"], refused["reason"]) == ("Failed", "OutOfcpu")
    assert "requested: 4000, used: 7000, capacity: 8000" in refused["message"]


def test_c11_bind_forced_past_a_terminating_victim_fails_admission(api):
    api.pod_create_hooks.append(MutatingWebhook(call=review, object_selector=BATCH))
    kube(api).publish_batch_capacity("n1", cpu_mcpu=4000, memory_bytes=24 * GIB)
    api.create_pod(c10_pod("v-0", cpu="3", memory="1Gi"))
    kube(api).bind(BatchSpec(id="batch/v-0"), "n1")
    assert api.get("pods", "batch/v-0")["status"]["phase"] == "Running"
    kube(api).evict("batch/v-0", grace_s=30, reason="test")  # terminating for 30 s: still counted
    assert api.get("pods", "batch/v-0")["metadata"]["deletionTimestamp"]
    api.create_pod(c10_pod("w-0", cpu="2", memory="1Gi"))
    kube(api).bind(BatchSpec(id="batch/w-0"), "n1")
    w = api.get("pods", "batch/w-0")["status"]
    # 3000 (V, terminating) + 2000 > 4000
    assert (w["phase"], w["reason"]) == ("Failed", "OutOfkalena.naughtian.io/batch-cpu")


def test_webhook_denial_refuses_the_create(api):
    api.pod_create_hooks.append(MutatingWebhook(call=review, object_selector=BATCH))
    core = k8s.CoreV1Api(k8s.ApiClient(k8s.Configuration(host=api.url)))
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod("batch", c10_pod(cpu="4x"))
    assert info.value.status == 400
    assert "denied the request" in info.value.body and "resources.limits.cpu: '4x' is not a Kubernetes quantity" in info.value.body
    assert [p["metadata"]["name"] for p in api.objects("pods")] == ["web-0"]  # nothing created


def test_token_review_with_the_real_client(api):
    token_reviews(api, {"tok-n1": {"username": "system:serviceaccount:kalena-system:kalena-agent", "node": "n1"}})
    auth = k8s.AuthenticationV1Api(k8s.ApiClient(k8s.Configuration(host=api.url)))
    ok = auth.create_token_review(k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token="tok-n1")))
    assert ok.status.authenticated and ok.status.user.extra["authentication.kubernetes.io/node-name"] == ["n1"]
    bad = auth.create_token_review(k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token="forged")))
    assert bad.status.authenticated is False
