"""Agent eviction actions → why-evicted records (docs/design.md §9), and the evicted batch requeued.

For every ``evict`` action an agent reported (its :class:`MitigationEvent`), one
:class:`EvictionRecord` with: the node condition from the agent's numbers (dimension, working
set, capacity, Σ r before and after, acute), whose reservations rose on that node in the ten
minutes before (from the archive's minute rows), the priority comparison with the batch left on
the node, and whether the limit-breach override applied. A bound batch pod that was evicted is
taken off its node's ledger and queued again from scratch. Idempotent (a cursor over settled
action batches, :mod:`kalena_web.archive.cursors`, and a unique ``source_key``); a record
appears once its batch has settled, ``SETTLE_S`` after it was stored.
"""

from __future__ import annotations

from collections import defaultdict

from django.db import transaction
from django.db.models import Q

from kalena_engine.resources import DIM_INDEX
from kalena_web.archive.cursors import settled_batches
from kalena_web.archive.models import ArchiveCursor, EvictionRecord, UsageRollup
from kalena_web.inventory.mappers import vector
from kalena_web.inventory.models import Cluster, Workload
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.lifecycle import batch_evicted
from kalena_web.telemetry.models import IngestBatch, MitigationEvent

ROSE_WINDOW_S = 600.0


def _rose(cluster: Cluster, node_id: int, t: float, dimension: str, victim_id: int | None) -> list[dict]:
    """The three workloads on the node whose reservation on ``dimension`` rose most in the
    ten minutes before ``t`` (archive minute rows)."""
    d = DIM_INDEX.get(dimension, 1)
    series: dict[int, list[tuple[float, float]]] = defaultdict(list)
    names = {}
    for wid, name, bucket, reservation in UsageRollup.objects.filter(
            cluster=cluster, resolution=UsageRollup.MINUTE, workload__node_id=node_id,
            bucket_s__gte=t - ROSE_WINDOW_S, bucket_s__lte=t).values_list(
                "workload_id", "workload__name", "bucket_s", "reservation").order_by("bucket_s"):
        series[wid].append((bucket, vector(reservation)[d]))
        names[wid] = name
    rises = [(points[-1][1] - points[0][1], wid, points[0][1], points[-1][1])
             for wid, points in series.items() if wid != victim_id and len(points) > 1]
    rises = sorted((r for r in rises if r[0] > 0), reverse=True)[:3]
    return [{"workload": names[wid], "from": a, "to": b} for _, wid, a, b in rises]


def evictions_record(*, cluster: Cluster, now_s: float, limit: int = 5000) -> int:
    """Turn new agent eviction actions into why-evicted records; returns how many."""
    with transaction.atomic():
        cursor, _ = ArchiveCursor.objects.select_for_update().get_or_create(cluster=cluster, name="evictions")
        batches = settled_batches(cluster=cluster, after=cursor.position, now_s=now_s, kinds=(IngestBatch.ACTION,),
                                  max_batches=limit)
        if not batches:
            return 0
        events = list(MitigationEvent.objects.filter(node__cluster=cluster, action="evict",
                                                     batch_id__gt=cursor.position, batch_id__lte=batches[-1])
                      .select_related("workload", "node").order_by("id"))
        requeue = []
        for e in events:
            workload = e.workload or _by_name(cluster, e.workload_name, node_id=e.node_id)
            n = e.numbers or {}
            dimension = str(n.get("dimension") or "ram")
            node_batch = list(BatchPod.objects.filter(workload__node_id=e.node_id, state=BatchPod.BOUND)
                              .exclude(workload_id=getattr(workload, "id", None))
                              .values_list("workload__priority", flat=True))
            detail = {
                "dimension": dimension, "capacity": n.get("capacity"), "working_set": n.get("working_set"),
                "unaccounted": n.get("unaccounted") or 0.0, "ledger_before": n.get("ledger_before"), "ledger_after": n.get("ledger_after"),
                "acute": bool(n.get("acute")), "usage": n.get("usage"), "reservation": n.get("reservation"),
                "limit": n.get("limit"), "limit_breach": e.reason == "limit_breach",
                "rose": _rose(cluster, e.node_id, e.ts, dimension, getattr(workload, "id", None)),
                "priority_comparison": (f"{e.priority} ≤ {sorted(set(node_batch))}" if node_batch else "no other batch"),
                "trigger": e.trigger_source,
            }
            _, created = EvictionRecord.objects.get_or_create(source_key=f"agent:{e.id}", defaults=dict(
                cluster=cluster, node_id=e.node_id, workload=workload,
                workload_name=e.workload_name or e.workload_ref, time_s=e.ts, cause=e.reason, tier=e.tier or "batch",
                priority=e.priority or 0, dimension=dimension, detail=detail))
            if created:
                from kalena_web.policy.services import audit_record

                audit_record(actor_kind="agent", actor=f"agent of {e.node.name}", action="eviction",
                             cluster_name=cluster.name, target=e.workload_name or e.workload_ref,
                             before={"ledger": n.get("ledger_before")}, after={"ledger": n.get("ledger_after"),
                                                                               "reason": e.reason})
            if workload is not None:
                requeue.append((workload.id, e.node_id, e.ts))
        cursor.position = batches[-1]
        cursor.save(update_fields=["position"])
    for workload_id, node_id, at_s in requeue:
        # only the placement the agent evicted: a pod the orchestrator's watch already requeued
        # and placed again (elsewhere, or later) is left alone — requeued exactly once
        for pod in BatchPod.objects.filter(workload_id=workload_id, state=BatchPod.BOUND, workload__node_id=node_id,
                                           bound_s__lte=at_s):
            batch_evicted(pod=pod, now_s=now_s, reason="evicted by its node's agent")
    return len(events)


def _by_name(cluster: Cluster, name: str, *, node_id: int) -> Workload | None:
    """The report's workload by its name (``namespace/pod``) when ingest could not resolve it on
    the node (the victim had already left the node's inventory when its report was stored):
    only one on no node or on the reporting node — a node's agent never names another node's
    workload into a why-evicted record (docs/design.md §12; ingest refuses such a report outright)."""
    if not name:
        return None
    return (Workload.objects.filter(cluster=cluster, name=name)
            .filter(Q(node__isnull=True) | Q(node_id=node_id)).first())
