"""Lock order between a pod's lifecycle and the ledger writers (a deadlock CI found).

Every lifecycle step of a batch pod (requeue, evict, finish, drop, adopt) locks the pod's row
first, then its node's ledger. The estimation pass locks ledgers first and then writes
reservation rows, whose foreign key takes a key-share lock on the pod's workload row. A
lifecycle step that also locked the workload row (``FOR UPDATE`` through the join) made the two
wait for each other: PostgreSQL aborted one with "deadlock detected". The lifecycle locks the
pod's own row only, so the two now queue behind each other and both finish.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from django.db import connection, transaction

from agents.orchestrators import FakeOrchestrator
from agents.orchestrators.events import NodeSeen
from kalena_engine.policy import Policy
from kalena_web.control.reconciler import Reconciler
from kalena_web.inventory.models import Cluster
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.scheduling import lifecycle
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass

GIB = 2**30


def bound_pod() -> BatchPod:
    cluster = Cluster.objects.create(name="locks", kind=Cluster.LIVE)
    Reconciler(cluster, clock=lambda: 1000.0).apply(
        NodeSeen("n1", True, True, (8000.0, 32.0 * GIB, 0.0, 1e9, 1e9, 1e9, 1e9, 1e9), at_s=1000.0))
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=1000.0)
    batch_submit(cluster=cluster, name="batch/p", owner="job-1", request={"cpu": 500, "ram": GIB}, now_s=1000.0)
    assert scheduling_pass(cluster=cluster, orchestrator=FakeOrchestrator(node_names=["n1"]), policy=Policy(),
                           now_s=1001.0, rng=np.random.default_rng(0)).placed == 1
    pod = BatchPod.objects.select_related("workload").get(workload__name="batch/p")
    WorkloadReservation.objects.filter(workload_id=pod.workload_id).delete()
    return pod


def lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                       "AND wait_event_type = 'Lock'")
        return int(cursor.fetchone()[0])


@pytest.mark.parametrize("step", ["requeue", "evicted", "finish", "drop"])
def test_a_lifecycle_step_and_a_ledger_writer_inserting_for_the_pod_both_finish(transactional_db, step) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("row locks: PostgreSQL")
    pod = bound_pod()
    node_id = pod.workload.node_id
    holding, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def ledger_writer() -> None:  # as the estimation pass: the ledger locked, then a reservation written
        try:
            with transaction.atomic():
                LiveNodeLedger.objects.select_for_update().get(node_id=node_id)
                holding.set()
                assert go.wait(30)
                WorkloadReservation.objects.create(workload_id=pod.workload_id, value=[100.0] + [0.0] * 7,
                                                   updated_s=1002.0)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()

    def lifecycle_step() -> None:
        try:
            if step == "requeue":
                lifecycle.batch_requeue(pod=pod, now_s=1003.0, reason="evicted by its node's agent")
            elif step == "evicted":
                lifecycle.batch_evicted(pod=pod, now_s=1003.0, reason="evicted by its node's agent")
            elif step == "finish":
                lifecycle.batch_finish(pod=pod, now_s=1003.0, outcome="succeeded")
            else:
                lifecycle.batch_drop(pod=pod, now_s=1003.0, reason="refused")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()

    writer = threading.Thread(target=ledger_writer)
    writer.start()
    assert holding.wait(30)
    stepper = threading.Thread(target=lifecycle_step)
    stepper.start()
    deadline = time.monotonic() + 30
    while lock_waiters() < 1:  # the step holds the pod's row and waits for the ledger
        assert time.monotonic() < deadline, "the lifecycle step never waited for the ledger"
        time.sleep(0.02)
    go.set()
    writer.join(60)
    stepper.join(60)
    assert errors == []
    pod.refresh_from_db()
    assert pod.state != BatchPod.BOUND
    ledger = LiveNodeLedger.objects.get(node_id=node_id)
    assert ledger.batch_request[0] == 0.0  # its request left the node's ledger
