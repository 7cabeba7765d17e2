"""One live link per node, and refusals the agent does not hammer, end to end: a real Daphne
(``kalena serve``) on the test database and real ``LinkClient`` agents.

A second agent with a node's own token supersedes the node's live link (the newest wins); the
old one is closed 4409 with who took over, both sides log it, the console counts and audits it,
and the superseded agent backs off longer each time it is superseded right after reconnecting.
An agent holding another node's token (``node_mismatch``) or a revoked one is never reported
connected, logs the console's reason once, backs off exponentially and shows the refusal in its
``/healthz``."""

from __future__ import annotations

import logging
import random
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from agents.health import AgentMetrics, HealthServer
from agents.link.buffer import LinkBuffer
from agents.link.client import LinkClient
from agents.runner import Agent as AgentProcess
from kalena_web.control.models import MetricSeries
from kalena_web.inventory.models import Node
from kalena_web.policy.models import AuditEntry
from kalena_web.telemetry.models import AgentStatus, RefusedConnection
from kalena_web.telemetry.services import agent_token_create, agent_token_revoke
from tests.web.telemetry.conftest import hello, wait_until

NODE = "thinkcentre-beta"


@pytest.fixture
def clients():
    started: list[LinkClient] = []

    def make(url: str, token: str, path: Path, *, node: str = NODE, **kwargs) -> LinkClient:
        client = LinkClient(url, token, LinkBuffer(path, node=node), hello=lambda: hello(node),
                            backoff_base_s=0.1, backoff_max_s=1.0, open_timeout_s=10, rng=random.Random(3), **kwargs)
        client.start()
        started.append(client)
        return client

    yield make
    for client in started:
        client.stop()


def test_a_second_agent_for_a_node_supersedes_the_first_and_both_back_off_visibly(
        tmp_path, daphne, services, clients, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="kalena.agent.link")
    token = agent_token_create(node=Node.objects.get(name=NODE))[0]
    metrics_a = AgentMetrics()
    a = clients(daphne, token, tmp_path / "a.sqlite3", superseded_backoff_base_s=2.0, metrics=metrics_a)
    wait_until(lambda: a.connected.is_set(), timeout_s=30, what="the first agent to be accepted")
    b = clients(daphne, token, tmp_path / "b.sqlite3", superseded_backoff_base_s=2.0)
    wait_until(lambda: b.connected.is_set(), timeout_s=30, what="the second agent to be accepted")
    wait_until(lambda: a.superseded >= 1, timeout_s=10, what="the first agent to be superseded")
    assert not a.connected.is_set() and a.accepted == 1
    state = a.state()
    assert state["state"] == "superseded" and state["superseded"] == 1
    assert f"superseded by a newer link for node {NODE} from 127.0.0.1:" in state["reason"]
    assert metrics_a.link_superseded._value.get() == 1
    assert any("another agent took this node's link over" in r.getMessage() for r in caplog.records)
    # it does not come straight back: nothing for the first 1 s of its 1-2 s backoff
    time.sleep(0.8)
    assert a.connects == 1 and b.connected.is_set()
    # the console: the node stays connected (the old link's close does not disconnect it), logged, counted, audited
    assert AgentStatus.objects.get(node__name=NODE).connected is True
    wait_until(lambda: AuditEntry.objects.filter(action="link.superseded").exists(), timeout_s=10,
               what="the takeover to be audited")
    entry = AuditEntry.objects.get(action="link.superseded")
    assert entry.target == NODE and entry.after["old_peer"] != entry.after["new_peer"]
    assert MetricSeries.objects.get(name="kalena_link_superseded").count == 1
    shown = RefusedConnection.objects.get(node__name=NODE, reason="superseded")
    assert shown.count == 1 and shown.last_peer == entry.after["old_peer"]
    log = services.log("daphne")
    assert f"agent link of node {NODE} from" in log and "supersedes the live link from" in log
    # two agents fighting: each takeover right after the other's reconnect backs off longer
    wait_until(lambda: a.superseded + b.superseded >= 4, timeout_s=60, what="the agents to fight over the node")
    assert max(a.superseded_in_a_row, b.superseded_in_a_row) >= 2
    assert any("two agents are running for this node" in r.getMessage() for r in caplog.records)


def test_an_agent_with_another_nodes_token_is_refused_once_logged_and_backs_off(
        tmp_path, daphne, clients, caplog) -> None:
    caplog.set_level(logging.INFO, logger="kalena.agent.link")
    beta_token = agent_token_create(node=Node.objects.get(name=NODE))[0]
    other = Node.objects.exclude(name=NODE).order_by("name").first()
    client = clients(daphne, beta_token, tmp_path / "x.sqlite3", node=other.name)   # default refusal backoff
    wait_until(lambda: client.refusals >= 1, timeout_s=30, what="the first refusal")
    time.sleep(6.0)
    # 5 s base: the 2nd attempt comes after 2.5-5 s, the 3rd 5-10 s later
    assert 1 <= client.refusals <= 2 and client.accepted == 0 and not client.connected.is_set()
    messages = [r.getMessage() for r in caplog.records]
    assert not any("link: connected" in m for m in messages)
    refused = [m for m in messages if "refused this agent" in m]
    assert len(refused) == 1 and "node_mismatch" in refused[0] and f"token is for node '{NODE}'" in refused[0]
    # the agent's /healthz says so (and stays 200: the node is still protected locally)
    metrics = AgentMetrics()
    metrics.ticked(time.time())
    process = SimpleNamespace(link=client, buffer=client.buffer)
    health = HealthServer("127.0.0.1:0", metrics, max_tick_age_s=10,
                          link_state=lambda: AgentProcess.link_state(process))
    try:
        status, body = health.health()
    finally:
        health.server.server_close()
    assert status == 200 and body["link"]["connected"] is False and body["link"]["state"] == "refused"
    assert "node_mismatch" in body["link"]["reason"] and body["link"]["refusals"] == client.refusals


def test_a_revoked_token_is_refused_at_the_upgrade_and_shown(tmp_path, daphne, clients) -> None:
    plaintext, row = agent_token_create(node=Node.objects.get(name=NODE))
    agent_token_revoke(token_id=row.id)
    client = clients(daphne, plaintext, tmp_path / "r.sqlite3", refused_backoff_base_s=0.2)
    wait_until(lambda: client.refusals >= 2, timeout_s=30, what="two refusals")
    state = client.state()
    assert state["state"] == "refused" and "HTTP 403" in state["reason"] and client.connects == 0
