"""Fixtures for the ingest and estimation tests: a live homelab cluster (3 nodes, 10 production
pods), agent tokens, the agent endpoint as an in-process ASGI app (the real consumer, writer
and database), message builders, and — for the tests with real processes — PostgreSQL, Redis,
Daphne and Celery worker processes sharing the test database.

These tests need PostgreSQL (``scripts/test`` runs the suite on it) and Redis; when either is
missing they fail with the reason, never skip.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from kalena_web.inventory.models import Node
from kalena_web.telemetry.services import agent_token_create
from tests.web.live_cluster import import_homelab
BETA_PODS = ["database/postgres-0", "monitoring/grafana-0", "smart-home/home-assistant-0", "smart-home/zigbee2mqtt-0"]
REDIS_TEST_URL = os.environ.get("KALENA_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")


def require_postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.fail("this test needs PostgreSQL: run it through ./scripts/test, or set "
                    "DATABASE_URL=postgres://postgres@127.0.0.1:5432/kalena")


def require_redis() -> str:
    import redis

    try:
        redis.Redis.from_url(REDIS_TEST_URL).ping()
    except redis.exceptions.RedisError as exc:
        pytest.fail(f"this test needs Redis at {REDIS_TEST_URL}: {exc} (scripts/services up starts it)")
    return REDIS_TEST_URL


@pytest.fixture
def home(transactional_db, kuberina_dir: Path, tmp_path: Path):
    """The live homelab cluster, committed (the ingest writer has its own connection)."""
    return import_homelab(kuberina_dir, tmp_path, now_s=time.time() - 3600)


@pytest.fixture
def beta(home) -> Node:
    return Node.objects.get(cluster=home, name="thinkcentre-beta")


@pytest.fixture
def beta_token(beta) -> str:
    return agent_token_create(node=beta)[0]


def vector(**values: float | None) -> dict[str, float | None]:
    out = {k: 0.0 for k in ("cpu_mcpu", "ram_bytes", "gpu_devices", "storage_bytes", "disk_read_bps",
                            "disk_write_bps", "net_in_bps", "net_out_bps")}
    out.update(values)
    return out


def record(workload: str, ts: float, *, cpu_mcpu: float = 100.0, ram_bytes: float = 2**30, **extra: Any) -> dict:
    """One sample record as the agent sends it (``extra`` overrides fields)."""
    usage = vector(cpu_mcpu=cpu_mcpu, ram_bytes=ram_bytes, gpu_devices=None, storage_bytes=None)
    out = {"workload": workload, "name": workload.rsplit("/", 1)[-1], "kind": "kubernetes", "tier": "service",
           "priority": 0, "ts": ts, "stale": False, "usage": usage, "request": vector(), "limit": vector(),
           "reservation": vector(), "memory_usage_bytes": ram_bytes * 1.5,
           "cpu_throttling": {"nr_periods": 10, "nr_throttled": 2, "throttled_time_us": 1500.0},
           "psi": {"cpu": {"some": {"avg10": 1.5, "avg60": 1.0, "avg300": 0.5, "total_us": 10},
                           "full": None},
                   "memory": {"some": {"avg10": 0.5, "avg60": 0, "avg300": 0, "total_us": 1},
                              "full": {"avg10": 0.25, "avg60": 0, "avg300": 0, "total_us": 1}}}}
    out.update(extra)
    return out


def samples(node: str, seq: int, records: list[dict], *, ts: float | None = None,
            node_sample: dict | None = None) -> dict:
    ts = time.time() if ts is None else ts
    return {"type": "samples", "v": 1, "batch_id": f"{node}:{seq}", "node": node, "ts": ts, "interval_s": 10.0,
            "node_sample": node_sample, "samples": records}


def hello(node: str, *, interval_s: float = 10.0) -> dict:
    return {"type": "hello", "v": 1, "node": node, "agent_version": "test", "sampling_interval_s": interval_s,
            "cgroup_version": 2, "signal_sources": {"cpu": ["poll"]}, "trigger_window_s": 2.0,
            "capacity": vector(cpu_mcpu=4000.0, ram_bytes=16 * 2**30, storage_bytes=None),
            "buffered": 0, "ts": time.time()}


def child_database_url() -> str:
    """The URL of the database pytest-django created, for child processes."""
    s = settings.DATABASES["default"]
    user = s.get("USER") or "postgres"
    return f"postgres://{user}@{s.get('HOST') or '127.0.0.1'}:{s.get('PORT') or 5432}/{s['NAME']}"


class Agent:
    """A hand-driven agent on the real endpoint, in process (channels' ``WebsocketCommunicator``
    over the app of :func:`kalena_web.telemetry.routing.agent_routes`)."""

    def __init__(self, app, token: str | None, *, raw_header: bytes | None = None) -> None:
        from channels.testing import WebsocketCommunicator

        headers = []
        if raw_header is not None:
            headers.append((b"authorization", raw_header))
        elif token is not None:
            headers.append((b"authorization", f"Bearer {token}".encode()))
        self.comm = WebsocketCommunicator(app, "/agent/v1/ws", headers=headers)
        self.welcomed: dict | None = None

    async def connect(self) -> bool:
        connected, _ = await self.comm.connect(timeout=10)
        return connected

    async def send(self, message: dict | str) -> None:
        await self.comm.send_to(text_data=message if isinstance(message, str) else json.dumps(message))

    async def receive(self, timeout: float = 10.0, *, welcome: bool = False) -> dict:
        """The next frame; the ``welcome`` that accepts a hello is noted in ``welcomed`` and
        skipped unless ``welcome``."""
        while True:
            output = await self.comm.receive_output(timeout)
            if output["type"] == "websocket.close":
                return {"type": "closed", "code": output.get("code")}
            message = json.loads(output["text"])
            if message.get("type") != "welcome" or welcome:
                return message
            self.welcomed = message

    async def until(self, kind: str, timeout: float = 10.0) -> dict:
        while True:
            message = await self.receive(timeout, welcome=kind == "welcome")
            if message["type"] in (kind, "closed"):
                return message

    async def close(self) -> None:
        await self.comm.disconnect()


@pytest.fixture
def agent_app():
    """A fresh agent endpoint (writer and token watch of its own) per test."""
    from channels.routing import URLRouter
    from django.urls import path

    from kalena_web.telemetry.consumers import AgentConsumer, TokenWatch
    from kalena_web.telemetry.writer import GroupCommitWriter

    writer = GroupCommitWriter(flush_s=0.02)
    app = URLRouter([path("agent/v1/ws", AgentConsumer.as_asgi(writer=writer, tokens=TokenWatch(check_s=0.2)))])
    app.writer = writer  # for the tests that look at how entries were grouped
    yield app
    writer.close()


def run(coro):
    """Drive an async conversation from a synchronous test, then close the database connection
    the server side opened on asgiref's thread (so flushing the test database never waits)."""
    from channels.db import database_sync_to_async
    from django.db import connections

    async def conversation():
        try:
            return await coro
        finally:
            await database_sync_to_async(connections.close_all)()

    return asyncio.run(conversation())


