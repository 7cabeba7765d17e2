"""Publishing node ledger points from estimation workers without waiting for Redis.

A Celery worker has no event loop; ``async_to_sync(group_send)`` makes a fresh one per call, and
channels-redis keeps its connections per event loop, so every call would reconnect. With Redis
(production) the points go instead to one long-lived publisher thread per worker process with
its own loop and connections; :func:`publish` only queues them (chart updates are best-effort:
when the queue is full the oldest are dropped). Embedded (no Redis): the in-memory channel
layer lives in the serving process, so points are sent in place
(:func:`kalena_web.ledger.live.publish_node_ledgers`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from functools import lru_cache

from django.conf import settings

from kalena_web.ledger.live import node_group, publish_node_ledgers

log = logging.getLogger(__name__)


class Publisher:
    """A daemon thread running one event loop that sends queued points (module doc).

    The thread waits on an :class:`asyncio.Event` set with ``call_soon_threadsafe`` — never on a
    blocking wait handed to the loop's executor: that executor's thread is not a daemon, the
    interpreter joins it at exit, and a worker told to stop (SIGTERM) would hang until SIGKILL.
    """

    def __init__(self, max_queued: int = 100_000) -> None:
        self._queue: deque = deque(maxlen=max_queued)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        ready = threading.Event()
        self._thread = threading.Thread(target=self._main, args=(ready,), name="kalena-ledger-publisher", daemon=True)
        self._thread.start()
        ready.wait(10)

    def send(self, points: list) -> None:
        self._queue.extend(points)
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    def _main(self, ready: threading.Event) -> None:
        asyncio.run(self._run(ready))

    async def _run(self, ready: threading.Event) -> None:
        from channels.layers import get_channel_layer

        layer = get_channel_layer()
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        ready.set()
        while True:
            if not self._queue:
                await self._wake.wait()
            self._wake.clear()
            batch = []
            while self._queue:
                batch.append(self._queue.popleft())
            if layer is None or not batch:
                continue
            try:
                await asyncio.gather(*(layer.group_send(node_group(node_id), {"type": "ledger.update", "point": p})
                                       for node_id, p in batch))
            except Exception:  # noqa: BLE001 - best-effort chart updates; the ledgers are committed
                log.exception("publishing %d ledger points failed", len(batch))


@lru_cache(maxsize=1)
def _publisher(pid: int) -> Publisher:  # keyed by pid: a forked worker child starts its own thread
    return Publisher()


def publish(points: list) -> None:
    """Send ``(node id, chart point)`` pairs to the console (module doc); never raises."""
    if not points:
        return
    try:
        if settings.REDIS_URL:
            import os

            _publisher(os.getpid()).send(points)
        else:
            publish_node_ledgers(points)
    except Exception:  # noqa: BLE001 - the ledgers are committed; a lost chart update is not worth a retry
        log.exception("publishing %d node ledgers failed", len(points))
