"""Production identity under interleavings a real cluster produces (docs/design.md §15: nothing charged
twice): a pod seen first without an owner and then adopted by its ReplicaSet, pods re-created
under their names on another node while unwatched, a Resynced that drops a claim holder while an
extra waits, pods past the blueprint's replicas; and override annotations added to and removed
from a running pod reach its entry. Pods are
created through the test API server with the real ``kubernetes`` client as the controllers make
them and watched into a reconciler (the harness of ``test_production_identity``)."""

from __future__ import annotations


import pytest

from agents.orchestrators.kubernetes.testpods import bare_pod, deployment_pod, statefulset_pod
# the shop cluster and its API server are test_production_identity's fixtures
from tests.web.kubernetes.test_production_identity import (  # noqa: F401 - fixtures
    NOW, Watch, api, claims, core, prod_cpu, run, shop,
)



def seen(watch: Watch) -> int:
    return sum(watch.rec.counts.get("ProductionSeen", {}).values())


def test_an_orphan_adopted_by_its_replicaset_takes_the_free_entry_and_leaves_its_extra_charge(shop, api) -> None:
    # kube-a's blueprint: web-0000, web-0001, db-0000, cache-0 = 6 + 6 + 12 + 18 = 42 cores
    v1 = core(api)
    started = NOW - 3600.0
    for pod in (deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "kube-a", cpu="6", started_s=started),
                deployment_pod("shop", "web", "7d9c5b6f4", "h5v7m", "kube-b", cpu="6", started_s=started),
                statefulset_pod("shop", "db", 0, "kube-a", cpu="12", started_s=started),
                statefulset_pod("shop", "db", 1, "kube-b", cpu="12", started_s=started),
                statefulset_pod("shop", "cache", 0, "kube-a", cpu="18", started_s=started),
                # a pod created by hand with the Deployment's labels: no owner yet
                bare_pod("shop", "web-7d9c5b6f4-adopt", "kube-a", cpu="6", started_s=started,
                         labels={"app": "web", "pod-template-hash": "7d9c5b6f4"})):
        run(v1, pod)
    watch = Watch(api, shop)
    try:
        watch.until(lambda: seen(watch) >= 6 and watch.rec.counts.get("Resynced"), "every production pod")
        assert claims(shop)["shop/web-7d9c5b6f4-adopt"][0] == "extra"
        assert prod_cpu(shop)["kube-a"] == 48000.0  # 42 + the orphan at its request, once
        # the ReplicaSet adopts the orphan (its selector matches): the controller adds its reference
        v1.patch_namespaced_pod("web-7d9c5b6f4-adopt", "shop", {"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d9c5b6f4", "controller": True,
             "blockOwnerDeletion": True, "uid": "5e1f2a3b-0000-4000-8000-000000000001"}]}})
        watch.until(lambda: claims(shop)["shop/web-7d9c5b6f4-adopt"][0] != "extra", "the adopted pod's entry")
        # web-0001 (on kube-a) is the free replica there: the pod holds it; kube-a back to 42
        assert claims(shop)["shop/web-7d9c5b6f4-adopt"] == ("mapped", "shop/web-0001")
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 18000.0}
    finally:
        watch.close()


def _shop_pods(started: float) -> list[dict]:
    """The shop's production as its controllers run it, where the blueprint put each entry."""
    return [deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "kube-a", cpu="6", started_s=started),
            deployment_pod("shop", "web", "7d9c5b6f4", "p8r2t", "kube-a", cpu="6", started_s=started),
            deployment_pod("shop", "web", "7d9c5b6f4", "h5v7m", "kube-b", cpu="6", started_s=started),
            statefulset_pod("shop", "db", 0, "kube-a", cpu="12", started_s=started),
            statefulset_pod("shop", "db", 1, "kube-b", cpu="12", started_s=started),
            statefulset_pod("shop", "cache", 0, "kube-a", cpu="18", started_s=started)]


def test_a_relist_that_drops_the_holder_hands_its_entry_to_the_waiting_surge_pod(shop, api) -> None:
    v1 = core(api)
    for pod in _shop_pods(NOW - 3600.0):
        run(v1, pod)
    run(v1, deployment_pod("shop", "web", "5f6b8c9d7", "zzzzz", "kube-a", cpu="6", started_s=NOW - 60.0))
    watch = Watch(api, shop)
    try:
        watch.until(lambda: seen(watch) >= 7 and watch.rec.counts.get("Resynced"), "every production pod")
        assert claims(shop)["shop/web-5f6b8c9d7-zzzzz"][0] == "extra"
        assert prod_cpu(shop)["kube-a"] == 48000.0  # the surge pod at its request, once
    finally:
        watch.close()
    # while no watch runs, the rollout deletes the old pod; the next watch's list lacks it
    v1.delete_namespaced_pod("web-7d9c5b6f4-x2k9q", "shop", grace_period_seconds=0)
    again = Watch(api, shop)
    try:
        again.until(lambda: again.rec.counts.get("Resynced"), "the re-list")
        assert claims(shop)["shop/web-5f6b8c9d7-zzzzz"] == ("mapped", "shop/web-0000")
        assert "shop/web-7d9c5b6f4-x2k9q" not in claims(shop)
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 18000.0}
    finally:
        again.close()


