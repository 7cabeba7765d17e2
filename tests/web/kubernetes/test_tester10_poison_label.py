"""Tester 10: one malformed pod must not stop Kalena scheduling every other pod (issue 10, "Bad
input": "counted and logged with its name and field, never crashes the watcher, and changes
nothing"). End to end against the test API server with the real client, as
tests/web/kubernetes/test_live_kubernetes.py."""

from __future__ import annotations

import pytest

from tests.web.kubernetes.test_live_kubernetes import api, job_pod, scheduler, wait_for  # noqa: F401 - fixture
from kalena_web.scheduling.models import BatchPod


@pytest.mark.parametrize("value", [["a", "b"], {"x": "1"}], ids=["list", "mapping"])
@pytest.mark.django_db(transaction=True)
def test_a_pod_whose_label_value_is_not_a_string_does_not_stop_the_others_being_scheduled(live, api, value) -> None:
    """Observed: the watcher checks that ``metadata.labels`` is a mapping but not that its values
    are strings, the reconciler queues the pod with ``labels={"app": ["a", "b"], …}``, and from
    then on every scheduling pass fails ("scheduling pass for home failed … kalena_engine/
    placement/scheduler.py, in _drop_unplaceable: signatures.setdefault(p.templates[t].
    rule_signature, …) TypeError: unhashable type: 'list'"): the good pod created after it is
    never bound, nor any other pod of the cluster, until the bad pod is deleted.
    Expected: the bad pod counted as malformed (or rejected) and skipped; the good pod bound."""
    bad = job_pod("bad", owner="b")
    bad["metadata"]["labels"]["app"] = value
    s = scheduler(live, api, "kalena-a")
    s.start()
    try:
        api.create_pod(bad)
        api.create_pod(job_pod("good"))
        wait_for(lambda: BatchPod.objects.filter(workload__name="batch/good").exists(), "the good pod queued")
        wait_for(lambda: api.get("pods", "batch/good")["spec"].get("nodeName"), "the good pod bound", 30)
    finally:
        s.stop()
    assert BatchPod.objects.get(workload__name="batch/good").state == "bound"


@pytest.mark.django_db(transaction=True)
def test_a_production_pod_whose_label_value_is_not_a_string_does_not_stop_scheduling(live, api) -> None:
    """Observed: a production (non-batch) pod with ``labels: {"app": ["a", "b"]}`` is taken as
    ``ProductionSeen`` with those labels; from then on every pass that has a pending pod with pod
    anti-affinity or topology spread fails ("kalena_engine/placement/model.py, in label_groups:
    out.setdefault(key, []).append(…) TypeError: unhashable type: 'list'"), so no pod is bound.
    Expected: the production pod counted as malformed (or its label refused), the batch pod bound."""
    from agents.orchestrators.kubernetes.testserver import pod

    api.create_pod(pod("web", "shop-0", "thinkcentre-alpha", labels={"app": ["a", "b"]}))
    good = job_pod("good")
    good["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kubernetes.io/hostname",
         "namespaces": ["web", "batch"]}]}}
    s = scheduler(live, api, "kalena-a")
    s.start()
    try:
        api.create_pod(good)
        wait_for(lambda: BatchPod.objects.filter(workload__name="batch/good").exists(), "the good pod queued")
        wait_for(lambda: api.get("pods", "batch/good")["spec"].get("nodeName"), "the good pod bound", 30)
    finally:
        s.stop()
    assert BatchPod.objects.get(workload__name="batch/good").state == "bound"
