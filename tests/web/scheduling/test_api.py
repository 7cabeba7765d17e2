"""Scheduling REST API: submit in IR units, list, why-pending, delete; errors name the field."""

from __future__ import annotations

import json

import numpy as np
import pytest
from django.contrib.auth.models import Group, User

from kalena_engine.policy import Policy
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import scheduling_pass


@pytest.fixture
def api(client, live):
    user = User.objects.create_user("op", password="x" * 12)
    user.groups.add(Group.objects.get(name="operator"))
    client.force_login(user)
    return client


def post(api, body):
    return api.post("/api/clusters/home/batch", json.dumps(body), content_type="application/json")


def test_submit_list_why_pending_delete(api, live) -> None:
    response = post(api, {"name": "batch/train-0", "owner": "train", "request": {"cpu": "500m", "ram": "2Gi"}, "priority": 2})
    assert response.status_code == 201, response.content
    assert response.json()["request"]["cpu"] == 0.5 and response.json()["request"]["ram"] == 2.0
    # a whole node's RAM: some node could hold it (accepted), none can beside its production pods
    assert post(api, {"name": "batch/huge-0", "request": {"cpu": 1, "ram": "16Gi"}}).status_code == 201
    scheduling_pass(cluster=live, orchestrator=orchestrator_for(live), policy=Policy(), now_s=2000.0,
                    rng=np.random.default_rng(0))
    bound = api.get("/api/clusters/home/batch?state=bound").json()
    assert [b["name"] for b in bound] == ["batch/train-0"] and bound[0]["node"]
    pending = api.get("/api/clusters/home/batch").json()
    assert [(p["name"], p["binding"]) for p in pending] == [("batch/huge-0", "ram")]
    why = api.get("/api/clusters/home/batch/batch/huge-0/why-pending").json()
    assert why["binding"] == "ram" and why["nodes_total"] == 3
    assert [s["unit"] for s in why["shortfall"] if s["dim"] == "ram"] == ["GiB"]
    assert api.get("/api/clusters/home/batch/batch/train-0/why-pending").status_code == 404  # bound, not pending
    assert api.delete("/api/clusters/home/batch/batch/huge-0").status_code == 204
    assert BatchPod.objects.get(workload__name="batch/huge-0").state == BatchPod.DELETED


@pytest.mark.parametrize(
    ("body", "words"),
    [
        pytest.param({"name": "batch/a", "request": {"ram": "2G"}}, ["request.ram", "Ki Mi Gi Ti"], id="decimal ram"),
        pytest.param({"name": "batch/a", "request": {"memory": 1}}, ["memory", "ram"], id="unknown dimension"),
        pytest.param({"name": "batch/a", "request": {}}, ["request", "cpu or ram"], id="empty request"),
        pytest.param({"name": "batch/a", "request": {"cpu": "0", "gpu": 1}}, ["request", "cpu or ram"], id="only gpu"),
        pytest.param({"name": "batch/a", "request": {"cpu": 1, "gpu": 0.5}}, ["request.gpu", "whole"], id="half a gpu"),
        pytest.param({"name": "batch/a", "request": {"cpu": "1e3"}}, ["request.cpu", "millicores"], id="exponent"),
        pytest.param({"name": "batch/a", "request": {"cpu": "99999999"}}, ["request.cpu", "10,000,000"], id="8 digits"),
        pytest.param({"name": "batch/a", "request": {"cpu": True}}, ["request.cpu", "not a quantity"], id="boolean"),
        pytest.param({"name": "batch/a", "request": {"cpu": 1}, "labels": {"app": "x" * 64}}, ["labels.app"],
                     id="label value over 63"),
        pytest.param({"name": "batch/a", "request": {"cpu": 1}, "labels": {"-app": "x"}}, ["labels.-app"],
                     id="label key syntax"),
        pytest.param({"name": "batch/a", "request": {"cpu": 1}, "constraints": {"node_selector": "gpu"}},
                     ["constraints.node_selector", "dictionary"], id="selector not a mapping"),
        pytest.param({"name": "batch/a", "request": {"cpu": 1}, "constraints": {"tolerations": 5}},
                     ["constraints.tolerations", "list"], id="tolerations not a list"),
        pytest.param({"name": "batch/a", "request": {"cpu": 1}, "constraints": {"nodeSelector": {"gpu": "a100"}}},
                     ["constraints", "nodeSelector", "node_selector"], id="unknown constraint key"),
        pytest.param({"name": "batch/a", "request": {"cpu": 1}, "constraints": {"spread": [{"maxSkew": 0}]}},
                     ["constraints.spread.0.maxSkew"], id="skew below 1"),
        pytest.param({"name": "batch/a", "request": {"cpu": 1},
                      "constraints": {"node_affinity": [{"matchExpressions": [{"key": "gpus", "operator": "Gt",
                                                                               "values": ["many"]}]}]}},
                     ["constraints.node_affinity.0.matchExpressions.0.Gt.values.0"], id="Gt not an integer"),
        pytest.param({"name": "batch/a", "request": {"cpu": 1},
                      "constraints": {"anti_affinity_terms": [{"labelSelector": {"matchExpressions": [
                          {"key": "app", "operator": "In", "values": []}]}}]}},
                     ["constraints.anti_affinity_terms", "values"], id="In without values"),
    ],
)
def test_bad_input_is_422_naming_the_field_and_changes_nothing(api, live, body, words) -> None:
    response = post(api, body)  # the body's schema states each rule (kalena_web/scheduling/schemas.py)
    assert response.status_code == 422, response.content
    for word in words:
        assert word in response.content.decode()
    assert not BatchPod.objects.exists()


