"""GET /api/clusters, paging/sorting/filters with totals, ISO 8601 times, token scopes within
the user's role, and the interactive docs behind login."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from kalena_web.api.services import api_token_create
from kalena_web.scheduling.models import BatchPod


def _user(name: str, role: str) -> User:
    user = User.objects.create_user(name, password="x" * 12)
    user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def operator(live) -> Client:
    client = Client()
    client.force_login(_user("op-l", "operator"))
    return client


def _submit(client, name: str, **extra):
    body = {"name": name, "request": {"cpu": "100m"}, **extra}
    response = client.post("/api/clusters/home/batch", json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    return response.json()


def test_clusters_lists_the_live_cluster_with_counts_and_iso_times(operator, live) -> None:
    _submit(operator, "batch/c-0")
    response = operator.get("/api/clusters")
    assert response.status_code == 200 and response["X-Total-Count"] == "1"
    [row] = response.json()
    assert (row["name"], row["kind"], row["nodes"], row["batch_pending"], row["batch_bound"]) == ("home", "live", 3, 1, 0)
    assert abs(datetime.fromisoformat(row["created_at"]).timestamp() - row["created_s"]) < 0.001
    assert operator.get("/api/clusters?q=HOM").json()[0]["name"] == "home"
    assert operator.get("/api/clusters?q=nosuch").json() == []
    assert operator.get("/api/clusters/home").json()["nodes"] == 3


def test_batch_list_pages_sorts_and_filters_with_totals(operator, live) -> None:
    for i in range(7):
        _submit(operator, f"batch/p-{i}", priority=i % 3, owner="a" if i < 4 else "b")
    first = operator.get("/api/clusters/home/batch?page_size=3")
    assert first["X-Total-Count"] == "7" and [p["name"] for p in first.json()] == ["batch/p-0", "batch/p-1", "batch/p-2"]
    assert 'rel="next"' in first["Link"] and "page=2" in first["Link"]
    third = operator.get("/api/clusters/home/batch?page_size=3&page=3")
    assert [p["name"] for p in third.json()] == ["batch/p-6"] and 'rel="next"' not in third["Link"]
    assert operator.get("/api/clusters/home/batch?page_size=3&page=9").json() == []
    by_priority = operator.get("/api/clusters/home/batch?sort=-priority&page_size=2").json()
    assert [p["priority"] for p in by_priority] == [2, 2]
    owned = operator.get("/api/clusters/home/batch?owner=b")
    assert owned["X-Total-Count"] == "3" and {p["name"] for p in owned.json()} == {"batch/p-4", "batch/p-5", "batch/p-6"}
    assert operator.get("/api/clusters/home/batch?q=p-5").json()[0]["name"] == "batch/p-5"
    assert operator.get("/api/clusters/home/batch?state=all")["X-Total-Count"] == "7"
    bad = operator.get("/api/clusters/home/batch?sort=colour")
    assert bad.status_code == 422 and bad.json()["code"] == "validation_failed" and "-priority" in bad.json()["detail"]
    assert operator.get("/api/clusters/home/batch?page_size=5000").status_code == 422
    row = operator.get("/api/clusters/home/batch?q=p-0").json()[0]
    assert abs(datetime.fromisoformat(row["queued_at"]).timestamp() - row["queued_s"]) < 0.001 and row["bound_at"] is None


def _bearer(token: str) -> Client:
    return Client(HTTP_AUTHORIZATION=f"Bearer {token}")


def test_token_scopes_narrow_the_role(live) -> None:
    approver = _user("appr", "approver")
    read_token, _ = api_token_create(user=approver, name="ro", scopes="read")
    write_token, row = api_token_create(user=approver, name="rw", scopes=["write"])
    assert row.scopes == "read write"
    reader = _bearer(read_token)
    assert reader.get("/api/clusters").status_code == 200
    refused = reader.post("/api/clusters/home/batch", json.dumps({"name": "batch/s-0", "request": {"cpu": 1}}),
                          content_type="application/json")
    assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
    assert not BatchPod.objects.exists()
    writer = _bearer(write_token)
    assert writer.post("/api/clusters/home/batch", json.dumps({"name": "batch/s-1", "request": {"cpu": 1}}),
                       content_type="application/json").status_code == 201


def test_a_token_never_exceeds_its_users_role(live) -> None:
    viewer_token, _ = api_token_create(user=_user("view-t", "viewer"), name="all")
    response = _bearer(viewer_token).post("/api/clusters/home/batch",
                                          json.dumps({"name": "batch/s-2", "request": {"cpu": 1}}),
                                          content_type="application/json")
    assert response.status_code == 403


def test_an_unknown_scope_is_refused_naming_it(live) -> None:
    from kalena_engine.errors import InputError

    with pytest.raises(InputError, match="admin"):
        api_token_create(user=_user("x-t", "operator"), name="bad", scopes="read admin")


def test_the_docs_need_login_and_load_nothing_from_outside(live) -> None:
    anonymous = Client()
    response = anonymous.get("/api/docs")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    client = Client()
    client.force_login(_user("doc", "viewer"))
    page = client.get("/api/docs")
    assert page.status_code == 200
    html = page.content.decode()
    assert "swagger-ui-bundle.js" in html and "cdn." not in html and "/api/openapi.json" in html
    assert client.get("/api/openapi.json").json()["openapi"].startswith("3.1")


def test_the_schema_stays_open_for_client_generators(db) -> None:
    response = Client().get("/api/openapi.json")
    assert response.status_code == 200 and "/api/clusters" in response.json()["paths"]


def test_a_scope_refusal_names_the_missing_scope_not_the_role(live) -> None:
    """An operator's read-only token was told the write "needs the operator role" (tester16): the
    user has the role; what the token lacks is the ``write`` scope."""
    read_token, _ = api_token_create(user=_user("op-ro", "operator"), name="ro", scopes="read")
    refused = _bearer(read_token).post("/api/clusters/home/batch",
                                       json.dumps({"name": "batch/s-3", "request": {"cpu": 1}}),
                                       content_type="application/json")
    assert refused.status_code == 403 and "'write' scope" in refused.json()["detail"]
    assert "operator role" not in refused.json()["detail"]
    viewer_token, _ = api_token_create(user=_user("view-t2", "viewer"), name="all")
    refused = _bearer(viewer_token).post("/api/clusters/home/batch",
                                         json.dumps({"name": "batch/s-4", "request": {"cpu": 1}}),
                                         content_type="application/json")
    assert refused.status_code == 403 and "operator role" in refused.json()["detail"]
