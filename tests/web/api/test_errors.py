"""Every error under /api/ is JSON with a machine-readable ``code``, never an HTML page; an
unauthenticated write is 401 (not "CSRF Failed"); validation locations are not doubled; bounds
that overflowed the database (HTTP 500) are refused naming the field."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client, override_settings

from kalena_web.scheduling.models import BatchPod

VALID = {"name": "batch/e-0", "request": {"cpu": "250m", "ram": "1Gi"}}


def _user(name: str, role: str) -> User:
    user = User.objects.create_user(name, password="x" * 12)
    user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def operator(live) -> Client:
    client = Client(raise_request_exception=False)
    client.force_login(_user("op-e", "operator"))
    return client


def _error(response, status: int, code: str) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert body["code"] == code and body["detail"], body
    return body


def post(client, body, path="/api/clusters/home/batch", **extra):
    return client.post(path, json.dumps(body) if not isinstance(body, bytes | str) else body,
                       content_type="application/json", **extra)


def test_unauthenticated_read_and_write_are_401_json(live) -> None:
    anonymous = Client(enforce_csrf_checks=True)
    _error(anonymous.get("/api/clusters/home/batch"), 401, "unauthenticated")
    response = post(anonymous, VALID)
    body = _error(response, 401, "unauthenticated")
    assert "CSRF" not in body["detail"] and response["WWW-Authenticate"].startswith("Bearer")
    assert not BatchPod.objects.exists()


def test_a_refused_api_token_is_named_not_answered_with_log_in(live) -> None:
    """A script sending a wrong token is told its token was refused (and how to get one), not to
    log in — the CLI prints this detail as it is."""
    script = Client(enforce_csrf_checks=True)
    for call in (lambda: script.get("/api/clusters/home/batch", HTTP_AUTHORIZATION="Bearer kal_not-a-token"),
                 lambda: post(script, VALID, HTTP_AUTHORIZATION="Bearer kal_not-a-token")):
        response = call()
        body = _error(response, 401, "unauthenticated")
        assert "API token sent is not valid" in body["detail"] and "log in" not in body["detail"], body
        assert "kalena api-token create" in body["detail"]
        assert 'error="invalid_token"' in response["WWW-Authenticate"]
    assert not BatchPod.objects.exists()


def test_a_logged_in_write_without_the_csrf_token_is_refused_as_json(live) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(_user("op-csrf", "operator"))
    _error(post(client, VALID), 403, "forbidden")
    assert not BatchPod.objects.exists()


def test_viewer_write_is_403(live) -> None:
    client = Client()
    client.force_login(_user("viewer-e", "viewer"))
    _error(post(client, VALID), 403, "forbidden")


def test_unknown_url_and_cluster_are_404_json(operator) -> None:
    _error(operator.get("/api/no/such/thing"), 404, "not_found")
    _error(operator.get("/api/clusters/nosuch/batch"), 404, "not_found")
    _error(operator.get("/api/clusters/nosuch"), 404, "not_found")


def test_wrong_method_is_405_json_with_allow(operator) -> None:
    response = operator.put("/api/clusters/home/batch", "{}", content_type="application/json")
    _error(response, 405, "method_not_allowed")
    assert "POST" in response["Allow"] and "GET" in response["Allow"]


def test_state_conflict_is_409(operator) -> None:
    assert post(operator, VALID).status_code == 201
    _error(operator.post("/api/clusters/home/batch/batch/e-0/complete"), 409, "conflict")
    assert post(operator, VALID).status_code == 200  # the same submit again: the pod as it is (idempotent)


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=1_000_000)
def test_oversize_body_is_413_json(operator) -> None:
    body = json.dumps({**VALID, "owner": "x" * 1_500_000})
    response = post(operator, body)
    assert "1000000" in _error(response, 413, "body_too_large")["detail"]
    assert not BatchPod.objects.exists()


def test_validation_is_422_with_undoubled_locations(operator) -> None:
    body = _error(post(operator, {"request": {"cpu": 1}, "priority": "high"}), 422, "validation_failed")
    locs = sorted(e["loc"] for e in body["errors"])
    assert locs == [["body", "name"], ["body", "priority"]], locs
    _error(post(operator, b"{not json"), 400, "invalid_input")  # not even JSON
    _error(operator.get("/api/clusters?page=0"), 422, "validation_failed")


def test_unhandled_error_is_500_json_without_traceback(operator, monkeypatch) -> None:
    from kalena_web.scheduling import selectors

    def broken(**kwargs):
        raise RuntimeError("secret internals")

    monkeypatch.setattr(selectors, "live_cluster", broken)
    body = _error(operator.get("/api/clusters/home/batch"), 500, "internal_error")
    assert "secret" not in json.dumps(body) and "Traceback" not in json.dumps(body)


@pytest.mark.parametrize(("field", "value"), [("priority", 2**31), ("priority", 2**63), ("priority", -1),
                                              ("min_member", 2**31), ("min_member", 0)])
def test_integers_out_of_range_are_422_naming_the_field(operator, field, value) -> None:
    body = _error(post(operator, {**VALID, field: value}), 422, "validation_failed")  # the schema states the range
    assert field in body["detail"] and body["errors"][0]["loc"] == ["body", field]
    assert not BatchPod.objects.exists()


def test_a_request_the_largest_node_holds_is_accepted(operator, live) -> None:
    from kalena_engine.resources import DIM_INDEX, to_ir
    import numpy as np

    largest = to_ir(np.max(np.asarray([n.allocatable for n in live.nodes.all()]), axis=0))
    body = {**VALID, "request": {"cpu": float(largest[DIM_INDEX["cpu"]]), "ram": f"{largest[DIM_INDEX['ram']]:.3f}Gi"}}
    assert post(operator, body).status_code == 201


def test_too_many_labels_are_refused(operator) -> None:
    body = _error(post(operator, {**VALID, "labels": {f"k{i}": "v" for i in range(100_000)}}), 422,
                  "validation_failed")  # the schema states the bound (maxProperties)
    assert "labels" in body["detail"]
    assert not BatchPod.objects.exists()
