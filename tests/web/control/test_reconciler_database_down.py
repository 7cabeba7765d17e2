"""The watch's events while the database is away (restarting, refusing connections) are kept and
applied once it answers — none is dropped.

The database is taken away as a restart does it to a client: every open connection to it is
terminated and new ones are refused (``ALLOW_CONNECTIONS false``) until it is given back.
"""

from __future__ import annotations

import queue
import threading
import time

import psycopg
import pytest
from django.db import connection

from agents.orchestrators.events import NodeSeen, PodPending, PodRunning
from kalena_web.control.reconciler import Reconciler
from kalena_web.inventory.models import Cluster
from kalena_web.scheduling.models import BatchPod

GIB = 2**30
VEC = (1000.0, 1.0 * GIB, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
END = object()


def pending(name: str) -> PodPending:
    return PodPending(f"batch/{name}", VEC, VEC, labels={"app": "train"}, priority=1, owner="Job/train", at_s=1000.0)


class Outage:
    """Takes the test database away and gives it back, from the server's maintenance database."""

    def __init__(self) -> None:
        settings = connection.settings_dict
        self.name = settings["NAME"]
        self.admin = psycopg.connect(dbname="postgres", host=settings["HOST"] or None, port=settings["PORT"] or None,
                                     user=settings["USER"] or None, password=settings["PASSWORD"] or None,
                                     autocommit=True)

    def begin(self) -> int:
        self.admin.execute(f'ALTER DATABASE "{self.name}" WITH ALLOW_CONNECTIONS false')
        return self.admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                  "WHERE datname = %s AND pid <> pg_backend_pid()", (self.name,)).fetchone()[0]

    def end(self) -> None:
        self.admin.execute(f'ALTER DATABASE "{self.name}" WITH ALLOW_CONNECTIONS true')

    def close(self) -> None:
        self.end()
        self.admin.close()


def test_events_that_arrive_while_the_database_is_away_are_applied_when_it_answers(transactional_db) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("a database server to take away: PostgreSQL")
    cluster = Cluster.objects.create(name="outage", kind=Cluster.LIVE)
    node = NodeSeen("n1", True, True, (8000.0, 32.0 * GIB, 0.0, 1e9, 1e9, 1e9, 1e9, 1e9), at_s=1000.0)
    rec = Reconciler(cluster=cluster, clock=lambda: 1000.0)
    rec.apply(node)
    rec.apply(pending("running"))
    feed: queue.Queue = queue.Queue()

    def events():
        while (event := feed.get()) is not END:
            yield event

    def run() -> None:
        try:
            rec.run(events())
        finally:
            connection.close()

    outage = Outage()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        assert outage.begin() >= 1   # this test's own connection at least
        for i in range(5):
            feed.put(pending(f"p-{i}"))
        feed.put(PodRunning("batch/running", "n1", at_s=1001.0))
        end = time.monotonic() + 60
        while rec.database_waits < 2 and time.monotonic() < end:   # tried, found it away, tried again
            time.sleep(0.05)
        assert rec.database_waits >= 2
    finally:
        outage.close()
    feed.put(END)
    worker.join(timeout=60)
    assert not worker.is_alive()
    connection.close()   # terminated with the others

    pods = dict(BatchPod.objects.filter(cluster=cluster).values_list("workload__name", "state"))
    assert pods == {**{f"batch/p-{i}": BatchPod.PENDING for i in range(5)}, "batch/running": BatchPod.BOUND}
    assert BatchPod.objects.get(workload__name="batch/running").running_s == 1001.0
    assert not any(outcomes.get("failed") for outcomes in rec.counts.values()), rec.counts
