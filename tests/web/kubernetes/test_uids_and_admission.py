"""Kubernetes joints that only show on a real-shaped cluster, through the test API server and the
real ``kubernetes`` client: the Binding carries the pod's uid (a pod deleted and re-created under
its name between decision and bind is not bound with the old decision), Kalena's Events carry
``involvedObject.uid`` (what ``kubectl describe pod`` selects them by), and the published batch
floor counts only pods the kubelet admitted (docs/design.md §14)."""

from __future__ import annotations

import numpy as np
import pytest
from kubernetes import client as k8s

from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.admission import review
from agents.orchestrators.kubernetes.testkubelet import MutatingWebhook
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod
from agents.orchestrators.kubernetes.watch import KubernetesWatcher
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU
from kalena_web.control.reconciler import Reconciler
from kalena_web.kubehooks.models import PublishedBatch
from kalena_web.kubehooks.services import batch_capacity_publish
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import scheduling_pass
from tests.web.live_cluster import NODES

BUCKETS = (50.0, 128.0 * 2**20)
BATCH_CPU = "kalena.naughtian.io/batch-cpu"


@pytest.fixture
def api():
    with TestAPIServer() as server:
        server.bound_hooks[:] = []  # no kubelet: a bound pod stays Pending until a test admits it
        server.pod_create_hooks.append(MutatingWebhook(call=review, object_selector={
            "matchLabels": {"kalena.naughtian.io/tier": "batch"}}))
        for name in NODES:
            server.create("nodes", node(name, cpu="4", memory="16Gi"))
        yield server


def orchestrator(api: TestAPIServer) -> KubernetesOrchestrator:
    return KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)), request_timeout_s=5.0)


def job_pod(name: str, cpu: str) -> dict:
    """A Job's pod as the Job controller makes it (ownerReferences to the Job, its labels)."""
    return pod("batch", name, tier="batch", owner_kind="Job", owner_name="train", cpu=cpu, memory="1Gi",
               limit_cpu=cpu, limit_memory="1Gi", labels={"job-name": "train", "batch.kubernetes.io/job-name": "train"})


def seen(rec: Reconciler, watcher: KubernetesWatcher, event_type: str, obj: dict) -> None:
    rec.apply_all(watcher._translate("pods", event_type, obj))


def test_a_pod_recreated_under_its_name_is_not_bound_with_the_old_decision(live, api) -> None:
    core = orchestrator(api)
    watcher = KubernetesWatcher(core)
    rec = Reconciler(cluster=live, clock=lambda: 1000.0)
    api.create_pod(job_pod("train-0", cpu="500m"))
    old = api.get("pods", "batch/train-0")
    seen(rec, watcher, "ADDED", old)
    assert BatchPod.objects.get(workload__name="batch/train-0").uid == old["metadata"]["uid"]
    # deleted and re-created under its name (a 1.5-core pod now) before Kalena's watch hears of it
    api.delete_pod("batch/train-0")
    api.create_pod(job_pod("train-0", cpu="1500m"))
    new = api.get("pods", "batch/train-0")
    assert new["metadata"]["uid"] != old["metadata"]["uid"]
    report = scheduling_pass(cluster=live, orchestrator=core, policy=Policy(), now_s=1001.0,
                             rng=np.random.default_rng(0))
    assert not api.get("pods", "batch/train-0")["spec"].get("nodeName")  # not bound with the old decision
    bindings = [body for verb, path, body in api.requests if verb == "POST" and path.endswith("/binding")]
    assert bindings[-1]["metadata"]["uid"] == old["metadata"]["uid"]
    assert report.stale_bindings == 1 and "Precondition failed: UID in precondition" in report.errors[0]
    assert sum(led.batch_request[CPU] for led in LiveNodeLedger.objects.filter(node__cluster=live)) == 0
    # the watch now reports the deletion and the new pod: queued and decided afresh, at its own request
    seen(rec, watcher, "DELETED", old)
    seen(rec, watcher, "ADDED", new)
    fresh = BatchPod.objects.select_related("workload").get(workload__name="batch/train-0")
    assert (fresh.state, fresh.uid) == ("pending", new["metadata"]["uid"])
    report = scheduling_pass(cluster=live, orchestrator=core, policy=Policy(), now_s=1002.0,
                             rng=np.random.default_rng(0))
    assert report.placed == 1
    where = api.get("pods", "batch/train-0")["spec"]["nodeName"]
    bindings = [body for verb, path, body in api.requests if verb == "POST" and path.endswith("/binding")]
    assert bindings[-1]["metadata"]["uid"] == new["metadata"]["uid"]
    assert {led.node.name: led.batch_request[CPU] for led in LiveNodeLedger.objects.filter(
        node__cluster=live, batch_request__isnull=False).select_related("node") if led.batch_request[CPU]} == {
        where: 1500.0}  # the new pod's request once, nothing left of the old one
    # Kalena's Scheduled Event is the new pod's: kubectl describe pod finds it by uid
    assert core.flush_events()
    events = k8s.CoreV1Api(core.api_client).list_namespaced_event(
        "batch", field_selector=f"involvedObject.kind=Pod,involvedObject.name=train-0,involvedObject.namespace=batch,"
                                f"involvedObject.uid={new['metadata']['uid']}")
    assert [(e.reason, e.involved_object.uid) for e in events.items] == [("Scheduled", new["metadata"]["uid"])]
    stale = k8s.CoreV1Api(core.api_client).list_namespaced_event(
        "batch", field_selector=f"involvedObject.uid={old['metadata']['uid']}")
    assert stale.items == []


