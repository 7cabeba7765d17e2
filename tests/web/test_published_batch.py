"""Published batch capacity on a live cluster (docs/design.md §14): the 5 s loop patches each node's
status through the real client on the test API server, lowered at once and raised lazily; and
case C11 in the control plane: a node still releasing an evicted pod takes no batch beyond what
it publishes, why-pending names it releasing the victim, and the pod binds once the victim is gone."""

from __future__ import annotations

import math

import numpy as np
import pytest
from kubernetes import client as k8s

from agents.orchestrators import FakeOrchestrator
from agents.orchestrators.events import NodeSeen, PodFinished, PodGone, PodPending, PodRunning
from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node
from kalena_engine.policy import Policy
from kalena_web.control.reconciler import Reconciler
from kalena_web.inventory.models import Cluster
from kalena_web.kubehooks.models import PublishedBatch
from kalena_web.kubehooks.services import batch_capacity_publish
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod, WhyPending
from kalena_web.scheduling.services import pending_message, scheduling_pass
from tests.web.live_cluster import NODES

GIB = 2**30
INF = math.inf
BUCKETS = (50.0, 128.0 * 2**20)


def vec(cores: float, gib: float) -> tuple:
    return (cores * 1000, gib * GIB, 0.0, INF, INF, INF, INF, INF)


def req(cores: float, gib: float) -> tuple:
    return (cores * 1000, gib * GIB, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@pytest.fixture
def api():
    with TestAPIServer() as server:
        for name in NODES:
            server.create("nodes", node(name, cpu="4", memory="16Gi"))
        yield server


def test_publish_patches_changed_nodes_and_follows_the_hysteresis(live, api):
    kube = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)))
    assert batch_capacity_publish(cluster=live, orchestrator=kube, now_s=1000.0, buckets=BUCKETS) == 3
    led = LiveNodeLedger.objects.select_related("node").get(node__cluster=live, node__name=NODES[0])
    room = np.asarray(led.capacity) - np.asarray(led.prod_reservation)  # no batch yet: room = slack
    status = api.get("nodes", NODES[0])["status"]
    assert status["allocatable"]["kalena.naughtian.io/batch-cpu"] == str(int(room[0]))
    assert status["capacity"]["kalena.naughtian.io/batch-memory"] == str(int(room[1]))
    patches = sum(1 for verb, path, _ in api.requests if verb == "PATCH" and path.endswith("/status"))
    assert patches == 3
    # nothing changed: no patch at all (no patch storm)
    assert batch_capacity_publish(cluster=live, orchestrator=kube, now_s=1005.0, buckets=BUCKETS) == 0
    # production's reservation rises by 0.5 core on node 0: lowered at once (5 s after the last change)
    LiveNodeLedger.objects.filter(id=led.id).update(prod_reservation=(np.asarray(led.prod_reservation) + req(0.5, 0)).tolist())
    assert batch_capacity_publish(cluster=live, orchestrator=kube, now_s=1010.0, buckets=BUCKETS) == 1
    assert PublishedBatch.objects.get(node=led.node).cpu_mcpu == int(room[0]) - 500
    # …and falls back: +500 mcpu ≥ one 50 mcpu bucket, but only 10 s after the change → kept until 30 s
    LiveNodeLedger.objects.filter(id=led.id).update(prod_reservation=led.prod_reservation)
    assert batch_capacity_publish(cluster=live, orchestrator=kube, now_s=1020.0, buckets=BUCKETS) == 0
    assert batch_capacity_publish(cluster=live, orchestrator=kube, now_s=1040.0, buckets=BUCKETS) == 1
    assert PublishedBatch.objects.get(node=led.node).cpu_mcpu == int(room[0])


def test_publish_refused_patch_keeps_the_old_value(live, api):
    kube = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)))
    api.fault("PATCH", r"/status$", code=500, times=10)
    assert batch_capacity_publish(cluster=live, orchestrator=kube, now_s=1000.0, buckets=BUCKETS) == 0
    assert not PublishedBatch.objects.filter(node__cluster=live).exists()  # tried again next pass
    assert batch_capacity_publish(cluster=live, orchestrator=FakeOrchestrator(), now_s=1000.0, buckets=BUCKETS) == 0


