"""Scheduling writes: submit batch, run a scheduling pass (decide, bind with optimistic
concurrency, record why-pending), requeue evicted batch (DESIGN §9)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.db import transaction

from agents.orchestrators import BatchSpec, Orchestrator, OrchestratorError
from kalena_engine.errors import InputError
from kalena_engine.placement import schedule_batch
from kalena_engine.policy import Policy
from kalena_engine.resources import DIM_INDEX, IR_UNITS, N_DIMS, to_ir
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.scheduling import mappers, selectors
from kalena_web.scheduling.models import BatchPod, WhyPending
from kalena_web.telemetry.validation import Rejected, check_json_values

NAME_MAX = 253
PRIORITY_MAX = 1_000_000_000  # Kubernetes: user PriorityClass values are at most one billion (int32 storage)
MIN_MEMBER_MAX = 100_000
LABELS_MAX = 64  # Kubernetes sets no count, only 256 KiB of metadata; 64 is ample for a batch pod
POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?")


class BatchRejected(InputError):
    """A batch submission that cannot be accepted; nothing was stored."""


def _vector(raw: Mapping[str, float] | None, field_name: str) -> list[float]:
    out = [0.0] * N_DIMS
    for key, value in (raw or {}).items():
        if key not in DIM_INDEX:
            raise BatchRejected(f"unknown dimension {key!r}", field=field_name, accepted=", ".join(DIM_INDEX))
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise BatchRejected(f"{value!r} is not a finite non-negative number", field=f"{field_name}.{key}",
                                accepted="internal units: mcpu, bytes, devices, bytes/s")
        if key == "gpu" and value != int(value):
            raise BatchRejected(f"{value!r} is not a whole number of devices", field=f"{field_name}.gpu")
        out[DIM_INDEX[key]] = float(value)
    return out


def _fits_some_node(cluster: Cluster, req: list[float]) -> None:
    """Refuse a request no node of ``cluster`` could ever hold: on some dimension it exceeds the
    largest node's allocatable (one bound per dimension, whatever its unit)."""
    rows = [n.allocatable for n in Node.objects.filter(cluster=cluster).only("allocatable")]
    if not rows:
        return
    largest = np.max(np.asarray(rows, dtype=float), axis=0)
    for dim, i in DIM_INDEX.items():
        if req[i] > largest[i]:
            asked, most = to_ir(np.asarray(req))[i], to_ir(largest)[i]
            unit = IR_UNITS[i]
            raise BatchRejected(f"{asked:.6g} {unit} is more than any node of {cluster.name!r} has",
                                field=f"request.{dim}",
                                accepted=f"at most {most:.6g} {unit} (the largest node's allocatable)")


