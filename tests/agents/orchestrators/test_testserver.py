"""The Kubernetes test API server against the real ``kubernetes`` client: what a user of the
client would see from a real API server (list/watch with resourceVersion, 410, bookmarks,
subresources, status codes, Status bodies)."""

from __future__ import annotations

import json
import threading

import pytest
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.rest import ApiException

from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod


@pytest.fixture
def api():
    with TestAPIServer(bookmark_interval_s=0.2) as server:
        yield server


@pytest.fixture
def core(api) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s.ApiClient(k8s.Configuration(host=api.url)))


def test_list_has_a_resource_version_selectors_and_consistent_pages(api, core) -> None:
    for i in range(5):
        api.create_pod(pod("batch", f"a-{i}", tier="batch"))
    api.create_pod(pod("web", "api-0", "node-a"))
    listed = core.list_pod_for_all_namespaces(field_selector="spec.schedulerName=kalena,spec.nodeName=")
    assert sorted(p.metadata.name for p in listed.items) == [f"a-{i}" for i in range(5)]
    assert int(listed.metadata.resource_version) == api.store.rv
    assert [p.metadata.name for p in core.list_namespaced_pod("web", label_selector="app=api").items] == ["api-0"]
    first = core.list_pod_for_all_namespaces(limit=4)
    api.create_pod(pod("batch", "late-0", tier="batch"))  # after the first page: not in the snapshot
    rest = core.list_pod_for_all_namespaces(limit=4, _continue=first.metadata._continue)
    names = [p.metadata.name for p in first.items + rest.items]
    assert len(names) == 6 and "late-0" not in names and rest.metadata._continue is None
    with pytest.raises(ApiException) as err:
        core.list_pod_for_all_namespaces(field_selector="spec.bogus=1")
    assert err.value.status == 400


def test_watch_streams_changes_after_the_list_version_in_order(api, core) -> None:
    api.create_pod(pod("batch", "a-0", tier="batch"))
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    api.create_pod(pod("batch", "b-0", tier="batch"))
    api.set_pod_phase("batch/a-0", "Running")
    api.delete_pod("batch/b-0")
    w = k8s_watch.Watch()
    seen = []
    for event in w.stream(core.list_pod_for_all_namespaces, resource_version=rv, timeout_seconds=2):
        seen.append((event["type"], event["object"].metadata.name, int(event["object"].metadata.resource_version)))
        if len(seen) == 3:
            w.stop()
    assert [(t, n) for t, n, _ in seen] == [("ADDED", "b-0"), ("MODIFIED", "a-0"), ("DELETED", "b-0")]
    assert [v for _, _, v in seen] == sorted(v for _, _, v in seen) and seen[0][2] > int(rv)
    assert api.requests[-1][1] == "/api/v1/pods"


def test_an_expired_version_is_410_to_the_client_and_to_its_one_retry(api, core) -> None:
    """kubernetes-client/python: Watch.stream retries once after an ERROR 410 and then raises."""
    api.create_pod(pod("batch", "a-0", tier="batch"))
    old = core.list_pod_for_all_namespaces().metadata.resource_version
    api.create_pod(pod("batch", "b-0", tier="batch"))
    api.compact()
    before = len(api.requests)
    with pytest.raises(ApiException) as err:
        for _ in k8s_watch.Watch().stream(core.list_pod_for_all_namespaces, resource_version=old):
            pass
    assert err.value.status == 410 and "too old resource version" in err.value.reason
    assert [r[:2] for r in api.requests[before:]] == [("GET", "/api/v1/pods")] * 2


def test_bookmarks_carry_the_current_version(api, core) -> None:
    rv = core.list_node().metadata.resource_version
    api.create("nodes", node("node-a"))
    events = []
    w = k8s_watch.Watch()
    for event in w.stream(core.list_node, resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=5):
        events.append(event)
        if event["type"] == "BOOKMARK":
            w.stop()
    assert events[0]["type"] == "ADDED" and events[-1]["type"] == "BOOKMARK"
    assert int(events[-1]["raw_object"]["metadata"]["resourceVersion"]) >= api.store.rv - 0


