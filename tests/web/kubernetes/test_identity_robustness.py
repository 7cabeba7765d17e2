"""Production identity where a real cluster's order of events is not the tidy one (docs/design.md §15:
nothing accepted is lost, nothing charged twice): a pod reported on a node the control plane has
not seen yet, a claim holder re-created unscheduled, a DaemonSet the infrastructure's Phase 0
does not know. Pods are created through the test API server with the real ``kubernetes`` client
as the controllers make them and watched into a reconciler (the harness of
``test_production_identity``)."""

from __future__ import annotations


import pytest

from agents.orchestrators.kubernetes.testpods import daemonset_pod, deployment_pod, job_pod, statefulset_pod
from agents.orchestrators.kubernetes.testserver import node
from kalena_web.control.models import ProductionPlacement
# the shop cluster and its API server are test_production_identity's fixtures
from tests.web.kubernetes.test_production_identity import (  # noqa: F401 - fixtures
    NOW, Watch, api, claims, core, extras, prod_cpu, run, shop,
)



def test_production_pods_on_a_node_not_seen_yet_are_applied_when_the_node_appears(shop, api) -> None:
    v1 = core(api)
    watch = Watch(api, shop)
    try:
        watch.until(lambda: watch.rec.counts.get("Resynced"), "the first list")
        # the scheduler bound two pods to kube-c before the node watch reported it
        run(v1, deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "kube-c", cpu="6", started_s=NOW))
        run(v1, job_pod("shop", "report", "28h4k", "kube-c", cpu="2", started_s=NOW))
        watch.until(lambda: watch.rec.counts.get("ProductionSeen", {}).get("rejected", 0) >= 2,
                    "both pods refused for their unknown node")
        assert "shop/report-28h4k" not in claims(shop)
        api.create("nodes", node("kube-c", cpu="32", memory="128Gi"))
        watch.until(lambda: {"shop/web-7d9c5b6f4-x2k9q", "shop/report-28h4k"} <= set(claims(shop)),
                    "the pods applied once kube-c is seen")
        assert claims(shop)["shop/web-7d9c5b6f4-x2k9q"] == ("moved", "shop/web-0000")
        assert claims(shop)["shop/report-28h4k"] == ("extra", "shop/report-28h4k")
        # web-0000 left kube-a's charge for kube-c; the Job's pod is charged once, there
        assert prod_cpu(shop) == {"kube-a": 36000.0, "kube-b": 18000.0, "kube-c": 6000.0 + 2000.0}
    finally:
        watch.close()


def test_a_kept_report_is_dropped_when_its_pod_goes_before_the_node_appears(shop, api) -> None:
    v1 = core(api)
    watch = Watch(api, shop)
    try:
        watch.until(lambda: watch.rec.counts.get("Resynced"), "the first list")
        run(v1, job_pod("shop", "report", "28h4k", "kube-c", cpu="2", started_s=NOW))
        watch.until(lambda: watch.rec.counts.get("ProductionSeen", {}).get("rejected", 0) >= 1, "the refusal")
        v1.delete_namespaced_pod("report-28h4k", "shop", grace_period_seconds=0)
        watch.until(lambda: watch.rec.counts.get("PodGone"), "the pod gone")
        api.create("nodes", node("kube-c", cpu="32", memory="128Gi"))
        watch.until(lambda: "kube-c" in prod_cpu(shop), "kube-c seen")
        assert "shop/report-28h4k" not in claims(shop)
        assert prod_cpu(shop)["kube-c"] == 0.0
    finally:
        watch.close()