def batch_submit(*, cluster: Cluster, name: str, owner: str, request: Mapping[str, float],
                 limit: Mapping[str, float] | None = None, priority: int = 0,
                 labels: Mapping[str, str] | None = None, constraints: Mapping[str, Any] | None = None,
                 image: str = "", command: Sequence[str] = (), gang: str = "", min_member: int | None = None,
                 now_s: float) -> BatchPod:
    """Queue one batch pod (``name`` = ``namespace/pod``); its limit defaults to its request.

    Raises:
        BatchRejected: bad name, vector, priority, constraints, or a name already in use —
            naming the field; nothing is stored.
    """
    if not isinstance(name, str) or not POD_NAME.fullmatch(name) or len(name) > NAME_MAX:
        raise BatchRejected(f"{name!r} is not namespace/pod", field="name",
                            accepted="namespace/pod in Kubernetes' DNS-1123 form (lower-case letters, digits, "
                                     "'-', '.' in the pod name), ≤ 253 characters")
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= PRIORITY_MAX:
        raise BatchRejected(f"{priority!r} is not an integer in 0–{PRIORITY_MAX}", field="priority",
                            accepted=f"0 ≤ priority ≤ {PRIORITY_MAX} (Kubernetes' user PriorityClass range)")
    if min_member is not None and (not isinstance(min_member, int) or not 1 <= min_member <= MIN_MEMBER_MAX):
        raise BatchRejected(f"{min_member!r} is not an integer in 1–{MIN_MEMBER_MAX}", field="min_member")
    if labels is not None and (not isinstance(labels, Mapping) or len(labels) > LABELS_MAX):
        raise BatchRejected(f"{len(labels) if isinstance(labels, Mapping) else labels!r} labels", field="labels",
                            accepted=f"a mapping of at most {LABELS_MAX} labels")
    req = _vector(request, "request")
    _fits_some_node(cluster, req)
    if req[DIM_INDEX["cpu"]] <= 0 and req[DIM_INDEX["ram"]] <= 0:
        raise BatchRejected("a batch pod must request cpu or ram", field="request", accepted="cpu > 0 or ram > 0")
    lim = _vector(limit, "limit") if limit else list(req)
    if any(lv < rv for lv, rv in zip(lim, req, strict=True)):
        raise BatchRejected("a limit is below its request", field="limit", accepted="limit ≥ request per dimension")
    for field_name, text, longest in (("owner", owner, 200), ("image", image, 300), ("gang", gang, 200)):
        if not isinstance(text, str) or "\x00" in text or len(text) > longest:
            raise BatchRejected(f"{str(text)[:40]!r} is not a string of at most {longest} characters without NUL",
                                field=field_name)
    for field_name, value in (("labels", labels), ("constraints", constraints), ("command", list(command))):
        try:
            check_json_values(value, field_name)
        except Rejected as exc:
            raise BatchRejected(exc.detail, field=field_name) from None
    namespace = name.split("/", 1)[0]
    constraints = dict(constraints or {})
    mappers.template_of(owner=owner, namespace=namespace, labels=labels or {}, constraints=constraints,
                        min_member=min_member)  # raises InputError on malformed constraints
    with transaction.atomic():
        if Workload.objects.filter(cluster=cluster, name=name).exists():
            raise BatchRejected(f"{name!r} exists in cluster {cluster.name!r}", field="name", accepted="a new name")
        workload = Workload.objects.create(
            cluster=cluster, kind=Workload.BATCH, row=Workload.objects.filter(cluster=cluster, kind=Workload.BATCH).count(),
            name=name, namespace=namespace, owner=owner or name, tier="batch", priority=priority,
            instances=1, request=req, limit=lim, labels={**(labels or {}), "kalena.naughtian.io/tier": "batch"},
            constraints=constraints,
        )
        return BatchPod.objects.create(cluster=cluster, workload=workload, image=image, command=list(command),
                                       gang=gang, min_member=min_member, submitted_s=now_s, queued_s=now_s)


@dataclass
class PassReport:
    """What one scheduling pass did."""

    pending: int = 0
    placed: int = 0
    stale: int = 0
    failed: int = 0
    why_pending: int = 0
    errors: list[str] = field(default_factory=list)


def scheduling_pass(*, cluster: Cluster, orchestrator: Orchestrator, policy: Policy, now_s: float,
                    rng: np.random.Generator) -> PassReport:
    """Place pending batch into reservation-ledger slack (DESIGN §9).

    Decides with the engine's scheduler on a snapshot, then binds each placement inside a
    transaction that re-reads the node's ledger under a row lock: a binding whose node version
    changed since the snapshot is stale and its pods stay pending (requeued, never lost). An
    accepted binding debits the node's ledger at the pod's request at once (in flight) and
    bumps its version; the orchestrator is then asked to bind; if it refuses, the debit is
    undone and the pod is requeued. Every pod left pending gets its why-pending record.
    """
    report = PassReport()
    rows = selectors.node_rows(cluster=cluster)
    pending_rows = selectors.pending_rows(cluster=cluster)
    report.pending = len(pending_rows)
    if not rows or not pending_rows:
        return report
    row_of_node = {r.id: i for i, r in enumerate(rows)}
    snapshot = mappers.snapshot(
        rows, now_s=now_s, production=selectors.production_pods(cluster=cluster, row_of_node=row_of_node),
        batch=selectors.batch_residents(cluster=cluster, row_of_node=row_of_node),
        evictions=selectors.recent_evictions(cluster=cluster, since_s=now_s - policy.eviction.cooldown_s,
                                             row_of_node=row_of_node),
    )
    pending, pods_of_entry = mappers.pending_batch(pending_rows)
    result = schedule_batch(snapshot, pending, policy, rng=rng)
    taken = [0] * len(pods_of_entry)
    pods = {p.id: p for p in BatchPod.objects.filter(id__in=[i for ids in pods_of_entry for i in ids])
            .select_related("workload")}
    bindings = result.bindings
    # a pass's bindings on one node were decided together (in-flight debits): bind them together,
    # against the version the pass read, and bump the node's version once (as SlackLedger.bind)
    by_node: dict[int, list[BatchPod]] = {}
    version_of: dict[int, int] = {}
    for b in range(len(bindings)):
        entry, node_row, count = int(bindings.entry[b]), int(bindings.node[b]), int(bindings.count[b])
        by_node.setdefault(node_row, []).extend(
            pods[i] for i in pods_of_entry[entry][taken[entry]:taken[entry] + count])
        taken[entry] += count
        version_of[node_row] = int(bindings.version[b])
    for node_row, chosen in by_node.items():
        node = rows[node_row]
        if not _bind_in_ledger(chosen, node_id=node.id, version=version_of[node_row], now_s=now_s):
            report.stale += len(chosen)
            continue
        for pod in chosen:
            try:
                orchestrator.bind(_spec(pod), node.name)
                report.placed += 1
            except OrchestratorError as exc:
                report.failed += 1
                report.errors.append(str(exc))
                batch_requeue(pod=pod, now_s=now_s, reason="bind refused")
    left = {p_id for ids in pods_of_entry for p_id in ids} - {
        p.id for p in BatchPod.objects.filter(id__in=list(pods), state=BatchPod.BOUND).only("id")}
    report.why_pending = _record_why_pending(result.why_pending(), pods_of_entry, pending, left, now_s)
    return report


