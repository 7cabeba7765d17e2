"""Scheduling writes: submit batch, run a scheduling pass (decide, bind with optimistic
concurrency, record why-pending), requeue evicted batch (DESIGN §9)."""

from __future__ import annotations

import dataclasses
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from django.db import IntegrityError, transaction

from agents.orchestrators import (
    BatchSpec, BindingUncertain, Orchestrator, OrchestratorError, StaleBinding, WorkloadGone,
)
from kalena_engine.errors import InputError
from kalena_engine.kuberina.fields import parse_resource_block
from kalena_engine.kuberina.yamlio import Where
from kalena_engine.placement import schedule_batch
from kalena_engine.policy import Policy
from kalena_engine.resources import DIM_INDEX, DIMS, N_DIMS
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.scheduling import mappers, selectors
from kalena_web.scheduling.models import BatchPod, WhyPending
from kalena_web.telemetry.validation import Rejected, check_json_values

NAME_MAX = 253
PRIORITY_MAX = 1_000_000_000  # Kubernetes: user PriorityClass values are at most one billion (int32 storage)
MIN_MEMBER_MAX = 100_000
LABELS_MAX = 64  # Kubernetes sets no count, only 256 KiB of metadata; 64 is ample for a batch pod
TIER_LABEL = "kalena.naughtian.io/tier"
POD_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-.a-z0-9]*[a-z0-9])?")


class BatchRejected(InputError):
    """A batch submission that cannot be accepted; nothing was stored."""


class BatchConflict(InputError):
    """A complete or delete the pod's state does not allow (HTTP 409); nothing changed."""


class BatchNameTaken(BatchConflict):
    """A submission whose name is already in use by a workload with another spec (HTTP 409);
    ``differing`` names the fields that differ (``("priority", "request")``); nothing changed."""

    def __init__(self, problem: str, *, differing: Sequence[str], field: str = "name") -> None:
        super().__init__(problem, field=field, accepted="the same spec again (answered with the existing pod), "
                                                        "or a new name")
        self.differing = tuple(differing)


class BatchNotStopped(InputError):
    """A delete of a running pod the orchestrator refused to stop (HTTP 502); nothing changed."""


#: Orchestrators whose watch reports completion: completing a pod by hand is refused there.
OBSERVES_COMPLETION = ("kubernetes", "docker", "swarm")
DELETE_GRACE_S = 30.0  # SIGTERM → this long → SIGKILL when a running pod is deleted


def batch_submit_allowed(*, name: str, orchestrator_kind: str) -> None:
    """Submitting by hand (REST, ``kalena batch submit``) is for Docker, Swarm and automation.

    Raises:
        BatchConflict: on Kubernetes, where Kalena takes batch pods from the watch.
    """
    if orchestrator_kind == "kubernetes":
        raise BatchConflict(f"{name!r} was not queued: on Kubernetes, Kalena takes batch pods from the watch — "
                            "create the pod with schedulerName: kalena (DESIGN §14); the REST submit path is for "
                            "Docker and automation", field="name")


def batch_complete(*, pod: BatchPod, orchestrator_kind: str, now_s: float) -> None:
    """Report a placed pod completed (the REST ``complete`` and ``kalena batch complete``):
    it leaves every ledger at once; completing a completed pod changes nothing.

    Raises:
        BatchConflict: the orchestrator observes completion itself (Kubernetes, Docker, Swarm:
            a hand-made completion would free a ledger while the pod still runs), or the pod is
            pending or deleted.
    """
    name = pod.workload.name
    if pod.source == BatchPod.WATCH:
        raise BatchConflict(f"{name!r} is watched from its orchestrator: its completion is observed, not reported",
                            field="name")
    if orchestrator_kind in OBSERVES_COMPLETION:
        raise BatchConflict(f"{name!r}: completion is observed from the orchestrator ({orchestrator_kind}), "
                            "not reported by hand; delete the pod to stop it", field="name")
    if pod.state in (BatchPod.DELETED, BatchPod.PENDING):
        raise BatchConflict(f"{name!r} is {pod.state}: only a pod that was placed can complete"
                            + (" (delete a pending pod instead)" if pod.state == BatchPod.PENDING else ""),
                            field="name")
    batch_finish(pod=pod, now_s=now_s, state=BatchPod.COMPLETED, by_hand=True)


def batch_delete(*, pod: BatchPod, orchestrator: Callable[[], Orchestrator], now_s: float, by: str) -> None:
    """Delete a pod (the REST ``DELETE`` and ``kalena batch delete``): a running one is stopped
    through ``orchestrator()`` first (SIGTERM, :data:`DELETE_GRACE_S`, SIGKILL).

    Raises:
        BatchConflict: the pod already completed or was deleted.
        BatchNotStopped: the orchestrator refused to stop it; nothing changed.
    """
    name = pod.workload.name
    if pod.state in (BatchPod.COMPLETED, BatchPod.DELETED):
        raise BatchConflict(f"{name!r} is already {pod.state}", field="name")
    if pod.state == BatchPod.BOUND:  # stop what runs first; if that fails, nothing changes
        try:
            orchestrator().evict(name, grace_s=DELETE_GRACE_S, reason=f"deleted {by}")
        except WorkloadGone:
            pass
        except OrchestratorError as exc:
            raise BatchNotStopped(f"{name!r} was not deleted: the orchestrator refused to stop it: {exc}",
                                  field="name") from None
    batch_finish(pod=pod, now_s=now_s, state=BatchPod.DELETED, by_hand=True)


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


@dataclass(frozen=True)
class Queued:
    """What a submission did: ``pod``, and ``created`` — False when a pod of that name and the
    same spec was already there (a retried submit), which is answered unchanged."""

    pod: BatchPod
    created: bool


def batch_submit(*, cluster: Cluster, name: str, owner: str, request: Mapping[str, float],
                 limit: Mapping[str, float] | None = None, priority: int = 0,
                 labels: Mapping[str, str] | None = None, constraints: Mapping[str, Any] | None = None,
                 image: str = "", command: Sequence[str] = (), gang: str = "", min_member: int | None = None,
                 now_s: float) -> BatchPod:
    """Queue one batch pod (``name`` = ``namespace/pod``). Its limit is, per dimension, the larger
    of the limit given and the request (a pod is never capped below what it reserves; an omitted
    limit or dimension is the request): request ``cpu 2``, limit ``cpu 1, ram 4 GiB`` → limit
    ``cpu 2, ram 4 GiB``. A request larger than every node of the cluster is queued all the same
    and stays pending, its why-pending record naming the dimension and the shortfall (as
    kube-scheduler keeps an unschedulable pod; a larger node may join). Idempotent: the same
    name with the same spec again returns the existing pod, whatever its state, and changes
    nothing (:func:`batch_submit_once` says which happened).

    Raises:
        BatchRejected: bad name, vector, priority, constraints — naming the field; nothing is stored.
        BatchNameTaken: the name is in use by a workload with another spec, naming the fields
            that differ; nothing changed.
    """
    return batch_submit_once(cluster=cluster, name=name, owner=owner, request=request, limit=limit,
                             priority=priority, labels=labels, constraints=constraints, image=image,
                             command=command, gang=gang, min_member=min_member, now_s=now_s).pod


