"""The control-plane link against a small real WebSocket server: bearer token in the handshake,
hello first, at-least-once delivery with acks, jittered reconnects, the bounded on-disk buffer
(5 minutes of 200 workloads at 10 s lose nothing) and local mitigation that never waits."""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from http import HTTPStatus

import numpy as np
import pytest
from websockets.asyncio.server import serve

from agents.errors import ProtocolError
from agents.link import protocol
from agents.link.buffer import LinkBuffer
from agents.link.client import LinkClient, backoff_delay_s
from agents.link.protocol import PolicyUpdate
from agents.model import KIND_KUBERNETES, UsageSample, Workload
from kalena_engine.resources import zeros
from tests.agents.rig import GIB, Rig

TOKEN = "node-a-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WsServer:
    """A real WebSocket server checking ``Authorization: Bearer <token>``; acks what it receives."""

    def __init__(self, port: int, *, token: str = TOKEN, ack: bool = True, on_connect: list[str] | None = None,
                 ack_from_connection: int = 1) -> None:
        self.port, self.token, self.ack = port, token, ack
        self.ack_from_connection = ack_from_connection  # connections before this one store and ack nothing
        self.on_connect = on_connect or []
        self.received: list[dict] = []
        self.connections = 0
        self.refused = 0
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Future | None = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(ready,), daemon=True)
        self._thread.start()
        assert ready.wait(10)

    def _run(self, ready: threading.Event) -> None:
        asyncio.set_event_loop(self._loop)

        def check(connection, request):
            if request.headers.get("Authorization") != f"Bearer {self.token}":
                self.refused += 1
                return connection.respond(HTTPStatus.UNAUTHORIZED, "unknown node token\n")
            return None

        async def handler(ws):
            self.connections += 1
            acking = self.connections >= self.ack_from_connection
            for frame in self.on_connect:
                await ws.send(frame)
            async for frame in ws:
                message = json.loads(frame)
                self.received.append(message)
                if message["type"] == "hello":   # the console accepts the hello
                    await ws.send(json.dumps({"type": "welcome", "v": 1, "node": message["node"]}))
                if self.ack and acking and "batch_id" in message:
                    await ws.send(json.dumps({"type": "ack", "v": 1, "batch_id": message["batch_id"]}))

        async def main():
            self._stop = self._loop.create_future()
            async with serve(handler, "127.0.0.1", self.port, process_request=check):
                ready.set()
                await self._stop

        self._loop.run_until_complete(main())

    def close(self) -> None:
        self._loop.call_soon_threadsafe(lambda: self._stop.done() or self._stop.set_result(None))
        self._thread.join(10)

    def of_type(self, kind: str) -> list[dict]:
        return [m for m in self.received if m["type"] == kind]


