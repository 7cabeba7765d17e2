"""Loop locks with a TTL (docs/design.md §8, §12): estimation holds one per node shard; scheduling,
escalation, the batch-capacity publisher, archive and drift one per cluster
(:func:`kalena_web.control.loops.run_for_clusters`, TTL ``KALENA_LOOP_LOCK_TTL_S``, 5 s).

Production: a redis-py ``Lock`` (``SET NX PX``, released by a Lua compare-and-delete, so only
the holder releases it and a crashed holder's lock expires after its TTL). While it is held a
renewal thread resets the TTL every ``ttl_s / 3`` (redis-py ``reacquire``, again a Lua
compare-and-set), so a run may last longer than its TTL while a dead holder — SIGKILLed, its
machine gone — loses the lock at most ``ttl_s`` after its last renewal: the TTL can be short
(estimation: ``KALENA_ESTIMATION_LOCK_TTL_S`` 6 s, so a dead worker's shard resumes within
about 6.5 s; the per-cluster loops: ``KALENA_LOOP_LOCK_TTL_S`` 5 s). A renewal that finds the
lock taken over or gone (Redis restarted) stops and is logged; the database keeps the work
exactly-once regardless (a batch is marked applied in the same commit that applies it, under
row locks). A frozen holder (SIGSTOP) stops renewing too.
Embedded default: the process-local cache (``add`` is atomic there) — one process, one lock
table, a holder cannot die without the table: no TTL and no renewal, the lock is held until its
run ends however long that takes (a short TTL without renewal would let a second run of a slow
loop start beside the first).
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache

import redis
from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)


@lru_cache(maxsize=4)
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


@contextmanager
def loop_lock(name: str, *, ttl_s: float) -> Iterator[bool]:
    """Try to take lock ``name`` for at most ``ttl_s`` seconds; yields whether it was taken.

    Never blocks: a loop that finds its lock held skips this run (another worker is on it).
    With Redis the lock is renewed every ``ttl_s / 3`` while held (module doc).
    """
    key = f"kalena:lock:{name}"
    if settings.REDIS_URL:
        # thread_local=False: the token must be visible to the renewal thread
        lock = _redis(settings.REDIS_URL).lock(key, timeout=ttl_s, blocking=False, thread_local=False)
        taken = bool(lock.acquire())
        renewal = _Renewal(lock, name=name, every_s=ttl_s / 3) if taken else None
        try:
            yield taken
        finally:
            if renewal is not None:
                renewal.stop()
                try:
                    lock.release()
                except redis.exceptions.LockError:
                    pass  # expired and possibly taken by another worker: not ours to release
                except redis.exceptions.RedisError as exc:  # Redis away: the lock expires after its TTL
                    log.warning("releasing lock %s failed: %s", name, exc)
        return
    token = secrets.token_hex(8)
    taken = bool(cache.add(key, token, timeout=None))  # embedded: held until the run ends (module doc)
    try:
        yield taken
    finally:
        if taken and cache.get(key) == token:
            cache.delete(key)


class _Renewal:
    """A daemon thread resetting a held lock's TTL every ``every_s`` until :meth:`stop`."""

    def __init__(self, lock: redis.lock.Lock, *, name: str, every_s: float) -> None:
        self.lock, self.name, self.every_s = lock, name, every_s
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kalena-lock-{name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stopped.wait(self.every_s):
            try:
                self.lock.reacquire()
            except redis.exceptions.LockError:
                log.warning("lock %s was lost (expired or taken over); no longer renewed", self.name)
                return
            except redis.exceptions.RedisError as exc:  # retried at the next tick while the TTL lasts
                log.warning("renewing lock %s failed: %s", self.name, exc)

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join(10)


def shard_of(node_name: str, shards: int) -> int:
    """Stable node → shard mapping, the same in every process and on every machine: the node's
    virtual node (:func:`kalena_web.scheduling.shards.vnode_of`, the map the sharded schedulers
    share out) modulo ``shards`` — with a ``shards`` that divides 256 (the default 16 does) an
    estimation shard is a whole set of vnodes, so the estimation loop follows the same map."""
    from kalena_web.scheduling.shards import vnode_of

    return vnode_of(node_name) % max(1, shards)
