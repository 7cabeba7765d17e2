"""Starting a watch: the orchestrator's event stream applied by the reconciler on a thread.

``kalena watch`` runs :func:`watch_run` in its own process; ``kalena serve`` runs
:func:`watch_start` on a daemon thread when ``KALENA_ORCHESTRATOR=kubernetes``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass

from django.db import connection

from agents.orchestrators import Orchestrator
from kalena_web.control.reconciler import Reconciler
from kalena_web.inventory.models import Cluster

log = logging.getLogger(__name__)


def _wake(cluster_id: int) -> None:
    from kalena_web.scheduling.tasks import scheduling_request

    try:
        scheduling_request(cluster_id=cluster_id)
    except Exception:  # noqa: BLE001 - the periodic pass still runs; a wake-up is an optimisation
        log.exception("watch: event-driven scheduling request failed")


@dataclass
class RunningWatch:
    """A started watch: stop it with :meth:`stop`; ``reconciler.counts`` says what it applied."""

    thread: threading.Thread
    reconciler: Reconciler
    stop_event: threading.Event

    def stop(self, timeout_s: float = 10.0) -> None:
        self.stop_event.set()
        self.thread.join(timeout=timeout_s)


def watch_run(*, cluster: Cluster, orchestrator: Orchestrator, stop: threading.Event,
              reconciler: Reconciler | None = None) -> Reconciler:
    """Apply ``orchestrator.watch(stop)`` to ``cluster`` until ``stop`` is set (blocking)."""
    reconciler = reconciler or Reconciler(cluster=cluster, wake=_wake)
    try:
        reconciler.run(orchestrator.watch(stop), stop=stop)
    finally:
        connection.close()  # this thread's connection
    return reconciler


def watch_start(*, cluster: Cluster, orchestrator: Orchestrator, reconciler: Reconciler | None = None,
                name: str = "kalena-watch") -> RunningWatch:
    """:func:`watch_run` on a daemon thread; returns the handle."""
    stop = threading.Event()
    reconciler = reconciler or Reconciler(cluster=cluster, wake=_wake)
    thread = threading.Thread(target=watch_run, kwargs=dict(cluster=cluster, orchestrator=orchestrator, stop=stop,
                                                            reconciler=reconciler), name=name, daemon=True)
    thread.start()
    return RunningWatch(thread=thread, reconciler=reconciler, stop_event=stop)