def test_a_limit_below_its_request_is_the_request(api, live) -> None:
    # request cpu 2, ram 1 GiB; limit cpu 1 (below), ram omitted, gpu 0 → limit cpu 2, ram 1 GiB:
    # a pod is never capped below what it reserves
    response = post(api, {"name": "batch/capped-0", "request": {"cpu": 2, "ram": "1Gi"}, "limit": {"cpu": "1"}})
    assert response.status_code == 201, response.content
    limit = response.json()["limit"]
    assert (limit["cpu"], limit["ram"], limit["gpu"]) == (2.0, 1.0, 0.0)
    above = post(api, {"name": "batch/capped-1", "request": {"cpu": 1}, "limit": {"cpu": "1500m", "ram": "4Gi"}})
    limit = above.json()["limit"]
    assert (limit["cpu"], limit["ram"]) == (1.5, 4.0)  # a limit above its request is kept as given
    again = post(api, {"name": "batch/capped-0", "request": {"cpu": 2, "ram": "1Gi"}})
    assert again.status_code == 200  # the same spec as stored: the raised limit is the omitted one


@pytest.mark.parametrize(("dim", "value", "unit"), [("ram", "9999999Ti", "GiB"), ("cpu", 1e6, "cores"),
                                                   ("gpu", 64, "devices")])
def test_a_request_no_node_could_hold_is_queued_and_pending_with_its_shortfall(api, live, dim, value, unit) -> None:
    # kube-scheduler keeps an unschedulable pod pending (FailedScheduling) rather than refusing it
    response = post(api, {"name": "batch/giant-0", "request": {"cpu": 1, dim: value}})
    assert response.status_code == 201, response.content
    scheduling_pass(cluster=live, orchestrator=orchestrator_for(live), policy=Policy(), now_s=2000.0,
                    rng=np.random.default_rng(0))
    assert BatchPod.objects.get(workload__name="batch/giant-0").state == BatchPod.PENDING
    why = api.get("/api/clusters/home/batch/batch/giant-0/why-pending").json()
    assert why["binding"] == dim and why["excluded"][dim] == why["nodes_total"] == 3
    shortfall = next(s for s in why["shortfall"] if s["dim"] == dim)
    assert shortfall["unit"] == unit and shortfall["nodes"] == 3 and shortfall["amount"] > 0


@pytest.mark.parametrize("name", [
    pytest.param("a", id="no namespace"),
    pytest.param("a/b/c", id="two slashes"),
    pytest.param("batch/ j8", id="space"),
    pytest.param("Batch/A", id="upper case"),
])
def test_a_name_outside_the_schemas_pattern_is_422_naming_it(api, live, name) -> None:
    response = post(api, {"name": name, "request": {"cpu": 1}})  # the schema gives the DNS-1123 pattern
    assert response.status_code == 422 and response.json()["errors"][0]["loc"] == ["body", "name"]
    assert "name" in response.json()["detail"] and "pattern" in response.json()["detail"]
    assert not BatchPod.objects.exists()


def test_only_a_placed_pod_completes_and_a_finished_pod_cannot_be_deleted(api, live) -> None:
    assert post(api, {"name": "batch/idle-0", "request": {"cpu": "250m"}}).status_code == 201
    pending = api.post("/api/clusters/home/batch/batch/idle-0/complete")
    assert pending.status_code == 409 and "pending" in pending.json()["detail"]
    assert BatchPod.objects.get(workload__name="batch/idle-0").state == BatchPod.PENDING  # unchanged
    assert api.delete("/api/clusters/home/batch/batch/idle-0").status_code == 204
    again = api.delete("/api/clusters/home/batch/batch/idle-0")
    assert again.status_code == 409 and "already deleted" in again.json()["detail"]
    assert api.get("/api/clusters/home/escalations?limit=0").status_code == 422  # the schema says 1–1000
    assert api.get("/api/clusters/home/escalations?limit=1000").status_code == 200


def test_unknown_cluster_and_anonymous(client, api, live) -> None:
    assert api.get("/api/clusters/nope/batch").status_code == 404
    client.logout()
    assert client.get("/api/clusters/home/batch").status_code == 401