def batch_submit_once(*, cluster: Cluster, name: str, owner: str, request: Mapping[str, float],
                      limit: Mapping[str, float] | None = None, priority: int = 0,
                      labels: Mapping[str, str] | None = None, constraints: Mapping[str, Any] | None = None,
                      image: str = "", command: Sequence[str] = (), gang: str = "",
                      min_member: int | None = None, now_s: float) -> Queued:
    """:func:`batch_submit`, saying whether this call queued the pod (``created``) or found it
    already submitted with the same spec. Raises as :func:`batch_submit`."""
    if not isinstance(name, str) or not POD_NAME.fullmatch(name) or len(name) > NAME_MAX:
        raise BatchRejected(f"{name!r} is not namespace/pod", field="name",
                            accepted="namespace/pod in Kubernetes' DNS-1123 form (lower-case letters, digits, "
                                     "'-', '.' in the pod name), ≤ 253 characters")
    if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= PRIORITY_MAX:
        raise BatchRejected(f"{priority!r} is not an integer in 0–{PRIORITY_MAX}", field="priority",
                            accepted=f"0 ≤ priority ≤ {PRIORITY_MAX} (Kubernetes' user PriorityClass range)")
    if min_member is not None and (not isinstance(min_member, int) or not 1 <= min_member <= MIN_MEMBER_MAX):
        raise BatchRejected(f"{min_member!r} is not an integer in 1–{MIN_MEMBER_MAX}", field="min_member")
    if labels is not None and isinstance(labels, Mapping) and len(labels) > LABELS_MAX:
        raise BatchRejected(f"{len(labels)} labels", field="labels", accepted=f"a mapping of at most {LABELS_MAX} labels")
    _check_labels(labels)
    req = _vector(request, "request")
    if req[DIM_INDEX["cpu"]] <= 0 and req[DIM_INDEX["ram"]] <= 0:
        raise BatchRejected("a batch pod must request cpu or ram", field="request", accepted="cpu > 0 or ram > 0")
    lim = [max(lv, rv) for lv, rv in zip(_vector(limit, "limit"), req, strict=True)]
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
    if not isinstance(constraints or {}, Mapping):
        raise BatchRejected("constraints must be a mapping", field="constraints")
    constraints = dict(constraints or {})
    try:
        mappers.template_of(owner=owner, namespace=namespace, labels=labels or {}, constraints=constraints,
                            min_member=min_member)
    except InputError as exc:  # malformed constraints: refused as every other bad field
        raise BatchRejected(exc.problem, field=exc.field, accepted=exc.accepted) from None
    spec = {"kind": Workload.BATCH, "owner": owner or name, "priority": priority, "request": req, "limit": lim,
            "labels": {**(labels or {}), TIER_LABEL: "batch"}, "constraints": constraints, "image": image,
            "command": list(command), "gang": gang, "min_member": min_member}
    with transaction.atomic():
        existing = Workload.objects.filter(cluster=cluster, name=name).select_related("batch").first()
        if existing is not None:
            return Queued(pod=_same_submission(existing, spec, cluster=cluster), created=False)
        try:
            with transaction.atomic():  # a savepoint: a submit of the same name may commit first (a retry)
                workload = Workload.objects.create(
                    cluster=cluster, kind=Workload.BATCH,
                    row=Workload.objects.filter(cluster=cluster, kind=Workload.BATCH).count(), name=name,
                    namespace=namespace, owner=owner or name, tier="batch", priority=priority, instances=1,
                    request=req, limit=lim, labels=spec["labels"], constraints=constraints,
                )
        except IntegrityError:
            # the insert waited for that submit's commit and lost to it: it is the existing pod now
            existing = Workload.objects.filter(cluster=cluster, name=name).select_related("batch").first()
            if existing is None:
                raise
            return Queued(pod=_same_submission(existing, spec, cluster=cluster), created=False)
        pod = BatchPod.objects.create(cluster=cluster, workload=workload, image=image, command=list(command),
                                      gang=gang, min_member=min_member, submitted_s=now_s, queued_s=now_s)
        from kalena_web.policy.audit import audit

        audit("batch.submit", cluster_name=cluster.name, target=name, after={"owner": owner, "priority": priority})
        return Queued(pod=pod, created=True)


def _same_submission(existing: Workload, spec: Mapping[str, Any], *, cluster: Cluster) -> BatchPod:
    """The pod ``existing`` stands for when it was submitted with ``spec`` (the fields a submit
    sets, normalised as stored), else :class:`BatchNameTaken` naming the fields that differ."""
    pod = getattr(existing, "batch", None) if existing.kind == Workload.BATCH else None
    if pod is None:
        raise BatchNameTaken(f"{existing.name!r} is a {existing.get_kind_display()} in cluster {cluster.name!r}",
                             differing=("kind",))
    stored = {"kind": existing.kind, "owner": existing.owner, "priority": existing.priority,
              "request": [float(v) for v in existing.request], "limit": [float(v) for v in existing.limit],
              "labels": existing.labels, "constraints": existing.constraints, "image": pod.image,
              "command": pod.command, "gang": pod.gang, "min_member": pod.min_member}
    differing = [k for k in spec if spec[k] != stored[k]]
    if pod.source != BatchPod.REST:
        differing.insert(0, "source")
    if differing:
        raise BatchNameTaken(f"{existing.name!r} exists in cluster {cluster.name!r} with another "
                             f"{', '.join(differing)}", differing=differing)
    return pod


def resource_block(raw: Mapping[str, Any] | None, field_name: str) -> dict[str, float] | None:
    """A Kuberina resource block (IR units, ``{"cpu": 0.5, "ram": "2Gi"}``) → internal units per
    dimension (REST, ``kalena batch submit`` and the console's form).

    Raises:
        InputError: a malformed block, naming ``field_name``.
    """
    if raw is None:
        return None
    vector = parse_resource_block(raw, Where("request body", field_name), capacity=False)
    return {DIMS[i]: float(v) for i, v in enumerate(vector) if v}


def batch_queue(*, cluster: Cluster, orchestrator_kind: str, name: str, owner: str = "",
                request: Mapping[str, Any], limit: Mapping[str, Any] | None = None, priority: int = 0,
                labels: Mapping[str, str] | None = None, constraints: Mapping[str, Any] | None = None,
                image: str = "", command: Sequence[str] = (), gang: str = "", min_member: int | None = None,
                now_s: float) -> Queued:
    """Submit one batch pod by hand — the one path of the REST ``POST …/batch``, ``kalena batch
    submit`` and the console's submit form: refuse where the orchestrator feeds batch itself,
    parse the IR resource blocks, :func:`batch_submit`, and ask for a scheduling pass once the
    transaction commits. Idempotent: the same name and spec again is ``Queued(created=False)``
    with the existing pod (no pass asked for).

    Raises:
        BatchConflict: on Kubernetes (:func:`batch_submit_allowed`).
        BatchNameTaken: the name is in use with another spec (naming the fields that differ).
        InputError: a malformed resource block, or anything :func:`batch_submit` refuses.
    """
    from kalena_web.scheduling.tasks import scheduling_request

    batch_submit_allowed(name=name, orchestrator_kind=orchestrator_kind)
    with transaction.atomic():
        queued = batch_submit_once(
            cluster=cluster, name=name, owner=owner, request=resource_block(request, "request"),
            limit=resource_block(limit, "limit"), priority=priority, labels=labels, constraints=constraints,
            image=image, command=command, gang=gang, min_member=min_member, now_s=now_s)
        if queued.created:
            transaction.on_commit(lambda: scheduling_request(cluster_id=cluster.id), robust=True)
    return queued


