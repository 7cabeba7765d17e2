"""The control plane keeps a production pod's required anti-affinity terms (the reconciler →
``control.observed_production.production_observe`` → ``constraints.anti_affinity_terms``) and
the scheduler's read of resident production (``scheduling.selectors.production_pods``, cached
between passes by the lease holder) hands them to the engine — also for a blueprint pod first
seen where the blueprint put it, which neither moves nor adds a pod."""

from __future__ import annotations

import pytest

from agents.orchestrators.events import ProductionSeen
from kalena_engine.placement import HOSTNAME, AntiAffinityTerm, LabelSelector
from kalena_web.control.reconciler import CHANGED, REJECTED, UNCHANGED, Reconciler
from kalena_web.inventory.models import Workload
from kalena_web.scheduling.selectors import node_rows, production_pods

NOISY = {"labelSelector": {"matchLabels": {"app": "noisy"}}, "topologyKey": HOSTNAME, "namespaces": ["batch"]}


def read(cluster, cache: dict):
    rows = node_rows(cluster=cluster)
    return production_pods(cluster=cluster, row_of_node={r.id: i for i, r in enumerate(rows)}, cache=cache)


def seen(w: Workload, *terms: dict) -> ProductionSeen:
    return ProductionSeen(w.name, w.node.name, tuple(w.request), tuple(w.limit), labels=dict(w.labels), at_s=1000.0,
                          anti_affinity=terms)


@pytest.mark.django_db
def test_a_blueprint_pod_s_terms_reach_a_cached_read_and_leave_it_again(live) -> None:
    rec = Reconciler(cluster=live, clock=lambda: 1000.0)
    w = (Workload.objects.filter(cluster=live, kind=Workload.PRODUCTION, constraints__has_key="anti_affinity")
         .select_related("node").first())
    names = list(w.constraints["anti_affinity"])  # its Kuberina name list, from the blueprint
    cache: dict = {}
    assert read(live, cache).terms[read(live, cache).ids.index(w.name)] == ()
    assert rec.apply(seen(w, NOISY)) == CHANGED
    assert rec.apply(seen(w, NOISY)) == UNCHANGED
    w.refresh_from_db()
    assert w.constraints == {"anti_affinity": names, "anti_affinity_terms": [NOISY]}
    prod = read(live, cache)
    assert prod.terms[prod.ids.index(w.name)] == (AntiAffinityTerm(LabelSelector.of(app="noisy"), HOSTNAME, ("batch",)),)
    assert prod.names[prod.ids.index(w.name)] == tuple(names)
    assert rec.apply(seen(w)) == CHANGED  # the pod re-created without the term
    prod = read(live, cache)
    assert prod.terms[prod.ids.index(w.name)] == ()
    w.refresh_from_db()
    assert w.constraints == {"anti_affinity": names}


@pytest.mark.parametrize(("term", "field"), [
    ({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}},
     "anti_affinity[0].labelSelector.matchExpressions[0]"),
    ({"labelSelector": {}, "topologyKey": 7}, "anti_affinity[0].topologyKey"),
    ({"labelSelector": {}, "namespaces": "batch"}, "anti_affinity[0].namespaces"),
], ids=["unknown-operator", "topology-key-not-a-string", "namespaces-not-a-list"])
@pytest.mark.django_db
def test_a_malformed_term_is_rejected_naming_the_field_and_changes_nothing(live, term, field) -> None:
    rec = Reconciler(cluster=live, clock=lambda: 1000.0)
    w = Workload.objects.filter(cluster=live, kind=Workload.PRODUCTION).select_related("node").first()
    before = dict(w.constraints)
    assert rec.apply(seen(w, term)) == REJECTED
    assert field in rec.rejected[-1][2]
    w.refresh_from_db()
    assert w.constraints == before
