"""The agent's own ``/healthz`` and ``/metrics`` on a local port (``--health-address``).

``/healthz`` answers 200 while the mitigation loop ticks (its last tick at most
``max(10 s, 5 × mitigation interval)`` ago) and 503 otherwise, with the loop's and the link's state
in the JSON body; a link that cannot reach the console does not fail it (the agent keeps
mitigating and buffering without the console — restarting it would help nothing). ``/metrics`` is
the Prometheus text of :class:`AgentMetrics`. Names follow docs/metrics.md.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

#: Event → action latency buckets (seconds): the agent decides in milliseconds (docs/agent.md).
DECISION_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)


class AgentMetrics:
    """The agent's Prometheus series, on a registry of its own (one per agent, no globals)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.actions = Counter("kalena_agent_actions", "Mitigation actions taken, by kind (throttle, evict, …)",
                               ["action"], registry=self.registry)
        self.psi_events = Counter("kalena_agent_pressure_events", "Pressure signals received, by resource and "
                                  "source (psi-trigger, eventfd-threshold, poll)", ["resource", "source"],
                                  registry=self.registry)
        self.decision = Histogram("kalena_agent_decision_duration_seconds", "From a pressure signal's arrival to "
                                  "the mitigation loop having acted on it", buckets=DECISION_BUCKETS_S,
                                  registry=self.registry)
        self.last_tick = Gauge("kalena_agent_last_tick_timestamp_seconds", "Unix time of the mitigation loop's "
                               "last tick", registry=self.registry)
        self.last_tick_s: float | None = None
        self.collector_errors = Counter("kalena_agent_collector_errors", "Reads by a collector or discovery source "
                                        "that gave no sample, by collector and cause (empty_body, truncated, "
                                        "malformed, gone, cgroup_removed, permission, unreachable, http_status, "
                                        "read_error, unexpected)", ["collector", "cause"], registry=self.registry)
        self.buffered = Gauge("kalena_agent_link_buffered_messages", "Messages in the on-disk link buffer not yet "
                              "acknowledged by the console", registry=self.registry)
        self.link_refusals = Counter("kalena_agent_link_refusals", "Link connections the console refused (token "
                                     "unknown or revoked, node_mismatch, bad hello)", registry=self.registry)
        self.link_superseded = Counter("kalena_agent_link_superseded", "Times this agent's link was closed because "
                                       "a newer link for the same node took over (rising steadily: two agents run "
                                       "for this node)", registry=self.registry)

    def action_emitted(self, message: dict[str, Any]) -> None:
        """Count an outgoing message if it is an ``action``."""
        if message.get("type") == "action":
            self.actions.labels(action=str(message.get("action", "unknown"))).inc()

    def events_handled(self, events: list, *, started_mono: float, finished_mono: float) -> None:
        """Count pressure events and observe each one's event → action latency."""
        for event in events:
            self.psi_events.labels(resource=event.resource, source=event.source).inc()
            self.decision.observe(max(0.0, finished_mono - min(started_mono, event.detected_mono)))

    def collector_error(self, collector: str, cause: str) -> None:
        """Count one failed read (:mod:`agents.collectors.failures`)."""
        self.collector_errors.labels(collector=collector, cause=cause).inc()

    def ticked(self, now_s: float) -> None:
        self.last_tick_s = now_s
        self.last_tick.set(now_s)


class HealthServer:
    """``/healthz`` and ``/metrics`` on a daemon thread; ``stop()`` closes the socket.

    Raises:
        OSError: the address cannot be bound (the caller names the flag).
    """

    def __init__(self, address: str, metrics: AgentMetrics, *, max_tick_age_s: float,
                 link_state: Callable[[], dict[str, Any]] = dict, clock: Callable[[], float] = time.time) -> None:
        host, _, port = address.rpartition(":")
        self.metrics, self.max_tick_age_s, self.link_state, self.clock = metrics, max_tick_age_s, link_state, clock
        self.started_s = clock()
        self.server = ThreadingHTTPServer((host, int(port)), self._handler())
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="kalena-agent-health", daemon=True)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def health(self) -> tuple[int, dict[str, Any]]:
        """``(status, body)``: 200 while the loop ticks (see module doc), else 503."""
        now = self.clock()
        last = self.metrics.last_tick_s
        age = None if last is None else max(0.0, now - last)
        # before the first tick, allow one tick age from the start
        ok = (now - self.started_s <= self.max_tick_age_s) if age is None else age <= self.max_tick_age_s
        body = {"status": "ok" if ok else "stalled", "last_tick_age_s": age, "max_tick_age_s": self.max_tick_age_s,
                "link": self.link_state()}
        return (200 if ok else 503), body

    def _handler(self):
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?", 1)[0] == "/healthz":
                    status, body = outer.health()
                    self._send(status, json.dumps(body).encode(), "application/json")
                elif self.path.split("?", 1)[0] == "/metrics":
                    outer.metrics.buffered.set(outer.link_state().get("buffered", 0))
                    self._send(200, generate_latest(outer.metrics.registry), CONTENT_TYPE_LATEST)
                else:
                    self._send(404, b'{"error": "not found: /healthz and /metrics only"}', "application/json")

            def _send(self, status: int, payload: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *_: Any) -> None:  # probes every few seconds: no access log
                return

        return Handler
