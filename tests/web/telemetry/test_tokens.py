"""Agent tokens: created per node and shown once, stored only as a hash, listed and revoked from
the CLI and the API; the agent endpoint refuses a missing, malformed, unknown or revoked token
before accepting the connection (and counts why), refuses a hello for another node, and closes
an open connection whose token gets revoked."""

from __future__ import annotations

import hashlib
import json
import time

import pytest

from kalena_web.cli import main as kalena
from kalena_web.telemetry.models import AgentStatus, AgentToken, IngestBatch, RefusedConnection
from kalena_web.telemetry.services import TokenAlreadyRevoked, agent_token_create, agent_token_revoke
from tests.web.telemetry.conftest import Agent, hello, record, run, samples


def test_a_token_is_shown_once_and_stored_only_as_its_sha256(beta, capsys) -> None:
    plaintext, row = agent_token_create(node=beta)
    assert plaintext.startswith("kna_") and len(plaintext) > 40
    assert row.digest == hashlib.sha256(plaintext.encode()).hexdigest()
    stored = AgentToken.objects.filter(id=row.id).values().get()
    assert plaintext not in json.dumps(stored, default=str)  # nowhere in the row
    assert row.prefix == plaintext[:12]

    assert kalena(["agent-token", "create", "home", "thinkcentre-beta"]) == 0
    created = capsys.readouterr().out.splitlines()
    assert created[1].startswith("kna_") and AgentToken.objects.filter(node=beta).count() == 2
    assert kalena(["agent-token", "list", "home"]) == 0
    listing = capsys.readouterr().out
    assert row.prefix in listing and created[1] not in listing and "2 token(s)" in listing


def test_cli_names_what_is_wrong(home, capsys) -> None:
    assert kalena(["agent-token", "create", "home", "no-such-node"]) == 2
    assert "live cluster 'home' has no node 'no-such-node'" in capsys.readouterr().err
    assert kalena(["agent-token", "create", "nowhere", "x"]) == 2
    assert "no live cluster named 'nowhere'" in capsys.readouterr().err
    assert kalena(["agent-token", "revoke", "999999"]) == 2
    assert "no agent token with id 999999" in capsys.readouterr().err


def test_revoke_once_then_refuse_to_revoke_again(beta) -> None:
    _, row = agent_token_create(node=beta)
    assert agent_token_revoke(token_id=row.id).revoked_at is not None
    with pytest.raises(TokenAlreadyRevoked, match="was revoked at"):
        agent_token_revoke(token_id=row.id)


