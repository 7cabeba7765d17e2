"""The submit body's schema says what the server accepts: for each body, the OpenAPI schema's
verdict (a JSON Schema 2020-12 validator over ``/api/openapi.json``) is the server's — valid is
queued (201), invalid is a 422 naming the field — including the rules the schema used to state
only in words (quantity spellings, some cpu or ram, Kubernetes' label syntax, constraint shapes)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from kalena_web.scheduling.models import BatchPod

R = {"cpu": "250m"}
CASES = {
    "millicores": ({"request": {"cpu": "250m"}}, True),
    "GiB and a limit below it": ({"request": {"ram": "1.5Gi"}, "limit": {"ram": "1Gi"}}, True),
    "larger than every node": ({"request": {"cpu": 9_999_999.5}}, True),
    "whole gpu as 2.0": ({"request": {**R, "gpu": 2.0}}, True),
    "nested bandwidth": ({"request": {**R, "disk": {"read": "500M"}, "network": {"out": "1G"}}}, True),
    "prefixed label": ({"request": R, "labels": {"app.kubernetes.io/name": "etl_v1.2"}}, True),
    "Gt with a sign": ({"request": R, "constraints": {"node_affinity": [{"matchExpressions": [
        {"key": "gpu-count", "operator": "Gt", "values": ["+3"]}]}]}}, True),
    "every kind of toleration": ({"request": R, "constraints": {"tolerations": [
        "gpu", {"operator": "Exists"}, {"key": "a", "operator": "Equal", "value": "b", "effect": "NoExecute"}]}}, True),
    "selector alone as a term": ({"request": R, "constraints": {"anti_affinity_terms": [
        {"matchLabels": {"app": "noisy"}}]}}, True),
    "zero at the tenth decimal": ({"request": {"cpu": "0.0000000001"}}, False),
    "only gpu": ({"request": {"gpu": 1}}, False),
    "an exponent": ({"request": {"cpu": "1e3"}}, False),
    "ten million cores": ({"request": {"cpu": 10_000_000}}, False),
    "decimal suffix on ram": ({"request": {"ram": "16G"}}, False),
    "Kubernetes' memory": ({"request": {**R, "memory": "1Gi"}}, False),
    "label value of 64": ({"request": R, "labels": {"app": "x" * 64}}, False),
    "label key with a space": ({"request": R, "labels": {"my app": "x"}}, False),
    "Exists with a value": ({"request": R, "constraints": {"tolerations": [
        {"key": "a", "operator": "Exists", "value": "b"}]}}, False),
    "In without values": ({"request": R, "constraints": {"node_affinity": [{"matchExpressions": [
        {"key": "a", "operator": "In", "values": []}]}]}}, False),
    "a field other than metadata.name": ({"request": R, "constraints": {"node_affinity": [{"matchFields": [
        {"key": "spec.nodeName", "operator": "In", "values": ["a"]}]}]}}, False),
    "upper-case namespace": ({"request": R, "constraints": {"anti_affinity_terms": [{"namespaces": ["Batch"]}]}},
                             False),
}


@pytest.fixture
def operator(live) -> Client:
    user = User.objects.create_user("op-schema", password="x" * 12)
    user.groups.add(Group.objects.get(name="operator"))
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def _body_validator(client: Client) -> jsonschema.protocols.Validator:
    doc = client.get("/api/openapi.json").json()
    schema = doc["paths"]["/api/clusters/{cluster}/batch"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema.Draft202012Validator({**schema, "components": doc["components"]})


@pytest.mark.parametrize(("case", "accepted"), [(k, v[1]) for k, v in CASES.items()], ids=list(CASES))
def test_the_schema_and_the_server_give_the_same_verdict(operator, case, accepted) -> None:
    body = {"name": "batch/verdict-0", **CASES[case][0]}
    assert _body_validator(operator).is_valid(body) is accepted, case
    response = operator.post("/api/clusters/home/batch", json.dumps(body), content_type="application/json")
    assert response.status_code == (201 if accepted else 422), response.content
    assert BatchPod.objects.filter(workload__name="batch/verdict-0").exists() is accepted
    if not accepted:
        assert response.json()["errors"][0]["loc"][:2] in (["body", "request"], ["body", "labels"],
                                                           ["body", "constraints"])