def test_an_event_without_a_decision_still_names_the_pod_uid(live, api) -> None:
    """A FailedScheduling Event (no binding, nothing Kalena decided) carries the uid too: the one
    the watch saw under that name."""
    core = orchestrator(api)
    watcher = KubernetesWatcher(core)
    core.watchers.append(watcher)
    rec = Reconciler(cluster=live, clock=lambda: 1000.0)
    api.create_pod(job_pod("huge-0", cpu="64"))
    obj = api.get("pods", "batch/huge-0")
    seen(rec, watcher, "ADDED", obj)
    report = scheduling_pass(cluster=live, orchestrator=core, policy=Policy(), now_s=1001.0,
                             rng=np.random.default_rng(0))
    assert report.placed == 0
    assert core.flush_events()
    events = k8s.CoreV1Api(core.api_client).list_namespaced_event(
        "batch", field_selector=f"involvedObject.uid={obj['metadata']['uid']}")
    assert {e.reason for e in events.items} == {"FailedScheduling"}


def test_a_pod_bound_but_not_admitted_does_not_raise_the_published_floor(live, api) -> None:
    core = orchestrator(api)
    watcher = KubernetesWatcher(core)
    rec = Reconciler(cluster=live, clock=lambda: 1000.0)
    assert batch_capacity_publish(cluster=live, orchestrator=core, now_s=1000.0, buckets=BUCKETS) == 3
    node_name = NODES[0]
    room = int(api.get("nodes", node_name)["status"]["allocatable"][BATCH_CPU])
    assert 0 < room < 4000
    # someone else binds a 10^15 m batch pod there (the webhook moved it to batch-cpu); the kubelet
    # has not admitted it (it would refuse it: OutOfkalena.naughtian.io/batch-cpu)
    api.create_pod(job_pod("greedy-0", cpu=f"{10**15}m"))
    assert pod_requests_batch_cpu(api.get("pods", "batch/greedy-0")) == str(10**15)
    seen(rec, watcher, "ADDED", api.get("pods", "batch/greedy-0"))  # queued: no node has room for it
    k8s.CoreV1Api(core.api_client).create_namespaced_pod_binding("greedy-0", "batch", {
        "apiVersion": "v1", "kind": "Binding", "metadata": {"name": "greedy-0", "namespace": "batch"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name}}, _preload_content=False)
    bound = api.get("pods", "batch/greedy-0")
    assert (bound["spec"]["nodeName"], bound["status"]["phase"]) == (node_name, "Pending")
    seen(rec, watcher, "MODIFIED", bound)
    assert BatchPod.objects.get(workload__name="batch/greedy-0").state == "bound"  # adopted where it was bound
    for now_s in (1001.0, 1040.0):  # neither at once nor after the raise interval
        batch_capacity_publish(cluster=live, orchestrator=core, now_s=now_s, buckets=BUCKETS)
        assert int(api.get("nodes", node_name)["status"]["allocatable"][BATCH_CPU]) == room
    # the kubelet admits it and it runs: now the kubelet counts it, and so does the floor
    api.set_pod_phase("batch/greedy-0", "Running")
    seen(rec, watcher, "MODIFIED", api.get("pods", "batch/greedy-0"))
    batch_capacity_publish(cluster=live, orchestrator=core, now_s=1080.0, buckets=BUCKETS)
    assert int(api.get("nodes", node_name)["status"]["allocatable"][BATCH_CPU]) == 10**15
    assert PublishedBatch.objects.get(node__cluster=live, node__name=node_name).cpu_mcpu == 10**15


def pod_requests_batch_cpu(obj: dict) -> str:
    return obj["spec"]["containers"][0]["resources"]["requests"][BATCH_CPU]