def wait_for(predicate, timeout_s: float = 30.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def hello() -> dict:
    return protocol.hello_message(node="node-a", agent_version="test", sampling_interval_s=10.0, cgroup_version=1,
                                  signal_sources={"cpu": ["psi-trigger", "poll"]}, trigger_window_s=2.0,
                                  capacity=zeros() + 1000.0, buffered=0, ts=time.time())


def samples_batch(n_workloads: int, ts: float) -> dict:
    records = []
    for i in range(n_workloads):
        w = Workload(f"ns/pod-{i:03d}", f"pod-{i:03d}", KIND_KUBERNETES, "batch" if i % 2 else "service", i % 5,
                     zeros() + 100.0, zeros() + np.inf, 0.0, 30.0, f"kubepods/pod{i}")
        usage = np.full(8, np.nan)
        usage[0], usage[1] = 250.0 + i, 2**28 + i
        records.append(protocol.sample_record(w, UsageSample(w.id, ts, usage), reservation=zeros() + 120.0, stale=False))
    return protocol.samples_message(node="node-a", ts=ts, interval_s=10.0, records=records, node_reading=None)


@pytest.fixture
def client_factory(tmp_path):
    clients: list[LinkClient] = []

    def make(port: int, buffer: LinkBuffer, *, token: str = TOKEN, **kwargs) -> LinkClient:
        client = LinkClient(f"ws://127.0.0.1:{port}/agent/v1/ws", token, buffer, hello=hello,
                            backoff_base_s=0.05, backoff_max_s=0.5, rng=random.Random(1), open_timeout_s=5, **kwargs)
        buffer.on_append = client.notify
        client.start()
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.stop()


def test_hello_first_then_every_message_acked_and_deleted(tmp_path, client_factory) -> None:
    port = free_port()
    server = WsServer(port)
    buffer = LinkBuffer(tmp_path / "buf.sqlite3", node="node-a")
    try:
        ids = [buffer.append(samples_batch(3, 100.0 + i)) for i in range(5)]
        client_factory(port, buffer)
        assert wait_for(lambda: buffer.count() == 0)
        assert server.received[0]["type"] == "hello" and server.received[0]["node"] == "node-a"
        assert [m["batch_id"] for m in server.of_type("samples")] == ids == [f"node-a:{buffer.epoch}:{i}" for i in range(1, 6)]
        for message in server.received:
            protocol.validate_agent_message(message)
    finally:
        server.close()


def test_wrong_token_is_refused_at_the_handshake_and_retried_with_backoff(tmp_path, client_factory) -> None:
    port = free_port()
    server = WsServer(port, token="the-right-one")
    buffer = LinkBuffer(tmp_path / "buf.sqlite3", node="node-a")
    try:
        buffer.append(samples_batch(1, 1.0))
        client = client_factory(port, buffer, token="a-wrong-one", refused_backoff_base_s=0.05)
        assert wait_for(lambda: server.refused >= 3)
        assert server.received == [] and buffer.count() == 1 and "401" in (client.last_error or "")
        state = client.state()
        assert state["state"] == "refused" and "HTTP 401" in state["reason"] and not client.connected.is_set()
    finally:
        server.close()


def test_backoff_is_exponential_with_jitter() -> None:
    rng = random.Random(7)
    for attempt, cap in enumerate([0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]):
        delays = [backoff_delay_s(attempt, base_s=0.5, max_s=30.0, rng=rng) for _ in range(50)]
        assert all(cap / 2 <= d <= cap for d in delays) and len(set(delays)) > 40   # jittered within [d/2, d]


def test_after_a_long_outage_the_default_client_tries_again_within_5_s(tmp_path) -> None:
    """However many attempts an outage refused, the default backoff (base 0.5 s, cap 5 s) waits
    2.5–5 s before the next one: an agent is back at most 5 s after the console can take it
    (docs/agent.md; with the former 10 s cap, 150 agents took 7 s after a 20 s database outage)."""
    client = LinkClient("ws://127.0.0.1:9/agent/v1/ws", TOKEN, LinkBuffer(tmp_path / "buf.sqlite3", node="node-a"),
                        hello=hello)
    rng = random.Random(3)
    delays = [backoff_delay_s(attempt, base_s=client.backoff_base_s, max_s=client.backoff_max_s, rng=rng)
              for attempt in range(4, 40) for _ in range(20)]
    assert 2.5 <= min(delays) and max(delays) <= 5.0


def test_five_minute_disconnect_at_10s_sampling_with_200_workloads_loses_no_sample(tmp_path, client_factory) -> None:
    port = free_port()
    buffer = LinkBuffer(tmp_path / "buf.sqlite3", node="node-a", max_bytes=256 * 2**20)
    client = client_factory(port, buffer)                          # nothing listens yet: the link is down
    for i in range(30):                                            # 5 min / 10 s = 30 batches × 200 workloads
        buffer.append(samples_batch(200, 1_000.0 + 10 * i))
    assert buffer.count("samples") == 30 and client.failures >= 1
    server = WsServer(port)                                        # the control plane comes back
    try:
        assert wait_for(lambda: buffer.count() == 0, 60)
        batches = {m["batch_id"]: m for m in server.of_type("samples")}
        assert len(batches) == 30 and sum(len(m["samples"]) for m in batches.values()) == 6000
        assert sorted(m["ts"] for m in batches.values()) == [1_000.0 + 10 * i for i in range(30)]
    finally:
        server.close()


def test_unacknowledged_messages_survive_a_restart_and_are_resent(tmp_path, client_factory) -> None:
    port = free_port()
    silent = WsServer(port, ack=False)                             # receives but never acks
    path = tmp_path / "buf.sqlite3"
    buffer = LinkBuffer(path, node="node-a")
    ids = [buffer.append(samples_batch(2, float(i))) for i in range(4)]
    client = client_factory(port, buffer)
    assert wait_for(lambda: len(silent.of_type("samples")) == 4)
    client.stop()
    silent.close()
    buffer.close()
    restarted = LinkBuffer(path, node="node-a")                    # the agent restarts: nothing was acked
    assert restarted.count() == 4
    later = restarted.append(samples_batch(2, 99.0))
    assert later == f"node-a:{restarted.epoch}:5"                 # seq keeps increasing across restarts,
    assert restarted.epoch != buffer.epoch                         # under a new boot id
    server = WsServer(port)
    try:
        client_factory(port, restarted)
        assert wait_for(lambda: restarted.count() == 0)
        assert {m["batch_id"] for m in server.of_type("samples")} == set(ids) | {later}
    finally:
        server.close()


def test_overflow_drops_the_oldest_samples_never_actions_and_reports_a_gap(tmp_path) -> None:
    one = len(protocol.encode(samples_batch(50, 0.0)))
    buffer = LinkBuffer(tmp_path / "buf.sqlite3", node="node-a", max_bytes=int(one * 3.5))
    action = protocol.action_message(node="node-a", ts=1.0, action="evict", reason="priority", workload=None,
                                     trigger={"source": "poll", "resource": "memory", "scope": "node"},
                                     numbers={"ledger_before": 2.0}, result={"ok": True})
    buffer.append(action)
    for i in range(6):
        buffer.append(samples_batch(50, float(i)))
    kept = [json.loads(body) for _, _, body in buffer.pending(limit=100)]
    assert [m["type"] for m in kept].count("action") == 1
    gaps = [m for m in kept if m["type"] == "gap"]
    assert gaps and sum(g["dropped_samples"] for g in gaps) == 50 * buffer.dropped_batches
    assert buffer.size_bytes() <= buffer.max_bytes


def test_policy_updates_arrive_and_malformed_frames_are_ignored(tmp_path, client_factory) -> None:
    port = free_port()
    frames = ["{not json", json.dumps({"type": "policy", "v": 1, "eviction": {"unknown_knob": 1}}),
              json.dumps({"type": "policy", "v": 1, "estimator": {"margin_ratio": 1.3}, "eviction": {"min_run_time_s": 60}})]
    server = WsServer(port, on_connect=frames)
    got: list[PolicyUpdate] = []
    buffer = LinkBuffer(tmp_path / "buf.sqlite3", node="node-a")
    try:
        client_factory(port, buffer, on_policy=got.append)
        assert wait_for(lambda: len(got) >= 1)
        assert got[0].estimator == {"margin_ratio": 1.3} and got[0].eviction == {"min_run_time_s": 60.0}
        buffer.append(samples_batch(1, 1.0))                       # the link still works after the bad frames
        assert wait_for(lambda: buffer.count() == 0)
    finally:
        server.close()


def test_local_mitigation_never_waits_on_a_hung_control_plane(tmp_path, client_factory) -> None:
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)                                                 # accepts TCP, never answers the handshake
    rig = Rig(tmp_path, capacity={"cpu": 2000.0})
    buffer = LinkBuffer(tmp_path / "buf.sqlite3", node="node-t")
    try:
        client_factory(hung.getsockname()[1], buffer)
        rig.add("s", tier="service", requests={"cpu": "1500m"}, limits={"cpu": "1500m"})
        rig.add("b", tier="batch", requests={"cpu": "1"}, limits={"cpu": "1"})
        loop = rig.build()
        loop.emit = buffer.append
        started = time.monotonic()
        loop.tick(1000.0, 0.0)
        assert time.monotonic() - started < 5.0                    # the handshake timeout is 5 s
        assert rig.file("b", "cpu.max") == "50000 100000"          # 2 − 1.5 = 0.5 core, enforced locally
        assert buffer.count("action") >= 1
        loop.apply_policy_update(PolicyUpdate({}, {"min_batch_cpu_mcpu": 700.0}))
        loop.tick(1001.0, 1.0)                                     # policy applied at the next tick
        assert rig.file("b", "cpu.max") == "70000 100000"          # floor 0.7 core
    finally:
        rig.close()
        hung.close()


