"""Simulated node agents for ``kalena bench ingest``: one WebSocket per node speaking the real
link protocol (:mod:`agents.link.protocol`: bearer token, ``hello``, ``samples`` with
``batch_id``, acks), all on one asyncio loop.

Rate: with ``W`` workloads in total and a target of ``rate`` samples/s, every agent sends one
``samples`` message every ``T = W / rate`` seconds carrying one sample (one workload × 8
dimensions) per workload on its node, with a node sample; agents start at phases spread evenly
over ``T``. Usage follows a slow sine per workload between 20 % and 50 % of the request (gpu
and storage are "not measured": null). Every sample sent is remembered as ``(node id,
workload id, ts)`` so the database can be checked afterwards, independently of the acks.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
from websockets.asyncio.client import connect

from agents.link.protocol import USAGE_KEYS


@dataclass(frozen=True)
class SimWorkload:
    id: int
    name: str
    request: tuple[float, ...]


@dataclass(frozen=True)
class SimNode:
    id: int
    name: str
    token: str
    capacity: tuple[float | None, ...]
    workloads: tuple[SimWorkload, ...]


@dataclass
class LoadStats:
    """What the simulated agents did. ``sent_keys``: ``(node id, workload id, ts)`` per sample."""

    connected: int = 0
    connect_failures: list[str] = field(default_factory=list)
    batches_sent: int = 0
    batches_acked: int = 0
    samples_sent: int = 0
    samples_acked: int = 0
    rejected: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    ack_latency_s: list[float] = field(default_factory=list)
    sent_per_second: Counter = field(default_factory=Counter)
    sent_keys: list[tuple[int, int, float]] = field(default_factory=list)
    send_started_s: float = 0.0
    send_ended_s: float = 0.0


def _vector(values) -> dict[str, float | None]:
    return {key: (None if v is None or not math.isfinite(v) else float(v)) for key, v in zip(USAGE_KEYS, values)}


def _usage(request: tuple[float, ...], ts: float, phase: float) -> dict[str, float | None]:
    f = 0.35 + 0.15 * math.sin(2 * math.pi * ts / 300.0 + phase)
    return {"cpu_mcpu": request[0] * f, "ram_bytes": request[1] * f, "gpu_devices": None, "storage_bytes": None,
            "disk_read_bps": request[4] * f, "disk_write_bps": request[5] * f, "net_in_bps": request[6] * f,
            "net_out_bps": request[7] * f}


class Agent:
    """One simulated agent (module doc)."""

    def __init__(self, node: SimNode, *, url: str, stats: LoadStats) -> None:
        self.node, self.url, self.stats = node, url, stats
        self.pending: dict[str, tuple[float, int]] = {}
        self.seq = 0
        self.static = [(w, {"workload": w.name, "name": w.name.rsplit("/", 1)[-1], "kind": "kubernetes",
                            "tier": "service", "priority": 0, "stale": False, "request": _vector(w.request),
                            "limit": _vector(w.request), "reservation": _vector(w.request),
                            "memory_usage_bytes": None, "cpu_throttling": None, "psi": None},
                        (w.id % 97) / 97 * 2 * math.pi) for w in node.workloads]
        self.ws = None
        self.done = asyncio.Event()

    async def open(self) -> None:
        self.ws = await connect(self.url, additional_headers={"Authorization": f"Bearer {self.node.token}"},
                                open_timeout=60, max_size=2**24, compression=None, ping_interval=None)
        await self.ws.send(orjson.dumps({
            "type": "hello", "v": 1, "node": self.node.name, "agent_version": "bench", "sampling_interval_s": 10.0,
            "cgroup_version": 2, "signal_sources": {"cpu": ["poll"], "memory": ["poll"]}, "trigger_window_s": 2.0,
            "capacity": dict(zip(USAGE_KEYS, self.node.capacity)), "buffered": 0, "ts": time.time()}).decode())
        self.receiver = asyncio.get_running_loop().create_task(self._receive())

    async def _receive(self) -> None:
        async for frame in self.ws:
            message = orjson.loads(frame)
            if message.get("type") == "ack":
                sent = self.pending.pop(message["batch_id"], None)
                if sent is not None:
                    self.stats.batches_acked += 1
                    self.stats.samples_acked += int(message.get("accepted", 0))
                    self.stats.ack_latency_s.append(time.time() - sent[0])
                    self.stats.rejected.update(message.get("rejected") or {})
                if not self.pending and self.done.is_set():
                    return
            elif message.get("type") == "error":
                self.stats.errors.append(f"{self.node.name}: {message.get('message')}")

    def message(self, now: float) -> tuple[str, list[tuple[int, int, float]]]:
        self.seq += 1
        records, keys = [], []
        for w, static, phase in self.static:
            records.append({**static, "ts": now, "usage": _usage(w.request, now, phase)})
            keys.append((self.node.id, w.id, now))
        capacity_ram = self.node.capacity[1] or 0.0
        body = {"type": "samples", "v": 1, "batch_id": f"{self.node.name}:{self.seq}", "node": self.node.name,
                "ts": now, "interval_s": 10.0, "samples": records,
                "node_sample": {"ts": now, "working_set_bytes": 0.4 * capacity_ram, "psi": None}}
        return orjson.dumps(body).decode(), keys

    async def run(self, *, start: float, period_s: float, end: float) -> None:
        due = start
        while due < end:
            delay = due - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            now = time.time()
            text, keys = self.message(now)
            self.pending[f"{self.node.name}:{self.seq}"] = (now, len(keys))
            await self.ws.send(text)
            self.stats.batches_sent += 1
            self.stats.samples_sent += len(keys)
            self.stats.sent_per_second[int(now)] += len(keys)
            self.stats.sent_keys.extend(keys)
            due += period_s
        self.done.set()

    async def drain(self, timeout_s: float) -> None:
        if self.pending:
            try:
                await asyncio.wait_for(self.receiver, timeout=timeout_s)
            except (asyncio.TimeoutError, Exception):  # noqa: BLE001 - unacked batches are counted as such
                pass
        self.receiver.cancel()
        await self.ws.close()


async def run_agents(nodes: list[SimNode], *, url: str, rate: float, seconds: float, ack_timeout_s: float = 60.0,
                     progress: Callable[[LoadStats, float], None] | None = None,
                     connect_parallel: int = 64) -> LoadStats:
    """Connect every agent, stream for ``seconds`` at ``rate`` samples/s in total, wait for acks."""
    stats = LoadStats()
    agents = [Agent(n, url=url, stats=stats) for n in nodes]
    gate = asyncio.Semaphore(connect_parallel)

    async def open_one(agent: Agent) -> None:
        async with gate:
            try:
                await agent.open()
                stats.connected += 1
            except Exception as exc:  # noqa: BLE001 - reported in the summary
                stats.connect_failures.append(f"{agent.node.name}: {type(exc).__name__}: {exc}")

    await asyncio.gather(*(open_one(a) for a in agents))
    live = [a for a in agents if a.ws is not None]
    workloads = sum(len(a.node.workloads) for a in live)
    period = max(workloads / rate, 0.05) if rate > 0 else seconds
    start = time.time() + 1.0
    end = start + seconds
    stats.send_started_s = start
    ticker = None
    if progress is not None:
        async def tick() -> None:
            while time.time() < end + ack_timeout_s:
                await asyncio.sleep(5.0)
                progress(stats, time.time() - start)
        ticker = asyncio.get_running_loop().create_task(tick())
    phases = random.Random(0).sample(range(len(live)), len(live))   # spread big and small nodes evenly
    await asyncio.gather(*(a.run(start=start + period * phases[i] / len(live), period_s=period, end=end)
                           for i, a in enumerate(live)))
    stats.send_ended_s = time.time()
    await asyncio.gather(*(a.drain(ack_timeout_s) for a in live))
    if ticker is not None:
        ticker.cancel()
    return stats
