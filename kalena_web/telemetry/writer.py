"""The group-commit writer: every connection of a server process hands its entries here; they
are stored together, a few transactions per second, and each connection acknowledges its
messages only after the transaction that holds them committed.

Timing: the first entry after an idle spell waits ``flush_s`` for company; while a write runs,
new entries gather and go in the next write as soon as it ends. A write holds at most
``max_samples`` samples. Writes run one at a time on one dedicated thread (one database
connection), so entries are stored in the order they were submitted.

Failure: a database error fails every entry of the write — the connections send an ``error``,
acknowledge nothing and close, so their agents resend after reconnecting. Only an error that
is the data's fault (``DataError``, ``IntegrityError``: a value the checks did not foresee) is
isolated: the entries are retried one by one, and one that still fails is stored as refused
(``unstorable``, acknowledged with that reason) so it cannot block the others forever.
Entries of a connection that already failed are not written.

Estimation requests: with Redis (production) the shards a write touched are handed to
:class:`EstimationRequests`, a thread of its own that queues ``kalena.ledger.estimate`` — so a
slow, frozen or restarting Redis never holds up writes and acks (it used to: the request ran in
the write's ``on_commit`` on the writer thread, and a 20 s Redis freeze stopped every ack for
20 s, every agent timed out and resent its backlog). A request lost while Redis is away is
made good by ``kalena.ledger.sweep``, which re-queues every shard with pending batches.
Embedded (no Redis) the request runs in the write's ``on_commit`` as before (eager estimation
stays on the writer thread, one SQLite writer at a time).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from django.conf import settings
from django.db import DataError, IntegrityError, close_old_connections, connection

from kalena_web.telemetry.ingest import Entry
from kalena_web.telemetry.storage import store_entries, store_unstorable

log = logging.getLogger(__name__)


class WriteFailed(Exception):
    """The entry was not stored; nothing may be acknowledged."""


@dataclass(eq=False)
class Session:
    """One agent connection as the writer sees it: once ``broken``, none of its later entries
    are written (its agent resends them in order after reconnecting)."""

    node_id: int
    broken: bool = False


@dataclass(eq=False)
class _Item:
    entry: Entry
    session: Session
    future: asyncio.Future = field(repr=False)


@dataclass
class WriterStats:
    writes: int = 0
    entries: int = 0
    samples: int = 0
    failures: int = 0
    write_s: float = 0.0


class EstimationRequests:
    """Queues estimation for shards on a daemon thread of its own (module doc): shards handed
    in while a request is under way are merged into the next one."""

    def __init__(self) -> None:
        self._shards: set[int] = set()
        self._ready = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, shards: set[int]) -> None:
        if not shards:
            return
        with self._ready:
            self._shards |= shards
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="kalena-estimation-requests", daemon=True)
                self._thread.start()
            self._ready.notify()

    def _run(self) -> None:
        from kalena_web.ledger.tasks import estimation_request

        while True:
            with self._ready:
                while not self._shards:
                    self._ready.wait()
                shards, self._shards = sorted(self._shards), set()
            try:
                estimation_request(shards=shards)
            except Exception:  # noqa: BLE001 - Redis away: the periodic sweep re-queues pending shards
                log.warning("requesting estimation for shards %s failed; the sweep will", shards, exc_info=True)


class GroupCommitWriter:
    """See module doc. Create it on the event loop that serves the connections.

    Args:
        flush_s: how long the first entry waits for others (s).
        max_samples: samples per transaction at most.
        store: the write (default :func:`~kalena_web.telemetry.storage.store_entries`), called
            on the writer thread with ``(entries, now_s=…)``.
    """

    def __init__(self, *, flush_s: float = 0.05, max_samples: int = 20000,
                 store: Callable[..., object] = store_entries) -> None:
        self.flush_s = flush_s
        self.max_samples = max_samples
        self.store = store
        self.stats = WriterStats()
        self.requests = EstimationRequests() if settings.REDIS_URL and store is store_entries else None
        self._queue: asyncio.Queue[_Item] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kalena-ingest-writer")
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def submit(self, entry: Entry, session: Session) -> Entry:
        """Queue ``entry``; returns it once stored (``entry.duplicate`` set).

        Raises:
            WriteFailed: it was not stored (acknowledge nothing).
        """
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            self._loop, self._queue = loop, asyncio.Queue()
            self._task = loop.create_task(self._run(), name="kalena-ingest-writer")
        future: asyncio.Future = loop.create_future()
        self._queue.put_nowait(_Item(entry, session, future))
        await future
        return entry

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self._queue
        while True:
            first = await queue.get()
            if queue.qsize() == 0 and self.flush_s > 0:
                await asyncio.sleep(self.flush_s)
            items = [first]
            samples = len(first.entry.samples)
            while not queue.empty() and samples < self.max_samples:
                item = queue.get_nowait()
                items.append(item)
                samples += len(item.entry.samples)
            live = []
            for item in items:
                if item.session.broken:
                    item.future.set_exception(WriteFailed("an earlier message of this connection was not stored"))
                else:
                    live.append(item)
            if not live:
                continue
            failed = await loop.run_in_executor(self._executor, self._write, [i.entry for i in live])
            for item in live:
                if item.future.done():
                    continue
                if item.entry in failed:
                    item.session.broken = True
                    item.future.set_exception(WriteFailed(failed[item.entry]))
                else:
                    item.future.set_result(item.entry)

    def _write(self, entries: list[Entry]) -> dict[Entry, str]:
        """Runs on the writer thread; returns the entries that were not stored, with why."""
        close_old_connections()
        started = time.time()
        try:
            self._store(entries, now_s=started)
            self._count(entries, started)
            return {}
        except (DataError, IntegrityError) as exc:
            log.warning("ingest: a group write of %d messages failed (%s); retrying one by one", len(entries), exc)
        except Exception as exc:  # noqa: BLE001 - any other failure: nothing stored, nothing acknowledged
            return self._failed(entries, exc)
        failed: dict[Entry, str] = {}
        for entry in entries:
            try:
                self._store([entry], now_s=time.time())
                continue
            except (DataError, IntegrityError) as exc:
                error = f"{type(exc).__name__}: {exc}"
            except Exception as exc:  # noqa: BLE001
                failed.update(self._failed([entry], exc))
                continue
            log.error("ingest: message %s of node %s cannot be stored: %s", entry.batch_id, entry.node_id, error)
            try:
                store_unstorable(entry, error=error, now_s=time.time())
            except Exception as exc:  # noqa: BLE001
                failed.update(self._failed([entry], exc))
        self._count(entries, started)
        return failed

    def _store(self, entries: list[Entry], *, now_s: float) -> None:
        if self.requests is None:
            self.store(entries, now_s=now_s)
            return
        self.requests.add(self.store(entries, now_s=now_s, estimate=False))

    def _failed(self, entries: list[Entry], exc: Exception) -> dict[Entry, str]:
        self.stats.failures += 1
        log.error("ingest: write of %d messages failed, none acknowledged: %s", len(entries), exc)
        try:
            connection.close()  # the next write reconnects
        except Exception:  # noqa: BLE001 - a broken connection may not even close cleanly
            pass
        return {e: f"not stored: {type(exc).__name__}" for e in entries}

    def _count(self, entries: list[Entry], started: float) -> None:
        self.stats.writes += 1
        self.stats.entries += len(entries)
        self.stats.samples += sum(len(e.samples) for e in entries)
        self.stats.write_s += time.time() - started

    def close(self) -> None:
        """Stop writing; closes the writer thread's database connection."""
        if self._task is not None and self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._executor.submit(lambda: connection.close()).result(timeout=10)
        self._executor.shutdown(wait=True)
