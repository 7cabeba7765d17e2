"""Starting a watch: the orchestrator's event stream applied by the reconciler on a thread.

``kalena watch`` runs :func:`watch_run` in its own process; ``kalena serve`` runs
:func:`watch_start` on a daemon thread when ``KALENA_ORCHESTRATOR=kubernetes``.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

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
              reconciler: Reconciler | None = None, beat: Callable[[], object] | None = None) -> Reconciler:
    """Apply ``orchestrator.watch(stop)`` to ``cluster`` until ``stop`` is set (blocking);
    ``beat``: called from the applying loop while it turns (:meth:`Reconciler.run`)."""
    reconciler = reconciler or Reconciler(cluster=cluster, wake=_wake)
    try:
        reconciler.run(orchestrator.watch(stop), stop=stop, beat=beat)
    finally:
        connection.close()  # this thread's connection
    return reconciler


def watch_start(*, cluster: Cluster, orchestrator: Orchestrator, reconciler: Reconciler | None = None,
                name: str = "kalena-watch", beat: Callable[[], object] | None = None) -> RunningWatch:
    """:func:`watch_run` on a daemon thread; returns the handle."""
    stop = threading.Event()
    reconciler = reconciler or Reconciler(cluster=cluster, wake=_wake)
    thread = threading.Thread(target=watch_run, kwargs=dict(cluster=cluster, orchestrator=orchestrator, stop=stop,
                                                            reconciler=reconciler, beat=beat),
                              name=name, daemon=True)
    thread.start()
    return RunningWatch(thread=thread, reconciler=reconciler, stop_event=stop)


#: The watcher's in-process counters (attribute → counter of :data:`kalena_web.control.metrics.COUNTERS`).
WATCHER_COUNTERS = {"lists": "kalena_watch_lists", "expired": "kalena_watch_expired",
                    "reconnects": "kalena_watch_reconnects", "malformed": "kalena_watch_malformed_objects"}


def _copy(counts: Mapping) -> list[tuple]:
    """``counts.items()`` read while another thread may add keys (a dict resized under the
    iteration is read again)."""
    while True:
        try:
            return list(counts.items())
        except RuntimeError:
            continue


@dataclass
class WatchCounters:
    """The watch's in-process counters made cluster-wide ``/metrics/cluster`` counters
    (:func:`~kalena_web.control.services.metric_increment`): :meth:`record` adds what rose since
    the last call, so every count reaches the metrics once, from whichever process counted it."""

    cluster: Cluster
    recorded: Counter = field(default_factory=Counter)

    def totals(self, watchers: Iterable, reconcilers: Iterable[Reconciler]) -> Counter:
        """``(counter, labels) → count`` over ``watchers`` (each with the Counters named in
        :data:`WATCHER_COUNTERS`, keyed by resource) and ``reconcilers`` (their ``counts``)."""
        out: Counter = Counter()
        for watcher in watchers:
            for attribute, name in WATCHER_COUNTERS.items():
                for resource, n in _copy(getattr(watcher, attribute, {})):
                    out[name, (("resource", resource),)] += n
        for reconciler in reconcilers:
            for kind, outcomes in _copy(reconciler.counts):
                for outcome, n in _copy(outcomes):
                    out["kalena_reconciler_events", (("kind", kind), ("outcome", outcome))] += n
        return out

    def record(self, totals: Mapping) -> int:
        """Add each counter's rise since the last call; returns how many series rose."""
        from kalena_web.control.services import metric_increment

        rose = 0
        for key, total in totals.items():
            delta = total - self.recorded[key]
            if delta > 0:
                name, labels = key
                metric_increment(name=name, labels={"cluster": self.cluster.name, **dict(labels)}, by=delta)
                self.recorded[key] = total
                rose += 1
        return rose