def _binding(name: str, node_name: str) -> k8s.V1Binding:
    return k8s.V1Binding(api_version="v1", kind="Binding", metadata=k8s.V1ObjectMeta(name=name),
                         target=k8s.V1ObjectReference(api_version="v1", kind="Node", name=node_name))


def test_binding_then_409_already_assigned_and_404_gone(api, core) -> None:
    api.create("nodes", node("node-a"))
    api.create_pod(pod("batch", "a-0", tier="batch"))
    core.create_namespaced_pod_binding("a-0", "batch", _binding("a-0", "node-a"), _preload_content=False)
    bound = api.get("pods", "batch/a-0")
    assert bound["spec"]["nodeName"] == "node-a" and bound["status"]["phase"] == "Running"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("a-0", "batch", _binding("a-0", "node-b"), _preload_content=False)
    assert err.value.status == 409 and 'already assigned to node "node-a"' in json.loads(err.value.body)["message"]
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("zz-0", "batch", _binding("zz-0", "node-a"), _preload_content=False)
    assert err.value.status == 404 and json.loads(err.value.body)["reason"] == "NotFound"


def test_eviction_respects_a_disruption_budget_with_a_429_status(api, core) -> None:
    api.create_pod(pod("batch", "p-0", "node-a", tier="batch", labels={"job": "p"}))
    api.add_pdb("batch", "p-budget", {"job": "p"}, max_unavailable=0)
    body = k8s.V1Eviction(api_version="policy/v1", kind="Eviction", metadata=k8s.V1ObjectMeta(name="p-0"),
                          delete_options=k8s.V1DeleteOptions(grace_period_seconds=30))
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("p-0", "batch", body, _preload_content=False)
    status = json.loads(err.value.body)
    assert err.value.status == 429 and status["kind"] == "Status" and status["reason"] == "TooManyRequests"
    assert "p-budget" in status["details"]["causes"][0]["message"]
    assert api.get("pods", "batch/p-0")["status"]["phase"] == "Running"
    api.store.delete("poddisruptionbudgets", "batch/p-budget")
    core.create_namespaced_pod_eviction("p-0", "batch", body, _preload_content=False)
    assert api.objects("pods") == []


def test_events_leases_and_status_patches(api, core) -> None:
    api.create("nodes", node("node-a"))
    api.create_pod(pod("batch", "a-0", tier="batch"))
    core.create_namespaced_event("batch", k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(generate_name="a-0."), involved_object=k8s.V1ObjectReference(
            kind="Pod", namespace="batch", name="a-0"), reason="FailedScheduling", message="0/1 nodes are available",
        type="Warning", source=k8s.V1EventSource(component="kalena")), _preload_content=False)
    (event,) = api.objects("events")
    assert event["reason"] == "FailedScheduling" and event["metadata"]["name"].startswith("a-0.")
    patch = {"status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                        "message": "0/1 nodes are available"}]}}
    core.patch_namespaced_pod_status("a-0", "batch", patch)  # the client sends a dict as a strategic merge patch
    core.patch_namespaced_pod_status("a-0", "batch", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}})
    conditions = {c["type"]: c for c in api.get("pods", "batch/a-0")["status"]["conditions"]}
    assert conditions["PodScheduled"]["reason"] == "Unschedulable" and "Ready" in conditions  # merged by type
    with pytest.raises(ApiException) as err:  # a JSON patch must be a list of operations
        core.patch_namespaced_pod_status("a-0", "batch", [{"op": "replace", "path": "/status/phase"}])
    assert err.value.status == 422
    core.patch_node_status("node-a", {"status": {"allocatable": {"kalena.naughtian.io/batch-cpu": "4000"}}},
                           _content_type="application/merge-patch+json")
    assert api.get("nodes", "node-a")["status"]["allocatable"]["kalena.naughtian.io/batch-cpu"] == "4000"
    coord = k8s.CoordinationV1Api(core.api_client)
    lease = k8s.V1Lease(metadata=k8s.V1ObjectMeta(name="kalena", namespace="kube-system"),
                        spec=k8s.V1LeaseSpec(holder_identity="a", lease_duration_seconds=15))
    coord.create_namespaced_lease("kube-system", lease)
    with pytest.raises(ApiException) as err:
        coord.create_namespaced_lease("kube-system", lease)
    assert err.value.status == 409
    current = coord.read_namespaced_lease("kalena", "kube-system")
    current.spec.holder_identity = "b"
    coord.replace_namespaced_lease("kalena", "kube-system", current)
    current.spec.holder_identity = "c"  # the same, now stale, resourceVersion
    with pytest.raises(ApiException) as err:
        coord.replace_namespaced_lease("kalena", "kube-system", current)
    assert err.value.status == 409 and "the object has been modified" in json.loads(err.value.body)["message"]
    assert coord.read_namespaced_lease("kalena", "kube-system").spec.holder_identity == "b"


