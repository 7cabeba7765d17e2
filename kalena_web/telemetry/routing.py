"""Agent WebSocket route: ``/agent/v1/ws`` (bearer token per node; no session, no Origin check —
agents are not browsers)."""

from __future__ import annotations

from django.conf import settings
from django.urls import path

from kalena_web.telemetry.consumers import AgentConsumer, TokenWatch
from kalena_web.telemetry.writer import GroupCommitWriter


def agent_routes() -> list:
    """The agent route, with this server process's group-commit writer and token watch."""
    writer = GroupCommitWriter(flush_s=settings.KALENA_INGEST_FLUSH_S,
                               max_samples=settings.KALENA_INGEST_FLUSH_MAX_SAMPLES)
    return [path("agent/v1/ws", AgentConsumer.as_asgi(writer=writer, tokens=TokenWatch()))]