def test_case_c11_w_waits_for_the_victim_to_be_terminal(db):
    cluster = Cluster.objects.create(name="c11", kind=Cluster.LIVE)
    rec = Reconciler(cluster, clock=lambda: 1000.0)
    rec.apply(NodeSeen("n1", True, True, vec(16, 64), at_s=1000.0))
    rec.apply(NodeSeen("n2", True, True, vec(1, 64), at_s=1000.0))  # no other node has room for 2 cores
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=1000.0)
    for led in LiveNodeLedger.objects.filter(node__cluster=cluster).select_related("node"):
        PublishedBatch.objects.create(node=led.node, cpu_mcpu=4000.0 if led.node.name == "n1" else 1000.0,
                                      memory_bytes=64 * GIB, changed_s=1000.0)
    fake = FakeOrchestrator(node_names=["n1", "n2"])
    rec.apply(PodPending("batch/v", req(3, 1), req(3, 1), owner="Job/v", at_s=1000.0))
    assert scheduling_pass(cluster=cluster, orchestrator=fake, policy=Policy(), now_s=1001.0,
                           rng=np.random.default_rng(0)).placed == 1
    rec.apply(PodRunning("batch/v", "n1", at_s=1002.0))
    # V evicted at t = 0 of C11 with a 30 s grace: Kalena credits it at once (case C4), its object remains
    rec.apply(PodFinished("batch/v", "n1", "evicted", reason="Evicted", at_s=1003.0))
    rec.apply(PodPending("batch/w", req(2, 1), req(2, 1), owner="Job/w", at_s=1004.0))
    report = scheduling_pass(cluster=cluster, orchestrator=fake, policy=Policy(), now_s=1005.0,
                             rng=np.random.default_rng(0))
    assert report.placed == 0  # 3000 + 2000 > 4000 would fail OutOfkalena.naughtian.io/batch-cpu
    why = WhyPending.objects.get(pod__workload__name="batch/w")
    assert why.binding == "releasing"
    releasing = [r for r in why.record["rejections"] if r["kind"] == "releasing"]
    assert [(r["node"], r["releasing"], r["releasing_amount"]) for r in releasing] == [("n1", ["batch/v"], 3.0)]
    # the FailedScheduling text says so too
    assert pending_message(why.record) == ("0/2 nodes are available: 1 Insufficient cpu slack, 1 releasing. "
                                           "n1 is releasing batch/v (3 cores of cpu).")
    # V terminal and gone: W binds there
    rec.apply(PodGone("batch/v", at_s=1033.0))
    report = scheduling_pass(cluster=cluster, orchestrator=fake, policy=Policy(), now_s=1034.0,
                             rng=np.random.default_rng(0))
    assert report.placed == 1 and fake.running["batch/w"].node == "n1"
    assert not BatchPod.objects.filter(cluster=cluster, state=BatchPod.REFUSED).exists()


def test_case_c10_published_room_admits_the_converted_pod(db):
    """C10: 8 cores / 32 GiB; production requests 7 / 24 and its reservations settled at
    1.15 cores / 9.2 GiB (seeded) → Kalena publishes 6850 mcpu and ⌊22.8 GiB⌋ = 24,481,313,587
    bytes; the 4-core / 8 GiB batch pod, converted by the webhook, is placed there and admitted
    by the kubelet (4000 ≤ 6850 batch-cpu), where plain requests would have been 7 + 4 > 8."""
    from agents.orchestrators.events import ProductionSeen
    from agents.orchestrators.kubernetes.admission import review
    from agents.orchestrators.kubernetes.testkubelet import MutatingWebhook, kubelet_admission
    from agents.orchestrators.kubernetes.testserver import pod as api_pod
    from kalena_web.ledger.models import WorkloadReservation

    cluster = Cluster.objects.create(name="c10", kind=Cluster.LIVE)
    rec = Reconciler(cluster, clock=lambda: 1000.0)
    rec.apply(NodeSeen("n1", True, True, vec(8, 32), at_s=1000.0))
    rec.apply(ProductionSeen("prod/web-0", "n1", req(7, 24), req(7, 24), at_s=1000.0))
    prod_r = req(1.15, 9.2)
    WorkloadReservation.objects.filter(workload__name="prod/web-0").update(value=list(prod_r))
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=1000.0,
                                                                prod_reservation=list(prod_r))
    with TestAPIServer() as api:
        api.bound_hooks[:] = [kubelet_admission]
        api.pod_create_hooks.append(MutatingWebhook(call=review, object_selector={
            "matchLabels": {"kalena.naughtian.io/tier": "batch"}}))
        api.create("nodes", node("n1", cpu="8", memory="32Gi"))
        api.create("pods", api_pod("prod", "web-0", "n1", cpu="7", memory="24Gi", limit_cpu="7", limit_memory="24Gi"))
        kube = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)))
        assert batch_capacity_publish(cluster=cluster, orchestrator=kube, now_s=1000.0, buckets=BUCKETS) == 1
        allocatable = api.get("nodes", "n1")["status"]["allocatable"]
        assert allocatable["kalena.naughtian.io/batch-cpu"] == "6850"            # in [4000, 6850]
        assert allocatable["kalena.naughtian.io/batch-memory"] == "24481313587"  # in [8 GiB, 22.8 GiB]
        api.create_pod(api_pod("batch", "c10-0", tier="batch", owner_kind="Job", owner_name="c10", cpu="4",
                               memory="8Gi", limit_cpu="4", limit_memory="8Gi"))
        rec.apply(PodPending("batch/c10-0", req(4, 8), req(4, 8), owner="Job/c10", at_s=1001.0))
        assert scheduling_pass(cluster=cluster, orchestrator=kube, policy=Policy(), now_s=1002.0,
                               rng=np.random.default_rng(0)).placed == 1
        admitted = api.get("pods", "batch/c10-0")["status"]
        assert (admitted["phase"], admitted["qosClass"]) == ("Running", "BestEffort")
        # the bound pod now holds 4000 of it: the room stays S + Σ q_b = 2.85 + 4 = 6.85 cores, nothing to patch
        assert batch_capacity_publish(cluster=cluster, orchestrator=kube, now_s=1003.0, buckets=BUCKETS) == 0


