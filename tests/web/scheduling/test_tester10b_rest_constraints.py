"""Tester 10b: the REST submit path (Docker, Swarm, automation, ``kalena batch submit``) checks a
pod's constraints less than the watch does (``objects.POD_SHAPE``'s ``_SELECTOR``): a wrongly typed
selector or namespace list is either an unnamed crash or stored and read as something else."""

from __future__ import annotations

import pytest

from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import BatchRejected
from tests.web.scheduling.test_scheduling_pass import run_pass, submit

BAD = {
    "matchLabels-str": {"anti_affinity_terms": [{"labelSelector": {"matchLabels": "app=x"}}]},
    "matchLabels-value-list": {"anti_affinity_terms": [{"labelSelector": {"matchLabels": {"app": ["x"]}}}]},
    "values-int": {"spread": [{"maxSkew": 1, "topologyKey": "zone", "labelSelector": {
        "matchExpressions": [{"key": "app", "operator": "In", "values": 5}]}}]},
    "values-str": {"spread": [{"maxSkew": 1, "topologyKey": "zone", "labelSelector": {
        "matchExpressions": [{"key": "app", "operator": "In", "values": "train"}]}}]},
    "namespaces-str": {"anti_affinity_terms": [{"labelSelector": {"matchLabels": {"app": "x"}},
                                                "namespaces": "batch"}]},
    "namespaces-nested": {"anti_affinity_terms": [{"labelSelector": {"matchLabels": {"app": "x"}},
                                                   "namespaces": [["batch"]]}]},
}


@pytest.mark.parametrize("constraints", BAD.values(), ids=BAD.keys())
def test_a_wrongly_typed_submitted_selector_is_refused_naming_its_field(live, constraints) -> None:
    """Expected (as for the watch, and as for ``node_selector`` values, which the REST path does
    check): ``BatchRejected`` naming ``constraints.…``, nothing stored. Observed: see the report
    (an AttributeError/TypeError — a 500 through REST — or the value accepted and stored)."""
    with pytest.raises(BatchRejected) as info:
        submit(live, "batch/bad-0", constraints=constraints)
    assert "constraints" in str(info.value)
    assert not BatchPod.objects.filter(workload__name="batch/bad-0").exists()


def test_a_submitted_selector_whose_match_labels_is_a_string_is_refused_not_a_500(live, client) -> None:
    """Observed: ``POST /api/clusters/home/batch`` with ``anti_affinity_terms[0].labelSelector.
    matchLabels: "app=x"`` raises ``AttributeError: 'str' object has no attribute 'items'`` in
    ``mappers.label_selector`` (a 500). Expected: refused naming the field — a 422, as the body's
    schema states a selector's shape."""
    import json

    from django.contrib.auth.models import Group, User

    user = User.objects.create_user("op10b", password="x" * 12)
    user.groups.add(*Group.objects.filter(name__in=["operator", "admin"]))
    user.is_superuser = True
    user.save()
    client.raise_request_exception = False
    client.force_login(user)
    body = {"name": "batch/bad-0", "request": {"cpu": 1},
            "constraints": {"anti_affinity_terms": [{"labelSelector": {"matchLabels": "app=x"}}]}}
    response = client.post("/api/clusters/home/batch", json.dumps(body), content_type="application/json")
    assert response.status_code == 422, response.status_code
    assert "matchLabels" in response.content.decode() or "anti_affinity_terms" in response.content.decode()



def test_kalena_batch_submit_with_integer_expression_values_exits_2_naming_the_field(live, capsys) -> None:
    """``kalena batch submit home batch/bad-0 --request cpu=1 --constraints '{"spread": [{"maxSkew": 1,
    "topologyKey": "zone", "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In",
    "values": 5}]}}]}'``. Observed: a ``TypeError: 'int' object is not iterable`` traceback out of the
    command. Expected: exit status 2 and a message naming ``constraints.spread[0]…`` (the module
    doc: "Exit status: … 2 refused (the message names the field …)")."""
    import json

    from kalena_web.cli import main

    constraints = json.dumps(BAD["values-int"])
    try:
        status = main(["batch", "submit", "home", "batch/bad-0", "--request", "cpu=1", "--constraints", constraints])
    except TypeError as exc:  # the observed crash
        pytest.fail(f"kalena batch submit crashed: {exc!r}")
    out, err = capsys.readouterr()
    assert status == 2 and "constraints.spread" in out + err, (status, out, err)
    assert not BatchPod.objects.filter(workload__name="batch/bad-0").exists()