def test_a_moved_claim_holder_recreated_unscheduled_returns_its_entry_to_the_blueprint_node(shop, api) -> None:
    v1 = core(api)
    started = NOW - 3600.0
    # db-0001 is kube-b's in the blueprint; its pod db-1 runs on kube-a
    for pod in (statefulset_pod("shop", "db", 0, "kube-a", cpu="12", started_s=started),
                statefulset_pod("shop", "db", 1, "kube-a", cpu="12", started_s=started)):
        run(v1, pod)
    watch = Watch(api, shop)
    try:
        watch.until(lambda: "shop/db-1" in claims(shop) and watch.rec.counts.get("Resynced"), "db-1 moved")
        assert claims(shop)["shop/db-1"] == ("moved", "shop/db-0001")
        assert prod_cpu(shop) == {"kube-a": 42000.0 + 12000.0, "kube-b": 6000.0}
    finally:
        watch.close()
    # while no watch runs, kube-a's kubelet loses db-1 and the StatefulSet re-creates it, unscheduled
    v1.delete_namespaced_pod("db-1", "shop", grace_period_seconds=0)
    pending = statefulset_pod("shop", "db", 1, "", cpu="12")
    pending.pop("status")
    v1.create_namespaced_pod("shop", pending)
    again = Watch(api, shop)
    try:
        again.until(lambda: again.rec.counts.get("Resynced"), "the re-list")
        # a pod with no node holds no node's resources: db-0001 is charged where the blueprint put it
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 18000.0}
        assert claims(shop)["shop/db-1"] == ("mapped", "shop/db-0001")  # the entry stays the pod's
        # placed again, on kube-b this time: where the blueprint put it, charged once
        v1.create_namespaced_pod_binding("db-1", "shop", {"apiVersion": "v1", "kind": "Binding",
                                                          "metadata": {"name": "db-1", "namespace": "shop"},
                                                          "target": {"kind": "Node", "name": "kube-b"}},
                                         _preload_content=False)
        again.until(lambda: ProductionPlacement.objects.filter(pod="shop/db-1", seen_node__name="kube-b").exists(),
                    "db-1 placed on kube-b")
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 18000.0}
    finally:
        again.close()


def test_an_extra_recreated_unscheduled_leaves_its_node(shop, api) -> None:
    v1 = core(api)
    run(v1, job_pod("shop", "report", "28h4k", "kube-b", cpu="2", started_s=NOW))
    watch = Watch(api, shop)
    try:
        watch.until(lambda: "shop/report-28h4k" in claims(shop), "the Job's pod charged")
        assert prod_cpu(shop)["kube-b"] == 20000.0
    finally:
        watch.close()
    v1.delete_namespaced_pod("report-28h4k", "shop", grace_period_seconds=0)
    pending = job_pod("shop", "report", "28h4k", "", cpu="2")
    pending.pop("status")
    v1.create_namespaced_pod("shop", pending)
    again = Watch(api, shop)
    try:
        again.until(lambda: again.rec.counts.get("Resynced"), "the re-list")
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 18000.0}
        assert "shop/report-28h4k" not in extras(shop)
    finally:
        again.close()


def test_a_daemonset_added_after_import_is_an_explained_extra_and_phase0s_stay_uncharged(shop, api) -> None:
    # the infrastructure's Phase 0 took fluentd out of every node's capacity; node-exporter came later
    v1 = core(api)
    for pod in (daemonset_pod("kube-system", "fluentd", "8x2kq", "kube-a", cpu="500m", started_s=NOW),
                daemonset_pod("kube-system", "fluentd", "q7w3e", "kube-b", cpu="500m", started_s=NOW),
                daemonset_pod("monitoring", "node-exporter", "4k2jd", "kube-a", cpu="250m", started_s=NOW),
                daemonset_pod("monitoring", "node-exporter", "m9p3x", "kube-b", cpu="250m", started_s=NOW)):
        run(v1, pod)
    watch = Watch(api, shop)
    try:
        watch.until(lambda: len(extras(shop)) >= 2 and watch.rec.counts.get("Resynced"), "the DaemonSet pods")
        reason = "DaemonSet monitoring/node-exporter is not in the infrastructure's Phase 0"
        assert extras(shop) == {"monitoring/node-exporter-4k2jd": reason, "monitoring/node-exporter-m9p3x": reason}
        assert prod_cpu(shop) == {"kube-a": 42000.0 + 250.0, "kube-b": 18000.0 + 250.0}  # once each, fluentd never
        assert not any(pod.startswith("kube-system/") for pod in claims(shop))
        # never reclaimed: its request is Phase-0 ballast to the node's agent, which takes every
        # DaemonSet's request out of its eviction ledger's capacity; the estimation pass and the
        # pre-flight read the pin from the workload's labels (r stays at q whatever it uses)
        from kalena_engine.overrides import workload_overrides
        from kalena_web.inventory.models import Workload

        for name in extras(shop):
            labels = Workload.objects.get(cluster=shop, name=name).labels
            assert workload_overrides(labels, source=name).reclaim_disabled, labels
        # the DaemonSet is deleted: its pods go and so does their charge
        v1.delete_namespaced_pod("node-exporter-4k2jd", "monitoring", grace_period_seconds=0)
        watch.until(lambda: "monitoring/node-exporter-4k2jd" not in claims(shop), "the pod gone")
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 18000.0 + 250.0}
    finally:
        watch.close()