def test_the_publish_loop_runs_only_for_kubernetes(live, api, settings, tmp_path, monkeypatch):
    from kalena_web.kubehooks.tasks import publish

    settings.KALENA_ORCHESTRATOR = "fake"
    assert publish() == {} and not PublishedBatch.objects.exists()
    kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
    # KUBECONFIG is read when the client is imported: point its default location at the file
    monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
    settings.KALENA_ORCHESTRATOR = "kubernetes"
    default = k8s.Configuration.get_default_copy()
    try:
        publish()
    finally:
        k8s.Configuration.set_default(default)  # load_kube_config set the process-wide default
    assert PublishedBatch.objects.filter(node__cluster=live).count() == 3
    assert all("kalena.naughtian.io/batch-cpu" in api.get("nodes", n)["status"]["allocatable"] for n in NODES)


def test_failed_scheduling_names_a_node_whose_published_allocatable_lags_in_words() -> None:
    # `kubectl get events` shows this text: "1 kubelet allocatable" said nothing to an operator
    record = {"nodes_total": 2, "excluded": {"cpu": 1, "kubelet_allocatable": 1}}
    assert pending_message(record) == ("0/2 nodes are available: 1 Insufficient cpu slack, "
                                       "1 node(s) whose published batch allocatable is not raised yet.")


def test_failed_scheduling_counts_a_node_short_of_published_cpu_and_memory_once(db):
    # `kubectl get events` in the lab read "0/4 nodes are available: 5 node(s) whose published
    # batch allocatable is not raised yet": a node lagging on cpu and on memory was counted twice
    cluster = Cluster.objects.create(name="lag2", kind=Cluster.LIVE)
    rec = Reconciler(cluster, clock=lambda: 1000.0)
    for name in ("n1", "n2"):
        rec.apply(NodeSeen(name, True, True, vec(16, 64), at_s=1000.0))
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=1000.0)
    for led in LiveNodeLedger.objects.filter(node__cluster=cluster).select_related("node"):
        PublishedBatch.objects.create(node=led.node, cpu_mcpu=1000.0, memory_bytes=1 * GIB, changed_s=1000.0)
    rec.apply(PodPending("batch/w", req(2, 2), req(2, 2), owner="Job/w", at_s=1000.0))
    report = scheduling_pass(cluster=cluster, orchestrator=FakeOrchestrator(node_names=["n1", "n2"]),
                             policy=Policy(), now_s=1001.0, rng=np.random.default_rng(0))
    assert report.placed == 0
    why = WhyPending.objects.get(pod__workload__name="batch/w")
    assert why.record["excluded"] == {"kubelet_allocatable": 2}
    assert pending_message(why.record) == ("0/2 nodes are available: "
                                           "2 node(s) whose published batch allocatable is not raised yet.")


def test_a_shards_publisher_reads_the_pods_of_its_own_nodes_as_the_whole_read_counts_them(db):
    """A sharded scheduler publishes its own nodes (``node_names``) and reads only their pods:
    what it finds held there — admitted pods, and a victim still terminating — is what a read of
    the whole cluster finds there, and nothing of another node's."""
    from kalena_web.inventory.models import Node
    from kalena_web.kubehooks.selectors import held_by_node

    cluster = Cluster.objects.create(name="shards", kind=Cluster.LIVE)
    rec = Reconciler(cluster, clock=lambda: 1000.0)
    for name in ("n1", "n2"):
        rec.apply(NodeSeen(name, True, True, vec(16, 64), at_s=1000.0))
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=1000.0)
    fake = FakeOrchestrator(node_names=["n1", "n2"])
    for i in range(6):
        rec.apply(PodPending(f"batch/p{i}", req(1 + i, 1), req(1 + i, 1), owner="Job/p", at_s=1000.0))
    assert scheduling_pass(cluster=cluster, orchestrator=fake, policy=Policy(), now_s=1001.0,
                           rng=np.random.default_rng(0)).placed == 6
    for i in range(6):
        rec.apply(PodRunning(f"batch/p{i}", fake.running[f"batch/p{i}"].node, at_s=1002.0, admitted=True))
    victim = "batch/p0"
    rec.apply(PodFinished(victim, fake.running[victim].node, "evicted", reason="Evicted", at_s=1003.0))
    ids = {n.name: n.id for n in Node.objects.filter(cluster=cluster)}
    whole = held_by_node(cluster=cluster, admitted_only=True)
    assert set(whole[0]) == set(ids.values())  # pods on both nodes
    assert [name for names in whole[1].values() for name, _ in names] == [victim]
    for name, node_id in ids.items():
        held, releasing = held_by_node(cluster=cluster, admitted_only=True, node_ids=[node_id])
        assert set(held) == {node_id} and np.array_equal(held[node_id], whole[0][node_id])
        assert releasing == {k: v for k, v in whole[1].items() if k == node_id}
