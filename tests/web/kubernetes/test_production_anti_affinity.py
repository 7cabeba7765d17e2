"""A production pod's required pod anti-affinity binds batch live (docs/design.md §9): the watch reads
it from the Deployment's pod, the control plane keeps it, and the Kubernetes scheduler keeps
matching batch pods out of the production pod's topology domain and says why. End to end
against the test API server with the real ``kubernetes`` client, as
tests/web/kubernetes/test_live_kubernetes.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.orchestrators.kubernetes.testserver import pod
from kalena_web.inventory.models import Workload
from kalena_web.scheduling.models import BatchPod, WhyPending
from tests.web.kubernetes.test_live_kubernetes import api, job_pod, scheduler, wait_for  # noqa: F401 - fixture

DATA = Path(__file__).parents[2] / "agents/orchestrators/data"
SHOP = "web/shop-7d9c5b6f4-x2k9q"
ALPHA = "thinkcentre-alpha"


def deployment_pod(*terms: dict) -> dict:
    """The Deployment ``shop``'s pod (ReplicaSet owner, ``pod-template-hash`` label, start time)
    running on thinkcentre-alpha, with ``terms`` as its required pod anti-affinity."""
    shop = json.loads((DATA / "pod-deployment-anti-affinity.json").read_text())
    shop["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = list(terms)
    return shop


def on_alpha(p: dict) -> dict:
    """``p`` pinned to thinkcentre-alpha by a required node affinity on the node's name."""
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [ALPHA]}]}]}}}
    return p


def bound_node(ref: str, api) -> str:
    return wait_for(lambda: api.get("pods", ref)["spec"].get("nodeName"), f"{ref} bound", 30)


def why_pending(ref: str, api) -> dict:
    """The why-pending record of ``ref``, once a pass has left it unplaced (fails at once if the
    pod is bound instead)."""
    def answer():
        node = api.get("pods", ref)["spec"].get("nodeName")
        assert not node, f"{ref} was bound to {node}"
        return WhyPending.objects.filter(pod__workload__name=ref).values_list("record", flat=True).first()
    return wait_for(answer, f"why {ref} is pending", 30)


@pytest.mark.django_db(transaction=True)
def test_batch_matching_a_production_pod_s_anti_affinity_never_lands_on_its_node(live, api) -> None:
    """shop (web, on alpha) refuses ``app=noisy`` pods of any namespace (``namespaceSelector: {}``)
    on its node: three noisy batch pods bind to beta and gamma; a noisy pod that may only run on
    alpha stays pending, its why-pending naming shop and the term; a pod without the label binds
    to alpha."""
    api.create_pod(deployment_pod({"labelSelector": {"matchLabels": {"app": "noisy"}}, "namespaceSelector": {},
                                   "topologyKey": "kubernetes.io/hostname"}))
    s = scheduler(live, api, "kalena-a")
    s.start()
    try:
        wait_for(lambda: Workload.objects.filter(cluster=live, name=SHOP, node__name=ALPHA).exists(), "shop seen")
        for i in range(3):
            api.create_pod(job_pod(f"noisy-{i}", owner="noisy", labels={"app": "noisy"}))
        api.create_pod(on_alpha(job_pod("noisy-pinned", owner="pinned", labels={"app": "noisy"})))
        api.create_pod(on_alpha(job_pod("quiet-0", owner="quiet")))
        noisy = {bound_node(f"batch/noisy-{i}", api) for i in range(3)}
        assert noisy and ALPHA not in noisy
        assert bound_node("batch/quiet-0", api) == ALPHA
        record = why_pending("batch/noisy-pinned", api)
    finally:
        s.stop()
    assert not api.get("pods", "batch/noisy-pinned")["spec"].get("nodeName")
    assert BatchPod.objects.get(workload__name="batch/noisy-pinned").state == "pending"
    assert record["excluded"]["production_anti_affinity"] == 1
    assert {"kind": "production_anti_affinity", "node": ALPHA, "pod": SHOP, "rule": "app=noisy",
            "topology_key": "kubernetes.io/hostname"} in record["rejections"]


@pytest.mark.django_db(transaction=True)
def test_a_zone_term_keeps_batch_of_its_namespace_out_of_the_zone_and_leaves_other_namespaces_alone(live, api) -> None:
    """shop's term names no namespaces, so it covers its own namespace ``web`` only (Kubernetes):
    on the homelab every node is in zone ``home``, so a ``team=etl`` batch pod in ``web`` has no
    node — pending, the binding rule production anti-affinity on all 3 nodes — while the same pod
    in ``batch`` binds."""
    api.create_pod(deployment_pod({"labelSelector": {"matchExpressions": [
        {"key": "team", "operator": "In", "values": ["etl", "ml"]}]}, "topologyKey": "topology.kubernetes.io/zone"}))
    s = scheduler(live, api, "kalena-a")
    s.start()
    try:
        wait_for(lambda: Workload.objects.filter(cluster=live, name=SHOP, node__name=ALPHA).exists(), "shop seen")
        api.create_pod(pod("web", "etl-web-0", tier="batch", owner_kind="Job", owner_name="etl-web", cpu="1",
                           memory="1Gi", labels={"team": "etl"}))
        api.create_pod(job_pod("etl-0", owner="etl", labels={"team": "etl"}))
        assert bound_node("batch/etl-0", api)
        record = why_pending("web/etl-web-0", api)
    finally:
        s.stop()
    assert not api.get("pods", "web/etl-web-0")["spec"].get("nodeName")
    assert record["binding"] == "production_anti_affinity"
    assert record["excluded"] == {"production_anti_affinity": 3}
    assert {r["pod"] for r in record["rejections"]} == {SHOP}
    assert {r["topology_key"] for r in record["rejections"]} == {"topology.kubernetes.io/zone"}
