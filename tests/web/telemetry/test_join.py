"""Agent join: three real agents on three nodes present the stack's join secret once and each
receives (and keeps) a token of its own, stored hashed; a node's token cannot act for another
node, a revoked token is refused, and a wrong join secret, a second join of a joined node and a
flood of refused joins create nothing."""

from __future__ import annotations

import asyncio
import json
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from agents.link.join import JoinedToken, JoinFailed, join_url
from kalena_web.cli.benchenv import free_port
from kalena_web.inventory.models import Node
from kalena_web.telemetry.models import AgentStatus, AgentToken, RefusedConnection
from kalena_web.telemetry.services import agent_token_revoke, token_digest
from tests.web.telemetry.conftest import hello, wait_until

NODES = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]


def start_agent(node: str, *, port: int, secret: Path, state: Path, log: Path) -> subprocess.Popen:
    workloads = state.parent / f"{node}.workloads.json"
    workloads.write_text(json.dumps({"workloads": []}))
    return subprocess.Popen(
        [sys.executable, "-m", "agents.cli", "run", "--node-name", node, "--discovery", "file",
         "--workloads-file", str(workloads), "--capacity", "cpu=4,memory=16Gi", "--node-cgroup", "",
         "--sampling-interval-s", "1", "--link-url", f"ws://127.0.0.1:{port}/agent/v1/ws",
         "--join-secret-file", str(secret), "--state-dir", str(state), "--health-address", "off", "--dry-run"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)


async def first_answer(port: int, token: str, node: str) -> dict:
    """Connect with ``token``, say hello as ``node``; the console's first answer (``welcome`` =
    accepted, else the error) and the close code."""
    async with connect(f"ws://127.0.0.1:{port}/agent/v1/ws", additional_headers={"Authorization": f"Bearer {token}"},
                       proxy=None) as ws:
        await ws.send(json.dumps(hello(node)))
        try:
            message = json.loads(await asyncio.wait_for(ws.recv(), timeout=10))
        except asyncio.TimeoutError:
            return {"accepted": None, "why": "no answer to the hello within 10 s"}
        except Exception:                           # closed without a message
            message = {}
        if message.get("type") == "welcome":
            return {"accepted": True}
        try:
            await asyncio.wait_for(ws.recv(), timeout=5)
        except Exception:
            pass
        return {"accepted": False, "message": message, "code": ws.close_code}


def test_three_agents_join_each_with_its_own_token_that_acts_only_for_its_node(home, services, tmp_path) -> None:
    secret = tmp_path / "join.secret"
    secret.write_text("the-stacks-join-secret-0123456789abcdef\n")
    services.env["KALENA_AGENT_JOIN_SECRET_FILE"] = str(secret)
    port = free_port()
    services.procs.daphne(port)
    agents = {n: start_agent(n, port=port, secret=secret, state=tmp_path / n, log=tmp_path / f"agent-{n}.log")
              for n in NODES}
    try:
        wait_until(lambda: AgentStatus.objects.filter(node__name__in=NODES, connected=True).count() == 3,
                   timeout_s=90, what="three joined agents connected")
        tokens = {n: (tmp_path / n / "link.token").read_text().strip() for n in NODES}
        for n in NODES:                                       # kept by the agent, readable only by it
            assert stat.S_IMODE((tmp_path / n / "link.token").stat().st_mode) == 0o600
        assert len(set(tokens.values())) == 3
        rows = {r.node.name: r for r in AgentToken.objects.select_related("node")}
        assert sorted(rows) == NODES                           # one token per node, each for its own node
        for n in NODES:
            assert rows[n].digest == token_digest(tokens[n]) and tokens[n] not in json.dumps(
                AgentToken.objects.filter(id=rows[n].id).values().get(), default=str)

        # alpha's token cannot speak for beta
        wrong = asyncio.run(first_answer(port, tokens["thinkcentre-alpha"], "thinkcentre-beta"))
        assert wrong["accepted"] is False and wrong["code"] == 4403
        assert "node_mismatch" in wrong["message"]["message"] and "thinkcentre-alpha" in wrong["message"]["message"]

        # a restarted agent uses the token it kept: no second join, same token row
        alpha = agents.pop("thinkcentre-alpha")
        alpha.send_signal(signal.SIGTERM)
        assert alpha.wait(timeout=30) == 0
        again = start_agent("thinkcentre-alpha", port=port, secret=secret, state=tmp_path / "thinkcentre-alpha",
                            log=tmp_path / "agent-alpha-2.log")
        agents["thinkcentre-alpha"] = again
        alpha_status = AgentStatus.objects.get(node__name="thinkcentre-alpha")
        wait_until(lambda: AgentStatus.objects.get(id=alpha_status.id).connections > alpha_status.connections,
                   timeout_s=60, what="the restarted agent reconnecting")
        assert AgentToken.objects.count() == 3

        # a revoked token is refused before the connection is accepted
        agent_token_revoke(token_id=rows["thinkcentre-gamma"].id)
        with pytest.raises(InvalidStatus):
            asyncio.run(first_answer(port, tokens["thinkcentre-gamma"], "thinkcentre-gamma"))
        assert RefusedConnection.objects.filter(reason="revoked_token", node__name="thinkcentre-gamma").exists()

        # a wrong join secret is refused and creates nothing
        wrong_secret = tmp_path / "wrong.secret"
        wrong_secret.write_text("not-the-secret\n")
        before = list(AgentToken.objects.order_by("id").values_list("id", "revoked_at"))
        stranger = JoinedToken(link_url=f"ws://127.0.0.1:{port}/agent/v1/ws", node="thinkcentre-gamma",
                               secret_file=str(wrong_secret), state_dir=str(tmp_path / "stranger"))
        with pytest.raises(JoinFailed) as refused:
            stranger()
        assert refused.value.reason == "bad_join_secret"
        assert list(AgentToken.objects.order_by("id").values_list("id", "revoked_at")) == before
        assert not (tmp_path / "stranger" / "link.token").exists()

        # the right secret cannot take over a joined node's identity …
        thief = JoinedToken(link_url=f"ws://127.0.0.1:{port}/agent/v1/ws", node="thinkcentre-beta",
                            secret_file=str(secret), state_dir=str(tmp_path / "thief"))
        with pytest.raises(JoinFailed) as taken:
            thief()
        assert taken.value.reason == "already_joined" and f"agent-token revoke {rows['thinkcentre-beta'].id}" in \
            taken.value.detail
        assert AgentToken.objects.count() == 3
        # … but gamma, its token revoked, may join again (a fresh state dir: the operator wiped it)
        rejoined = JoinedToken(link_url=f"ws://127.0.0.1:{port}/agent/v1/ws", node="thinkcentre-gamma",
                               secret_file=str(secret), state_dir=str(tmp_path / "gamma-new"))()
        assert rejoined != tokens["thinkcentre-gamma"]
        assert asyncio.run(first_answer(port, rejoined, "thinkcentre-gamma"))["accepted"] is True
    finally:
        for proc in agents.values():
            proc.send_signal(signal.SIGTERM)
        codes = {n: p.wait(timeout=30) for n, p in agents.items()}
    assert set(codes.values()) == {0}, {n: (tmp_path / f"agent-{n}.log").read_text()[-2000:] for n in NODES}


def test_join_refusals_name_the_cause_and_change_nothing(home, client, settings, tmp_path) -> None:
    from django.core.cache import cache

    from kalena_web.telemetry.join import _key

    for addr in ("198.51.100.7", "198.51.100.8", "127.0.0.1"):
        cache.delete(_key(addr))                             # counts of an earlier run (Redis keeps them 15 min)
    settings.KALENA_AGENT_JOIN_SECRET = ""

    def join(node: str, secret: str, addr: str = "198.51.100.7"):
        return client.post("/agent/v1/join", data=json.dumps({"node": node}), content_type="application/json",
                           HTTP_AUTHORIZATION=f"Bearer {secret}", REMOTE_ADDR=addr, HTTP_HOST="console:8000")

    off = join("thinkcentre-alpha", "anything")
    assert off.status_code == 403 and off.json()["error"] == "join_disabled"
    settings.KALENA_AGENT_JOIN_SECRET = "old-secret-abcdefghijklmnop\nnew-secret-abcdefghijklmnop"
    unknown = join("no-such-node", "new-secret-abcdefghijklmnop")
    assert unknown.status_code == 409 and unknown.json()["error"] == "unknown_node" and unknown["Retry-After"]
    assert not Node.objects.filter(name="no-such-node").exists()
    bad = client.post("/agent/v1/join", data="[]", content_type="application/json",
                      HTTP_AUTHORIZATION="Bearer new-secret-abcdefghijklmnop")
    assert bad.status_code == 400 and "node" in bad.json()["detail"]
    # both secrets are accepted while rotating (any line of the secret file)
    assert join("thinkcentre-alpha", "old-secret-abcdefghijklmnop").status_code == 201
    assert join("thinkcentre-beta", "new-secret-abcdefghijklmnop").status_code == 201
    # ten wrong secrets from one address lock that address out — even with the right secret
    for _ in range(10):
        assert join("thinkcentre-gamma", "guess").status_code == 401
    locked = join("thinkcentre-gamma", "new-secret-abcdefghijklmnop")
    assert locked.status_code == 429 and int(locked["Retry-After"]) > 0
    assert AgentToken.objects.filter(node__name="thinkcentre-gamma").count() == 0
    # … and only that address: another agent's join goes through
    assert join("thinkcentre-gamma", "new-secret-abcdefghijklmnop", addr="198.51.100.8").status_code == 201
    assert RefusedConnection.objects.get(reason="join_bad_join_secret").count == 10


def test_the_join_url_follows_the_link_url() -> None:
    assert join_url("ws://console:8000/agent/v1/ws") == "http://console:8000/agent/v1/join"
    assert join_url("wss://kalena.example/agent/v1/ws") == "https://kalena.example/agent/v1/join"
