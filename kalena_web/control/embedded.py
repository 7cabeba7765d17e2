"""The embedded default's loop runner: the periodic schedule of
:mod:`kalena_web.control.schedules` on one daemon thread of the serving process, calling each
task in-process (Celery runs them eagerly when ``REDIS_URL`` is unset).

Production runs the same tasks on Celery workers scheduled by Celery beat instead.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from django.db import close_old_connections

from kalena_web.control.schedules import PERIODS_S

log = logging.getLogger(__name__)


def registered_tasks(names) -> dict:
    """The Celery tasks called ``names``, after importing every app's ``tasks`` module (Celery's
    autodiscovery is lazy: in a serving process nothing else would import them).

    Raises:
        RuntimeError: a name no app registers.
    """
    from kalena_web.celery import app

    app.loader.import_default_modules()
    missing = sorted(set(names) - set(app.tasks))
    if missing:
        raise RuntimeError(f"no Celery task registered as {', '.join(missing)}")
    return {name: app.tasks[name] for name in names}


class EmbeddedLoops:
    """Runs every task of ``periods_s`` (name → seconds) when due, on one thread; a failing
    run is logged and retried at its next period. ``clock`` is injectable for tests."""

    def __init__(self, periods_s: Mapping[str, float] = PERIODS_S, *, clock: Callable[[], float] = time.monotonic,
                 tick_s: float = 0.5) -> None:
        self.periods_s = dict(periods_s)
        self.tasks = registered_tasks(self.periods_s)
        self.clock = clock
        self.tick_s = tick_s
        self.next_due = {name: 0.0 for name in self.periods_s}
        self.runs: dict[str, int] = {name: 0 for name in self.periods_s}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_due(self) -> list[str]:
        """Run every task whose time has come; returns their names."""
        now = self.clock()
        ran = []
        for name, period in self.periods_s.items():
            if now < self.next_due[name]:
                continue
            self.next_due[name] = now + period
            close_old_connections()
            try:
                self.tasks[name].apply()
                self.runs[name] += 1
                ran.append(name)
            except Exception:  # noqa: BLE001 - one loop's failure must not stop the others
                log.exception("embedded loop %s failed", name)
        return ran

    def start(self) -> None:
        """Start the daemon thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="kalena-loops", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.run_due()