@dataclass
class PassReport:
    """What one scheduling pass did."""

    pending: int = 0
    placed: int = 0
    stale: int = 0
    failed: int = 0
    why_pending: int = 0
    stale_bindings: int = 0
    uncertain: int = 0
    noticed: int = 0
    stopped_early: bool = False
    errors: list[str] = field(default_factory=list)
    phase_s: dict[str, float] = field(default_factory=dict)  # wall seconds: read, engine, ledger, bind_api, why_pending


def scheduling_pass(*, cluster: Cluster, orchestrator: Orchestrator, policy: Policy, now_s: float,
                    rng: np.random.Generator, keep_going: Callable[[], bool] | None = None,
                    cache: dict | None = None) -> PassReport:
    """Place pending batch into reservation-ledger slack (DESIGN §9).

    Decides with the engine's scheduler on a snapshot, then binds each placement inside a
    transaction that re-reads the node's ledger under a row lock: a binding whose node version
    changed since the snapshot is stale and its pods stay pending (requeued, never lost). An
    accepted binding debits the node's ledger at the pod's request at once (in flight) and
    bumps its version; the orchestrator is then asked to bind; if it refuses, the debit is
    undone and the pod is requeued. Every pod left pending gets its why-pending record.

    ``cache``: kept by a long-lived caller between passes (the production pods are re-read
    only when they changed, :func:`~kalena_web.scheduling.selectors.production_pods`).
    ``keep_going`` (e.g. "this scheduler still holds its Lease") is asked before each node's
    bindings: once it answers False the pass binds nothing more (the rest stays pending), so a
    pass never outlives the right to bind. A watched pod whose binding the orchestrator refuses
    as stale (409 already assigned, 404 gone) leaves the queue (:func:`batch_drop`).
    """
    report = PassReport()
    mark = time.perf_counter()
    pending_rows = selectors.pending_rows(cluster=cluster)
    report.pending = len(pending_rows)
    if not pending_rows:
        return report
    rows, snapshot = selectors.cluster_snapshot(cluster=cluster, now_s=now_s, cooldown_s=policy.eviction.cooldown_s,
                                                cache=cache)
    if not rows:
        return report
    _, image_sizes = mappers.node_images(rows)
    pending, pods_of_entry = mappers.pending_batch(pending_rows, image_sizes)
    mark = _phase(report, "read", mark)
    result = schedule_batch(snapshot, pending, policy, rng=rng)
    mark = _phase(report, "engine", mark)
    taken = [0] * len(pods_of_entry)
    bindings = result.bindings
    placed_ids, counted = [], [0] * len(pods_of_entry)
    for b in range(len(bindings)):  # only the placed pods are read as models
        entry, count = int(bindings.entry[b]), int(bindings.count[b])
        placed_ids += pods_of_entry[entry][counted[entry]:counted[entry] + count]
        counted[entry] += count
    pods = {p.id: p for p in BatchPod.objects.filter(id__in=placed_ids).select_related("workload")}
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
    groups = [(rows[node_row].id, rows[node_row].name, chosen, version_of[node_row])
              for node_row, chosen in by_node.items()]
    with _Binder(orchestrator, keep_going) as binder:
        for i in range(0, len(groups), BIND_CHUNK_NODES):
            if keep_going is not None and not keep_going():
                report.stopped_early = True
                break
            chunk = groups[i:i + BIND_CHUNK_NODES]
            mark = time.perf_counter()
            accepted = _bind_many_in_ledger(chunk, now_s=now_s)
            mark = _phase(report, "ledger", mark)
            calls = []
            for node_id, node_name, chosen, _ in chunk:
                if node_id not in accepted:
                    report.stale += len(chosen)
                    continue
                calls += [(pod, node_name) for pod in chosen]
            binder.submit(calls)  # in flight while the next chunk's ledger transaction runs
            _phase(report, "bind_api", mark)
        mark = time.perf_counter()
        binder.finish(now_s=now_s, report=report)
        _phase(report, "bind_api", mark)
    mark = time.perf_counter()
    left = set(BatchPod.objects.filter(id__in=[i for ids in pods_of_entry for i in ids], state=BatchPod.PENDING)
               .values_list("id", flat=True))
    report.why_pending = _record_why_pending(result.why_pending(), pods_of_entry, pending, left, now_s)
    report.noticed = _notice_pending(orchestrator, left, now_s=now_s)
    _phase(report, "why_pending", mark)
    return report


def _phase(report: PassReport, name: str, since: float) -> float:
    """Add the wall time since ``since`` to ``report.phase_s[name]``; returns now."""
    now = time.perf_counter()
    report.phase_s[name] = round(report.phase_s.get(name, 0.0) + now - since, 4)
    return now


NOTICE_EVERY_S = 60.0  # at most one FailedScheduling event per pod per minute (DESIGN §14)


def pending_message(record: Mapping[str, Any]) -> str:
    """kube-scheduler's FailedScheduling wording from a why-pending record:
    ``0/186 nodes are available: 150 Insufficient cpu slack, 36 node not ready.``"""
    labels = {"no_nodes": "no nodes", "node_selector": "node(s) didn't match Pod's node affinity/selector"}
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


def _notice_pending(orchestrator: Orchestrator, pod_ids: set[int], *, now_s: float) -> int:
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


BIND_CHUNK_NODES = 200  # nodes whose bindings one transaction accepts before their API calls


LEASE_LAPSED = "scheduler lost its lease (or stopped) before binding"


def _bind_call(orchestrator: Orchestrator, pod: BatchPod, node_name: str,
               keep_going: Callable[[], bool] | None) -> Exception | None:
    """One binding call (no database access: it may run on a worker thread); returns the
    refusal, or None when the orchestrator bound the pod."""
    if keep_going is not None and not keep_going():  # the lease lapsed: bind nothing more
        return _LeaseLapsed(LEASE_LAPSED)
    try:
        orchestrator.bind(_spec(pod), node_name)
    except OrchestratorError as exc:
        return exc
    return None


class _LeaseLapsed(Exception):
    pass