def test_pods_recreated_under_their_names_on_another_node_while_unwatched_are_charged_as_they_are_now(
        shop, api) -> None:
    v1 = core(api)
    for pod in _shop_pods(NOW - 3600.0):
        run(v1, pod)
    run(v1, bare_pod("shop", "debug", "kube-b", cpu="1", started_s=NOW - 3600.0))
    watch = Watch(api, shop)
    try:
        watch.until(lambda: seen(watch) >= 7 and watch.rec.counts.get("Resynced"), "every production pod")
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 19000.0}
    finally:
        watch.close()
    # unwatched: db-1 is rescheduled to kube-a (a new uid, a new start); the bare pod is
    # re-created by hand on kube-a asking 3 cores instead of 1
    for name in ("db-1", "debug"):
        v1.delete_namespaced_pod(name, "shop", grace_period_seconds=0)
    run(v1, statefulset_pod("shop", "db", 1, "kube-a", cpu="12", started_s=NOW - 30.0))
    run(v1, bare_pod("shop", "debug", "kube-a", cpu="3", started_s=NOW - 30.0))
    again = Watch(api, shop)
    try:
        again.until(lambda: again.rec.counts.get("Resynced") and seen(again) >= 7, "the re-list")
        assert claims(shop)["shop/db-1"] == ("moved", "shop/db-0001")
        # kube-a: 42 + db-0001's 12 + debug's 3; kube-b: web-0002's 6 only
        assert prod_cpu(shop) == {"kube-a": 57000.0, "kube-b": 6000.0}
    finally:
        again.close()


def test_pods_beyond_the_blueprint_and_a_pod_recreated_under_its_name_are_each_charged_once(shop, api) -> None:
    v1 = core(api)
    started = NOW - 3600.0
    for pod in _shop_pods(started):
        run(v1, pod)
    # the StatefulSet scaled past the blueprint (db-2), the Deployment one past it (a 4th pod),
    # and a pod with two controller references
    twice = deployment_pod("shop", "web", "7d9c5b6f4", "two2c", "kube-b", cpu="6", started_s=started)
    twice["metadata"]["ownerReferences"].append({**twice["metadata"]["ownerReferences"][0], "name": "web-other"})
    for pod in (statefulset_pod("shop", "db", 2, "kube-b", cpu="12", started_s=NOW - 120.0),
                deployment_pod("shop", "web", "7d9c5b6f4", "f0urt", "kube-b", cpu="6", started_s=NOW - 60.0),
                twice):
        run(v1, pod)
    watch = Watch(api, shop)
    try:
        watch.until(lambda: seen(watch) >= 9 and watch.rec.counts.get("Resynced"), "every production pod")
        assert {ref: c[0] for ref, c in claims(shop).items() if c[0] == "extra"} == {
            "shop/db-2": "extra", "shop/web-7d9c5b6f4-f0urt": "extra", "shop/web-7d9c5b6f4-two2c": "extra"}
        # kube-b: the blueprint's 18 + db-2's 12 + the 4th web pod's 6 + the two-controller pod's 6
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 42000.0}
        # db-1 deleted: db-2 does not take ordinal 1's entry (it stays charged where the blueprint put it)
        v1.delete_namespaced_pod("db-1", "shop", grace_period_seconds=0)
        watch.until(lambda: "shop/db-1" not in claims(shop), "db-1 gone")
        assert claims(shop)["shop/db-2"][0] == "extra"
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 42000.0}
        # ... and its re-creation under the same name (a new uid) holds db-0001 again
        run(v1, statefulset_pod("shop", "db", 1, "kube-b", cpu="12", started_s=NOW - 5.0))
        watch.until(lambda: "shop/db-1" in claims(shop), "db-1 back")
        assert claims(shop)["shop/db-1"] == ("mapped", "shop/db-0001")
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 42000.0}
        # a web holder goes: the 4th pod (an extra of web) inherits its entry, its own charge leaves
        v1.delete_namespaced_pod("web-7d9c5b6f4-h5v7m", "shop", grace_period_seconds=0)
        watch.until(lambda: claims(shop)["shop/web-7d9c5b6f4-f0urt"][0] != "extra", "the 4th pod's entry")
        assert claims(shop)["shop/web-7d9c5b6f4-f0urt"] == ("mapped", "shop/web-0002")
        assert prod_cpu(shop) == {"kube-a": 42000.0, "kube-b": 36000.0}
    finally:
        watch.close()


def test_an_annotation_added_and_removed_on_a_running_pod_reaches_its_entry(shop, api) -> None:
    from kalena_web.inventory.models import Workload

    v1 = core(api)
    for pod in _shop_pods(NOW - 3600.0):
        run(v1, pod)
    watch = Watch(api, shop)

    def overrides() -> dict:
        labels = Workload.objects.get(cluster=shop, name="shop/web-0002").labels or {}
        return {k: v for k, v in labels.items() if k.startswith("kalena.naughtian.io/")}

    try:
        watch.until(lambda: seen(watch) >= 6 and watch.rec.counts.get("Resynced"), "every production pod")
        assert overrides() == {}
        # kubectl annotate pod web-7d9c5b6f4-h5v7m kalena.naughtian.io/reclaim=disabled
        v1.patch_namespaced_pod("web-7d9c5b6f4-h5v7m", "shop", {"metadata": {"annotations": {
            "kalena.naughtian.io/reclaim": "disabled", "kalena.naughtian.io/startup-grace-s": "900"}}})
        watch.until(lambda: overrides() != {}, "the annotations on the entry")
        assert overrides() == {"kalena.naughtian.io/reclaim": "disabled", "kalena.naughtian.io/startup-grace-s": "900"}
        # kubectl annotate pod … kalena.naughtian.io/reclaim-
        v1.patch_namespaced_pod("web-7d9c5b6f4-h5v7m", "shop", {"metadata": {"annotations": {
            "kalena.naughtian.io/reclaim": None}}})
        watch.until(lambda: "kalena.naughtian.io/reclaim" not in overrides(), "the annotation removed")
        assert overrides() == {"kalena.naughtian.io/startup-grace-s": "900"}
    finally:
        watch.close()
