"""The cycle's decisions written as the record: a node's ledger debited and its pods bound, in
one transaction per pass with one statement per table (docs/design.md §9 optimistic concurrency: a
node whose ledger version moved since the snapshot accepts nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from django.db import transaction

from kalena_web.inventory.models import Workload
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.scheduling.bulk import insert_rows, update_by_id
from kalena_web.scheduling.models import BatchPod, WhyPending


#: rows per statement: one statement per table for a pass of up to this many pods (PostgreSQL
#: takes at most 65,535 parameters; the widest statement here has 4 per row)
ROWS_PER_STATEMENT = 10_000


@dataclass
class _Ledger:
    id: int
    node_id: int
    version: int
    batch_request: list
    batch_reservation: list


def assume_in_ledger(groups: Sequence[tuple[int, int, Sequence]], *, now_s: float) -> dict[int, list]:
    """Write a pass's decisions as the record, in one transaction with one statement per table:
    for each ``(node id, ledger version read, pods)`` — pods with ``id``, ``workload_id`` and
    ``request`` (an 8-vector), e.g. :class:`~kalena_web.scheduling.queue.QueuedPod` — the
    node accepts iff its ledger version is still the one the pass read (docs/design.md §9 optimistic
    concurrency); its pods still pending are bound (a pod that left the queue since the
    snapshot — ended, gone, adopted — is skipped), its ledger debited at their requests
    (``batch_request`` and ``batch_reservation``: in flight) and its version bumped once.
    Returns ``{node id: pods bound there}`` for the accepted nodes."""
    groups = [g for g in groups if g[2]]
    if not groups:
        return {}
    with transaction.atomic():
        ledgers = {row[1]: _Ledger(*row) for row in LiveNodeLedger.objects.select_for_update().filter(
            node_id__any=[g[0] for g in groups]).order_by("node_id").values_list(
            "id", "node_id", "version", "batch_request", "batch_reservation")}
        still = set(BatchPod.objects.select_for_update().filter(
            id__any=[p.id for g in groups for p in g[2]], state=BatchPod.PENDING).order_by("id").values_list("id", flat=True))
        accepted: dict[int, list] = {}
        changed, workloads, reservations, bound = [], [], [], []
        for node_id, version, pods in groups:
            ledger = ledgers.get(node_id)
            pods = [p for p in pods if p.id in still]
            if ledger is None or ledger.version != version or not pods:
                continue
            request = np.sum([p.request for p in pods], axis=0)
            ledger.batch_request = (np.asarray(ledger.batch_request) + request).tolist()
            ledger.batch_reservation = (np.asarray(ledger.batch_reservation) + request).tolist()
            ledger.version += 1
            changed.append(ledger)
            accepted[node_id] = pods
            for pod in pods:
                workloads.append((pod.workload_id, node_id, now_s))
                reservations.append((pod.workload_id, pod.request, now_s))
                bound.append((pod.id, BatchPod.BOUND, now_s, ledger.version))
        if not accepted:
            return accepted
        rows = ROWS_PER_STATEMENT
        update_by_id(LiveNodeLedger._meta.db_table, [("batch_request", "vector"), ("batch_reservation", "vector"),
                                                     ("version", "int")],
                     [(led.id, led.batch_request, led.batch_reservation, led.version) for led in changed], chunk=rows)
        update_by_id(Workload._meta.db_table, [("node_id", "int"), ("start_s", "float")], workloads, chunk=rows)
        ids = [w[0] for w in workloads]
        WorkloadReservation.objects.filter(workload_id__any=ids).delete()
        insert_rows(WorkloadReservation._meta.db_table, [("workload_id", "int"), ("value", "vector"),
                                                         ("updated_s", "float")], reservations, chunk=rows)
        update_by_id(BatchPod._meta.db_table, [("state", "text"), ("bound_s", "float"), ("bound_version", "int")],
                     bound, chunk=rows)
        WhyPending.objects.filter(pod_id__any=[b[0] for b in bound]).delete()
    return accepted


def bind_in_ledger(pods: list[BatchPod], *, node_id: int, version: int, now_s: float) -> bool:
    """Accept ``pods`` on the node iff its ledger version is still ``version``; debit at request."""
    with transaction.atomic():
        ledger = LiveNodeLedger.objects.select_for_update().get(node_id=node_id)
        if ledger.version != version:
            return False
        request = np.sum([p.workload.request for p in pods], axis=0)
        ledger.batch_request = (np.asarray(ledger.batch_request) + request).tolist()
        ledger.batch_reservation = (np.asarray(ledger.batch_reservation) + request).tolist()
        ledger.version += 1
        ledger.save(update_fields=["batch_request", "batch_reservation", "version"])
        ids = [pod.workload_id for pod in pods]
        Workload.objects.filter(id__any=ids).update(node_id=node_id, start_s=now_s)
        WorkloadReservation.objects.filter(workload_id__any=ids).delete()
        WorkloadReservation.objects.bulk_create([
            WorkloadReservation(workload_id=pod.workload_id, value=pod.workload.request, updated_s=now_s,
                                last_sample_s=None) for pod in pods])
        BatchPod.objects.filter(id__any=[p.id for p in pods]).update(
            state=BatchPod.BOUND, bound_s=now_s, bound_version=ledger.version)
        WhyPending.objects.filter(pod_id__any=[p.id for p in pods]).delete()
    for pod in pods:
        pod.state = BatchPod.BOUND
    return True