def _spec(pod: BatchPod) -> BatchSpec:
    w = pod.workload
    return BatchSpec(id=w.name, image=pod.image, request_mcpu=w.request[0], request_bytes=w.request[1],
                     limit_mcpu=w.limit[0], limit_bytes=w.limit[1], priority=w.priority, command=tuple(pod.command),
                     labels={k: str(v) for k, v in (w.labels or {}).items()})


def _bind_in_ledger(pods: list[BatchPod], *, node_id: int, version: int, now_s: float) -> bool:
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
        for pod in pods:
            Workload.objects.filter(id=pod.workload_id).update(node_id=node_id, start_s=now_s)
            WorkloadReservation.objects.update_or_create(
                workload_id=pod.workload_id,
                defaults={"value": pod.workload.request, "updated_s": now_s, "last_sample_s": None})
        BatchPod.objects.filter(id__in=[p.id for p in pods]).update(
            state=BatchPod.BOUND, bound_s=now_s, bound_version=ledger.version)
        WhyPending.objects.filter(pod__in=pods).delete()
    for pod in pods:
        pod.state = BatchPod.BOUND
    return True


def batch_requeue(*, pod: BatchPod, now_s: float, reason: str) -> None:
    """Take a bound pod off its node (evicted, or its binding refused): its request leaves the
    node's ledger at once (terminated workloads never count) and it is pending again, from
    scratch (no migration)."""
    with transaction.atomic():
        pod = BatchPod.objects.select_for_update().select_related("workload").get(id=pod.id)
        if pod.state != BatchPod.BOUND or pod.workload.node_id is None:
            return
        _credit(pod, pod.workload.node_id)
        Workload.objects.filter(id=pod.workload_id).update(node_id=None, start_s=None)
        WorkloadReservation.objects.filter(workload_id=pod.workload_id).delete()
        BatchPod.objects.filter(id=pod.id).update(state=BatchPod.PENDING, queued_s=now_s, bound_s=None,
                                                  bound_version=None, requeues=pod.requeues + 1)


def batch_finish(*, pod: BatchPod, now_s: float, state: str = BatchPod.COMPLETED) -> None:
    """A pod completed (or was deleted): it leaves every ledger at once."""
    with transaction.atomic():
        pod = BatchPod.objects.select_for_update().select_related("workload").get(id=pod.id)
        if pod.state in (BatchPod.COMPLETED, BatchPod.DELETED):
            return
        if pod.state == BatchPod.BOUND and pod.workload.node_id is not None:
            _credit(pod, pod.workload.node_id)
        Workload.objects.filter(id=pod.workload_id).update(node_id=None)
        WorkloadReservation.objects.filter(workload_id=pod.workload_id).delete()
        WhyPending.objects.filter(pod=pod).delete()
        BatchPod.objects.filter(id=pod.id).update(state=state, ended_s=now_s)


def _credit(pod: BatchPod, node_id: int) -> None:
    ledger = LiveNodeLedger.objects.select_for_update().get(node_id=node_id)
    reservation = WorkloadReservation.objects.filter(workload_id=pod.workload_id).values_list("value", flat=True).first()
    request = np.asarray(pod.workload.request)
    r = np.asarray(reservation) if reservation is not None else request
    ledger.batch_request = np.maximum(0.0, np.asarray(ledger.batch_request) - request).tolist()
    ledger.batch_reservation = np.maximum(0.0, np.asarray(ledger.batch_reservation) - r).tolist()
    ledger.version += 1
    ledger.save(update_fields=["batch_request", "batch_reservation", "version"])


def _record_why_pending(records, pods_of_entry: list[list[int]], pending, left: set[int], now_s: float) -> int:
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
        WhyPending.objects.bulk_create(rows, batch_size=500)
    return len(rows)