def test_viewers_cannot_submit_but_api_tokens_act_as_their_user(live) -> None:
    from django.test import Client

    from kalena_web.api.services import api_token_create, api_token_revoke

    client = Client(enforce_csrf_checks=True)  # as curl meets the server: a bearer write needs no CSRF token
    viewer = User.objects.create_user("viewer", password="x" * 12)
    viewer.groups.add(Group.objects.get(name="viewer"))
    token, row = api_token_create(user=viewer, name="ci")
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    assert client.get("/api/clusters/home/batch", **headers).status_code == 200
    body = json.dumps({"name": "batch/a-0", "request": {"cpu": 1}})
    denied = client.post("/api/clusters/home/batch", body, content_type="application/json", **headers)
    assert denied.status_code == 403 and "operator role" in denied.content.decode()
    viewer.groups.add(Group.objects.get(name="operator"))
    assert client.post("/api/clusters/home/batch", body, content_type="application/json", **headers).status_code == 201
    assert api_token_revoke(token_id=row.id)
    assert client.get("/api/clusters/home/batch", **headers).status_code == 401
    assert client.get("/api/clusters/home/batch", HTTP_AUTHORIZATION="Bearer kal_forged").status_code == 401
    client.force_login(viewer)  # a browser session still needs its CSRF token to write
    refused = client.post("/api/clusters/home/batch", json.dumps({"name": "batch/a-1", "request": {"cpu": 1}}),
                          content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.content.decode()


def test_a_submission_is_scheduled_at_once_and_completion_frees_the_ledger(api, live,
                                                                         django_capture_on_commit_callbacks) -> None:
    from kalena_web.ledger.models import LiveNodeLedger

    with django_capture_on_commit_callbacks(execute=True):  # the event-driven pass runs after the commit
        assert post(api, {"name": "batch/etl-0", "request": {"cpu": "250m", "ram": "1Gi"}}).status_code == 201
    pod = BatchPod.objects.select_related("workload__node").get(workload__name="batch/etl-0")
    assert pod.state == BatchPod.BOUND  # no periodic pass ran: the submission asked for one
    ledger = LiveNodeLedger.objects.get(node=pod.workload.node)
    assert ledger.batch_request[1] == pytest.approx(2**30)
    ran_on = pod.workload.node.name
    done = api.post("/api/clusters/home/batch/batch/etl-0/complete")
    assert done.status_code == 200 and done.json()["state"] == "completed"
    # a finished pod still says where it ran (`kalena batch get --state all` printed <none>)
    assert done.json()["node"] == ran_on
    ledger.refresh_from_db()
    assert ledger.batch_request[1] == pytest.approx(0.0)
    assert api.post("/api/clusters/home/batch/batch/etl-0/complete").status_code == 200  # again: nothing changes
    ledger.refresh_from_db()
    assert ledger.batch_request[1] == pytest.approx(0.0)
    assert api.post("/api/clusters/home/batch/batch/nope-0/complete").status_code == 404


def test_deleting_a_running_pod_stops_it_first_and_a_refusal_changes_nothing(api, live, monkeypatch) -> None:
    from agents.orchestrators.base import OrchestratorError
    from kalena_web.scheduling import api as scheduling_api

    assert post(api, {"name": "batch/etl-1", "request": {"cpu": "250m", "ram": "1Gi"}}).status_code == 201
    orchestrator = orchestrator_for(live)
    scheduling_pass(cluster=live, orchestrator=orchestrator, policy=Policy(), now_s=2000.0, rng=np.random.default_rng(0))
    assert BatchPod.objects.get(workload__name="batch/etl-1").state == BatchPod.BOUND

    class Refusing:
        def evict(self, workload_id, *, grace_s, reason):
            raise OrchestratorError(f"evict {workload_id}: 503 unavailable")

    monkeypatch.setattr(scheduling_api, "orchestrator_for", lambda cluster: Refusing())
    response = api.delete("/api/clusters/home/batch/batch/etl-1")
    assert response.status_code == 502 and "not deleted" in response.json()["detail"]
    assert BatchPod.objects.get(workload__name="batch/etl-1").state == BatchPod.BOUND  # unchanged

    stopped = []

    class Stopping:
        def evict(self, workload_id, *, grace_s, reason):
            stopped.append((workload_id, grace_s))

    monkeypatch.setattr(scheduling_api, "orchestrator_for", lambda cluster: Stopping())
    assert api.delete("/api/clusters/home/batch/batch/etl-1").status_code == 204
    assert stopped == [("batch/etl-1", 30.0)]
    assert BatchPod.objects.get(workload__name="batch/etl-1").state == BatchPod.DELETED


@pytest.mark.django_db
def test_the_role_groups_hold_exactly_the_documented_permissions() -> None:
    from kalena_web.api.roles import ROLES

    for role, perms in ROLES.items():
        group = Group.objects.get(name=role)
        held = {f"{p.content_type.app_label}.{p.codename}" for p in group.permissions.select_related("content_type")}
        assert held == set(perms), role