def test_a_connection_that_never_acks_is_given_up_and_everything_resent(tmp_path, client_factory) -> None:
    port = free_port()
    server = WsServer(port, ack_from_connection=2)                 # the first connection is half-dead: no acks
    buffer = LinkBuffer(tmp_path / "buf.sqlite3", node="node-a")
    try:
        ids = [buffer.append(samples_batch(2, float(i))) for i in range(3)]
        client = client_factory(port, buffer, ack_timeout_s=1.0)
        assert wait_for(lambda: buffer.count() == 0, 60)
        assert server.connections >= 2 and client.ack_timeouts >= 1
        sent = [m["batch_id"] for m in server.of_type("samples")]
        assert sent[:3] == ids and set(sent[3:]) == set(ids)      # resent after the reconnect, in order
    finally:
        server.close()


def test_a_batch_too_large_for_one_frame_is_split_into_parts_within_both_limits(tmp_path) -> None:
    buffer = LinkBuffer(tmp_path / "buf.sqlite3", node="node-a", max_batch_samples=500, max_message_bytes=200_000)
    message = samples_batch(1200, 5.0)
    message["node_sample"] = {"ts": 5.0, "working_set_bytes": 1.0, "psi": None}
    assert len(protocol.encode(message)) > 3 * 200_000
    buffer.append(message)
    parts = [json.loads(body) for _, _, body in buffer.pending(limit=100)]
    assert len(parts) >= 4 and all(len(p["samples"]) <= 500 for p in parts)
    assert all(len(body.encode()) <= 200_000 for _, _, body in buffer.pending(limit=100))
    assert [r["workload"] for p in parts for r in p["samples"]] == [r["workload"] for r in message["samples"]]
    assert parts[0]["node_sample"] == message["node_sample"] and all(p["node_sample"] is None for p in parts[1:])
    assert len({p["batch_id"] for p in parts}) == len(parts)


