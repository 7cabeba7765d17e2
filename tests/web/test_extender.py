"""The scheduler extender as kube-scheduler calls it: ExtenderArgs with capitalised (Go) or
lower-case keys, answered from the live ledgers with the scheduler's filters and scores. The views
are reached through the hooks listener's URL map (the TLS side is
tests/web/kubernetes/test_hooks_listener.py); off extender mode or off Kubernetes every verb is a
404 naming why, never a 500."""

from __future__ import annotations

import json

import pytest

from agents.orchestrators.kubernetes.extender import extender_score, parse_args, parse_binding
from tests.web.live_cluster import NODES

GIB = 2**30


@pytest.fixture(autouse=True)
def hooks_listener(settings):
    """What the hooks listener routes, in extender mode on Kubernetes."""
    from kalena_web.kubehooks.routing import HOOKS_URLCONF

    settings.ROOT_URLCONF = HOOKS_URLCONF
    settings.KALENA_ADMISSION_EXTENDER_MODE = True
    settings.KALENA_ORCHESTRATOR = "kubernetes"
    settings.KALENA_HOOKS_AUDIT_COALESCE_S = 0  # each refusal audited: the tests read each


def batch_pod(cpu="500m", memory="512Mi", **spec):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "train-0", "namespace": "batch", "uid": "u-1",
                         "labels": {"kalena.naughtian.io/tier": "batch", "app": "train"},
                         "ownerReferences": [{"kind": "Job", "name": "train", "controller": True, "uid": "j"}]},
            "spec": {"containers": [{"name": "main", "image": "busybox",
                                     "resources": {"requests": {"cpu": cpu, "memory": memory}}}], **spec}}


