"""`kalena watch`'s liveness: the loop that applies the orchestrator's events refreshes the
`watch` heartbeat while it turns, and `kalena probe watch` (the stacks' health check for the
watch service) fails when that heartbeat is missing or stale — a watch that stopped or is stuck."""

from __future__ import annotations

import threading
import time

import pytest

from kalena_web.cli import main, watch
from kalena_web.control import orchestrators
from kalena_web.control.heartbeat import HeartbeatTicker, heartbeat_path
from kalena_web.inventory.models import Cluster


class QuietEngines:
    """An orchestrator whose watch yields ``events`` and then nothing until stopped."""

    def __init__(self, events=()) -> None:
        self.events = list(events)

    def watch(self, stop: threading.Event):
        yield from self.events
        while not stop.wait(0.05):
            pass
        return
        yield


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture
def docker_watch(settings, tmp_path, monkeypatch):
    settings.KALENA_HEARTBEAT_DIR = tmp_path / "heartbeat"
    settings.KALENA_HEARTBEAT_S = 0.2
    settings.KALENA_ORCHESTRATOR = "docker"
    engines = QuietEngines()
    monkeypatch.setattr(orchestrators, "docker_orchestrator", lambda kind: engines)
    return engines


def probe(capsys, *extra: str) -> tuple[int, str]:
    code = main(["probe", "watch", *extra])
    return code, capsys.readouterr().err


def test_a_running_watch_refreshes_its_heartbeat_and_the_probe_fails_once_it_stops(docker_watch, capsys) -> None:
    code, err = probe(capsys)
    assert code == 1 and "no heartbeat at" in err                 # never watched: no heartbeat
    args = watch.defaults("docker")
    args.heartbeat = True                                          # what `kalena watch` sets
    handle = watch.start_docker(Cluster(name="docker", kind=Cluster.LIVE), args)
    try:
        wait_until(heartbeat_path("watch").exists, 5, "the first heartbeat")
        first = heartbeat_path("watch").read_text()
        wait_until(lambda: heartbeat_path("watch").read_text() != first, 5, "the heartbeat refreshed")
        assert probe(capsys)[0] == 0                               # default: 3 × KALENA_HEARTBEAT_S
    finally:
        handle.stop()
    time.sleep(0.8)                                                # > 3 × 0.2 s after the loop returned
    code, err = probe(capsys)
    assert code == 1 and "last heartbeat" in err and "s ago" in err
    assert probe(capsys, "--max-age", "60")[0] == 0                # the file is there, only old


def test_a_watch_stuck_applying_events_lets_its_heartbeat_go_stale(docker_watch, capsys, monkeypatch) -> None:
    from kalena_web.control.reconciler import Reconciler

    stuck = threading.Event()
    monkeypatch.setattr(Reconciler, "apply_many", lambda self, chunk: stuck.wait(30))
    docker_watch.events = ["an event the database never answers for"]
    args = watch.defaults("docker")
    args.heartbeat = True
    handle = watch.start_docker(Cluster(name="docker", kind=Cluster.LIVE), args)
    try:
        wait_until(heartbeat_path("watch").exists, 5, "the first heartbeat")
        time.sleep(1.0)
        code, err = probe(capsys)
        assert code == 1 and "s ago" in err
    finally:
        stuck.set()
        handle.stop()


def test_the_console_s_embedded_watch_writes_no_watch_heartbeat(docker_watch) -> None:
    handle = watch.start_docker(Cluster(name="docker", kind=Cluster.LIVE), watch.defaults("docker"))
    try:
        time.sleep(0.5)
    finally:
        handle.stop()
    assert not heartbeat_path("watch").exists()


def test_a_heartbeat_ticker_writes_at_most_once_a_period_and_refuses_unknown_roles(settings, tmp_path) -> None:
    settings.KALENA_HEARTBEAT_DIR = tmp_path
    now = [100.0]
    ticker = HeartbeatTicker("watch", period_s=10.0, clock=lambda: now[0])
    ticker()
    written = heartbeat_path("watch").stat().st_mtime_ns
    heartbeat_path("watch").unlink()
    now[0] = 109.0
    ticker()
    assert not heartbeat_path("watch").exists()                    # within the period: nothing written
    now[0] = 110.0
    ticker()
    assert heartbeat_path("watch").exists() and written
    with pytest.raises(ValueError, match="'scheduler' is not one of worker, beat, watch"):
        HeartbeatTicker("scheduler")
    with pytest.raises(ValueError, match="not positive"):
        HeartbeatTicker("watch", period_s=0)