class _Binder:
    """The binding calls of one pass: :meth:`submit` them (after their ledger transaction
    committed), :meth:`finish` to wait for every answer and apply each one in the pass's thread
    (:func:`_bind_outcome`, in submission order). An orchestrator with ``bind_concurrency`` > 1
    (Kubernetes: Binding calls are independent, and kube-scheduler makes them asynchronously
    too) gets that many calls in flight at once on a thread pool, overlapping the next chunk's
    ledger transaction; otherwise each call is made at once in this thread."""

    def __init__(self, orchestrator: Orchestrator, keep_going: Callable[[], bool] | None) -> None:
        self.orchestrator, self.keep_going = orchestrator, keep_going
        self.workers = int(getattr(orchestrator, "bind_concurrency", 1) or 1)
        self.pool = None
        self.pending: list[tuple[BatchPod, Any]] = []

    def __enter__(self) -> _Binder:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)

    def submit(self, calls: list[tuple[BatchPod, str]]) -> None:
        if self.workers <= 1:
            self.pending += [(pod, _bind_call(self.orchestrator, pod, name, self.keep_going)) for pod, name in calls]
            return
        if self.pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self.pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="kalena-bind")
        self.pending += [(pod, self.pool.submit(_bind_call, self.orchestrator, pod, name, self.keep_going))
                         for pod, name in calls]

    def finish(self, *, now_s: float, report: PassReport) -> None:
        lapsed = []
        for pod, answer in self.pending:
            answer = answer if self.workers <= 1 else answer.result()
            if isinstance(answer, _LeaseLapsed):
                lapsed.append(pod)
            else:
                _bind_outcome(pod, answer, now_s=now_s, report=report)
        if lapsed:  # everything not bound once the lease lapsed goes back to the queue at once
            report.stopped_early = True
            batch_requeue_many(pods=lapsed, now_s=now_s, reason=LEASE_LAPSED)
        self.pending = []


def _bind_outcome(pod: BatchPod, answer: Exception | None, *, now_s: float, report: PassReport) -> None:
    """Apply one binding call's answer: bound; the lease lapsed first (requeued; :class:`_Binder`
    requeues those together); a stale
    binding (409 already assigned, 404 gone: a watched pod leaves the queue, never loops); an
    uncertain one (a watched pod stays bound, unconfirmed, until the watch or a read —
    :func:`batch_unconfirmed` — settles it); any other refusal (requeued)."""
    if answer is None:
        report.placed += 1
    elif isinstance(answer, _LeaseLapsed):
        report.stopped_early = True
        batch_requeue(pod=pod, now_s=now_s, reason=LEASE_LAPSED)
    elif isinstance(answer, StaleBinding):
        report.failed += 1
        report.stale_bindings += 1
        report.errors.append(str(answer))
        if pod.source == BatchPod.WATCH:
            batch_drop(pod=pod, now_s=now_s, reason=str(answer), uid=pod.uid)
        else:
            batch_requeue(pod=pod, now_s=now_s, reason="bind refused")
    elif isinstance(answer, BindingUncertain):
        report.uncertain += 1
        report.errors.append(str(answer))
        if pod.source != BatchPod.WATCH:
            batch_requeue(pod=pod, now_s=now_s, reason="bind failed")
    else:
        report.failed += 1
        report.errors.append(str(answer))
        batch_requeue(pod=pod, now_s=now_s, reason="bind refused")


def _bind_many_in_ledger(groups: list[tuple[int, str, list[BatchPod], int]], *, now_s: float) -> set[int]:
    """:func:`_bind_in_ledger` for many nodes in one transaction (a fixed number of queries):
    each node's pods are accepted iff its ledger version is still the one the pass read.
    Returns the accepted node ids."""
    with transaction.atomic():
        ledgers = {led.node_id: led for led in LiveNodeLedger.objects.select_for_update().filter(
            node_id__in=[g[0] for g in groups]).order_by("node_id")}
        accepted, changed, workloads, reservations, bound = set(), [], [], [], []
        for node_id, _, pods, version in groups:
            ledger = ledgers.get(node_id)
            if ledger is None or ledger.version != version:
                continue
            request = np.sum([p.workload.request for p in pods], axis=0)
            ledger.batch_request = (np.asarray(ledger.batch_request) + request).tolist()
            ledger.batch_reservation = (np.asarray(ledger.batch_reservation) + request).tolist()
            ledger.version += 1
            changed.append(ledger)
            accepted.add(node_id)
            for pod in pods:
                workloads.append(Workload(id=pod.workload_id, node_id=node_id, start_s=now_s))
                reservations.append(WorkloadReservation(workload_id=pod.workload_id, value=pod.workload.request,
                                                        updated_s=now_s, last_sample_s=None))
                pod.state, pod.bound_s, pod.bound_version = BatchPod.BOUND, now_s, ledger.version
                bound.append(pod)
        if not accepted:
            return accepted
        _update_by_id(LiveNodeLedger._meta.db_table, [("batch_request", "vector"), ("batch_reservation", "vector"),
                                                      ("version", "int")],
                      [(led.id, led.batch_request, led.batch_reservation, led.version) for led in changed], chunk=500)
        ids = [w.id for w in workloads]
        _set_by_id(Workload._meta.db_table, "node_id", [(w.id, w.node_id) for w in workloads])
        Workload.objects.filter(id__in=ids).update(start_s=now_s)
        WorkloadReservation.objects.filter(workload_id__in=ids).delete()
        WorkloadReservation.objects.bulk_create(reservations, batch_size=1000)
        BatchPod.objects.filter(id__in=[p.id for p in bound]).update(state=BatchPod.BOUND, bound_s=now_s)
        _set_by_id(BatchPod._meta.db_table, "bound_version", [(p.id, p.bound_version) for p in bound])
        WhyPending.objects.filter(pod__in=bound).delete()
    return accepted


def _set_by_id(table: str, column: str, pairs: list[tuple[int, int]], chunk: int = 1000) -> None:
    """``UPDATE table SET column = v WHERE id = k`` for every ``(k, v)`` integer pair
    (:func:`_update_by_id`)."""
    _update_by_id(table, [(column, "int")], pairs, chunk=chunk)


_SQL_TYPES = {"postgresql": {"int": "BIGINT", "float": "DOUBLE PRECISION", "vector": "JSONB"},
              "sqlite": {"int": "INTEGER", "float": "REAL", "vector": "TEXT"}}


def _update_by_id(table: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]],
                  chunk: int = 1000) -> None:
    """``UPDATE table SET c1 = v1, … WHERE id = k`` for every row ``(k, v1, …)`` in one
    statement per ``chunk`` (a VALUES list joined by id; PostgreSQL and SQLite alike) —
    Django's ``bulk_update`` builds a CASE per row and column, which is slow for thousands of
    rows. ``columns``: ``(name, kind)`` with kind ``int``, ``float`` or ``vector`` (a
    :class:`~kalena_web.inventory.fields.ResourceVectorField`, stored as its JSON)."""
    import json

    from django.db import connection

    from kalena_web.inventory.fields import encode_vector

    types = _SQL_TYPES.get(connection.vendor, _SQL_TYPES["postgresql"])
    quote = connection.ops.quote_name
    casts = ", ".join(["CAST(%s AS BIGINT)"] + [f"CAST(%s AS {types[kind]})" for _, kind in columns])
    names = ", ".join(["k"] + [f"v{j}" for j in range(len(columns))])
    sets = ", ".join(f"{quote(name)} = v.v{j}" for j, (name, _) in enumerate(columns))
    encode = [(lambda v: json.dumps(encode_vector(v))) if kind == "vector" else (lambda v: v) for _, kind in columns]
    for i in range(0, len(rows), chunk):
        part = rows[i:i + chunk]
        sql = (f"WITH v({names}) AS (VALUES {', '.join([f'({casts})'] * len(part))}) "
               f"UPDATE {quote(table)} SET {sets} FROM v WHERE {quote(table)}.{quote('id')} = v.k")
        params = [x for row in part for x in [row[0], *(f(v) for f, v in zip(encode, row[1:], strict=True))]]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)