def post(client, verb, body):
    response = client.post(f"/kubernetes/extender/home/{verb}", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.parametrize("keys", ["Go", "lower"])
def test_filter_answers_from_the_ledgers(client, live, keys):
    names = [*NODES, "stranger"]
    body = {"Pod": batch_pod(), "NodeNames": names} if keys == "Go" else {"pod": batch_pod(), "nodenames": names}
    result = post(client, "filter", body)
    assert result["Error"] == ""
    assert sorted(result["NodeNames"]) == sorted(NODES)  # 0.5 core fits every homelab node's slack
    assert "stranger" in result["FailedAndUnresolvableNodes"] and result["FailedNodes"] == {}


def test_filter_names_the_short_dimension(client, live):
    result = post(client, "filter", {"Pod": batch_pod(cpu="100"), "NodeNames": NODES})
    assert result["NodeNames"] == []
    assert set(result["FailedNodes"]) == set(NODES)
    assert all(m.startswith("Insufficient cpu slack (requested 100 cores") for m in result["FailedNodes"].values())


def test_filter_taint_and_selector_are_unresolvable(client, live):
    result = post(client, "filter", {"Pod": batch_pod(nodeSelector={"disk": "nvme"}), "NodeNames": NODES})
    assert result["NodeNames"] == [] and set(result["FailedAndUnresolvableNodes"]) == set(NODES)
    assert all("node_selector" in m for m in result["FailedAndUnresolvableNodes"].values())


def test_filter_with_full_nodes_echoes_nodes(client, live):
    nodes = {"kind": "NodeList", "items": [{"metadata": {"name": n}} for n in NODES]}
    result = post(client, "filter", {"Pod": batch_pod(), "Nodes": nodes})
    assert [n["metadata"]["name"] for n in result["Nodes"]["items"]] == NODES


def test_prioritize_scores_zero_to_ten(client, live):
    result = post(client, "prioritize", {"Pod": batch_pod(), "NodeNames": NODES})
    assert [h["Host"] for h in result] == NODES
    assert all(isinstance(h["Score"], int) and 0 <= h["Score"] <= 10 for h in result)
    assert len({h["Score"] for h in result}) >= 1


@pytest.mark.parametrize("body, field", [
    (b"{", "body"), ({"NodeNames": NODES}, "Pod"), ({"Pod": batch_pod(), "NodeNames": "alpha"}, "NodeNames"),
], ids=["not-json", "no-pod", "names-not-list"])
def test_malformed_filter_is_an_error_answer(client, live, body, field):
    raw = body if isinstance(body, bytes) else json.dumps(body)
    response = client.post("/kubernetes/extender/home/filter", data=raw, content_type="application/json")
    assert response.status_code == 200 and response.json()["Error"].startswith(f"kalena extender: {field}:")


def test_unknown_cluster_is_an_error_answer(client, live):
    response = client.post("/kubernetes/extender/nope/filter", data=json.dumps({"Pod": batch_pod(), "NodeNames": []}),
                           content_type="application/json")
    assert response.status_code == 404 and "no live cluster named 'nope'" in response.json()["Error"]


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind"])
@pytest.mark.parametrize("switch, value, reason", [
    ("KALENA_ORCHESTRATOR", "docker", "serves Kubernetes clusters only (KALENA_ORCHESTRATOR=docker)"),
    ("KALENA_ORCHESTRATOR", "fake", "serves Kubernetes clusters only (KALENA_ORCHESTRATOR=fake)"),
    ("KALENA_ADMISSION_EXTENDER_MODE", False, "the extender is off"),
], ids=["docker", "fake", "extender-off"])
def test_extender_outside_extender_mode_or_kubernetes_is_a_404(client, live, settings, verb, switch, value, reason):
    from kalena_web.control.metrics import ClusterCollector
    from kalena_web.policy.models import AuditEntry

    setattr(settings, switch, value)
    body = ({"PodName": "train-0", "PodNamespace": "batch", "PodUID": "u-1", "Node": NODES[0]} if verb == "bind"
            else {"Pod": batch_pod(), "NodeNames": NODES})
    response = client.post(f"/kubernetes/extender/home/{verb}", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 404
    if verb != "prioritize":  # a priority list has no error field
        assert reason in response.json()["Error"]
    entry = AuditEntry.objects.get(action="hooks.refused")
    assert (entry.actor_kind, entry.actor, entry.after["endpoint"]) == ("client", "anonymous", verb)
    counted = {tuple(sorted(s.labels.items())): s.value for family in ClusterCollector().recorded()
               if family.name == "kalena_hooks_refused" for s in family.samples if s.name.endswith("_total")}
    assert counted[(("endpoint", verb), ("reason", "extender_off" if value is False else "not_kubernetes"))] == 1


def test_bind_args_case_insensitive_and_checked():
    args = parse_binding({"podName": "p", "PODNAMESPACE": "ns", "PodUID": "u", "Node": "n"})
    assert (args.ref, args.node, args.pod_uid) == ("ns/p", "n", "u")
    with pytest.raises(ValueError, match="Node"):
        parse_binding({"PodName": "p", "PodNamespace": "ns", "PodUID": "u"})
    assert parse_args({"POD": {}, "NodeNames": []}).node_names == ()


@pytest.mark.parametrize("score, expected", [(0, 0), (39.58, 4), (44.9, 4), (100, 10), (-3, 0), (140, 10)])
def test_extender_score(score, expected):
    # round(score / 10) clipped to MaxExtenderPriority: 39.58 → 3.958 → 4
    assert extender_score(score) == expected


@pytest.fixture
def kube_api(settings, tmp_path, monkeypatch):
    """The test API server with the homelab's nodes, as the control plane's orchestrator."""
    import yaml
    from kubernetes import client as k8s

    from agents.orchestrators.kubernetes.testserver import TestAPIServer, node

    with TestAPIServer() as api:
        for name in NODES:
            api.create("nodes", node(name, cpu="4", memory="16Gi"))
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "t",
            "clusters": [{"name": "t", "cluster": {"server": api.url}}],
            "contexts": [{"name": "t", "context": {"cluster": "t", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
        monkeypatch.setattr("kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig))
        settings.KALENA_ORCHESTRATOR = "kubernetes"
        default = k8s.Configuration.get_default_copy()
        try:
            yield api
        finally:
            k8s.Configuration.set_default(default)


def test_bind_enters_the_ledger_and_creates_the_binding(client, live, kube_api):
    from kalena_web.ledger.models import LiveNodeLedger
    from kalena_web.scheduling.models import BatchPod

    created = kube_api.create("pods", {**batch_pod(), "spec": {**batch_pod()["spec"], "schedulerName": "default-scheduler"}})
    uid = created["metadata"]["uid"]
    before = LiveNodeLedger.objects.get(node__cluster=live, node__name=NODES[1]).batch_request[0]
    wrong = client.post("/kubernetes/extender/home/bind", content_type="application/json", data=json.dumps(
        {"PodName": "train-0", "PodNamespace": "batch", "PodUID": "other", "Node": NODES[1]}))
    assert wrong.status_code == 403 and "has uid" in wrong.json()["Error"]
    assert not kube_api.get("pods", "batch/train-0")["spec"].get("nodeName")
    assert post(client, "bind", {"PodName": "train-0", "PodNamespace": "batch", "PodUID": uid, "Node": NODES[1]}) == {"Error": ""}
    assert kube_api.get("pods", "batch/train-0")["spec"]["nodeName"] == NODES[1]
    pod = BatchPod.objects.select_related("workload").get(workload__name="batch/train-0")
    assert pod.state == "bound" and pod.workload.node.name == NODES[1]
    # in flight at its request: 500 mcpu more on that node's ledger
    assert LiveNodeLedger.objects.get(node__cluster=live, node__name=NODES[1]).batch_request[0] == before + 500
    again = post(client, "bind", {"PodName": "train-0", "PodNamespace": "batch", "PodUID": uid, "Node": NODES[0]})
    assert "not pending" in again["Error"]  # bound once; a second bind is refused, nothing moves
    unknown = post(client, "bind", {"PodName": "train-0", "PodNamespace": "batch", "PodUID": uid, "Node": "elsewhere"})
    assert "is not in Kalena cluster" in unknown["Error"]


def test_a_refusal_repeated_from_one_peer_is_audited_once_per_window_and_counted_every_time(db, settings):
    """An anonymous client repeating one refused call cannot grow the audit log without bound:
    the first per (peer host, endpoint, reason) per window is audited, every one is counted."""
    from django.core.cache import cache

    from kalena_web.control.models import MetricSeries
    from kalena_web.kubehooks.services import REFUSED_COUNTER, hooks_refusal_record
    from kalena_web.policy.models import AuditEntry

    settings.KALENA_HOOKS_AUDIT_COALESCE_S = 60
    cache.clear()
    for port in range(40000, 40050):  # every connection comes from a port of its own
        hooks_refusal_record(endpoint="tls", reason="no_client_certificate", peer=f"198.51.100.7:{port}",
                             client="", detail="no certificate")
    hooks_refusal_record(endpoint="tls", reason="no_client_certificate", peer="198.51.100.8:40000", client="",
                         detail="no certificate")
    hooks_refusal_record(endpoint="bind", reason="wrong_uid", peer="198.51.100.7:40001", client="CN=kube-scheduler",
                         detail="uid")
    audited = list(AuditEntry.objects.filter(action="hooks.refused").values_list("target", flat=True))
    assert sorted(audited) == ["bind from 198.51.100.7:40001", "tls from 198.51.100.7:40000",
                               "tls from 198.51.100.8:40000"]
    counted = {row.key: row.count for row in MetricSeries.objects.filter(key__startswith=REFUSED_COUNTER)}
    assert sum(counted.values()) == 52
