"""Why pending: the record kept for every pod a pass leaves in the queue (docs/design.md §9) and the
orchestrator's notice of it (kube-scheduler's ``FailedScheduling``, at most once a minute)."""

from __future__ import annotations

import time
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
    if record.get("binding") == "bind_refused":
        text = ""
    text = " ".join(t for t in [text, *refusal_lines(record)] if t)
    return text


def _hms(unix_s: float) -> str:
    return time.strftime("%H:%M:%S UTC", time.gmtime(unix_s))


def refusal_lines(record: Mapping[str, Any]) -> list[str]:
    """The refused-binding part of a why-pending record in words, one sentence per node that
    refused to run the pod, then when it is tried again::

        ["node-a refused to run it: engine … run: … no such host (node-a avoided until 14:20:05 UTC
          while another node fits).", "Next attempt at 14:10:15 UTC (backoff after 2 refusals)."]
    """
    lines = [f"{r['node']} refused to run it: {r.get('error') or 'bind refused'} ({r['node']} avoided until "
             f"{_hms(r['until_s'])} while another node fits)." for r in record.get("refused") or []]
    if lines and record.get("retry_s") is not None:
        n = record.get("refusals", 1)
        lines.append(f"Next attempt at {_hms(record['retry_s'])} (backoff after {n} refusal{'s' if n != 1 else ''}).")
    return lines


def pending_notice(orchestrator: Orchestrator, pod_ids: set[int], *, now_s: float) -> int:
    """Tell the orchestrator why each watched pod stays pending (Kubernetes: a
    ``FailedScheduling`` event and ``PodScheduled=False``), at most once per pod per
    ``NOTICE_EVERY_S``. An orchestrator without ``note_pending`` (Docker) is told nothing."""
    note = getattr(orchestrator, "note_pending", None)
    if note is None or not pod_ids:
        return 0
    due = (WhyPending.objects.filter(pod_id__any=pod_ids, pod__source=BatchPod.WATCH, pod__state=BatchPod.PENDING)
           .exclude(pod__noticed_s__gt=now_s - NOTICE_EVERY_S).select_related("pod__workload"))
    noticed = []
    for why in due:
        try:
            note(why.pod.workload.name, pending_message(why.record))
        except OrchestratorError:
            continue  # told next pass; the pod stays queued either way
        noticed.append(why.pod_id)
    BatchPod.objects.filter(id__any=noticed).update(noticed_s=now_s)
    return len(noticed)


def why_pending_record(records, pods_of_entry: Sequence[Sequence[int]], left: set[int], now_s: float) -> int:
    """Store the engine's why-pending ``records`` (one per pending entry) for every pod of that
    entry still pending (``left``), replacing each pod's previous record (one delete and one
    insert statement, and one read of the pods a node refused to run: their record keeps the
    ``refused`` list while the node is avoided); returns how many were stored."""
    by_entry = {r.entry: r.to_dict() for r in records}
    refused = {pod_id: on for pod_id, on in BatchPod.objects.filter(id__any=left).exclude(refused_on={})
               .values_list("id", "refused_on")}
    rows = []
    for entry, pod_ids in enumerate(pods_of_entry):
        record = by_entry.get(entry)
        if record is None:
            continue
        for pod_id in pod_ids:
            if pod_id in left:
                own = record
                if refused.get(pod_id):  # a node refused to run it: its record says so beside the rules
                    from kalena_web.scheduling.lifecycle import refusal_list

                    live = {n: v for n, v in refused[pod_id].items() if v.get("until_s", 0.0) > now_s}
                    own = {**record, "refused": refusal_list(live)} if live else record
                rows.append(WhyPending(pod_id=pod_id, time_s=now_s, binding=str(own["binding"]), record=own))
    with transaction.atomic():
        WhyPending.objects.filter(pod_id__any=[r.pod_id for r in rows]).delete()
        WhyPending.objects.bulk_create(rows, batch_size=5000)
    return len(rows)
