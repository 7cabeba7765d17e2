"""The lab's production binder (kube-scheduler's stand-in): which node each pending production
pod of the slice goes to, from the slice's placement.json."""

from __future__ import annotations

from agents.lab.binder import choose_nodes

PLACEMENT = {
    "workloads": [
        {"kind": "StatefulSet", "namespace": "data", "name": "redis-cache", "replicas": 3, "nodes": {"l-1": 2, "l-2": 1}},
        {"kind": "Deployment", "namespace": "shop", "name": "web", "replicas": 3, "nodes": {"l-1": 1, "l-2": 2}},
    ],
    "pods": {"data/redis-cache-0000": {"node": "l-1"}, "data/redis-cache-0001": {"node": "l-1"},
             "data/redis-cache-0002": {"node": "l-2"}, "shop/web-0000": {"node": "l-1"},
             "shop/web-0001": {"node": "l-2"}, "shop/web-0002": {"node": "l-2"}},
}


def pod(ns: str, name: str, app: str, *, node: str = "", lab: str = "l", nodes=("l-1", "l-2"), scheduler: str = "") -> dict:
    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}]}]}}}}
    if node:
        spec["nodeName"] = node
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"metadata": {"namespace": ns, "name": name, "labels": {"app": app, "lab.kalena.naughtian.io/slice": lab}},
            "spec": spec, "status": {"phase": "Running" if node else "Pending"}}


def test_statefulset_ordinals_go_where_the_blueprint_put_each_ordinal() -> None:
    pods = [pod("data", f"redis-cache-{i}", "redis-cache") for i in (2, 0, 1)]
    got = {p["metadata"]["name"]: node for p, node in choose_nodes(pods, PLACEMENT, "l")}
    assert got == {"redis-cache-0": "l-1", "redis-cache-1": "l-1", "redis-cache-2": "l-2"}


def test_replicas_fill_the_blueprints_count_per_node_counting_those_already_bound() -> None:
    pods = [pod("shop", "web-abc", "web", node="l-2"), pod("shop", "web-def", "web"), pod("shop", "web-ghi", "web"),
            pod("shop", "web-jkl", "web")]
    got = sorted(node for _, node in choose_nodes(pods, PLACEMENT, "l"))
    assert got == ["l-1", "l-2"]   # one place left on each; the fourth pending replica has none


def test_batch_other_labs_and_pods_outside_the_slice_are_left_alone() -> None:
    pods = [pod("shop", "web-a", "web", scheduler="kalena"), pod("shop", "web-b", "web", lab="other"),
            pod("shop", "api-x", "api")]
    assert choose_nodes(pods, PLACEMENT, "l") == []


def test_a_pod_is_never_bound_to_a_node_its_affinity_excludes() -> None:
    got = choose_nodes([pod("shop", "web-a", "web", nodes=("l-1",)), pod("shop", "web-b", "web", nodes=("l-1",))],
                       PLACEMENT, "l")
    assert [node for _, node in got] == ["l-1"]


def test_a_cordoned_node_gets_no_new_pod_so_a_drain_is_not_undone() -> None:
    # kube-scheduler's NodeUnschedulable filter: `kubectl drain` cordons the node, evicts its pods,
    # and their replacements must not come straight back to it.
    pods = [pod("data", "redis-cache-2", "redis-cache"), pod("shop", "web-a", "web"), pod("shop", "web-b", "web"),
            pod("shop", "web-c", "web")]
    got = sorted((p["metadata"]["name"], node) for p, node in choose_nodes(pods, PLACEMENT, "l", unschedulable={"l-2"}))
    assert got == [("web-a", "l-1")]   # l-1's one place; redis-cache-2 and the other replicas stay Pending