def test_hooks_faults_and_the_request_log(api, core) -> None:
    api.pod_create_hooks.append(lambda p: p | {"metadata": p["metadata"] | {"annotations": {"mutated": "yes"}}})
    refused = []

    def refuse_gpu(p, node_name):
        if node_name == "gpu-0":
            refused.append(p["metadata"]["name"])
            from agents.orchestrators.kubernetes.teststore import APIError
            raise APIError(403, "Forbidden", "node gpu-0 takes no batch")
    api.bind_hooks.append(refuse_gpu)
    core.create_namespaced_pod("batch", k8s.V1Pod(metadata=k8s.V1ObjectMeta(name="a-0"), spec=k8s.V1PodSpec(
        containers=[k8s.V1Container(name="main", image="busybox")], scheduler_name="kalena")))
    assert api.get("pods", "batch/a-0")["metadata"]["annotations"] == {"mutated": "yes"}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_binding("a-0", "batch", _binding("a-0", "gpu-0"), _preload_content=False)
    assert err.value.status == 403 and refused == ["a-0"]
    api.fault("GET", r"^/api/v1/nodes$", code=503, reason="ServiceUnavailable")
    with pytest.raises(ApiException) as err:
        core.list_node()
    assert err.value.status == 503
    core.list_node()
    assert [r[:2] for r in api.requests] == [
        ("POST", "/api/v1/namespaces/batch/pods"), ("POST", "/api/v1/namespaces/batch/pods/a-0/binding"),
        ("GET", "/api/v1/nodes"), ("GET", "/api/v1/nodes")]


def test_drop_and_expire_end_open_watches(api, core) -> None:
    rv = core.list_pod_for_all_namespaces().metadata.resource_version
    got: list = []

    def watch() -> None:
        try:
            for e in k8s_watch.Watch().stream(core.list_pod_for_all_namespaces, resource_version=rv,
                                              timeout_seconds=30):
                got.append(e["type"])
        except ApiException as exc:
            got.append(exc.status)
    t = threading.Thread(target=watch)
    t.start()
    api.create_pod(pod("batch", "a-0", tier="batch"))
    import time
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        time.sleep(0.05)
    api.expire_watches()
    t.join(timeout=20)
    assert got == ["ADDED", 410]


def test_a_created_pods_qos_class_is_the_api_servers_from_its_cpu_and_memory(api, core) -> None:
    # kube-apiserver sets status.qosClass on create, after the mutating webhooks: `kubectl describe
    # pod` shows it while the pod is Pending. A pod converted to Kalena's extended resources alone
    # is BestEffort; requests equal to limits are Guaranteed.
    def make(name: str, resources: dict) -> str:
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "batch"},
                "spec": {"containers": [{"name": "c", "image": "busybox", "resources": resources}]}}
        core.create_namespaced_pod("batch", body)
        return core.read_namespaced_pod(name, "batch").status.qos_class

    same = {"cpu": "38m", "memory": "18Mi"}
    assert make("guaranteed", {"requests": same, "limits": same}) == "Guaranteed"
    assert make("burstable", {"requests": {"cpu": "10m"}}) == "Burstable"
    assert make("besteffort", {}) == "BestEffort"
    extended = {"kalena.naughtian.io/batch-cpu": "50", "kalena.naughtian.io/batch-memory": "16777216"}
    assert make("converted", {"requests": extended, "limits": extended}) == "BestEffort"
