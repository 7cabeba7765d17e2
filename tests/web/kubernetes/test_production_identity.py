"""Production identity end to end (docs/design.md §15): a cluster imported from a small blueprint, its
production created through the test API server with the real ``kubernetes`` client as the
controllers make it (a Deployment's ReplicaSet pods with ``pod-template-hash``, StatefulSet
ordinals, a DaemonSet, a Job, a bare pod; the kubelet reports ``status.startTime``), watched and
reconciled: each node holds the blueprint's production requests — never a pod charged twice —
the extras are counted once with their reasons, a rollout's replacement inherits its entry, and a
restart's re-list reshuffles nothing."""

from __future__ import annotations

import queue
import threading
import time

import pytest
from django.contrib.auth.models import User
from kubernetes import client as k8s

from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.testpods import (
    bare_pod, daemonset_pod, deployment_pod, job_pod, statefulset_pod,
)
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node
from agents.orchestrators.kubernetes.watch import KubernetesWatcher
from kalena_engine.resources import CPU
from kalena_web.control.models import ProductionPlacement
from kalena_web.control.reconciler import Reconciler
from kalena_web.ledger.models import LiveNodeLedger
from tests.web.shop_cluster import import_shop

DEADLINE_S = 60.0
NOW = time.time()


@pytest.fixture
def shop(db, tmp_path):
    return import_shop(tmp_path, now_s=NOW)


@pytest.fixture
def api():
    with TestAPIServer(bookmark_interval_s=0.5) as server:
        for name in ("kube-a", "kube-b"):
            server.create("nodes", node(name, cpu="64", memory="256Gi"))
        yield server


def core(api: TestAPIServer) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(k8s.ApiClient(k8s.Configuration(host=api.url)))


def run(v1: k8s.CoreV1Api, pod: dict) -> None:
    """What a controller and the kubelet do: create the pod (the API server drops a client's
    status), then report it Running with its start time."""
    status = pod.pop("status")
    meta = pod["metadata"]
    v1.create_namespaced_pod(meta["namespace"], pod)
    v1.patch_namespaced_pod_status(meta["name"], meta["namespace"], {"status": status})


class Watch:
    """The Kubernetes watch feeding a reconciler, applied on the test's thread."""

    def __init__(self, api: TestAPIServer, cluster) -> None:
        orch = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)), request_timeout_s=5.0)
        self.watcher = KubernetesWatcher(orch, watch_timeout_s=30, backoff_s=0.05,
                                         sleep=lambda s, stop: stop.wait(0.05))
        self.rec = Reconciler(cluster=cluster)
        self.stop, self.events = threading.Event(), queue.Queue()
        self.thread = threading.Thread(target=lambda: [self.events.put(e) for e in self.watcher.events(self.stop)],
                                       daemon=True)
        self.thread.start()

    def until(self, check, what: str) -> None:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            try:
                self.rec.apply(self.events.get(timeout=0.1))
            except queue.Empty:
                if check():
                    return
        raise AssertionError(f"timed out waiting for {what}")

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


def prod_cpu(cluster) -> dict[str, float]:
    return {led.node.name: led.prod_request[CPU]
            for led in LiveNodeLedger.objects.filter(node__cluster=cluster).select_related("node")}


def claims(cluster) -> dict[str, tuple[str, str]]:
    return {c.pod: (c.identity, c.workload.name)
            for c in ProductionPlacement.objects.filter(workload__cluster=cluster).select_related("workload")}


def extras(cluster) -> dict[str, str]:
    return {c.pod: c.reason_text for c in ProductionPlacement.objects.filter(workload__cluster=cluster,
                                                                          identity="extra")}


