"""Loop locks with a TTL (DESIGN §8): estimation holds one per node shard, scheduling,
escalation and drift one per cluster.

Production: a redis-py ``Lock`` (``SET NX PX``, released by a Lua compare-and-delete, so only
the holder releases it and a crashed holder's lock expires after its TTL). Embedded default:
the process-local cache (``add`` is atomic there) — one process, one lock table.
"""

from __future__ import annotations

import secrets
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

import redis
from django.conf import settings
from django.core.cache import cache


@lru_cache(maxsize=4)
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


@contextmanager
def loop_lock(name: str, *, ttl_s: float) -> Iterator[bool]:
    """Try to take lock ``name`` for at most ``ttl_s`` seconds; yields whether it was taken.

    Never blocks: a loop that finds its lock held skips this run (another worker is on it).
    """
    key = f"kalena:lock:{name}"
    if settings.REDIS_URL:
        lock = _redis(settings.REDIS_URL).lock(key, timeout=ttl_s, blocking=False)
        taken = bool(lock.acquire())
        try:
            yield taken
        finally:
            if taken:
                try:
                    lock.release()
                except redis.exceptions.LockError:
                    pass  # expired and possibly taken by another worker: not ours to release
        return
    token = secrets.token_hex(8)
    taken = bool(cache.add(key, token, timeout=max(1, int(round(ttl_s)))))
    try:
        yield taken
    finally:
        if taken and cache.get(key) == token:
            cache.delete(key)


def shard_of(node_name: str, shards: int) -> int:
    """Stable node → shard mapping (CRC-32: the same in every process and on every machine)."""
    return zlib.crc32(node_name.encode()) % max(1, shards)