def _spec(pod: BatchPod) -> BatchSpec:
    w = pod.workload
    return BatchSpec(id=w.name, image=pod.image, request_mcpu=w.request[0], request_bytes=w.request[1],
                     limit_mcpu=w.limit[0], limit_bytes=w.limit[1], priority=w.priority, command=tuple(pod.command),
                     attempt=pod.requeues, grace_s=pod.grace_s, labels={k: str(v) for k, v in (w.labels or {}).items()},
                     uid=pod.uid)


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
        ids = [pod.workload_id for pod in pods]
        Workload.objects.filter(id__in=ids).update(node_id=node_id, start_s=now_s)
        WorkloadReservation.objects.filter(workload_id__in=ids).delete()
        WorkloadReservation.objects.bulk_create([
            WorkloadReservation(workload_id=pod.workload_id, value=pod.workload.request, updated_s=now_s,
                                last_sample_s=None) for pod in pods])
        BatchPod.objects.filter(id__in=[p.id for p in pods]).update(
            state=BatchPod.BOUND, bound_s=now_s, bound_version=ledger.version)
        WhyPending.objects.filter(pod__in=pods).delete()
    for pod in pods:
        pod.state = BatchPod.BOUND
    return True


def batch_drop(*, pod: BatchPod, now_s: float, reason: str, uid: str = "") -> None:
    """The orchestrator refused a watched pod's binding because the world moved on (409
    already assigned, or another object under its name — the Binding's uid precondition — 404
    gone): the debit is undone and the pod leaves the queue — it is never bound again (no
    loop). The watch reports where it actually runs (adopted by :func:`batch_observe_running`),
    that it is gone, or the new object under its name (queued and decided afresh). When the
    watch has already reported it running on a node (adopted there before the refusal's answer
    came back), or already queued the new object of that name (the row holds another ``uid``
    than the binding's), the refusal is stale news and nothing changes."""
    with transaction.atomic():
        pod = BatchPod.objects.select_for_update().select_related("workload").get(id=pod.id)
        if pod.state in BatchPod.TERMINAL or (uid and pod.uid and pod.uid != uid):
            return
        if pod.state == BatchPod.BOUND and pod.running_s is not None and pod.workload.node_id is not None:
            return
        if pod.state == BatchPod.BOUND and pod.workload.node_id is not None:
            _credit(pod, pod.workload.node_id)
        Workload.objects.filter(id=pod.workload_id).update(node_id=None, start_s=None)
        WorkloadReservation.objects.filter(workload_id=pod.workload_id).delete()
        WhyPending.objects.filter(pod=pod).delete()
        BatchPod.objects.filter(id=pod.id).update(state=BatchPod.DELETED, ended_s=now_s, bound_s=None,
                                                  outcome="dropped", reason=reason[:300])


def batch_requeue(*, pod: BatchPod, now_s: float, reason: str) -> None:
    """Take a bound pod off its node (evicted, or its binding refused): its request leaves the
    node's ledger at once (terminated workloads never count) and it is pending again, from
    scratch (no migration): not running, ``reason`` kept as why it was requeued."""
    with transaction.atomic():
        pod = BatchPod.objects.select_for_update().select_related("workload").get(id=pod.id)
        if pod.state != BatchPod.BOUND or pod.workload.node_id is None:
            return
        _credit(pod, pod.workload.node_id)
        Workload.objects.filter(id=pod.workload_id).update(node_id=None, start_s=None)
        WorkloadReservation.objects.filter(workload_id=pod.workload_id).delete()
        BatchPod.objects.filter(id=pod.id).update(state=BatchPod.PENDING, queued_s=now_s, bound_s=None,
                                                  bound_version=None, running_s=None, admitted_s=None,
                                                  reason=reason[:300],
                                                  requeues=pod.requeues + 1)


def batch_requeue_many(*, pods: Sequence[BatchPod], now_s: float, reason: str) -> int:
    """:func:`batch_requeue` for many pods in one transaction (a fixed number of queries; a
    scheduler whose lease lapsed mid-pass gives back everything it had not bound yet). Pods no
    longer bound are left as they are. Returns how many were requeued."""
    from django.db.models import F

    if not pods:
        return 0
    with transaction.atomic():
        locked = [p for p in BatchPod.objects.select_for_update().select_related("workload")
                  .filter(id__in=[p.id for p in pods]).order_by("id")
                  if p.state == BatchPod.BOUND and p.workload.node_id is not None]
        if not locked:
            return 0
        workload_ids = [p.workload_id for p in locked]
        reserved = dict(WorkloadReservation.objects.filter(workload_id__in=workload_ids)
                        .values_list("workload_id", "value"))
        ledgers = {led.node_id: led for led in LiveNodeLedger.objects.select_for_update().filter(
            node_id__in={p.workload.node_id for p in locked}).order_by("node_id")}
        for pod in locked:  # as _credit, node by node (clamping at 0 once equals clamping each time)
            led = ledgers[pod.workload.node_id]
            request = np.asarray(pod.workload.request)
            r = np.asarray(reserved[pod.workload_id]) if pod.workload_id in reserved else request
            led.batch_request = (np.asarray(led.batch_request) - request).tolist()
            led.batch_reservation = (np.asarray(led.batch_reservation) - r).tolist()
        for led in ledgers.values():
            led.batch_request = np.maximum(0.0, led.batch_request).tolist()
            led.batch_reservation = np.maximum(0.0, led.batch_reservation).tolist()
            led.version += 1
        _update_by_id(LiveNodeLedger._meta.db_table, [("batch_request", "vector"), ("batch_reservation", "vector"),
                                                      ("version", "int")],
                      [(led.id, led.batch_request, led.batch_reservation, led.version) for led in ledgers.values()])
        Workload.objects.filter(id__in=workload_ids).update(node_id=None, start_s=None)
        WorkloadReservation.objects.filter(workload_id__in=workload_ids).delete()
        BatchPod.objects.filter(id__in=[p.id for p in locked]).update(
            state=BatchPod.PENDING, queued_s=now_s, bound_s=None, bound_version=None, running_s=None, admitted_s=None,
            reason=reason[:300], requeues=F("requeues") + 1)
    return len(locked)