def test_live_production_is_charged_as_the_blueprint_says_and_extras_once(shop, api, client) -> None:
    assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 18000.0}
    v1 = core(api)
    started = NOW - 3600.0
    for pod in (deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "kube-a", cpu="6", started_s=started),
                deployment_pod("shop", "web", "7d9c5b6f4", "p8r2t", "kube-a", cpu="6", started_s=started),
                deployment_pod("shop", "web", "7d9c5b6f4", "h5v7m", "kube-b", cpu="6", started_s=started),
                statefulset_pod("shop", "db", 0, "kube-a", cpu="12", started_s=started),
                statefulset_pod("shop", "db", 1, "kube-b", cpu="12", started_s=started),
                statefulset_pod("shop", "cache", 0, "kube-a", cpu="18", started_s=started),
                daemonset_pod("kube-system", "fluentd", "8x2kq", "kube-a", started_s=started),
                daemonset_pod("kube-system", "fluentd", "q7w3e", "kube-b", started_s=started),
                job_pod("shop", "report", "28h4k", "kube-b", cpu="2", started_s=started),
                bare_pod("shop", "debug", "kube-b", cpu="1", started_s=started),
                deployment_pod("shop", "ghost", "6f7c8d9b4", "m3n4b", "kube-b", cpu="500m", started_s=started)):
        run(v1, pod)
    watch = Watch(api, shop)
    try:
        watch.until(lambda: sum(watch.rec.counts.get("ProductionSeen", {}).values()) >= 9
                    and watch.rec.counts.get("Resynced"), "every production pod applied")
        # the reproduction: kube-a stays at the blueprint's 42 cores, not 48
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 18000.0 + 2000.0 + 1000.0 + 500.0}
        assert claims(shop) == {
            "shop/web-7d9c5b6f4-x2k9q": ("mapped", "shop/web-0000"),
            "shop/web-7d9c5b6f4-p8r2t": ("mapped", "shop/web-0001"),
            "shop/web-7d9c5b6f4-h5v7m": ("mapped", "shop/web-0002"),
            "shop/db-0": ("mapped", "shop/db-0000"), "shop/db-1": ("mapped", "shop/db-0001"),
            "shop/cache-0": ("mapped", "shop/cache-0"),
            "shop/report-28h4k": ("extra", "shop/report-28h4k"), "shop/debug": ("extra", "shop/debug"),
            "shop/ghost-6f7c8d9b4-m3n4b": ("extra", "shop/ghost-6f7c8d9b4-m3n4b")}
        assert extras(shop) == {
            "shop/report-28h4k": "owned by Job/report, a kind the blueprint does not declare "
                                 "(Deployment, ReplicaSet, StatefulSet)",
            "shop/debug": "a bare pod (no controller) whose name is no blueprint pod",
            "shop/ghost-6f7c8d9b4-m3n4b": "no blueprint declaration ghost in namespace shop"}
        assert not ProductionPlacement.objects.filter(finding=True).exists()  # all where the blueprint put them

        client.force_login(User.objects.create_user("viewer", password="x" * 12))
        page = client.get("/live/shop/nodes/kube-b/").content.decode()
        assert "Production pods not in the blueprint" in page and "no blueprint declaration ghost" in page
        assert "live as shop/web-7d9c5b6f4-h5v7m" in page

        # a rollout: the new ReplicaSet's pod surges on kube-a (extra, charged once: both run)
        run(v1, deployment_pod("shop", "web", "5f6b8c9d7", "zzzzz", "kube-a", cpu="6", started_s=NOW))
        watch.until(lambda: "shop/web-5f6b8c9d7-zzzzz" in claims(shop), "the surge pod")
        assert extras(shop)["shop/web-5f6b8c9d7-zzzzz"] == "declaration web has 3 replicas, all claimed"
        assert prod_cpu(shop)["kube-a"] == 48000.0
        # the old pod goes: the new one inherits its entry where the blueprint put it
        v1.delete_namespaced_pod("web-7d9c5b6f4-x2k9q", "shop", grace_period_seconds=0)
        watch.until(lambda: "shop/web-7d9c5b6f4-x2k9q" not in claims(shop), "the old pod gone")
        assert claims(shop)["shop/web-5f6b8c9d7-zzzzz"] == ("mapped", "shop/web-0000")
        assert prod_cpu(shop)["kube-a"] == 42000.0
        before = (claims(shop), prod_cpu(shop))
    finally:
        watch.close()
    # a restart: a new watch lists everything again; the persisted claims hold, nothing moves
    again = Watch(api, shop)
    try:
        again.until(lambda: again.rec.counts.get("Resynced"), "the re-list")
        assert (claims(shop), prod_cpu(shop)) == before
    finally:
        again.close()
