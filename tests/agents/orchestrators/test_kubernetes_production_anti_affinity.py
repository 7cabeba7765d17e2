"""A production pod's required pod anti-affinity, read by the watch (objects.py, pure) from a
Deployment's pod as the API server returns it (``kubectl get pod -o json``): it reaches
``ProductionSeen`` in the constraint shape, with namespaces as Kubernetes reads them, and a term
the API server would refuse is a ``MalformedObject`` naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from agents.orchestrators.events import ProductionSeen
from agents.orchestrators.kubernetes.objects import MalformedObject, pod_events
from tests.agents.orchestrators.kubernetes.test_watcher import api, watching  # noqa: F401 - fixtures

DATA = Path(__file__).parent / "data"
FIELD = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution"


def deployment_pod() -> dict:
    return json.loads((DATA / "pod-deployment-anti-affinity.json").read_text())


def terms_of(pod: dict) -> list:
    return pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]


def test_a_deployment_pod_s_required_anti_affinity_reaches_production_seen() -> None:
    (event,) = pod_events("ADDED", deployment_pod())
    assert isinstance(event, ProductionSeen)
    assert (event.ref, event.node) == ("web/shop-7d9c5b6f4-x2k9q", "thinkcentre-alpha")
    assert event.anti_affinity == (
        # namespaceSelector {}: every namespace (Kubernetes' empty selector)
        {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": "kubernetes.io/hostname",
         "namespaces": []},
        # neither namespaces nor namespaceSelector: the pod's own namespace
        {"labelSelector": {"matchExpressions": [{"key": "team", "operator": "In", "values": ["etl", "ml"]}]},
         "topologyKey": "topology.kubernetes.io/zone", "namespaces": ["web"]},
    )


NAMESPACES = [
    # (name, term's namespaces, term's namespaceSelector, read as)
    ("listed", ["batch", "ml"], None, ["batch", "ml"]),
    ("none_named_is_the_pods_own", None, None, ["web"]),
    ("empty_list_is_the_pods_own", [], None, ["web"]),
    ("a_label_selector_over_namespaces_is_widened_to_every_namespace", ["batch"],
     {"matchLabels": {"team": "data"}}, []),
]


@pytest.mark.parametrize(("namespaces", "selector", "read"), [c[1:] for c in NAMESPACES],
                         ids=[c[0] for c in NAMESPACES])
def test_the_namespaces_a_term_covers(namespaces, selector, read) -> None:
    pod = deployment_pod()
    term = {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": "kubernetes.io/hostname"}
    if namespaces is not None:
        term["namespaces"] = namespaces
    if selector is not None:
        term["namespaceSelector"] = selector
    terms_of(pod)[:] = [term]
    (event,) = pod_events("ADDED", pod)
    assert [t["namespaces"] for t in event.anti_affinity] == [read]


def test_a_term_without_a_label_selector_matches_no_pod_and_is_left_out() -> None:
    pod = deployment_pod()
    del terms_of(pod)[0]["labelSelector"]
    (event,) = pod_events("ADDED", pod)
    assert [t["topologyKey"] for t in event.anti_affinity] == ["topology.kubernetes.io/zone"]


def test_a_production_pod_without_anti_affinity_carries_none() -> None:
    pod = deployment_pod()
    del pod["spec"]["affinity"]
    (event,) = pod_events("MODIFIED", pod)
    assert event.anti_affinity == ()


def _set(path: str, value):
    def edit(pod: dict) -> None:
        target = terms_of(pod)
        *keys, last = path.split(".")
        for key in keys:
            target = target[int(key)] if key.isdigit() else target[key]
        target[int(last) if last.isdigit() else last] = value
    return edit


def _drop_topology_key(pod: dict) -> None:
    del terms_of(pod)[1]["topologyKey"]


MALFORMED = [
    ("unknown_operator", _set("1.labelSelector.matchExpressions.0.operator", "Near"),
     f"{FIELD}[1].labelSelector.matchExpressions[0]", "'Near' is not supported"),
    ("in_without_values", _set("1.labelSelector.matchExpressions.0.values", []),
     f"{FIELD}[1].labelSelector.matchExpressions[0]", "In needs at least one value"),
    ("exists_with_values", _set("1.labelSelector.matchExpressions.0.operator", "Exists"),
     f"{FIELD}[1].labelSelector.matchExpressions[0]", "Exists takes no values"),
    ("no_topology_key", _drop_topology_key, f"{FIELD}[1].topologyKey", "needs a topology key"),
    ("empty_topology_key", _set("0.topologyKey", ""), f"{FIELD}[0].topologyKey", "needs a topology key"),
    ("match_labels_a_string", _set("0.labelSelector.matchLabels", "app=noisy"),
     f"{FIELD}[0].labelSelector.matchLabels", "expected a mapping of strings"),
    ("namespace_selector_a_list", _set("0.namespaceSelector", ["batch"]),
     f"{FIELD}[0].namespaceSelector", "expected a mapping"),
    ("namespaces_not_strings", _set("1.namespaces", [3]), f"{FIELD}[1].namespaces[0]", "expected a string"),
]


@pytest.mark.parametrize(("edit", "field", "problem"), [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_a_term_the_api_server_would_refuse_names_the_pod_and_the_field(edit, field, problem) -> None:
    pod = deployment_pod()
    edit(pod)
    before = copy.deepcopy(pod)
    with pytest.raises(MalformedObject) as info:
        pod_events("ADDED", pod)
    assert (info.value.name, info.value.field) == ("web/shop-7d9c5b6f4-x2k9q", field)
    assert problem in info.value.problem
    assert pod == before  # reading changes nothing


def test_the_watch_counts_logs_and_skips_a_production_pod_with_a_malformed_term(api, watching, caplog) -> None:
    """Through the test API server and the real client: a shop pod whose term has an unknown
    operator is counted as malformed and logged with its field; the watch goes on (the next pod,
    a well-formed replica, arrives with its terms)."""
    import logging

    from agents.orchestrators.kubernetes.testserver import node

    caplog.set_level(logging.WARNING, logger="agents.orchestrators.kubernetes.watch")
    api.create("nodes", node("thinkcentre-alpha"))
    bad = deployment_pod()
    terms_of(bad)[1]["labelSelector"]["matchExpressions"][0]["operator"] = "Near"
    api.create_pod(bad)
    good = deployment_pod()
    good["metadata"]["name"] = "shop-7d9c5b6f4-m4p8z"
    api.create_pod(good)
    seen = watching.until(lambda e: isinstance(e, ProductionSeen) and e.ref == "web/shop-7d9c5b6f4-m4p8z", "good")
    assert [t["topologyKey"] for t in seen.anti_affinity] == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    assert watching.watcher.malformed["pods"] == 1
    assert not any(isinstance(e, ProductionSeen) and e.ref == "web/shop-7d9c5b6f4-x2k9q" for e in watching.seen)
    assert any(f"{FIELD}[1].labelSelector.matchExpressions[0]" in r.getMessage() for r in caplog.records)
