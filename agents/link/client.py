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
from agents.link.protocol import Ack, PolicyUpdate, ServerError

log = logging.getLogger("kalena.agent.link")


def backoff_delay_s(attempt: int, *, base_s: float, max_s: float, rng: random.Random) -> float:
    """The jittered delay before reconnect ``attempt`` (0-based), in ``[d/2, d]``."""
    d = min(max_s, base_s * (2 ** min(attempt, 30)))
    return d / 2 + rng.uniform(0, d / 2)


class AckTimeout(Exception):
    """A message waited longer than ``ack_timeout_s`` for its ack on this connection."""


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
    """

    def __init__(self, url: str, token: str | Callable[[], str], buffer: LinkBuffer, *, hello: Callable[[], dict[str, Any]],
                 on_policy: Callable[[PolicyUpdate], None] | None = None, window: int = 32,
                 backoff_base_s: float = 0.5, backoff_max_s: float = 5.0, rng: random.Random | None = None,
                 ssl: Any = None, open_timeout_s: float = 10.0, ack_timeout_s: float = 30.0) -> None:
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
        self.connects = 0
        self.failures = 0
        self.acked = 0
        self.last_error: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def notify(self) -> None:
        """Thread-safe: new messages were buffered."""
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    async def _session(self, ws: Any) -> None:
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
                if isinstance(message, Ack):
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
                    self.connects += 1
                    self.connected.set()
                    log.info("link: connected to %s", self.url)
                    await self._session(ws)
            except (OSError, asyncio.TimeoutError, websockets.exceptions.WebSocketException, AckTimeout) as exc:
                self.failures += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("link: %s (%s)", self.url, self.last_error)
            finally:
                self.connected.clear()
            if self._stop.is_set():
                break
            delay = backoff_delay_s(self.attempt, base_s=self.backoff_base_s, max_s=self.backoff_max_s, rng=self.rng)
            self.attempt += 1
            try:
                await asyncio.wait_for(self._stop.wait(), timeout=delay)
            except asyncio.TimeoutError:
                pass

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
