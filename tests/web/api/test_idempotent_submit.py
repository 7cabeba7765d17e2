"""Submitting a batch pod is idempotent: a client whose answer was lost retries the same call and
learns that the pod is there (200 with the pod as it is now), never a 400 it cannot tell from bad
input; the same name with another spec is a 409 naming the fields that differ. Neither changes
anything."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from kalena_web.policy.models import AuditEntry
from kalena_web.scheduling.models import BatchPod

SPEC = {"name": "batch/retry-0", "owner": "nightly", "request": {"cpu": "250m", "ram": "1Gi"}, "priority": 5,
        "labels": {"team": "a"}, "image": "kalena/busybox:test", "command": ["sleep", "60"]}


@pytest.fixture
def operator(live) -> Client:
    user = User.objects.create_user("op-retry", password="x" * 12)
    user.groups.add(Group.objects.get(name="operator"))
    client = Client(raise_request_exception=False)
    client.force_login(user)
    return client


def submit(client: Client, body: dict):
    return client.post("/api/clusters/home/batch", json.dumps(body), content_type="application/json")


def test_the_same_name_and_spec_again_answers_200_with_the_existing_pod(operator) -> None:
    first = submit(operator, SPEC)
    assert first.status_code == 201, first.content
    BatchPod.objects.filter(workload__name=SPEC["name"]).update(state=BatchPod.COMPLETED)  # it even ran meanwhile
    audited = AuditEntry.objects.filter(action="batch.submit").count()
    # the same spec written differently: cores instead of millicores, the default limit spelt out
    again = submit(operator, {**SPEC, "request": {"cpu": 0.25, "ram": "1Gi"}, "limit": {"cpu": "250m", "ram": "1Gi"}})
    assert again.status_code == 200, again.content
    body = again.json()
    assert body["name"] == SPEC["name"] and body["state"] == "completed"
    assert body["submitted_s"] == first.json()["submitted_s"]
    assert BatchPod.objects.filter(workload__name=SPEC["name"]).count() == 1
    assert AuditEntry.objects.filter(action="batch.submit").count() == audited  # nothing new happened


@pytest.mark.parametrize(("change", "differing"), [
    pytest.param({"priority": 6}, ["priority"], id="priority"),
    pytest.param({"request": {"cpu": "500m", "ram": "1Gi"}}, ["request", "limit"], id="request (and its default limit)"),
    pytest.param({"image": "other:1", "labels": {"team": "b"}}, ["labels", "image"], id="image and labels"),
    pytest.param({"owner": ""}, ["owner"], id="owner left to default"),
])
def test_the_same_name_with_another_spec_is_409_naming_the_fields(operator, change, differing) -> None:
    assert submit(operator, SPEC).status_code == 201
    before = BatchPod.objects.select_related("workload").get(workload__name=SPEC["name"])
    response = submit(operator, {**SPEC, **change})
    assert response.status_code == 409, response.content
    body = response.json()
    assert body["code"] == "name_taken" and body["differing"] == differing, body
    assert SPEC["name"] in body["detail"] and all(field in body["detail"] for field in differing)
    after = BatchPod.objects.select_related("workload").get(workload__name=SPEC["name"])
    assert (after.workload.priority, after.image, after.workload.request) == \
        (before.workload.priority, before.image, before.workload.request)


def test_a_production_pods_name_is_409_not_a_batch_pod(operator, live) -> None:
    production = live.workloads.filter(kind="production").first()
    response = submit(operator, {**SPEC, "name": production.name})
    assert response.status_code == 409, response.content
    assert response.json()["differing"] == ["kind"] and "production" in response.json()["detail"]
