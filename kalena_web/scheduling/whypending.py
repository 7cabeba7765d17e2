"""Why pending: the record kept for every pod a pass leaves in the queue (docs/design.md §9) and the
orchestrator's notice of it (kube-scheduler's ``FailedScheduling``, at most once a minute)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction

from agents.orchestrators import Orchestrator, OrchestratorError
from kalena_engine.resources import DIM_INDEX
from kalena_web.scheduling.models import BatchPod, WhyPending


NOTICE_EVERY_S = 60.0  # at most one FailedScheduling event per pod per minute (docs/design.md §14)


def pending_message(record: Mapping[str, Any]) -> str:
    """kube-scheduler's FailedScheduling wording from a why-pending record:
    ``0/186 nodes are available: 150 Insufficient cpu slack, 36 node not ready.``"""
    labels = {"no_nodes": "no nodes", "node_selector": "node(s) didn't match Pod's node affinity/selector",
              "kubelet_allocatable": "node(s) whose published batch allocatable is not raised yet"}
    parts = []
    for reason, count in sorted((record.get("excluded") or {}).items(), key=lambda kv: (-kv[1], kv[0])):
        label = f"Insufficient {reason} slack" if reason in DIM_INDEX else labels.get(reason, reason.replace("_", " "))
        parts.append(f"{count} {label}")
    text = f"0/{record.get('nodes_total', 0)} nodes are available: {', '.join(parts) or record.get('binding', '')}."
    gang = record.get("gang")
    if gang:
        text += f" Gang incomplete: {gang}."
    for r in [r for r in record.get("rejections") or [] if r.get("kind") == "releasing"][:3]:
        # case C11: the kubelet still counts a terminating victim there
        text += (f" {r['node']} is releasing {', '.join(r['releasing'])} ({r['releasing_amount']:g} {r['unit']} of "
                 f"{r['dim']}).")
    return text


def pending_notice(orchestrator: Orchestrator, pod_ids: set[int], *, now_s: float) -> int:
    """Tell the orchestrator why each watched pod stays pending (Kubernetes: a
    ``FailedScheduling`` event and ``PodScheduled=False``), at most once per pod per
    ``NOTICE_EVERY_S``. An orchestrator without ``note_pending`` (Docker) is told nothing."""
    note = getattr(orchestrator, "note_pending", None)
    if note is None or not pod_ids:
        return 0
    due = (WhyPending.objects.filter(pod_id__in=pod_ids, pod__source=BatchPod.WATCH, pod__state=BatchPod.PENDING)
           .exclude(pod__noticed_s__gt=now_s - NOTICE_EVERY_S).select_related("pod__workload"))
    noticed = []
    for why in due:
        try:
            note(why.pod.workload.name, pending_message(why.record))
        except OrchestratorError:
            continue  # told next pass; the pod stays queued either way
        noticed.append(why.pod_id)
    BatchPod.objects.filter(id__in=noticed).update(noticed_s=now_s)
    return len(noticed)


def why_pending_record(records, pods_of_entry: Sequence[Sequence[int]], left: set[int], now_s: float) -> int:
    """Store the engine's why-pending ``records`` (one per pending entry) for every pod of that
    entry still pending (``left``), replacing each pod's previous record (one delete and one
    insert statement); returns how many were stored."""
    by_entry = {r.entry: r.to_dict() for r in records}
    rows = []
    for entry, pod_ids in enumerate(pods_of_entry):
        record = by_entry.get(entry)
        if record is None:
            continue
        for pod_id in pod_ids:
            if pod_id in left:
                rows.append(WhyPending(pod_id=pod_id, time_s=now_s, binding=str(record["binding"]), record=record))
    with transaction.atomic():
        WhyPending.objects.filter(pod_id__in=[r.pod_id for r in rows]).delete()
        WhyPending.objects.bulk_create(rows, batch_size=5000)
    return len(rows)
