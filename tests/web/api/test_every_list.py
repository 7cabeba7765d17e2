"""Every list under /api/ is paged (X-Total-Count, Link), filterable and carries ISO 8601
times beside epoch seconds (issue 16: nodes, escalations, agents, agent tokens,
recommendations, runs, policy versions and the audit log were not)."""

from __future__ import annotations

from datetime import datetime

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from kalena_web.control.models import Escalation
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.replan.models import ReplanRecommendation
from kalena_web.telemetry.services import agent_token_create, agent_token_revoke


@pytest.fixture
def operator(live) -> Client:
    user = User.objects.create_user("op-e", password="x" * 12)
    user.groups.add(Group.objects.get(name="operator"))
    client = Client()
    client.force_login(user)
    return client


def _iso(text: str, epoch: float) -> None:
    assert text.endswith("Z") and abs(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() - epoch) < 1e-3


def _page(client, url: str, total: int) -> list:
    response = client.get(url)
    assert response.status_code == 200, (url, response.content)
    assert response["X-Total-Count"] == str(total), url
    assert 'rel="first"' in response["Link"] and 'rel="last"' in response["Link"]
    return response.json()


def test_nodes_are_paged_filtered_sorted_with_iso_times(operator, live) -> None:
    LiveNodeLedger.objects.filter(node__cluster=live, node__name="thinkcentre-gamma").update(stale=True)
    first = _page(operator, "/api/clusters/home/nodes?page_size=2", 3)
    assert [n["name"] for n in first] == ["thinkcentre-alpha", "thinkcentre-beta"]
    assert len(_page(operator, "/api/clusters/home/nodes?page_size=2&page=2", 3)) == 1
    _iso(first[0]["last_sample_at"], first[0]["last_sample_s"])
    assert [n["name"] for n in _page(operator, "/api/clusters/home/nodes?stale=true", 1)] == ["thinkcentre-gamma"]
    assert len(_page(operator, "/api/clusters/home/nodes?q=BETA", 1)) == 1
    names = [n["name"] for n in _page(operator, "/api/clusters/home/nodes?sort=-name", 3)]
    assert names == sorted(names, reverse=True)
    bad = operator.get("/api/clusters/home/nodes?sort=size")
    # the sort fields are an enum in the schema: refused as a validation error naming them
    assert bad.status_code == 422 and bad.json()["code"] == "validation_failed" and "slack_cpu" in bad.json()["detail"]


def test_escalations_agents_tokens_recommendations_are_paged(operator, live) -> None:
    node = live.nodes.get(name="thinkcentre-alpha")
    for i in range(3):
        Escalation.objects.create(node=node, time_s=1000.0 + i, reason="non_converging", detail="d", drained=[],
                                  until_s=2000.0 + i)
    rows = _page(operator, "/api/clusters/home/escalations?page_size=2", 3)
    assert [r["time_s"] for r in rows] == [1002.0, 1001.0]  # newest first
    _iso(rows[0]["time_at"], 1002.0)
    _iso(rows[0]["until_at"], 2002.0)
    assert _page(operator, "/api/clusters/home/escalations?node=thinkcentre-beta", 0) == []
    assert len(_page(operator, "/api/clusters/home/agents?q=alpha", 1)) == 1
    assert len(_page(operator, "/api/clusters/home/agents?connected=false", 3)) == 3
    _, kept = agent_token_create(node=node)
    _, gone = agent_token_create(node=node)
    agent_token_revoke(token_id=gone.id)
    assert [t["id"] for t in _page(operator, "/api/clusters/home/nodes/thinkcentre-alpha/agent-tokens?state=active",
                                   1)] == [kept.id]
    assert len(_page(operator, "/api/clusters/home/nodes/thinkcentre-alpha/agent-tokens", 2)) == 2
    for i, state in enumerate(("open", "rejected")):
        ReplanRecommendation.objects.create(cluster=live, created_s=5000.0 + i, window_s=86400, threshold=0.25,
                                            drift={"cpu": 0.5}, state=state)
    recs = _page(operator, "/api/clusters/home/recommendations", 2)
    assert recs[0]["state"] == "rejected"  # newest first
    _iso(recs[0]["created_at"], 5001.0)
    assert [r["state"] for r in _page(operator, "/api/clusters/home/recommendations?state=open", 1)] == ["open"]
    assert operator.get("/api/clusters/home/recommendations?state=maybe").status_code == 422


def test_runs_policy_versions_and_audit_are_paged(operator, live) -> None:
    assert _page(operator, "/api/runs?q=nothing-like-this", 0) == []
    versions = operator.get("/api/clusters/home/policy/versions")
    assert versions.status_code == 200 and "X-Total-Count" in versions
    for item in versions.json()["items"]:
        _iso(item["created_at"], item["created_s"])
    agent_token_create(node=live.nodes.first())  # audited
    audit = operator.get("/api/audit?page_size=1")
    assert audit.status_code == 200 and int(audit["X-Total-Count"]) >= 1 and len(audit.json()["items"]) == 1
    _iso(audit.json()["items"][0]["at"], audit.json()["items"][0]["at_s"])
    assert operator.get("/api/audit?limit=5000").json()["errors"][0]["loc"] == ["query", "limit"]  # 1–1000