class Services:
    """Daphne and Celery worker processes on the test database and the test Redis database,
    stopped (by pid) when the test ends; logs under ``tmp_path``."""

    def __init__(self, tmp_path: Path, **env: str) -> None:
        from kalena_web.cli.benchenv import Processes

        redis_url = require_redis()
        import redis

        redis.Redis.from_url(redis_url).flushdb()
        self.env = dict(os.environ, DATABASE_URL=child_database_url(), REDIS_URL=redis_url,
                        DJANGO_SETTINGS_MODULE="kalena_web.settings", KALENA_ESTIMATION_LOCK_TTL_S="3",
                        KALENA_LOG_LEVEL="INFO", **env)
        self.procs = Processes(env=self.env, log_dir=tmp_path)
        self.redis_url = redis_url

    def celery(self):
        from celery import Celery

        return Celery("kalena-test-client", broker=self.redis_url)

    def log(self, name: str) -> str:
        return (self.procs.log_dir / f"{name}.log").read_text()

    def stop(self) -> None:
        self.procs.stop_all()


@pytest.fixture
def services(tmp_path):
    require_postgres()
    s = Services(tmp_path)
    yield s
    s.stop()


@pytest.fixture
def daphne(home, services) -> str:
    """The agent endpoint's URL on a real Daphne serving the test database."""
    from kalena_web.cli.benchenv import free_port

    port = free_port()
    services.procs.daphne(port)
    return f"ws://127.0.0.1:{port}/agent/v1/ws"


def wait_until(predicate, timeout_s: float = 60.0, every_s: float = 0.1, what: str = "") -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(every_s)
    assert predicate(), f"timed out after {timeout_s:.0f} s waiting for {what or predicate}"
