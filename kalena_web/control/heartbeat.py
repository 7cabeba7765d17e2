"""Liveness of Celery workers and beat and of ``kalena watch``: a heartbeat file each process
refreshes, read by ``kalena probe worker|beat|watch`` (an exec probe in Kubernetes, a health
check in Compose/Swarm).

A probe that asked the broker (``celery inspect ping``) would restart every worker during a Redis
outage — exactly when restarting helps nothing — so liveness is local: the worker's heartbeat is
written from its own timer (the thread that also drives its task consumer, so a wedged consumer
stops it); beat's from its scheduler's ``tick``; the watch's from the loop that applies the
orchestrator's events (:meth:`~kalena_web.control.reconciler.Reconciler.run`, through
:class:`HeartbeatTicker`) — only while it watches: a ``kalena watch --wait`` still waiting for its
cluster, or whose watch thread ended, writes none. Docker and Swarm only: a Kubernetes
``kalena watch`` watches only while it leads, so a heartbeat would fail every standby (its
Deployments run ``kalena serve``, probed on ``/livez``). A probe fails when the file is missing or older
than ``max_age_s`` (default three heartbeat periods).

Files: ``KALENA_HEARTBEAT_DIR/worker``, ``…/beat`` and ``…/watch``, each holding the Unix time
of the last beat.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from celery import bootsteps
from celery.beat import PersistentScheduler
from django.conf import settings

ROLES = ("worker", "beat", "watch")


def heartbeat_path(role: str) -> Path:
    """The heartbeat file of ``role`` (one of :data:`ROLES`)."""
    return Path(settings.KALENA_HEARTBEAT_DIR) / role


def heartbeat_write(role: str, *, now_s: float | None = None) -> None:
    """Record that ``role`` is alive now (atomic replace: a probe never reads half a file)."""
    path = heartbeat_path(role)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{role}.{os.getpid()}")
    tmp.write_text(f"{time.time() if now_s is None else now_s:.3f}\n")
    tmp.replace(path)


def heartbeat_age_s(role: str, *, now_s: float | None = None) -> float | None:
    """Seconds since ``role``'s last heartbeat; None when it never wrote one (or the file is
    unreadable)."""
    try:
        beat = float(heartbeat_path(role).read_text().strip())
    except (OSError, ValueError):
        return None
    return max(0.0, (time.time() if now_s is None else now_s) - beat)


class HeartbeatTicker:
    """Refresh ``role``'s heartbeat at most every ``period_s`` seconds (default
    ``KALENA_HEARTBEAT_S``), however often it is called: give it to a loop that runs more often
    than that (``Reconciler.run(beat=...)`` checks every 0.2 s) so the file is fresh exactly while
    the loop turns.

    Raises:
        ValueError: ``role`` is not one of :data:`ROLES`, or ``period_s`` is not positive.
    """

    def __init__(self, role: str, *, period_s: float | None = None, clock=time.monotonic) -> None:
        if role not in ROLES:
            raise ValueError(f"heartbeat role {role!r} is not one of {', '.join(ROLES)}")
        self.role = role
        self.period_s = settings.KALENA_HEARTBEAT_S if period_s is None else period_s
        if not self.period_s > 0:
            raise ValueError(f"heartbeat period {self.period_s!r} s is not positive (KALENA_HEARTBEAT_S)")
        self.clock = clock
        self._last: float | None = None

    def __call__(self) -> None:
        now = self.clock()
        if self._last is None or now - self._last >= self.period_s:
            heartbeat_write(self.role)
            self._last = now


class WorkerHeartbeat(bootsteps.StartStopStep):
    """Worker bootstep: refresh the worker heartbeat every ``KALENA_HEARTBEAT_S`` on the worker's
    own timer."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker, **kwargs) -> None:
        super().__init__(worker, **kwargs)
        self.tref = None

    def start(self, worker) -> None:
        heartbeat_write("worker")
        self.tref = worker.timer.call_repeatedly(settings.KALENA_HEARTBEAT_S, heartbeat_write, ("worker",))

    def stop(self, worker) -> None:
        if self.tref is not None:
            self.tref.cancel()


class HeartbeatScheduler(PersistentScheduler):
    """Celery beat's persistent scheduler that also refreshes the beat heartbeat on every tick
    (``CELERY_BEAT_SCHEDULER``)."""

    def tick(self, *args, **kwargs):
        heartbeat_write("beat")
        interval = super().tick(*args, **kwargs)
        # beat sleeps ``interval`` between ticks: wake often enough to keep the heartbeat fresh
        return min(interval, settings.KALENA_HEARTBEAT_S)
