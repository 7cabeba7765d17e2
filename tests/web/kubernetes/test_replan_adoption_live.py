"""Re-plan adoption against a live Kubernetes-shaped cluster (docs/design.md §15): Kuberina's new
blueprint for the same pods is loaded while Deployment pods hold their entries by owner and
replica. Replicas of one declaration are interchangeable — a live pod holds *a* replica of its
declaration on its node — so a re-plan that only renumbers replicas between nodes leaves every
pod where the blueprint wants one, and none is a fidelity finding; pods that hold their entries
by a forge label are taken as the re-plan names them."""

from __future__ import annotations

import time
from pathlib import Path

from agents.orchestrators.kubernetes.testpods import deployment_pod
from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads
from kalena_engine.kuberina.identity import BLUEPRINT_POD_LABEL
from kalena_web.control.models import ProductionPlacement
from kalena_web.inventory.models import Workload
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.replan.services import live_cluster_blueprint_replace
from tests.web.kubernetes.test_identity_interleavings import NOW, _shop_pods, api, seen, shop  # noqa: F401
from tests.web.kubernetes.test_production_identity import Watch, claims, core, prod_cpu, run


def adopt(tmp_path: Path, solution: dict[str, str]):
    path = tmp_path / "replan.yaml"
    path.write_text("solution:\n" + "".join(f"  {pod}: {node}\n" for pod, node in solution.items()))
    workloads = load_workloads(tmp_path / "workloads.yaml")
    return live_cluster_blueprint_replace(name="shop", infra=load_infrastructure(tmp_path / "infra.yaml"),
                                          workloads=workloads, blueprint=load_blueprint(path, workloads),
                                          now_s=time.time(), actor_kind="user", actor="cli:test")


def test_a_replan_that_renumbers_replicas_between_nodes_leaves_no_finding(shop, api, tmp_path) -> None:
    v1 = core(api)
    for pod in _shop_pods(NOW - 3600.0):
        run(v1, pod)
    watch = Watch(api, shop)
    try:
        watch.until(lambda: seen(watch) >= 6 and watch.rec.counts.get("Resynced"), "every production pod")
    finally:
        watch.close()
    # live: web-0000 and web-0001 held on kube-a, web-0002 on kube-b. Kuberina's re-plan keeps
    # two web replicas on kube-a and one on kube-b, numbered the other way round
    adopted = adopt(tmp_path, {"shop/web-0000": "kube-b", "shop/web-0001": "kube-a", "shop/web-0002": "kube-a",
                               "shop/db-0000": "kube-a", "shop/db-0001": "kube-b", "shop/cache-0": "kube-a"})
    assert adopted.findings == 0
    assert not ProductionPlacement.objects.filter(workload__cluster=shop, finding=True).exists()
    assert {ref: c[0] for ref, c in claims(shop).items()} == dict.fromkeys(claims(shop), "mapped")
    assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 18000.0}
    # each node's blueprint reference still names two web replicas on kube-a and one on kube-b
    webs = {led.node.name: Workload.objects.filter(id__in=led.blueprint_workloads, name__startswith="shop/web-").count()
            for led in LiveNodeLedger.objects.filter(node__cluster=shop).select_related("node")}
    assert webs == {"kube-a": 2, "kube-b": 1}


def test_entries_held_by_a_forge_label_are_taken_as_the_replan_writes_them(shop, api, tmp_path) -> None:
    v1 = core(api)
    started = NOW - 3600.0
    # a forge rendered the blueprint: each pod names its entry (web-0000 and web-0001 on kube-a)
    for suffix, entry, node_name in (("x2k9q", "web-0000", "kube-a"), ("p8r2t", "web-0001", "kube-a"),
                                     ("h5v7m", "web-0002", "kube-b")):
        run(v1, deployment_pod("shop", "web", "7d9c5b6f4", suffix, node_name, cpu="6", started_s=started,
                               labels={BLUEPRINT_POD_LABEL: f"shop/{entry}"}))
    for pod in _shop_pods(started)[3:]:
        run(v1, pod)
    watch = Watch(api, shop)
    try:
        watch.until(lambda: seen(watch) >= 6 and watch.rec.counts.get("Resynced"), "every production pod")
    finally:
        watch.close()
    assert claims(shop)["shop/web-7d9c5b6f4-x2k9q"] == ("mapped", "shop/web-0000")
    adopted = adopt(tmp_path, {"shop/web-0000": "kube-b", "shop/web-0001": "kube-a", "shop/web-0002": "kube-a",
                               "shop/db-0000": "kube-a", "shop/db-0001": "kube-b", "shop/cache-0": "kube-a"})
    # the labels pin web-0000 and web-0002 to their pods: each runs off its new blueprint node
    # until the forge re-renders them
    assert adopted.findings == 2
    assert sorted(ProductionPlacement.objects.filter(workload__cluster=shop, finding=True)
                  .values_list("workload__name", flat=True)) == ["shop/web-0000", "shop/web-0002"]
    assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 18000.0}  # charged where they run