def batch_finish(*, pod: BatchPod, now_s: float, state: str = BatchPod.COMPLETED, outcome: str = "",
                 reason: str = "", by_hand: bool = False) -> bool:
    """A pod ended (completed, refused at admission, deleted): it leaves every ledger at once
    and the queue. Finishing a finished pod changes nothing; returns whether anything changed.
    The audit entry's actor is the reconciler loop, or with ``by_hand`` the request's user or
    the command line."""
    with transaction.atomic():
        pod = BatchPod.objects.select_for_update().select_related("workload").get(id=pod.id)
        if pod.state in BatchPod.TERMINAL:
            return False
        ran_on = ""
        if pod.state == BatchPod.BOUND and pod.workload.node_id is not None:
            _credit(pod, pod.workload.node_id)
            ran_on = Node.objects.filter(id=pod.workload.node_id).values_list("name", flat=True).first() or ""
        Workload.objects.filter(id=pod.workload_id).update(node_id=None)
        WorkloadReservation.objects.filter(workload_id=pod.workload_id).delete()
        WhyPending.objects.filter(pod=pod).delete()
        BatchPod.objects.filter(id=pod.id).update(state=state, ended_s=now_s, outcome=outcome,
                                                  reason=reason[:300] or pod.reason, ran_on=ran_on)
        from kalena_web.policy.audit import audit

        action = {BatchPod.DELETED: "delete", BatchPod.COMPLETED: "complete"}.get(state, state)
        audit(f"batch.{action}", cluster_name=pod.cluster.name, target=pod.workload.name,
              before={"state": pod.state}, after={"state": state, **({"outcome": outcome} if outcome else {})},
              **({} if by_hand else {"actor_kind": "loop", "actor": "reconciler"}))
    return True


def batch_evicted(*, pod: BatchPod, now_s: float, reason: str) -> None:
    """A bound pod was evicted (by an agent, a drain, the orchestrator). A submitted pod is
    requeued from scratch; a watched pod object is terminal (DESIGN §14: its owner's
    replacement is a new pod the watch queues) and leaves every ledger and the queue."""
    if pod.source == BatchPod.WATCH:
        batch_finish(pod=pod, now_s=now_s, outcome="evicted", reason=reason)
    else:
        batch_requeue(pod=pod, now_s=now_s, reason=reason)


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


# -- pods the orchestrator's watch reports (DESIGN §14; applied by kalena_web.control.reconciler) --


def _vector8(values: Sequence[float], field_name: str) -> list[float]:
    if len(values) != N_DIMS:
        raise BatchRejected(f"{len(values)} values", field=field_name, accepted=f"an {N_DIMS}-vector (DESIGN §2)")
    out = []
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise BatchRejected(f"{value!r} is not a finite non-negative number", field=f"{field_name}[{i}]")
        out.append(float(value))
    return out


def batch_observe_pending(*, cluster: Cluster, ref: str, request: Sequence[float], limit: Sequence[float],
                          labels: Mapping[str, str], priority: int, owner: str, gang: str = "",
                          min_member: int | None = None, image: str = "", constraints: Mapping[str, Any] | None = None,
                          grace_s: float = 30.0, uid: str = "", at_s: float, now_s: float) -> tuple[BatchPod, bool]:
    """Queue a pod the watch reports pending (the same queue :func:`batch_submit` feeds).

    Idempotent: a pod already queued, bound or ended is left as it is (its object cannot be
    pending again); a pod submitted through REST under the same name is adopted (one queue
    entry, never two); a pod whose object was gone and that reappears under its name is a new
    object, queued afresh — also when the deletion was missed (the watch was away), told by its
    ``uid`` (:func:`_replaced`); any eviction retry of the old object is dropped. ``at_s`` (its
    creation time) orders the queue. Returns the pod and whether anything changed.

    Raises:
        BatchRejected: a malformed name, vector, priority, owner, image or constraints —
            naming the field; nothing is stored.
    """
    if not isinstance(ref, str) or not POD_NAME.fullmatch(ref) or len(ref) > NAME_MAX:
        raise BatchRejected(f"{ref!r} is not namespace/pod", field="ref", accepted="namespace/pod (DNS-1123)")
    req, lim = _vector8(request, "requests"), _vector8(limit, "limits")
    if not isinstance(priority, int) or isinstance(priority, bool) or priority < 0:
        raise BatchRejected(f"{priority!r} is not a non-negative integer", field="priority")
    if req[DIM_INDEX["cpu"]] <= 0 and req[DIM_INDEX["ram"]] <= 0:
        raise BatchRejected("a batch pod must request cpu or ram", field="requests", accepted="cpu > 0 or ram > 0")
    lim = [max(lv, rv) if lv else rv for lv, rv in zip(lim, req, strict=True)]  # no limit: limit = request
    for field_name, text, longest in (("owner", owner, 200), ("image", image, 300), ("gang", gang, 200)):
        if not isinstance(text, str) or "\x00" in text or len(text) > longest:
            raise BatchRejected(f"{str(text)[:40]!r} is not a string of at most {longest} characters", field=field_name)
    if not isinstance(grace_s, int | float) or not math.isfinite(grace_s) or grace_s < 0:
        raise BatchRejected(f"{grace_s!r} is not a grace in seconds", field="grace_s")
    namespace = ref.split("/", 1)[0]
    constraints = dict(constraints or {})
    mappers.template_of(owner=owner, namespace=namespace, labels=labels or {}, constraints=constraints,
                        min_member=min_member)  # raises InputError on malformed constraints
    owner = owner or ref
    fields = dict(namespace=namespace, owner=owner, tier="batch", priority=priority, request=req, limit=lim,
                  labels={**dict(labels or {}), "kalena.naughtian.io/tier": "batch"}, constraints=constraints)
    queued_s = at_s or now_s
    with transaction.atomic():
        workload = (Workload.objects.select_for_update(of=("self",)).filter(cluster=cluster, kind=Workload.BATCH,
                                                                             name=ref).select_related("batch").first())
        if workload is None:
            workload = Workload.objects.create(
                cluster=cluster, kind=Workload.BATCH, name=ref, instances=1,
                row=Workload.objects.filter(cluster=cluster, kind=Workload.BATCH).count(), **fields)
            pod = BatchPod.objects.create(cluster=cluster, workload=workload, image=image, gang=gang,
                                          min_member=min_member, submitted_s=queued_s, queued_s=queued_s,
                                          source=BatchPod.WATCH, grace_s=float(grace_s), uid=uid)
            return pod, True
        pod = workload.batch
        replaced = _replaced(pod.source, pod.state, pod.running_s, pod.submitted_s, at_s, pod.uid, uid)
        if replaced and not pod.gone:  # the old object went while the watch was away: it leaves every ledger
            batch_gone(pod=pod, now_s=now_s, reason="replaced by a new pod of the same name")
        if pod.gone or replaced or (pod.source == BatchPod.REST and pod.state in BatchPod.TERMINAL):
            from kalena_web.control.escalation import eviction_retry_settle

            pod.refresh_from_db()
            eviction_retry_settle(pod=pod, now_s=now_s)  # a retry was for the old object, never the new one
            Workload.objects.filter(id=workload.id).update(node=None, start_s=None, **fields)
            BatchPod.objects.filter(id=pod.id).update(
                state=BatchPod.PENDING, source=BatchPod.WATCH, gone=False, outcome="", reason="", image=image,
                gang=gang, min_member=min_member, submitted_s=queued_s, queued_s=queued_s, bound_s=None,
                ended_s=None, bound_version=None, running_s=None, admitted_s=None, noticed_s=None, requeues=0,
                grace_s=float(grace_s),
                uid=uid, ran_on="")
            pod.refresh_from_db()
            return pod, True
        if pod.source == BatchPod.REST and pod.state in (BatchPod.PENDING, BatchPod.BOUND):
            BatchPod.objects.filter(id=pod.id).update(source=BatchPod.WATCH, grace_s=float(grace_s), uid=uid,
                                                      submitted_s=at_s or pod.submitted_s)
            pod.source = BatchPod.WATCH
            return pod, True
        if uid and not pod.uid:  # known from now on
            BatchPod.objects.filter(id=pod.id).update(uid=uid)
        return pod, False


