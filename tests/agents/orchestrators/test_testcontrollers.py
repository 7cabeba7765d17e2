"""The test API server's Job controller double through the real ``kubernetes`` client: a
Job's pods, replacements, ``backoffLimit``, ``podFailurePolicy`` ignoring an eviction, Complete."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client as k8s

from agents.orchestrators.kubernetes.testserver import TestAPIServer, node


def _job(name: str, *, backoff_limit: int = 6, ignore_disruption: bool = False, parallelism: int = 1,
         completions: int = 1) -> dict:
    spec: dict = {"backoffLimit": backoff_limit, "parallelism": parallelism, "completions": completions,
                  "template": {"metadata": {"labels": {"kalena.naughtian.io/tier": "batch"}},
                               "spec": {"schedulerName": "kalena", "restartPolicy": "Never",
                                        "containers": [{"name": "work", "image": "kalena/busybox:test"}]}}}
    if ignore_disruption:
        spec["podFailurePolicy"] = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "batch"}, "spec": spec}


@pytest.fixture
def api():
    with TestAPIServer() as server:
        server.create("nodes", node("node-a"))
        yield server


@pytest.fixture
def clients(api):
    client = k8s.ApiClient(k8s.Configuration(host=api.url))
    return k8s.BatchV1Api(client), k8s.CoreV1Api(client)


def _until(read, check, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    value = read()
    while not check(value) and time.monotonic() < deadline:
        time.sleep(0.05)
        value = read()
    assert check(value), f"still {value!r} after {timeout_s}s"
    return value


def _pods(core, job: str) -> list[dict]:
    listed = core.list_namespaced_pod("batch", label_selector=f"job-name={job}", _preload_content=False)
    return [p for p in json.loads(listed.data)["items"] if not p["metadata"].get("deletionTimestamp")]


def _status(batch, job: str) -> dict:
    return json.loads(batch.read_namespaced_job(job, "batch", _preload_content=False).data).get("status") or {}


def test_a_job_gets_pods_shaped_as_the_job_controller_makes_them(api, clients) -> None:
    batch, core = clients
    created = batch.create_namespaced_job("batch", _job("crunch", parallelism=2, completions=3))
    pods = _until(lambda: _pods(core, "crunch"), lambda ps: len(ps) == 2)  # parallelism 2 of 3 completions
    for p in pods:
        assert p["metadata"]["name"].startswith("crunch-")
        owner = p["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == \
            ("Job", "crunch", created.metadata.uid, True)
        assert p["metadata"]["labels"]["controller-uid"] == created.metadata.uid
        assert p["metadata"]["labels"]["kalena.naughtian.io/tier"] == "batch"
        assert p["spec"]["schedulerName"] == "kalena" and p["status"]["phase"] == "Pending"
    # two succeed: one more pod for the third completion; then Complete
    for p in pods:
        api.set_pod_phase(f"batch/{p['metadata']['name']}", "Succeeded", exit_code=0)
    third = _until(lambda: [q for q in _pods(core, "crunch") if q["status"]["phase"] == "Pending"],
                   lambda ps: len(ps) == 1)
    api.set_pod_phase(f"batch/{third[0]['metadata']['name']}", "Succeeded", exit_code=0)
    status = _until(lambda: _status(batch, "crunch"), lambda s: s.get("completionTime"))
    assert status["succeeded"] == 3 and [c["type"] for c in status["conditions"]] == ["Complete"]


@pytest.mark.parametrize(("ignore_disruption", "failed_after_eviction"), [
    pytest.param(True, 0, id="podFailurePolicy-ignores-DisruptionTarget"),
    pytest.param(False, 1, id="no-policy-an-eviction-counts-as-a-failure"),
])
def test_an_evicted_pod_is_replaced_and_counted_per_the_pod_failure_policy(api, clients, ignore_disruption,
                                                                          failed_after_eviction) -> None:
    batch, core = clients
    batch.create_namespaced_job("batch", _job("crunch", ignore_disruption=ignore_disruption))
    first = _until(lambda: _pods(core, "crunch"), lambda ps: len(ps) == 1)[0]["metadata"]["name"]
    core.create_namespaced_pod_eviction(first, "batch", {"apiVersion": "policy/v1", "kind": "Eviction",
                                                         "metadata": {"name": first, "namespace": "batch"}})
    second = _until(lambda: _pods(core, "crunch"), lambda ps: len(ps) == 1 and ps[0]["metadata"]["name"] != first)
    assert second[0]["metadata"]["name"] != first
    assert int(_status(batch, "crunch").get("failed") or 0) == failed_after_eviction


def test_failures_past_the_backoff_limit_fail_the_job_and_stop_replacements(api, clients) -> None:
    batch, core = clients
    batch.create_namespaced_job("batch", _job("crunch", backoff_limit=1))
    seen: list[str] = []
    for _ in range(2):  # backoffLimit 1: the second failure is one too many
        current = _until(lambda: _pods(core, "crunch"),
                         lambda ps: any(p["metadata"]["name"] not in seen and p["status"]["phase"] == "Pending"
                                        for p in ps))
        name = next(p["metadata"]["name"] for p in current if p["metadata"]["name"] not in seen)
        seen.append(name)
        api.set_pod_phase(f"batch/{name}", "Failed", reason="Error", exit_code=1)
    status = _until(lambda: _status(batch, "crunch"), lambda s: s.get("conditions"))
    assert status["failed"] == 2
    assert [(c["type"], c["reason"]) for c in status["conditions"]] == [("Failed", "BackoffLimitExceeded")]
    # the reconcile that set Failed returned before creating pods, and a failed Job is not reconciled again
    assert sorted(p["metadata"]["name"] for p in _pods(core, "crunch")) == sorted(seen)


def test_a_replacement_the_api_refused_is_created_once_admission_takes_it(api, clients) -> None:
    """A pod creation the API refuses (a webhook with ``failurePolicy: Fail`` that did not
    answer) is retried, as the Job controller requeues a sync that failed: the Job is not left
    without its pod until some other change touches it."""
    from agents.orchestrators.kubernetes.teststore import APIError

    batch, core = clients
    batch.create_namespaced_job("batch", _job("crunch"))
    first = _until(lambda: _pods(core, "crunch"), lambda ps: len(ps) == 1)[0]["metadata"]["name"]
    refused: list[str] = []

    def webhook_down(pod: dict) -> None:
        if len(refused) < 2:
            refused.append(pod["metadata"].get("generateName", ""))
            raise APIError(500, "InternalError", 'Internal error occurred: failed calling webhook "w": timeout')

    api.pod_create_hooks.append(webhook_down)
    api.set_pod_phase(f"batch/{first}", "Failed", reason="Error", exit_code=143)
    replacement = _until(lambda: _pods(core, "crunch"), lambda ps: any(p["metadata"]["name"] != first for p in ps))
    assert refused == ["crunch-", "crunch-"]
    assert len([p for p in replacement if p["metadata"]["name"] != first]) == 1
    assert int(_status(batch, "crunch").get("failed") or 0) == 1


def _deployment(image: str, replicas: int = 3) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "prod"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "web", "image": image}]}}}}


def _owned(api, resource: str, owner_uid: str) -> list[dict]:
    return [o for o in api.objects(resource) if not o["metadata"].get("deletionTimestamp")
            and any(r.get("uid") == owner_uid and r.get("controller")
                    for r in o["metadata"].get("ownerReferences") or [])]


def test_a_deployment_gets_a_replicaset_per_template_and_pods_with_its_hash(api) -> None:
    apps = k8s.AppsV1Api(k8s.ApiClient(k8s.Configuration(host=api.url)))
    deploy = apps.create_namespaced_deployment("prod", _deployment("nginx:1"))
    first_rs = _until(lambda: _owned(api, "replicasets", deploy.metadata.uid), lambda rs: len(rs) == 1)[0]
    digest = first_rs["metadata"]["labels"]["pod-template-hash"]
    assert first_rs["metadata"]["name"] == f"web-{digest}"
    assert first_rs["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": digest}
    pods = _until(lambda: _owned(api, "pods", first_rs["metadata"]["uid"]), lambda ps: len(ps) == 3)
    assert all(p["metadata"]["name"].startswith(f"web-{digest}-") for p in pods)
    assert all(p["metadata"]["labels"] == {"app": "web", "pod-template-hash": digest} for p in pods)

    # a rollout: a new template → a new ReplicaSet with another hash; the old one scaled to 0
    apps.patch_namespaced_deployment("web", "prod", {"spec": {"template": {"spec": {"containers": [
        {"name": "web", "image": "nginx:2"}]}}}})
    both = _until(lambda: _owned(api, "replicasets", deploy.metadata.uid), lambda rs: len(rs) == 2)
    second = next(rs for rs in both if rs["metadata"]["name"] != first_rs["metadata"]["name"])
    assert second["metadata"]["labels"]["pod-template-hash"] != digest
    old_rs = f"prod/{first_rs['metadata']['name']}"
    _until(lambda: api.get("replicasets", old_rs)["spec"]["replicas"], lambda n: n == 0)
    _until(lambda: _owned(api, "pods", first_rs["metadata"]["uid"]), lambda ps: ps == [])
    new_pods = _until(lambda: _owned(api, "pods", second["metadata"]["uid"]), lambda ps: len(ps) == 3)
    assert {p["spec"]["containers"][0]["image"] for p in new_pods} == {"nginx:2"}

    # a deleted pod is replaced by its ReplicaSet
    gone = new_pods[0]["metadata"]["name"]
    api.delete_pod(f"prod/{gone}")
    again = _until(lambda: _owned(api, "pods", second["metadata"]["uid"]),
                   lambda ps: len(ps) == 3 and gone not in {p["metadata"]["name"] for p in ps})
    assert len(again) == 3


@pytest.mark.parametrize("policy", ["OrderedReady", "Parallel"])
def test_a_statefulset_gets_ordinals_in_order_and_recreates_a_lost_one_under_its_name(api, policy) -> None:
    apps = k8s.AppsV1Api(k8s.ApiClient(k8s.Configuration(host=api.url)))
    apps.create_namespaced_stateful_set("db", {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "pg", "namespace": "db"},
        "spec": {"replicas": 3, "serviceName": "pg", "podManagementPolicy": policy,
                 "selector": {"matchLabels": {"app": "pg"}},
                 "template": {"metadata": {"labels": {"app": "pg"}},
                              "spec": {"containers": [{"name": "pg", "image": "postgres:16"}]}}}})

    def names() -> list[str]:
        return sorted(p["metadata"]["name"] for p in api.objects("pods"))
    if policy == "OrderedReady":  # pg-1 only once pg-0 runs, pg-2 once pg-1 runs
        assert _until(names, lambda ns: ns == ["pg-0"]) == ["pg-0"]
        api.set_pod_phase("db/pg-0", "Running")
        _until(names, lambda ns: ns == ["pg-0", "pg-1"])
        api.set_pod_phase("db/pg-1", "Running")
    _until(names, lambda ns: ns == ["pg-0", "pg-1", "pg-2"])
    pg1 = api.get("pods", "db/pg-1")
    assert pg1["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"] == "pg-1"
    assert pg1["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == "1"
    assert (pg1["spec"]["hostname"], pg1["spec"]["subdomain"]) == ("pg-1", "pg")
    api.delete_pod("db/pg-1")
    again = _until(lambda: [p for p in api.objects("pods") if p["metadata"]["name"] == "pg-1"], lambda ps: len(ps) == 1)
    assert again[0]["metadata"]["uid"] != pg1["metadata"]["uid"]  # a new pod under the same name


def test_a_daemonset_runs_one_pod_per_fitting_node_cordoned_included(api) -> None:
    api.create("nodes", node("node-b", unschedulable=True))
    api.create("nodes", node("node-gpu", taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}]))
    apps = k8s.AppsV1Api(k8s.ApiClient(k8s.Configuration(host=api.url)))
    apps.create_namespaced_daemon_set("kalena-system", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "kalena-system"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "agent", "image": "kalena/agent:test"}]}}}})
    pods = _until(lambda: api.objects("pods"), lambda ps: len(ps) == 2)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["node-a", "node-b"]  # the tainted node is not tolerated
    assert all(p["status"]["phase"] == "Running" for p in pods)  # bound at creation: the kubelet hook ran
    terms = pods[0]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [pods[0]["spec"]["nodeName"]]
    status = _until(lambda: api.get("daemonsets", "kalena-system/agent").get("status") or {},
                    lambda s: s.get("numberReady") == 2)
    assert status["desiredNumberScheduled"] == 2
    api.create("nodes", node("node-c"))  # a node joins: it gets the DaemonSet's pod
    joined = _until(lambda: api.objects("pods"), lambda ps: len(ps) == 3)
    assert sorted(p["spec"]["nodeName"] for p in joined) == ["node-a", "node-b", "node-c"]