def test_a_lost_buffer_file_never_reuses_a_batch_id(tmp_path) -> None:
    path = tmp_path / "buf.sqlite3"
    first = LinkBuffer(path, node="node-a")
    before = [first.append(samples_batch(1, float(i))) for i in range(3)]
    first.close()
    for leftover in tmp_path.glob("buf.sqlite3*"):                 # the state file is lost
        leftover.unlink()
    again = LinkBuffer(path, node="node-a")
    after = [again.append(samples_batch(1, 10.0 + i)) for i in range(3)]
    assert [b.rsplit(":", 1)[1] for b in after] == ["1", "2", "3"]  # seq starts again …
    assert not set(before) & set(after)                            # … but no id is reused
def test_the_agent_applies_a_policy_version_and_reports_it() -> None:
    update = protocol.parse_server_message(json.dumps(
        {"type": "policy", "v": 1, "version": 4, "estimator": {"margin_ratio": 1.3}, "eviction": {}}))
    assert update.version == 4 and update.estimator == {"margin_ratio": 1.3}
    with pytest.raises(Exception, match="version"):
        protocol.parse_server_message(json.dumps({"type": "policy", "v": 1, "version": "4"}))


def test_samples_carry_the_policy_version_the_loop_applies(tmp_path) -> None:
    rig = Rig(tmp_path, capacity={"cpu": 2000.0})
    try:
        rig.add("s", tier="service", requests={"cpu": "500m"}, limits={"cpu": "1"})
        loop = rig.build()
        sent: list[dict] = []
        loop.emit = sent.append
        loop.tick(1000.0, 0.0)
        loop.apply_policy_update(PolicyUpdate({"margin_ratio": 1.3}, {"min_run_time_s": 60.0}, version=4))
        loop.tick(1011.0, 11.0)
        reports = [m for m in sent if m["type"] == "samples"]
        assert [m["policy_version"] for m in reports] == [None, 4]
        assert loop.settings.policy.estimator.margin_ratio == 1.3
        assert loop.settings.policy.eviction.min_run_time_s == 60.0
        assert loop.policy_version == 4
    finally:
        rig.close()


@pytest.mark.parametrize("message, says", [
    ({"estimator": {"margin": 1.2}}, "<policy>: estimator.margin: unknown key 'margin' (accepted: margin_ratio"),
    ({"estimator": {"margin_ratio": 0.9}}, "<policy>: estimator.margin_ratio: 0.9 is out of range (accepted: a number in [1, 10])"),
    ({"estimator": {"half_life_s": "10min"}}, "<policy>: estimator.half_life_s: expected a number"),
    ({"eviction": {"cfs_period_us": 100000.5}}, "<policy>: eviction.cfs_period_us: 100000.5 is not a whole number"),
    ({"eviction": {"acute_ratio": 0.9}}, "acute_ratio 0.9 is below evict_threshold_ratio 0.95"),
])
def test_a_bad_policy_message_is_refused_naming_the_field(message, says) -> None:
    """The link's policy message is read by the engine's policy parser (one parser)."""
    with pytest.raises(ProtocolError) as info:
        protocol.parse_server_message(json.dumps({"type": "policy", "v": 1, "version": 2, **message}))
    assert says in str(info.value)


def test_a_policy_update_the_engine_refuses_leaves_the_policy_in_force(tmp_path) -> None:
    rig = Rig(tmp_path, capacity={"cpu": 4000.0, "ram": 64 * GIB})
    try:
        loop = rig.build()
        loop.apply_policy_update(PolicyUpdate({"margin_ratio": 1.3}, {}, version=2))
        loop.apply_policy_update(PolicyUpdate({}, {"evict_threshold_ratio": 0.999}, version=3))  # above acute 0.99
        loop.tick(1000.0, 0.0)
        assert loop.settings.policy.estimator.margin_ratio == 1.3 and loop.policy_version == 2
        assert loop.settings.policy.eviction.evict_threshold_ratio == 0.95
    finally:
        rig.close()
