"""WebSocket client of the control-plane link (:mod:`agents.link.protocol`).

Runs an asyncio loop in its own thread, so local mitigation never waits on it. After each
connect it sends ``hello``, then every buffered message in ``seq`` order (at most ``window``
unacknowledged in flight); each ``ack`` deletes its message from the buffer. On any failure
(refused, 401, closed, timeout) it reconnects after a jittered exponential backoff::

    delay = d / 2 + uniform(0, d / 2),  d = min(backoff_max_s, backoff_base_s · 2^attempt)

(base 0.5 s, cap 5 s — the default ``max_backoff`` of Prometheus's remote write, which faces the
same trade: a server that is back must not wait long for its clients.) The cap bounds how long an
agent stays away once the server can take it again: a database outage makes every connection
attempt fail (HTTP 403), ``attempt`` climbs, and after the database is back each agent waits at
most one more delay — ≤ 5 s, about 2 s on average. With a 10 s cap, 150 agents took 7 s after a
20 s database outage to be connected again — 7 of the 8.5 s until their backlog was stored; the
price of the lower cap is one refused attempt per agent every 2.5–5 s during an outage.
``attempt`` resets once a connection has delivered an ack. A connection that has had messages
in flight and no ack at all for ``ack_timeout_s`` is given up (closed) and the client
reconnects and resends: a server that keeps the socket open and answers pings but stores
nothing (a half-dead connection) cannot hold the buffer back. The clock is progress, not the
age of the oldest message: a server that is merely slow — working through every agent's
backlog after an outage — keeps acknowledging and is not flooded with the same messages again.
Each timeout in a row doubles the next connection's timeout (up to 8 ×; reset by an ack). Messages survive disconnects and
agent restarts in :class:`~agents.link.buffer.LinkBuffer`; after a reconnect everything not yet
acknowledged is sent again (the server de-duplicates on ``batch_id``).

The link is *connected* (logged "link: connected", :attr:`LinkClient.connected` set) only once the
console answered the ``hello`` with ``welcome``. Two answers are not transient and get a backoff
of their own (state in :meth:`LinkClient.state`, shown by the agent's ``/healthz``):

* **Refused** — the upgrade denied (HTTP 401/403: the token is unknown, revoked or malformed), or
  the connection closed 4403 (``node_mismatch``: the token is another node's; a bad ``hello``) or
  4401 (the token was revoked). Retrying at once cannot help: it is logged once at WARNING with
  the console's reason (again only when the reason changes; each retry at DEBUG) and retried after
  ``delay(refused_in_a_row - 1, base 5 s, cap 300 s)`` — 2.5–5 s, 5–10 s, 10–20 s, … up to
  150–300 s. The agent keeps protecting its node locally meanwhile (it never exits over its link).
* **Superseded** — closed 4409: a newer link for the same node took over (one live link per node;
  a restarted agent takes over from its old connection at once). Logged at WARNING, counted
  (``kalena_agent_link_superseded_total``), and retried after ``delay(n - 1, base 10 s, cap 300 s)``
  where ``n`` counts the supersessions that came within 60 s of the link being accepted (a longer
  link starts ``n`` again at 1): two agents fighting over one node back off to one takeover per
  2.5–5 minutes each, with the counter rising on both and a WARNING each time.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import Any

import websockets
from websockets.asyncio.client import connect

from agents.errors import ProtocolError
from agents.link import protocol
from agents.link.buffer import LinkBuffer
from agents.link.protocol import Ack, PolicyUpdate, ServerError, Welcome

log = logging.getLogger("kalena.agent.link")


def backoff_delay_s(attempt: int, *, base_s: float, max_s: float, rng: random.Random) -> float:
    """The jittered delay before reconnect ``attempt`` (0-based), in ``[d/2, d]``."""
    d = min(max_s, base_s * (2 ** min(attempt, 30)))
    return d / 2 + rng.uniform(0, d / 2)


class AckTimeout(Exception):
    """A message waited longer than ``ack_timeout_s`` for its ack on this connection."""


CLOSE_REVOKED = 4401      # the console's close codes (kalena_web.telemetry.consumers)
CLOSE_REFUSED = 4403
CLOSE_SUPERSEDED = 4409
REFUSED_BACKOFF_BASE_S = 5.0
REFUSED_BACKOFF_MAX_S = 300.0
SUPERSEDED_BACKOFF_BASE_S = 10.0
SUPERSEDED_BACKOFF_MAX_S = 300.0
SUPERSEDED_AGAIN_WITHIN_S = 60.0   # superseded this soon after being accepted: back off longer


class LinkClient:
    """The link client (module docstring).

    Args:
        url: ``ws://`` or ``wss://`` URL of the console's agent endpoint.
        token: the node's bearer token, or a function returning it (called at every connect:
            a projected service-account token rotates).
        buffer: the on-disk buffer to send from.
        hello: builds the ``hello`` message at each connect.
        on_policy: receives each ``policy`` update (called on the link thread; must not block).
        window: unacknowledged messages in flight.
        ack_timeout_s: messages in flight and no ack for this long (s) give the connection up:
            close, reconnect (backoff), resend everything unacknowledged (module doc).
        backoff_base_s, backoff_max_s: the reconnect backoff (s; module doc).
        refused_backoff_base_s, refused_backoff_max_s: the backoff after a refusal (s; module doc).
        superseded_backoff_base_s, superseded_backoff_max_s: the backoff after being superseded (s).
        metrics: the agent's :class:`~agents.health.AgentMetrics` (refusals and supersessions are
            counted there), or None.
    """

    def __init__(self, url: str, token: str | Callable[[], str], buffer: LinkBuffer, *, hello: Callable[[], dict[str, Any]],
                 on_policy: Callable[[PolicyUpdate], None] | None = None, window: int = 32,
                 backoff_base_s: float = 0.5, backoff_max_s: float = 5.0, rng: random.Random | None = None,
                 ssl: Any = None, open_timeout_s: float = 10.0, ack_timeout_s: float = 30.0,
                 refused_backoff_base_s: float = REFUSED_BACKOFF_BASE_S,
                 refused_backoff_max_s: float = REFUSED_BACKOFF_MAX_S,
                 superseded_backoff_base_s: float = SUPERSEDED_BACKOFF_BASE_S,
                 superseded_backoff_max_s: float = SUPERSEDED_BACKOFF_MAX_S, metrics: Any = None) -> None:
        self.url = url
        self.token = token
        self.buffer = buffer
        self.hello = hello
        self.on_policy = on_policy
        self.window = window
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.rng = rng or random.Random()
        self.ssl = ssl
        self.open_timeout_s = open_timeout_s
        self.ack_timeout_s = ack_timeout_s
        self.ack_timeouts = 0
        self.timeouts_in_a_row = 0
        self.connected = threading.Event()
        self.connects = 0       # WebSocket connections opened
        self.accepted = 0       # of them, hellos the console accepted (``welcome``)
        self.failures = 0
        self.acked = 0
        self.last_error: str | None = None
        self.refused_backoff_base_s = refused_backoff_base_s
        self.refused_backoff_max_s = refused_backoff_max_s
        self.superseded_backoff_base_s = superseded_backoff_base_s
        self.superseded_backoff_max_s = superseded_backoff_max_s
        self.metrics = metrics
        self.refused_reason: str | None = None   # the console's reason while refused, else None
        self.refused_in_a_row = 0
        self.refusals = 0
        self.superseded = 0                      # times a newer link for this node took over
        self.superseded_in_a_row = 0
        self.last_superseded: str | None = None
        self.retry_in_s: float | None = None     # the wait before the next attempt, while waiting
        self._server_error: str | None = None    # the last ``error`` of this connection
        self._welcomed_mono: float | None = None
        self._last_end: str | None = None         # how the last connection ended: refused, superseded, other
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def notify(self) -> None:
        """Thread-safe: new messages were buffered."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    def state(self) -> dict[str, Any]:
        """For ``/healthz``: ``{"state": "connected" | "connecting" | "refused" | "superseded" |
        "disconnected", "reason": str | None, "retry_in_s": float | None, "refusals": n,
        "superseded": n, "last_superseded": str | None, "last_error": str | None}``."""
        if self.connected.is_set():
            state = "connected"
        elif self._last_end == "refused":
            state = "refused"
        elif self._last_end == "superseded":
            state = "superseded"
        elif self.failures or self.connects:
            state = "disconnected"
        else:
            state = "connecting"
        reason = self.refused_reason if state == "refused" else \
            self.last_superseded if state == "superseded" else None
        return {"state": state, "reason": reason, "retry_in_s": self.retry_in_s, "refusals": self.refusals,
                "superseded": self.superseded, "last_superseded": self.last_superseded,
                "last_error": self.last_error}

    def _welcomed(self) -> None:
        self._welcomed_mono = time.monotonic()
        self.accepted += 1
        if self.refused_reason is not None:
            log.warning("link: the console accepted this agent again (it had refused it: %s)", self.refused_reason)
        self.refused_reason = None
        self.refused_in_a_row = 0
        self.connected.set()
        log.info("link: connected to %s", self.url)

    async def _session(self, ws: Any) -> None:
        self._server_error = None
        self._welcomed_mono = None
        await ws.send(protocol.encode(self.hello()))
        inflight: dict[str, float] = {}  # batch_id → when it was sent (monotonic s)
        progress_s = 0.0                 # when the last ack arrived (monotonic s)
        sent_seq = 0
        delivered = False

        async def receive() -> None:
            nonlocal delivered, progress_s
            async for frame in ws:
                try:
                    message = protocol.parse_server_message(frame)
                except ProtocolError as exc:
                    log.warning("link: ignoring malformed frame: %s", exc)
                    continue
                if isinstance(message, Welcome):
                    self._welcomed()
                elif isinstance(message, Ack):
                    progress_s = time.monotonic()
                    if self.buffer.ack(message.batch_id):
                        self.acked += 1
                    inflight.pop(message.batch_id, None)
                    delivered = True
                    assert self._wake is not None
                    self._wake.set()
                elif isinstance(message, PolicyUpdate) and self.on_policy is not None:
                    self.on_policy(message)
                elif isinstance(message, ServerError):
                    self._server_error = message.message
                    if self._welcomed_mono is not None:  # a refusal's reason is logged with the close
                        log.warning("link: server error: %s", message.message)

        receiver = asyncio.create_task(receive())
        try:
            assert self._wake is not None and self._stop is not None
            while not receiver.done() and not self._stop.is_set():
                room = self.window - len(inflight)
                if room > 0:
                    for seq, batch_id, body in self.buffer.pending(after_seq=sent_seq, limit=room):
                        await ws.send(body)
                        inflight[batch_id] = time.monotonic()
                        sent_seq = seq
                if delivered:
                    self.attempt = 0
                if delivered:
                    self.timeouts_in_a_row = 0
                limit_s = self.ack_timeout_s * 2 ** min(self.timeouts_in_a_row, 3)
                if inflight and time.monotonic() - max(progress_s, min(inflight.values())) > limit_s:
                    self.ack_timeouts += 1
                    self.timeouts_in_a_row += 1
                    raise AckTimeout(f"no ack for {len(inflight)} message(s) within {limit_s:g} s")
                self._wake.clear()
                wait = asyncio.create_task(self._wake.wait())
                await asyncio.wait({receiver, wait, asyncio.create_task(self._stop.wait())}, timeout=0.5,
                                   return_when=asyncio.FIRST_COMPLETED)
                wait.cancel()
        finally:
            receiver.cancel()
        if receiver.done() and not receiver.cancelled() and receiver.exception() is not None:
            raise receiver.exception()  # type: ignore[misc]

    async def run(self) -> None:
        """Connect, send, reconnect with backoff until :meth:`stop`."""
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self.attempt = 0
        while not self._stop.is_set():
            try:
                token = self.token() if callable(self.token) else self.token
                async with connect(self.url, additional_headers={"Authorization": f"Bearer {token}"},
                                   open_timeout=self.open_timeout_s, proxy=None, ssl=self.ssl,
                                   max_size=2**24) as ws:
                    self.connects += 1     # the transport is open; connected only after ``welcome``
                    await self._session(ws)
                delay = self._next_delay(None)
            except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException, AckTimeout) as exc:
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                delay = self._next_delay(exc)
            finally:
                self.connected.clear()
            if self._stop.is_set():
                break
            self.retry_in_s = delay
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=delay)
            except asyncio.TimeoutError:
                pass
            self.retry_in_s = None

    def _next_delay(self, exc: BaseException | None) -> float:
        """Classify how the last connection ended (module doc), log it, return the wait (s)."""
        code = None
        if isinstance(exc, websockets.exceptions.ConnectionClosed) and exc.rcvd is not None:
            code = exc.rcvd.code
        status = exc.response.status_code if isinstance(exc, websockets.exceptions.InvalidStatus) else None
        self._last_end = "other"
        if code == CLOSE_SUPERSEDED:
            self._last_end = "superseded"
            up_s = None if self._welcomed_mono is None else time.monotonic() - self._welcomed_mono
            self.superseded += 1
            self.superseded_in_a_row = self.superseded_in_a_row + 1 if up_s is None or \
                up_s < SUPERSEDED_AGAIN_WITHIN_S else 1
            self.last_superseded = self._server_error or f"closed {code} (superseded by a newer link for this node)"
            if self.metrics is not None:
                self.metrics.link_superseded.inc()
            delay = backoff_delay_s(self.superseded_in_a_row - 1, base_s=self.superseded_backoff_base_s,
                                    max_s=self.superseded_backoff_max_s, rng=self.rng)
            log.warning("link: %s — another agent took this node's link over (%d time(s) in a row); "
                        "reconnecting in %.0f s%s", self.last_superseded, self.superseded_in_a_row, delay,
                        "; two agents are running for this node" if self.superseded_in_a_row > 1 else "")
            return delay
        if code in (CLOSE_REFUSED, CLOSE_REVOKED) or status in (401, 403):
            self._last_end = "refused"
            if status is not None:
                reason = (f"HTTP {status}: the console refused this agent's token (unknown, revoked or "
                          "malformed; the console's Agents page counts the reason)")
            else:
                reason = self._server_error or f"closed {code}"
            self.refusals += 1
            self.refused_in_a_row += 1
            if self.metrics is not None:
                self.metrics.link_refusals.inc()
            delay = backoff_delay_s(self.refused_in_a_row - 1, base_s=self.refused_backoff_base_s,
                                    max_s=self.refused_backoff_max_s, rng=self.rng)
            if reason != self.refused_reason:
                log.warning("link: %s refused this agent: %s — retrying with backoff (up to %.0f s); the node "
                            "is still protected locally", self.url, reason, self.refused_backoff_max_s)
            else:
                log.debug("link: refused again (%s); next attempt in %.0f s", reason, delay)
            self.refused_reason = reason
            return delay
        if exc is not None:
            log.warning("link: %s (%s)", self.url, self.last_error)
        delay = backoff_delay_s(self.attempt, base_s=self.backoff_base_s, max_s=self.backoff_max_s, rng=self.rng)
        self.attempt += 1
        return delay

    def start(self) -> threading.Thread:
        """Run the client on its own daemon thread."""
        ready = threading.Event()

        def main() -> None:
            async def runner() -> None:
                task = asyncio.ensure_future(self.run())
                await asyncio.sleep(0)
                ready.set()
                await task
            asyncio.run(runner())

        self._thread = threading.Thread(target=main, name="kalena-link", daemon=True)
        self._thread.start()
        ready.wait(5)
        return self._thread

    def stop(self, timeout_s: float = 5.0) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(timeout_s)
