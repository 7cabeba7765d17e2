"""Bounded on-disk buffer of messages the control plane has not acknowledged (SQLite, WAL).

Every agent→server message (``samples``, ``action``, ``gap``) is appended here first, given its
``batch_id`` (``"<node>:<epoch>:<seq>"``), and deleted only when the server's ``ack`` for that
``batch_id`` arrives. ``epoch`` (12 hex digits, random) is drawn each time the buffer is opened
— a boot id — and ``seq`` increases across restarts while the file lasts. The server
de-duplicates on ``(node, batch_id)``, so ids must never repeat for different messages: with
the epoch they do not even when the file is lost (deleted, the disk replaced, restored from an
old snapshot) and ``seq`` starts again at 1. A message keeps the id it was stored with, so its
resend after a restart is still recognised as the same message. The link client sends from here; local
mitigation only appends, which takes well under a millisecond and never waits for the network.

A ``samples`` message larger than what the server accepts in one frame — more than
``max_batch_samples`` records or more than ``max_message_bytes`` of JSON — is split on append
(:func:`~agents.link.protocol.split_samples`) into several messages, each with its own
``batch_id``. The defaults (2,000 samples, 1 MiB) fit the server's defaults and also a Daphne
left at its own 1 MiB ``websocket_max_message_size``.

Sizing: one ``samples`` batch of 200 workloads is about 200 KB of JSON; a 5-minute disconnect
at 10 s sampling is 30 batches ≈ 6 MB. The default bound, 256 MiB, holds hours. When a new
message would exceed the bound, the oldest ``samples`` batches are dropped (actions are never
dropped) and one ``gap`` message records what was lost.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.link import protocol

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    batch_id TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL,
    size INTEGER NOT NULL,
    n_samples INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
"""


class LinkBuffer:
    """The buffer (module docstring).

    Args:
        path: SQLite file under the agent's state directory (created with its parents).
        node: node name, the ``batch_id`` prefix.
        max_bytes: bound on stored message bytes.
        on_append: called after each append (the client's wake-up), from the appending thread.
        max_batch_samples, max_message_bytes: a ``samples`` message is split into parts within
            both (module doc).
    """

    def __init__(self, path: str | Path, *, node: str, max_bytes: int = 256 * 2**20,
                 on_append: Callable[[], None] | None = None, clock_s: Callable[[], float] = time.time,
                 max_batch_samples: int = 2000, max_message_bytes: int = 2**20) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.node = node
        self.max_bytes = int(max_bytes)
        self.max_batch_samples = int(max_batch_samples)
        self.max_message_bytes = int(max_message_bytes)
        self.on_append = on_append
        self.clock_s = clock_s
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self.dropped_batches = 0
        self.epoch = secrets.token_hex(6)   # this lifetime's boot id (module doc)

    def _next_seq(self) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key='next_seq'").fetchone()
        seq = row[0] if row else 1
        top = self._db.execute("SELECT MAX(seq) FROM messages").fetchone()[0] or 0
        seq = max(seq, top + 1)
        self._db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES('next_seq', ?)", (seq + 1,))
        return seq

    def _insert(self, message: dict[str, Any]) -> str:
        seq = self._next_seq()
        batch_id = f"{self.node}:{self.epoch}:{seq}"
        body = protocol.encode({**message, "batch_id": batch_id})
        n_samples = len(message.get("samples", ())) if message.get("type") == "samples" else 0
        self._db.execute("INSERT INTO messages(seq, kind, batch_id, body, size, n_samples) VALUES(?,?,?,?,?,?)",
                         (seq, message["type"], batch_id, body, len(body), n_samples))
        return batch_id

    def _make_room(self, incoming: int) -> None:
        total = self._db.execute("SELECT COALESCE(SUM(size), 0) FROM messages").fetchone()[0]
        if total + incoming <= self.max_bytes:
            return
        dropped: list[tuple[int, str, int, int]] = []
        for seq, batch_id, size, n in self._db.execute(
                "SELECT seq, batch_id, size, n_samples FROM messages WHERE kind='samples' ORDER BY seq").fetchall():
            if total + incoming <= self.max_bytes:
                break
            dropped.append((seq, batch_id, size, n))
            total -= size
        if not dropped:
            return
        self._db.executemany("DELETE FROM messages WHERE seq=?", [(d[0],) for d in dropped])
        self.dropped_batches += len(dropped)
        self._insert(protocol.gap_message(node=self.node, ts=self.clock_s(), dropped_batches=len(dropped),
                                          dropped_samples=sum(d[3] for d in dropped),
                                          first_dropped=dropped[0][1], last_dropped=dropped[-1][1]))

    def append(self, message: dict[str, Any]) -> str:
        """Store one message (its ``batch_id`` is assigned here) and return the ``batch_id``. A
        ``samples`` message too large for one frame is stored as several (module doc), in one
        transaction; the id of the last part is returned."""
        parts = protocol.split_samples(message, max_samples=self.max_batch_samples, max_bytes=self.max_message_bytes)
        size_hint = len(json.dumps(message, separators=(",", ":"), default=str))
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._make_room(size_hint)
                for part in parts:
                    batch_id = self._insert(part)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        if self.on_append is not None:
            self.on_append()
        return batch_id

    def pending(self, *, after_seq: int = 0, limit: int = 64) -> list[tuple[int, str, str]]:
        """Unacknowledged messages in order: ``(seq, batch_id, json text)`` with ``seq > after_seq``."""
        with self._lock:
            return self._db.execute("SELECT seq, batch_id, body FROM messages WHERE seq > ? ORDER BY seq LIMIT ?",
                                    (after_seq, limit)).fetchall()

    def ack(self, batch_id: str) -> bool:
        """Delete an acknowledged message; False if it was not (or no longer) buffered."""
        with self._lock:
            return self._db.execute("DELETE FROM messages WHERE batch_id=?", (batch_id,)).rowcount > 0

    def count(self, kind: str | None = None) -> int:
        with self._lock:
            if kind is None:
                return self._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
            return self._db.execute("SELECT COUNT(*) FROM messages WHERE kind=?", (kind,)).fetchone()[0]

    def size_bytes(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COALESCE(SUM(size), 0) FROM messages").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()
