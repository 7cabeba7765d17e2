"""Every per-cluster loop lock — scheduling, escalation, the batch-capacity publisher, archive,
drift — on real Redis, held by real processes running the real loop tasks
(``loop_holder.py``): a holder still working keeps its locks well past their TTL (renewed, never
lost), and the locks of a holder killed with SIGKILL are free again within the TTL, so the next
worker's loops resume within seconds.

Nothing here is timed against the CPU: the test reads Redis's own countdown (``PTTL``) and waits
for Redis to expire a key, with a margin.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings
from django.test import override_settings

from kalena_web.control.locks import loop_lock
from kalena_web.control.models import LoopRun
from kalena_web.inventory.models import Cluster
from tests.web.telemetry.conftest import child_database_url, require_postgres, require_redis, wait_until

HOLDER = Path(__file__).with_name("loop_holder.py")
LOOPS = ("scheduling", "escalation", "publish", "archive", "drift")
TTL_S = 3.0          # the holders' KALENA_LOOP_LOCK_TTL_S: renewed every 1 s
MARGIN_S = 5.0       # Redis expires a key at most this late after its TTL (its clock, not ours)


class Holders:
    """Two holder processes (the publisher runs only under KALENA_ORCHESTRATOR=kubernetes, the
    scheduling task never does), stopped by pid when the test ends."""

    def __init__(self, cluster: Cluster, tmp_path: Path, redis_url: str) -> None:
        self.release = tmp_path / "release"
        env = dict(os.environ, DATABASE_URL=child_database_url(), REDIS_URL=redis_url,
                   DJANGO_SETTINGS_MODULE="kalena_web.settings", KALENA_LOOP_LOCK_TTL_S=str(TTL_S),
                   KALENA_LOG_LEVEL="WARNING")
        env.pop("KALENA_ORCHESTRATOR", None)
        self.outputs = [tmp_path / "holder-0.out", tmp_path / "holder-1.out"]
        groups = [(env, ["scheduling", "escalation", "archive", "drift"]),
                  (dict(env, KALENA_ORCHESTRATOR="kubernetes"), ["publish"])]
        self.procs = []
        for (group_env, loops), out in zip(groups, self.outputs, strict=True):
            with out.open("w") as stdout:
                self.procs.append(subprocess.Popen([sys.executable, str(HOLDER), str(cluster.id), str(self.release),
                                                    *loops], env=group_env, stdout=stdout, stderr=subprocess.STDOUT))

    def output(self) -> str:
        return "\n".join(p.read_text() for p in self.outputs)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)


@pytest.fixture
def redis_client():
    import redis

    url = require_redis()
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url, client
    client.flushdb()


@pytest.fixture
def holders(transactional_db, tmp_path, redis_client):
    require_postgres()
    cluster = Cluster.objects.create(name="lab", kind=Cluster.LIVE)
    started = Holders(cluster, tmp_path, redis_client[0])
    yield cluster, started
    started.stop()


def keys(cluster: Cluster) -> dict[str, str]:
    return {loop: f"kalena:lock:{loop}:{cluster.id}" for loop in LOOPS}


def wait_all_held(client, cluster: Cluster, holders: Holders) -> dict[str, bytes]:
    wait_until(lambda: all(client.exists(k) for k in keys(cluster).values()), timeout_s=90,
               what=f"the holders to take every loop lock (output: {holders.output()!r})")
    return {loop: client.get(k) for loop, k in keys(cluster).items()}


def taken_elsewhere(redis_url: str, cluster: Cluster) -> dict[str, bool]:
    """Whether another worker would find each loop lock free right now."""
    out = {}
    with override_settings(REDIS_URL=redis_url):
        for loop in LOOPS:
            with loop_lock(f"{loop}:{cluster.id}", ttl_s=TTL_S) as taken:
                out[loop] = taken
    return out


def test_a_working_holder_keeps_every_loop_lock_past_its_ttl_by_renewing_it(holders, redis_client) -> None:
    cluster, procs = holders
    redis_url, client = redis_client
    tokens = wait_all_held(client, cluster, procs)
    renewals = dict.fromkeys(LOOPS, 0)
    previous = {loop: client.pttl(k) for loop, k in keys(cluster).items()}
    lost: list[str] = []
    first = time.monotonic()
    # held for at least three TTLs and until Redis shows every lock reset at least twice
    while time.monotonic() - first < 3 * TTL_S or min(renewals.values()) < 2:
        assert time.monotonic() - first < 60, f"renewals seen in 60 s: {renewals}"
        for loop, key in keys(cluster).items():
            left_ms, token = client.pttl(key), client.get(key)
            if left_ms < 0 or token != tokens[loop]:
                lost.append(f"{loop}: pttl {left_ms}, token {token!r}")
            assert left_ms <= TTL_S * 1000, f"the {loop} lock is held for {left_ms} ms, over its {TTL_S:g} s TTL"
            if left_ms > previous[loop]:
                renewals[loop] += 1
            previous[loop] = left_ms
        time.sleep(0.05)
    assert not lost, f"a held lock was lost: {lost}"
    assert taken_elsewhere(redis_url, cluster) == dict.fromkeys(LOOPS, False)   # another worker skips
    procs.release.touch()                                                         # the work finishes
    for proc in procs.procs:
        assert proc.wait(60) == 0, procs.output()
    outcomes = {}
    for line in procs.output().splitlines():
        if line.startswith("{"):
            outcomes.update(json.loads(line))
    assert outcomes == {loop: {"lab": "done"} for loop in LOOPS}, procs.output()
    assert sorted(LoopRun.objects.filter(cluster=cluster, outcome="done").values_list("loop", flat=True)) == \
        sorted(LOOPS)
    assert not any(client.exists(k) for k in keys(cluster).values())            # released, not left to expire


def test_the_loop_locks_of_a_killed_holder_are_free_again_within_the_ttl(holders, redis_client) -> None:
    cluster, procs = holders
    redis_url, client = redis_client
    wait_all_held(client, cluster, procs)
    for proc in procs.procs:
        proc.send_signal(signal.SIGKILL)                    # a worker killed mid-pass: no release, no renewal
    for proc in procs.procs:
        proc.wait(10)
    left_ms = {loop: client.pttl(k) for loop, k in keys(cluster).items()}
    # Redis's own countdown at the kill: -2 (already gone) or at most one TTL
    assert all(ms == -2 or 0 < ms <= TTL_S * 1000 for ms in left_ms.values()), \
        f"a dead worker's lock outlives it: {left_ms} ms left (TTL {TTL_S:g} s)"
    wait_until(lambda: not any(client.exists(k) for k in keys(cluster).values()), timeout_s=TTL_S + MARGIN_S,
               every_s=0.05, what="the killed holder's loop locks to expire")
    assert taken_elsewhere(redis_url, cluster) == dict.fromkeys(LOOPS, True)    # the next worker takes them
    assert not LoopRun.objects.filter(cluster=cluster).exists()                 # the killed passes recorded nothing


def test_the_default_loop_lock_ttl_lets_a_killed_workers_loops_resume_within_ten_seconds() -> None:
    # at most a TTL until the lock is free, then the scheduling period's 5 s at worst: a TTL
    # of 5 s puts the first scheduling pass within 5 + 5 = 10 s of the kill
    assert 0 < settings.KALENA_LOOP_LOCK_TTL_S <= 5.0


def test_an_embedded_lock_is_held_until_its_run_ends_however_long_it_takes(settings) -> None:
    # embedded (no Redis): one process, no renewal thread — a run slower than the TTL must not
    # let a second run of the same loop start beside it
    settings.REDIS_URL = ""
    with loop_lock("drift:embedded", ttl_s=1.0) as first:
        time.sleep(1.5)                                             # the run outlasts its TTL
        with loop_lock("drift:embedded", ttl_s=1.0) as second:
            assert (first, second) == (True, False)
    with loop_lock("drift:embedded", ttl_s=1.0) as after:
        assert after                                                # released when the run ended
