"""Scheduling writes by hand: submit batch (REST, ``kalena batch submit``, the console), complete
and delete it (docs/design.md §9).

The live scheduler is a house of its own (kube-scheduler's split): :mod:`.queue` (pending pods
in order), :mod:`.cache` (nodes, residents and assumed pods between passes), :mod:`.cycle`
(snapshot → engine → assume), :mod:`.binder` (the orchestrator's Binding calls, off the decision
path), :mod:`.lifecycle` (requeue, drop, finish, evict) and :mod:`.observe` (what the watch
reports). This module re-exports the names callers used before that split.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from agents.orchestrators import Orchestrator, OrchestratorError, WorkloadGone
from kalena_engine.errors import InputError
from kalena_engine.kuberina.fields import parse_resource_block
from kalena_engine.kuberina.yamlio import Where
from kalena_engine.resources import DIM_INDEX, DIMS, N_DIMS
from kalena_web.inventory.models import Cluster, Workload
from kalena_web.scheduling import mappers
from kalena_web.scheduling.checks import (  # noqa: F401 - re-exported
    LABEL_KEY_MAX, LABEL_VALUE_MAX, LABELS_MAX, MIN_MEMBER_MAX, NAME_MAX, POD_NAME, PRIORITY_MAX, TIER_LABEL,
    BatchConflict, BatchNameTaken,
    BatchNotStopped, BatchRejected, check_labels,
)
from kalena_web.scheduling.cycle import PassReport, scheduling_pass  # noqa: F401 - re-exported
from kalena_web.scheduling.lifecycle import (  # noqa: F401 - re-exported
    UNCONFIRMED_S, batch_drop, batch_evicted, batch_finish, batch_gone, batch_requeue, batch_requeue_many,
    batch_unconfirmed,
)
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.observe import (  # noqa: F401 - re-exported
    _replaced, batch_observe_pending, batch_observe_pending_many, batch_observe_running,
    batch_observe_running_many,
)
from kalena_web.scheduling.recording import bind_in_ledger as _bind_in_ledger  # noqa: F401 - re-exported
from kalena_web.scheduling.whypending import NOTICE_EVERY_S, pending_message  # noqa: F401 - re-exported
from kalena_web.telemetry.validation import Rejected, check_json_values

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
                            "create the pod with schedulerName: kalena (docs/design.md §14); the REST submit path is for "
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
    check_labels(labels)
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
                now_s: float, wake: Callable[..., object] | None = None) -> Queued:
    """Submit one batch pod by hand — the one path of the REST ``POST …/batch``, ``kalena batch
    submit`` and the console's submit form: refuse where the orchestrator feeds batch itself,
    parse the IR resource blocks, :func:`batch_submit`, and call ``wake(cluster_id=…)`` once the
    transaction commits (callers pass :func:`~kalena_web.scheduling.tasks.scheduling_request`, an
    event-driven pass; services never import tasks). Idempotent: the same name and spec again is ``Queued(created=False)``
    with the existing pod (no pass asked for).

    Raises:
        BatchConflict: on Kubernetes (:func:`batch_submit_allowed`).
        BatchNameTaken: the name is in use with another spec (naming the fields that differ).
        InputError: a malformed resource block, or anything :func:`batch_submit` refuses.
    """
    batch_submit_allowed(name=name, orchestrator_kind=orchestrator_kind)
    with transaction.atomic():
        queued = batch_submit_once(
            cluster=cluster, name=name, owner=owner, request=resource_block(request, "request"),
            limit=resource_block(limit, "limit"), priority=priority, labels=labels, constraints=constraints,
            image=image, command=command, gang=gang, min_member=min_member, now_s=now_s)
        if queued.created and wake is not None:
            transaction.on_commit(lambda: wake(cluster_id=cluster.id), robust=True)
    return queued
