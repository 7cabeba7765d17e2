"""Nothing accepted is lost and nothing is stored twice: a resent message is acknowledged again
without a second write; an ack is sent only after the commit — when the write fails the agent
gets an error, no ack and a close code Daphne accepts (4500), and its resend after reconnecting is stored exactly once; many
connections' messages share a few transactions (group commit)."""

from __future__ import annotations

import asyncio
import threading
import time

from django.db import connection

from kalena_web.inventory.models import Node
from kalena_web.telemetry.models import AgentStatus, IngestBatch, RejectedSamples, Sample
from kalena_web.telemetry.services import agent_token_create
from tests.web.telemetry.conftest import Agent, hello, record, require_postgres, run, samples

NODE = "thinkcentre-beta"
PODS = ["database/postgres-0", "monitoring/grafana-0"]


def test_a_resent_message_is_acknowledged_again_and_stored_once(agent_app, beta, beta_token) -> None:
    now = time.time()
    message = samples(NODE, 7, [record(PODS[0], now - 2), record(PODS[1], now - 2), record("x/unknown", now - 2)])

    async def go() -> list[dict]:
        first = Agent(agent_app, beta_token)
        assert await first.connect()
        await first.send(hello(NODE))
        await first.send(message)
        await first.send(message)                     # resent on the same connection (ack lost)
        acks = [await first.until("ack"), await first.until("ack")]
        await first.close()
        second = Agent(agent_app, beta_token)         # and again after a reconnect
        assert await second.connect()
        await second.send(hello(NODE))
        await second.send(message)
        acks.append(await second.until("ack"))
        await second.close()
        return acks

    acks = run(go())
    assert acks[0]["accepted"] == 2 and acks[0]["duplicate"] is False
    assert acks[1:] == [{"type": "ack", "v": 1, "batch_id": f"{NODE}:7", "duplicate": True}] * 2
    assert Sample.objects.count() == 2 and IngestBatch.objects.count() == 1
    assert RejectedSamples.objects.get(node=beta, reason="unknown_workload").samples == 1  # counted once
    status = AgentStatus.objects.get(node=beta)
    assert (status.accepted_samples, status.batches, status.duplicate_batches) == (2, 1, 2)


def test_no_ack_without_a_durable_write_and_the_resend_is_stored_once(agent_app, beta, beta_token) -> None:
    require_postgres()
    now = time.time()
    message = samples(NODE, 1, [record(PODS[0], now - 2), record(PODS[1], now - 2)])

    def break_storage(broken: bool) -> None:
        with connection.cursor() as cursor:   # the test's own connection: a real failure of the real table
            cursor.execute("ALTER TABLE telemetry_sample RENAME TO telemetry_sample_away" if broken
                           else "ALTER TABLE telemetry_sample_away RENAME TO telemetry_sample")

    async def go() -> dict:
        from channels.db import database_sync_to_async

        agent = Agent(agent_app, beta_token)
        assert await agent.connect()
        await agent.send(hello(NODE))
        while not await database_sync_to_async(AgentStatus.objects.filter(node=beta, connected=True).exists)():
            await asyncio.sleep(0.05)                 # the hello is in: the node's view is loaded
        await database_sync_to_async(break_storage)(True)
        try:
            await agent.send(message)
            error = await agent.receive()
            closed = await agent.receive()
            await agent.close()
        finally:
            await database_sync_to_async(break_storage)(False)
        again = Agent(agent_app, beta_token)
        assert await again.connect()
        await again.send(hello(NODE))
        await again.send(message)                     # what the agent's buffer resends after reconnecting
        ack = await again.until("ack")
        await again.close()
        return {"error": error, "closed": closed, "ack": ack}

    result = run(go())
    assert result["error"]["type"] == "error" and "not stored" in result["error"]["message"]
    assert result["closed"] == {"type": "closed", "code": 4500}   # no ack: the batch stays in the agent's buffer
    assert result["ack"]["accepted"] == 2 and result["ack"]["duplicate"] is False
    assert Sample.objects.count() == 2 and IngestBatch.objects.count() == 1


def test_many_connections_share_few_transactions(agent_app, home) -> None:
    nodes = list(Node.objects.filter(cluster=home).order_by("row"))
    tokens = {n.name: agent_token_create(node=n)[0] for n in nodes}
    pods = {n.name: list(n.production.values_list("name", flat=True)) for n in nodes}
    now = time.time()

    async def one(node: str, copy: int) -> list[dict]:
        agent = Agent(agent_app, tokens[node])
        assert await agent.connect()
        await agent.send(hello(node))
        acks = []
        for seq in range(5):
            await agent.send(samples(node, 100 * copy + seq, [record(p, now - 50 + seq + copy / 10) for p in pods[node]]))
        for _ in range(5):
            acks.append(await agent.until("ack"))
        await agent.close()
        return acks

    async def go():
        return await asyncio.gather(*(one(n.name, 0) for n in nodes))

    acks = [a for per in run(go()) for a in per]
    assert len(acks) == 15 and all(a["duplicate"] is False for a in acks)
    assert Sample.objects.count() == sum(a["accepted"] for a in acks) == 5 * sum(len(p) for p in pods.values())
    assert agent_app.writer.stats.entries == 15 and agent_app.writer.stats.writes < 15


def test_a_hello_and_the_messages_behind_it_never_wait_for_the_shared_sync_thread(agent_app, beta, beta_token) -> None:
    """After a database restart every agent reconnects at once. The hello's database work used to
    take two hops on the one sync thread every consumer of the process shares, so the hellos — and
    the backlog each connection reads only after its hello — queued there one after another. With
    that thread busy (here: blocked until the end of the test) an agent is still greeted, and its
    samples stored and acknowledged."""
    now = time.time()
    message = samples(NODE, 1, [record(PODS[0], now - 2), record(PODS[1], now - 2)])
    release = threading.Event()

    async def go() -> dict:
        from channels.db import database_sync_to_async

        blocked = asyncio.ensure_future(database_sync_to_async(release.wait)())   # the shared sync thread is taken
        try:
            agent = Agent(agent_app, beta_token)
            assert await agent.connect()
            await agent.send(hello(NODE))
            await agent.send(message)
            ack = await agent.until("ack")
            await agent.close()
        finally:
            release.set()
            await blocked
        return ack

    ack = run(go())
    assert ack["type"] == "ack" and ack["accepted"] == 2 and ack["duplicate"] is False
    assert Sample.objects.count() == 2
