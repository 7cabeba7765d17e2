"""Ingest under faults, end to end: a real Daphne (``kalena serve``) on the test database and real
``LinkClient`` agents with on-disk buffers. A failed write never wedges a connection (the agent
is closed with a code Daphne accepts, reconnects and resends; every sample is stored exactly
once once the database takes writes again); a batch larger than the transport's limit is split
by the agent and stored whole; a buffer whose state file was lost starts a new epoch, so its
new messages are stored, not taken for duplicates."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from agents.link import protocol
from agents.link.buffer import LinkBuffer
from agents.link.client import LinkClient
from kalena_web.cli.benchenv import free_port
from kalena_web.inventory.models import Node
from kalena_web.telemetry.models import AgentStatus, IngestBatch, RejectedSamples, Sample
from kalena_web.telemetry.services import agent_token_create
from tests.web.telemetry.conftest import child_database_url, hello, record, samples, wait_until

NODE = "thinkcentre-beta"
PODS = ["database/postgres-0", "monitoring/grafana-0"]


@pytest.fixture
def link(tmp_path: Path, daphne: str):
    """``make(buffer) -> LinkClient`` for node beta, started; all stopped at the end."""
    token = agent_token_create(node=Node.objects.get(name=NODE))[0]
    clients: list[LinkClient] = []

    def make(buffer: LinkBuffer, **kwargs) -> LinkClient:
        client = LinkClient(daphne, token, buffer, hello=lambda: hello(NODE), backoff_base_s=0.1,
                            backoff_max_s=1.0, open_timeout_s=10, **kwargs)
        buffer.on_append = client.notify
        client.start()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()


def batch(t0: float, *, rounds: int = 1, pods: list[str] = PODS) -> dict:
    """A ``samples`` message with ``rounds`` samples of each pod, 1 s apart from ``t0``."""
    return samples(NODE, 0, [record(p, t0 + r + 0.01 * k) for r in range(rounds) for k, p in enumerate(pods)])


def stored_keys() -> list[tuple]:
    return list(Sample.objects.values_list("workload_id", "ts"))


def test_a_failed_write_never_wedges_ingest_and_every_sample_is_stored_once(tmp_path, link) -> None:
    buffer = LinkBuffer(tmp_path / "buf.sqlite3", node=NODE)
    client = link(buffer, ack_timeout_s=3600)   # only the server's close may end the connection here
    t0 = time.time() - 100
    buffer.append(batch(t0))
    wait_until(lambda: buffer.count() == 0, what="the first batch to be acked")
    with psycopg.connect(child_database_url(), autocommit=True) as db:
        db.execute("ALTER TABLE telemetry_sample RENAME TO telemetry_sample_away")   # every write now fails
        try:
            buffer.append(batch(t0 + 10))
            buffer.append(batch(t0 + 20))
            failures = client.failures
            # closed (4500) and reconnected, more than once: the connection is not left half-dead
            wait_until(lambda: client.failures >= failures + 2 and client.connects >= 3, timeout_s=60,
                       what="the agent to be closed and to reconnect after the failed writes")
            assert buffer.count() == 2                                # nothing acknowledged
        finally:
            db.execute("ALTER TABLE telemetry_sample_away RENAME TO telemetry_sample")
    wait_until(lambda: buffer.count() == 0, timeout_s=60, what="the resent batches to be acked")
    keys = stored_keys()
    assert len(keys) == len(set(keys)) == 3 * len(PODS)               # every sample, exactly once
    assert IngestBatch.objects.count() == 3


def test_a_batch_over_the_transport_limit_is_split_by_the_agent_and_stored_whole(tmp_path, link) -> None:
    buffer = LinkBuffer(tmp_path / "buf.sqlite3", node=NODE)
    pods = Node.objects.get(name=NODE).production.values_list("name", flat=True)
    message = batch(time.time() - 3000, rounds=750, pods=list(pods)[:4])      # 3,000 samples, ~2.7 MB
    assert len(message["samples"]) == 3000 and len(protocol.encode(message)) > 2 * 2**20
    link(buffer)
    buffer.append(message)
    wait_until(lambda: buffer.count() == 0, timeout_s=90, what="every part of the split batch to be acked")
    keys = stored_keys()
    assert len(keys) == len(set(keys)) == 3000
    assert IngestBatch.objects.count() >= 3 and all(b.samples <= 2000 for b in IngestBatch.objects.all())
    assert not RejectedSamples.objects.exists()


def test_frames_over_the_limit_are_refused_counted_and_acknowledged(home, services) -> None:
    """One setting (``KALENA_INGEST_MAX_FRAME_BYTES``) sets Kalena's frame limit and Daphne's
    message limit (twice it): a frame between the two is refused with its samples counted and
    acknowledged (the agent drops it rather than resending it forever); one over Daphne's limit
    never reaches Kalena: the transport drops the connection."""
    import asyncio
    import json

    from websockets.asyncio.client import connect

    limit = 200_000
    services.env["KALENA_INGEST_MAX_FRAME_BYTES"] = str(limit)
    port = free_port()
    services.procs.daphne(port)
    beta = Node.objects.get(name=NODE)
    token = agent_token_create(node=beta)[0]
    now = time.time()
    over = samples(NODE, 1, [record(PODS[i % 2], now - 500 + i) for i in range(300)])     # ~270 KB
    far_over = samples(NODE, 2, [record(PODS[i % 2], now - 200 + i) for i in range(600)])  # ~540 KB
    assert limit < len(json.dumps(over)) < 2 * limit < len(json.dumps(far_over))

    async def go() -> tuple[list[dict], int | None]:
        url = f"ws://127.0.0.1:{port}/agent/v1/ws"
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}, max_size=None) as ws:
            await ws.send(json.dumps(hello(NODE)))
            assert json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] == "welcome"
            await ws.send(json.dumps(over))
            replies = [json.loads(await asyncio.wait_for(ws.recv(), 30)) for _ in range(2)]
            await ws.send(json.dumps(far_over))
            try:
                await asyncio.wait_for(ws.recv(), 30)
            except Exception:  # noqa: BLE001 - the transport closes the connection
                pass
            return replies, ws.close_code

    replies, code = asyncio.run(go())
    assert replies[0]["type"] == "error" and replies[0]["message"].startswith("oversize_batch")
    assert replies[1] == {"type": "ack", "v": 1, "batch_id": f"{NODE}:1", "accepted": 0,
                          "rejected": {"oversize_batch": 300}, "duplicate": False}
    assert code is not None and code != 1000                       # dropped by the transport
    counted = RejectedSamples.objects.get(node=beta, reason="oversize_batch")
    assert (counted.samples, counted.messages) == (300, 1) and not Sample.objects.exists()
    assert IngestBatch.objects.get().batch_id == f"{NODE}:1"     # remembered: a resend is acked as a duplicate


def test_after_a_lost_buffer_file_new_samples_are_stored_not_taken_for_duplicates(tmp_path, link) -> None:
    path = tmp_path / "buf.sqlite3"
    buffer = LinkBuffer(path, node=NODE)
    client = link(buffer)
    t0 = time.time() - 300
    buffer.append(batch(t0))
    for i in range(1, 3):
        buffer.append(batch(t0 + 10 * i))
    wait_until(lambda: buffer.count() == 0, what="the first lifetime's batches to be acked")
    client.stop()
    buffer.close()
    for leftover in tmp_path.glob("buf.sqlite3*"):                 # the agent's state file is lost
        leftover.unlink()
    fresh = LinkBuffer(path, node=NODE)                            # seq starts again at 1
    link(fresh)
    for i in range(3, 6):
        fresh.append(batch(t0 + 10 * i))
    wait_until(lambda: fresh.count() == 0, what="the new lifetime's batches to be acked")
    keys = stored_keys()
    assert len(keys) == len(set(keys)) == 6 * len(PODS)            # nothing discarded as a "duplicate"
    status = AgentStatus.objects.get(node__name=NODE)
    assert (status.batches, status.duplicate_batches) == (6, 0)



def test_a_single_frame_over_one_mebibyte_within_the_limits_is_stored_at_the_default_settings(home, services) -> None:
    """A batch inside both documented limits (1,500 samples ≤ 2,000; ~1.3 MB ≤ F = 8 MiB) sent as
    one WebSocket frame — what a client that does not split to 1 MiB sends — reaches Kalena and
    is stored and acknowledged. Daphne has a frame limit as well as a message limit, both 1 MiB
    by default: raising only the message limit left such a frame dropped by the transport,
    uncounted, and resent forever (issue 17, item 2)."""
    import asyncio
    import json

    from websockets.asyncio.client import connect

    port = free_port()
    services.procs.daphne(port)                                    # the default KALENA_INGEST_MAX_FRAME_BYTES
    beta = Node.objects.get(name=NODE)
    token = agent_token_create(node=beta)[0]
    now = time.time()
    message = samples(NODE, 1, [record(PODS[i % 2], now - 1600 + i) for i in range(1500)])
    frame = json.dumps(message)
    assert 2**20 < len(frame.encode()) < 8 * 2**20

    async def go() -> list[dict]:
        url = f"ws://127.0.0.1:{port}/agent/v1/ws"
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}, max_size=None) as ws:
            await ws.send(json.dumps(hello(NODE)))
            await ws.send(frame)                                   # one frame: websockets does not fragment
            replies = []
            while not any(r.get("type") == "ack" for r in replies):
                replies.append(json.loads(await asyncio.wait_for(ws.recv(), 60)))
            return replies

    try:
        replies = asyncio.run(go())
    except Exception as exc:  # noqa: BLE001 - the transport dropped the frame
        raise AssertionError(f"the {len(frame):,}-byte frame did not reach Kalena: {exc!r}") from None
    ack = next(r for r in replies if r.get("type") == "ack")
    assert ack == {"type": "ack", "v": 1, "batch_id": f"{NODE}:1", "accepted": 1500, "rejected": {},
                   "duplicate": False}
    assert Sample.objects.filter(node=beta).count() == 1500 and not RejectedSamples.objects.exists()