def _replaced(source: str, state: str, running_s: float | None, submitted_s: float, at_s: float,
              held_uid: str = "", uid: str = "") -> bool:
    """Whether a pending report for a watched pod Kalena holds is a new object under the same
    name (the old one deleted while the watch was away, its DELETED never seen). Their
    ``metadata.uid`` decide when both are known (rows stored before the uid was kept have
    none). Otherwise: a bound pod only when it was seen running on a node (a pod's node never
    changes, so it cannot be pending again); a queued or ended one when the report's object was
    created after it (``at_s``, its creationTimestamp, is immutable; 0 when unknown)."""
    if source != BatchPod.WATCH:
        return False
    if held_uid and uid:
        return held_uid != uid
    if state == BatchPod.BOUND:  # never unbind on a guess: only an object seen on a node is surely another
        return running_s is not None
    return at_s > 0 and at_s > submitted_s


def _debit(pod: BatchPod, node_id: int) -> None:
    ledger = LiveNodeLedger.objects.select_for_update().get(node_id=node_id)
    request = np.asarray(pod.workload.request)
    ledger.batch_request = (np.asarray(ledger.batch_request) + request).tolist()
    ledger.batch_reservation = (np.asarray(ledger.batch_reservation) + request).tolist()
    ledger.version += 1
    ledger.save(update_fields=["batch_request", "batch_reservation", "version"])


def batch_observe_running(*, pod: BatchPod, node_id: int, at_s: float, now_s: float, admitted: bool = True) -> bool:
    """The watch reports ``pod`` on the node ``node_id`` (``admitted``: the node accepted it, see
    :class:`~agents.orchestrators.events.PodRunning`); returns whether anything changed.

    Bound there already: its running time is noted (once), and its admission (once, as
    ``admitted_s``: from then on it counts in the published batch floor). Pending, or dropped after a refused
    binding: it is adopted on that node — its request debits the node's ledger at once, as an
    in-flight placement (someone else bound it; it uses the node either way). Bound elsewhere:
    the debit moves with it. Ended: nothing changes (a terminal object never runs again).
    """
    with transaction.atomic():
        pod = BatchPod.objects.select_for_update().select_related("workload").get(id=pod.id)
        dropped = pod.state == BatchPod.DELETED and pod.outcome == "dropped" and not pod.gone
        if (pod.state in BatchPod.TERMINAL and not dropped) or pod.gone:
            return False
        w = pod.workload
        if pod.state == BatchPod.BOUND and w.node_id == node_id:
            noted = {} if pod.running_s is not None else {"running_s": at_s or now_s}
            if admitted and pod.admitted_s is None:
                noted["admitted_s"] = now_s
            if not noted:
                return False
            BatchPod.objects.filter(id=pod.id).update(**noted)
            return True
        if pod.state == BatchPod.BOUND and w.node_id is not None:
            _credit(pod, w.node_id)
        _debit(pod, node_id)
        Workload.objects.filter(id=w.id).update(node_id=node_id, start_s=at_s or now_s)
        WorkloadReservation.objects.update_or_create(
            workload_id=w.id, defaults={"value": w.request, "updated_s": now_s, "last_sample_s": None})
        WhyPending.objects.filter(pod=pod).delete()
        BatchPod.objects.filter(id=pod.id).update(state=BatchPod.BOUND, bound_s=pod.bound_s or now_s,
                                                  running_s=at_s or now_s, outcome="", ended_s=None,
                                                  admitted_s=now_s if admitted else None)
        return True


def batch_gone(*, pod: BatchPod, now_s: float, reason: str = "deleted") -> bool:
    """The pod object no longer exists: it leaves every ledger and the queue at once (deleted,
    unless it had ended already) and is marked gone; returns whether anything changed."""
    changed = batch_finish(pod=pod, now_s=now_s, state=BatchPod.DELETED, outcome="gone", reason=reason)
    marked = BatchPod.objects.filter(id=pod.id, gone=False).update(gone=True)
    return changed or bool(marked)


UNCONFIRMED_S = 30.0  # a binding the watch has not confirmed this long after it was made is checked


def batch_unconfirmed(*, cluster: Cluster, now_s: float, older_than_s: float = UNCONFIRMED_S,
                      limit: int = 100) -> list[BatchPod]:
    """Watched pods Kalena bound more than ``older_than_s`` ago that the watch never reported
    on a node (no ``PodRunning``), oldest first: their binding call may never have reached the
    orchestrator (a scheduler died between its ledger commit and the call, a timeout). The
    caller asks the orchestrator where each one is and settles it with
    :func:`batch_observe_running`, :func:`batch_requeue` or :func:`batch_gone` (1 query)."""
    return list(BatchPod.objects.filter(cluster=cluster, source=BatchPod.WATCH, state=BatchPod.BOUND,
                                        running_s__isnull=True, bound_s__lt=now_s - older_than_s)
                .select_related("workload").order_by("bound_s")[:limit])


