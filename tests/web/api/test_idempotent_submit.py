"""Submitting a batch pod is idempotent: a client whose answer was lost retries the same call and
learns that the pod is there (200 with the pod as it is now), never a 400 it cannot tell from bad
input; the same name with another spec is a 409 naming the fields that differ. Neither changes
anything."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.test import Client

from kalena_web.policy.models import AuditEntry
from kalena_web.scheduling.models import BatchPod

SPEC = {"name": "batch/retry-0", "owner": "nightly", "request": {"cpu": "250m", "ram": "1Gi"}, "priority": 5,
        "labels": {"team": "a"}, "image": "kalena/busybox:test", "command": ["sleep", "60"]}


@pytest.fixture
def operator(live) -> Client:
    user = User.objects.create_user("op-retry", password="x" * 12)
    # the role comes from a data migration; a transactional test run earlier empties the tables
    # (the flush recreates permissions, not groups), so make sure it is there with its permission
    group, _ = Group.objects.get_or_create(name="operator")
    group.permissions.add(Permission.objects.get(content_type__app_label="scheduling", codename="operate_batch"))
    user.groups.add(group)
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
    # what `kalena batch submit` prints after "kalena: error: ": the field, never a literal "<input>:"
    assert body["detail"].startswith("name: ") and "<input>" not in body["detail"], body["detail"]
    after = BatchPod.objects.select_related("workload").get(workload__name=SPEC["name"])
    assert (after.workload.priority, after.image, after.workload.request) == \
        (before.workload.priority, before.image, before.workload.request)


def test_a_production_pods_name_is_409_not_a_batch_pod(operator, live) -> None:
    production = live.workloads.filter(kind="production").first()
    response = submit(operator, {**SPEC, "name": production.name})
    assert response.status_code == 409, response.content
    assert response.json()["differing"] == ["kind"] and "production" in response.json()["detail"]


@pytest.mark.django_db(transaction=True)
def test_a_retry_racing_the_first_submit_answers_200_with_the_one_pod(operator, live) -> None:
    """A client whose first submit is still committing (slow database, the answer not back yet)
    retries: the retry must not fail (500) on the name the first call is inserting — it waits
    for it and answers 200 with that one pod."""
    import threading
    import time

    from django.db import connection, connections, transaction

    from kalena_web.scheduling import services

    inserted, release, answers = threading.Event(), threading.Event(), {}

    def first() -> None:
        try:
            with transaction.atomic():
                services.batch_queue(cluster=live, orchestrator_kind="docker", name=SPEC["name"], owner=SPEC["owner"],
                                     request=SPEC["request"], priority=SPEC["priority"], labels=SPEC["labels"],
                                     image=SPEC["image"], command=SPEC["command"], now_s=1000.0)
                inserted.set()
                release.wait(30)               # the commit is slow: the retry arrives meanwhile
        finally:
            connections.close_all()

    def retry() -> None:
        try:
            answers["retry"] = submit(operator, SPEC)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=first)]
    threads[0].start()
    assert inserted.wait(30)
    threads.append(threading.Thread(target=retry))
    threads[1].start()
    with connection.cursor() as cursor:       # the retry is waiting on the first call's row
        for _ in range(300):
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND wait_event_type = 'Lock'")
            if cursor.fetchone()[0]:
                break
            if not threads[1].is_alive():
                break
            time.sleep(0.1)
    release.set()
    for thread in threads:
        thread.join(60)
    response = answers["retry"]
    assert response.status_code == 200, response.content
    assert response.json()["name"] == SPEC["name"]
    assert BatchPod.objects.filter(workload__name=SPEC["name"]).count() == 1