def test_api_creates_lists_and_revokes_tokens(client, django_user_model, beta) -> None:
    url = "/api/clusters/home/nodes/thinkcentre-beta/agent-tokens"
    assert client.get(url).status_code == 401  # session login required, as for the rest of /api/
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user(username="viewer", password="pw-long-enough")
    client.force_login(viewer)
    assert client.get(url).status_code == 200
    denied = client.post(url)
    assert denied.status_code == 403 and "operator role" in denied.json()["detail"]
    operator = django_user_model.objects.create_user(username="op", password="pw-long-enough")
    operator.user_permissions.add(Permission.objects.get(codename="manage_agent_tokens"))
    client.force_login(operator)
    created = client.post(url)
    assert created.status_code == 201
    body = created.json()
    assert body["token"].startswith("kna_") and body["prefix"] == body["token"][:12]
    listed = client.get(url).json()
    assert [t["id"] for t in listed] == [body["id"]] and "token" not in listed[0]
    revoked = client.post(f"/api/agent-tokens/{body['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert client.post(f"/api/agent-tokens/{body['id']}/revoke").status_code == 409
    assert client.post("/api/agent-tokens/987654/revoke").status_code == 404
    assert client.get("/api/clusters/home/nodes/nope/agent-tokens").status_code == 404


def test_operators_and_approvers_may_manage_agent_tokens_viewers_may_not(db) -> None:
    from django.contrib.auth.models import Group

    holders = set(Group.objects.filter(permissions__codename="manage_agent_tokens").values_list("name", flat=True))
    assert holders == {"operator", "approver"}


@pytest.mark.parametrize(("header", "reason"), [
    pytest.param(None, "missing_token", id="no Authorization header"),
    pytest.param(b"Basic dXNlcjpwdw==", "malformed_token", id="not a bearer token"),
    pytest.param(b"Bearer not-a-kalena-token", "malformed_token", id="not a Kalena token"),
    pytest.param(b"Bearer kna_" + b"x" * 43, "unknown_token", id="unknown token"),
    pytest.param("revoked", "revoked_token", id="revoked token"),
])
def test_bad_tokens_are_refused_before_the_connection_is_accepted(agent_app, beta, header, reason) -> None:
    if header == "revoked":
        plaintext, row = agent_token_create(node=beta)
        agent_token_revoke(token_id=row.id)
        header = f"Bearer {plaintext}".encode()
    agent = Agent(agent_app, None, raw_header=header)
    assert run(agent.connect()) is False
    refused = RefusedConnection.objects.get(reason=reason)
    assert refused.count == 1 and refused.node_id == (beta.id if reason == "revoked_token" else None)
    assert not AgentStatus.objects.exists() and not IngestBatch.objects.exists()


def test_hello_must_come_first_and_name_the_token_node(agent_app, beta, beta_token) -> None:
    async def conversation(first: dict) -> dict:
        agent = Agent(agent_app, beta_token)
        assert await agent.connect()
        await agent.send(first)
        error = await agent.receive()
        closed = await agent.receive()
        return {"error": error, "closed": closed}

    wrong_node = run(conversation(hello("thinkcentre-alpha")))
    assert wrong_node["closed"] == {"type": "closed", "code": 4403}
    assert "token is for node 'thinkcentre-beta'" in wrong_node["error"]["message"]
    assert RefusedConnection.objects.get(reason="node_mismatch").node_id == beta.id
    no_hello = run(conversation(samples("thinkcentre-beta", 1, [])))
    assert no_hello["closed"]["code"] == 4403 and "expected 'hello'" in no_hello["error"]["message"]
    assert RefusedConnection.objects.filter(reason="no_hello").count() == 1
    assert not IngestBatch.objects.exists()


def test_revoking_a_token_closes_its_open_connection(agent_app, beta) -> None:
    plaintext, row = agent_token_create(node=beta)

    async def conversation() -> dict:
        from channels.db import database_sync_to_async

        agent = Agent(agent_app, plaintext)
        assert await agent.connect()
        await agent.send(hello("thinkcentre-beta"))
        await agent.send(samples("thinkcentre-beta", 1, [record("database/postgres-0", time.time())]))
        ack = await agent.until("ack")
        await database_sync_to_async(agent_token_revoke)(token_id=row.id)
        error = await agent.receive(timeout=10)
        closed = await agent.receive(timeout=10)
        await agent.close()  # the socket goes away: the server records the disconnect
        return {"ack": ack, "error": error, "closed": closed}

    result = run(conversation())
    assert result["ack"]["accepted"] == 1
    assert "revoked" in result["error"]["message"] and result["closed"]["code"] == 4401
    assert AgentStatus.objects.get(node=beta).connected is False


def test_the_agents_page_shows_tokens_staleness_and_rejections_per_reason(client, django_user_model, agent_app,
                                                                          beta, beta_token) -> None:
    async def conversation() -> None:
        agent = Agent(agent_app, beta_token)
        assert await agent.connect()
        await agent.send(hello("thinkcentre-beta"))
        now = time.time()
        await agent.send(samples("thinkcentre-beta", 1, [record("database/postgres-0", now - 1),
                                                         record("nope/gone", now - 1)]))
        await agent.until("ack")
        await agent.close()

    run(conversation())
    assert client.get("/live/home/agents/").status_code == 302          # login required
    client.force_login(django_user_model.objects.create_user(username="v", password="pw-long-enough"))
    page = client.get("/live/home/agents/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "unknown_workload" in html and "&#x27;nope/gone&#x27; is not a live workload" in html
    assert html.count("<span class=\"bad\">none</span>") == 2         # alpha and gamma have no token
    assert "1 active" in html and "fresh" in html
    assert client.get("/live/nowhere/agents/").status_code == 404
    assert 'href="/live/home/agents/"' in client.get("/live/home/").content.decode()   # linked from the nav


def test_a_newer_link_for_the_node_supersedes_the_live_one(agent_app, beta, beta_token) -> None:
    async def conversation() -> dict:
        old, new = Agent(agent_app, beta_token), Agent(agent_app, beta_token)
        assert await old.connect()
        await old.send(hello("thinkcentre-beta"))
        old_welcome = await old.until("welcome")
        assert await new.connect()
        await new.send(hello("thinkcentre-beta"))
        new_welcome = await new.until("welcome")
        error = await old.receive()
        closed = await old.receive()
        await old.close()
        await new.send(samples("thinkcentre-beta", 1, [record("database/postgres-0", time.time())]))
        ack = await new.until("ack")
        await new.close()
        return {"old_welcome": old_welcome, "new_welcome": new_welcome, "error": error, "closed": closed, "ack": ack}

    result = run(conversation())
    assert result["old_welcome"] == result["new_welcome"] == {"type": "welcome", "v": 1, "node": "thinkcentre-beta"}
    assert result["error"]["message"].startswith("superseded by a newer link for node thinkcentre-beta from ")
    assert result["closed"] == {"type": "closed", "code": 4409}
    assert result["ack"]["accepted"] == 1                  # the newer link goes on


def test_a_connection_while_the_database_is_away_is_closed_4500_not_refused(agent_app, beta, beta_token) -> None:
    """A token that cannot be checked is no verdict on it: the agent must retry within seconds (4500),
    not take it for a refused token (HTTP 403) and back off for minutes."""
    from django.db import connection

    def break_tokens(broken: bool) -> None:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE telemetry_agenttoken RENAME TO telemetry_agenttoken_away" if broken
                           else "ALTER TABLE telemetry_agenttoken_away RENAME TO telemetry_agenttoken")

    async def conversation() -> dict:
        agent = Agent(agent_app, beta_token)
        accepted = await agent.connect()
        return {"accepted": accepted, "error": await agent.receive(), "closed": await agent.receive()}

    break_tokens(True)
    try:
        result = run(conversation())
    finally:
        break_tokens(False)
    assert result["accepted"] is True and "database is unavailable" in result["error"]["message"]
    assert result["closed"] == {"type": "closed", "code": 4500}