def batch_observe_pending_many(*, cluster: Cluster, pods: Sequence[Mapping[str, Any]], now_s: float,
                               ) -> list[bool | BatchRejected]:
    """:func:`batch_observe_pending` for many pods (keyword dicts of its arguments) with a fixed
    number of queries for the common cases — names Kalena does not hold yet, created in bulk, and
    watched pods it holds already (a re-list repeats every pending pod: valid, they change
    nothing); the others (gone, or submitted through REST) go one by one. Returns, per pod,
    whether it changed anything or the :class:`BatchRejected` that refused it (nothing stored
    for that pod)."""
    out: list[bool | BatchRejected] = [False] * len(pods)
    names = [p.get("ref") for p in pods]
    held = {row[0]: row[1:] for row in Workload.objects.filter(  # (source, gone, state, running_s, submitted_s, uid)
        cluster=cluster, kind=Workload.BATCH, name__in=names).values_list(
        "name", "batch__source", "batch__gone", "batch__state", "batch__running_s", "batch__submitted_s",
        "batch__uid")}
    existing = set(held)
    fresh, seen = [], set()
    for i, p in enumerate(pods):
        if p.get("ref") in existing or p.get("ref") in seen:
            continue
        try:
            _check_pending(**p)
        except InputError as exc:
            out[i] = exc if isinstance(exc, BatchRejected) else BatchRejected(exc.problem, field=exc.field,
                                                                                 accepted=exc.accepted)
            seen.add(p.get("ref"))
            continue
        seen.add(p["ref"])
        fresh.append(i)
    if fresh:
        with transaction.atomic():
            row = Workload.objects.filter(cluster=cluster, kind=Workload.BATCH).count()
            workloads = []
            for k, i in enumerate(fresh):
                p = pods[i]
                req, lim = _vector8(p["request"], "requests"), _vector8(p["limit"], "limits")
                workloads.append(Workload(
                    cluster=cluster, kind=Workload.BATCH, name=p["ref"], instances=1, row=row + k,
                    namespace=p["ref"].split("/", 1)[0], owner=p.get("owner") or p["ref"], tier="batch",
                    priority=p.get("priority", 0), request=req,
                    limit=[max(lv, rv) if lv else rv for lv, rv in zip(lim, req, strict=True)],
                    labels={**dict(p.get("labels") or {}), "kalena.naughtian.io/tier": "batch"},
                    constraints=dict(p.get("constraints") or {})))
            Workload.objects.bulk_create(workloads, batch_size=1000)
            BatchPod.objects.bulk_create([
                BatchPod(cluster=cluster, workload=w, image=pods[i].get("image", ""), gang=pods[i].get("gang", ""),
                         min_member=pods[i].get("min_member"), submitted_s=pods[i].get("at_s") or now_s,
                         queued_s=pods[i].get("at_s") or now_s, source=BatchPod.WATCH,
                         grace_s=float(pods[i].get("grace_s", 30.0)), uid=pods[i].get("uid") or "")
                for w, i in zip(workloads, fresh, strict=True)], batch_size=1000)
        for i in fresh:
            out[i] = True
    fresh_set = set(fresh)
    for i, p in enumerate(pods):
        if i in fresh_set or isinstance(out[i], BatchRejected):
            continue
        if p.get("ref") in existing:
            source, gone, state, running_s, submitted_s, held_uid = held[p["ref"]]
            uid = p.get("uid") or ""
            if source == BatchPod.WATCH and not gone and (not uid or held_uid) and not _replaced(
                    source, state, running_s, submitted_s, p.get("at_s") or 0.0, held_uid, uid):  # unchanged
                try:
                    _check_pending(**p)
                    out[i] = False
                except InputError as exc:
                    out[i] = exc if isinstance(exc, BatchRejected) else BatchRejected(
                        exc.problem, field=exc.field, accepted=exc.accepted)
                continue
            try:
                out[i] = batch_observe_pending(cluster=cluster, now_s=now_s, **p)[1]
            except BatchRejected as exc:
                out[i] = exc
    return out


LABEL_KEY_MAX = 317  # Kubernetes: a DNS subdomain prefix (253) + "/" + a name (63)
LABEL_VALUE_MAX = 4096  # Kubernetes allows 63; Docker and Swarm labels (compose's config hashes, paths) run longer


def _check_labels(labels: object, field: str = "labels") -> None:
    """Labels are a mapping of strings to strings, as in Kubernetes and Docker (the scheduler
    matches selectors and spreads on them).

    Raises:
        BatchRejected: naming the label.
    """
    if labels is None:
        return
    if not isinstance(labels, Mapping):
        raise BatchRejected(f"{type(labels).__name__} is not a mapping", field=field,
                            accepted="a mapping of label name → string value")
    for key, value in labels.items():
        if not isinstance(key, str) or not key or len(key) > LABEL_KEY_MAX or "\x00" in key:
            raise BatchRejected(f"{str(key)[:40]!r} is not a label name", field=field,
                                accepted=f"a non-empty string of at most {LABEL_KEY_MAX} characters without NUL")
        if not isinstance(value, str) or len(value) > LABEL_VALUE_MAX or "\x00" in value:
            raise BatchRejected(f"{str(value)[:40]!r} ({type(value).__name__}) is not a label value",
                                field=f"{field}.{key}",
                                accepted=f"a string of at most {LABEL_VALUE_MAX} characters without NUL")


def _check_pending(*, ref: str, request, limit, labels, priority: int, owner: str, gang: str = "",
                   min_member: int | None = None, image: str = "", constraints=None, grace_s: float = 30.0,
                   at_s: float = 0.0, uid: str = "") -> None:
    """Every check :func:`batch_observe_pending` makes before it stores anything.

    Raises:
        BatchRejected: naming the field.
    """
    if not isinstance(ref, str) or not POD_NAME.fullmatch(ref) or len(ref) > NAME_MAX:
        raise BatchRejected(f"{ref!r} is not namespace/pod", field="ref", accepted="namespace/pod (DNS-1123)")
    req = _vector8(request, "requests")
    _vector8(limit, "limits")
    if not isinstance(priority, int) or isinstance(priority, bool) or priority < 0:
        raise BatchRejected(f"{priority!r} is not a non-negative integer", field="priority")
    if req[DIM_INDEX["cpu"]] <= 0 and req[DIM_INDEX["ram"]] <= 0:
        raise BatchRejected("a batch pod must request cpu or ram", field="requests", accepted="cpu > 0 or ram > 0")
    for field_name, text, longest in (("owner", owner, 200), ("image", image, 300), ("gang", gang, 200)):
        if not isinstance(text, str) or "\x00" in text or len(text) > longest:
            raise BatchRejected(f"{str(text)[:40]!r} is not a string of at most {longest} characters", field=field_name)
    if not isinstance(grace_s, int | float) or not math.isfinite(grace_s) or grace_s < 0:
        raise BatchRejected(f"{grace_s!r} is not a grace in seconds", field="grace_s")
    _check_labels(labels)
    mappers.template_of(owner=owner, namespace=ref.split("/", 1)[0], labels=labels or {},
                        constraints=dict(constraints or {}), min_member=min_member)


def batch_observe_running_many(*, cluster: Cluster, reports: Sequence[tuple[str, int, float, bool]], now_s: float,
                               ) -> list[bool | None]:
    """:func:`batch_observe_running` for many ``(ref, node_id, at_s, admitted)``: the common
    case (bound there, running or admission not yet noted) in one update; the rest one by one.
    Returns per report whether it changed anything, None for a pod Kalena does not hold."""
    pods = {p.workload.name: p for p in BatchPod.objects.filter(
        cluster=cluster, workload__name__in=[r[0] for r in reports]).select_related("workload")}
    out: list[bool | None] = [None] * len(reports)
    quick: dict[int, tuple[float | None, float | None]] = {}
    for i, (ref, node_id, at_s, admitted) in enumerate(reports):
        pod = pods.get(ref)
        if pod is None:
            continue
        if pod.state == BatchPod.BOUND and pod.workload.node_id == node_id and not pod.gone:
            running_s, admitted_s = quick.get(pod.id, (pod.running_s, pod.admitted_s))
            new = (running_s if running_s is not None else at_s or now_s,
                   admitted_s if admitted_s is not None or not admitted else now_s)
            out[i] = new != (running_s, admitted_s)
            if out[i]:
                quick[pod.id] = new
            continue
        out[i] = batch_observe_running(pod=pod, node_id=node_id, at_s=at_s, now_s=now_s, admitted=admitted)
    if quick:
        _update_by_id(BatchPod._meta.db_table, [("running_s", "float"), ("admitted_s", "float")],
                      [(k, *v) for k, v in quick.items()])
    return out
