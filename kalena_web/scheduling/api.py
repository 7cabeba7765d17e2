"""Scheduling REST API (one ninja ``Router``): submit batch, list it, why-pending, delete.

Quantities in requests are Kuberina resource blocks in IR units (``{"cpu": 0.5, "ram": "2Gi"}``,
parsed by the planner's rules; the body's schema states them, :mod:`~kalena_web.scheduling.schemas`);
answers give IR units too.

Submitting is idempotent: the same name with the same spec again (a retry after a lost answer)
answers 200 with the pod as it is now (201 only when it was queued by this call); the same name
with another spec answers 409 naming the fields that differ.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import numpy as np
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError

from kalena_engine.errors import InputError
from kalena_engine.resources import to_ir_block
from kalena_web.api.services import permission_refusal
from kalena_web.api.errors import ApiError, answers
from kalena_web.api.lists import list_query, order_by, page_of
from kalena_web.api.params import ClusterName, Namespace, PodName, text
from kalena_web.api.times import iso
from kalena_web.inventory.models import Cluster
from kalena_web.scheduling import selectors, services
from kalena_web.scheduling.schemas import BatchIn
from kalena_web.scheduling.tasks import scheduling_request
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.scheduling.models import BatchPod

router = Router(tags=["scheduling"])


class BatchOut(Schema):
    name: str
    owner: str
    state: str
    node: str | None
    priority: int
    request: dict[str, Any]
    limit: dict[str, Any] = Field(description="the most it may use, IR units; never below the request")
    submitted_s: float
    queued_s: float
    bound_s: float | None
    submitted_at: str | None = None  # the three times above as ISO 8601 (UTC)
    queued_at: str | None = None
    bound_at: str | None = None
    requeues: int
    binding: str | None


def _cluster(name: str) -> Cluster:
    try:
        return selectors.live_cluster(name=name)
    except Cluster.DoesNotExist:
        raise HttpError(404, f"no live cluster named {name!r}") from None


def _pod(cluster: str, name: str) -> tuple[Cluster, BatchPod]:
    c = _cluster(cluster)
    try:
        return c, selectors.batch_pod(cluster=c, name=name)
    except BatchPod.DoesNotExist:
        raise HttpError(404, f"no batch pod {name!r} in {cluster!r}") from None


def _operator(request: HttpRequest) -> None:
    if not request.user.has_perm("scheduling.operate_batch"):
        raise HttpError(403, permission_refusal(request.user, "scheduling.operate_batch", "submitting or deleting batch needs the operator role (permission scheduling.operate_batch)"))


def pod_out(pod: BatchPod) -> BatchOut:
    """The answer for one pod (REST and ``kalena batch --json``)."""
    w = pod.workload
    why = selectors.why_pending(pod=pod)
    return BatchOut(name=w.name, owner=w.owner, state=pod.state,
                    node=w.node.name if w.node_id else (pod.ran_on or None),  # a finished pod: where it ran
                    priority=w.priority, request=to_ir_block(np.asarray(w.request)),
                    limit=to_ir_block(np.asarray(w.limit)), submitted_s=pod.submitted_s,
                    queued_s=pod.queued_s, bound_s=pod.bound_s, submitted_at=iso(pod.submitted_s),
                    queued_at=iso(pod.queued_s), bound_at=iso(pod.bound_s), requeues=pod.requeues,
                    binding=why.binding if why else None)


@router.post("/clusters/{cluster}/batch", response=answers({201: BatchOut, 200: BatchOut}, 403, 404, 409, 413),
             summary="Queue a batch pod (idempotent: the same name and spec again answers 200 with the pod)")
def submit(request: HttpRequest, cluster: ClusterName, body: BatchIn):
    """201: queued by this call. 200: a pod of that name with the same spec was already
    submitted (a retry after a lost answer) — the answer is that pod as it is now, nothing
    changed. 409: the name is taken by a pod with another spec (``differing`` lists the
    fields), or the orchestrator feeds batch itself (Kubernetes)."""
    _operator(request)
    c = _cluster(cluster)
    try:
        queued = services.batch_queue(
            cluster=c, orchestrator_kind=settings.KALENA_ORCHESTRATOR, name=body.name, owner=body.owner,
            request=body.request.block(), limit=body.limit.block() if body.limit else None, priority=body.priority,
            labels=body.labels, constraints=body.constraints.mapping(), image=body.image, command=body.command, gang=body.gang,
            min_member=body.min_member, now_s=time.time(), wake=scheduling_request)
    except services.BatchNameTaken as exc:
        raise ApiError(409, str(exc), code="name_taken", differing=list(exc.differing)) from None
    except services.BatchConflict as exc:
        raise HttpError(409, exc.problem) from None
    except InputError as exc:
        raise HttpError(400, str(exc)) from None
    out = pod_out(selectors.batch_pod(cluster=c, name=queued.pod.workload.name))
    return Status(201 if queued.created else 200, out)


BATCH_SORTS = {"queued": ("queued_s", "id"), "submitted": ("submitted_s", "id"), "name": ("workload__name", "id"),
               "priority": ("workload__priority", "id"), "bound": ("bound_s", "id")}


BatchListQuery = list_query("BatchListQuery", tuple(BATCH_SORTS), "queued")
BatchState = Literal["pending", "bound", "completed", "refused", "deleted", "all"]
assert set(BatchState.__args__) == {*dict(BatchPod.STATES), "all"}  # the enum follows the model's states


@router.get("/clusters/{cluster}/batch", response=answers({200: list[BatchOut]}, 404),
            summary="Batch pods, oldest first; paginated (X-Total-Count, Link), filtered, sorted")
def batch_list(request: HttpRequest, response: HttpResponse, cluster: ClusterName,
               page: Query[BatchListQuery],  # type: ignore[valid-type]
               state: BatchState = Query("pending", description="pending, bound, completed, refused, deleted or all"),
               q: str = text(253, "part of the name"), node: str = text(253, "the node it is bound to"),
               owner: str = text(200, "the exact owner")):
    """``state``: pending, bound, completed, refused, deleted, or all; ``q``: part of the name;
    ``node``: the node it is bound to; ``owner``: exact owner. ``sort``: queued, submitted,
    name, priority, bound."""
    c = _cluster(cluster)
    pods = BatchPod.objects.filter(cluster=c).select_related("workload", "workload__node", "why_pending")
    if state != "all":
        pods = pods.filter(state=state)
    if q:
        pods = pods.filter(workload__name__icontains=q)
    if node:
        pods = pods.filter(workload__node__name=node)
    if owner:
        pods = pods.filter(workload__owner=owner)
    pods = pods.order_by(*order_by(page, BATCH_SORTS, "queued"))
    return [pod_out(p) for p in page_of(pods, page, request, response)]


@router.get("/clusters/{cluster}/batch/{namespace}/{pod}/why-pending", response=answers({200: dict[str, Any]}, 404),
            summary="Why a batch pod is pending")
def why_pending(request: HttpRequest, cluster: ClusterName, namespace: Namespace, pod: PodName):
    """The last scheduling pass's record for a pending pod; 404 when the pod is not pending or
    has not been through a pass yet (the detail says which)."""
    name = f"{namespace}/{pod}"
    _, found = _pod(cluster, name)
    why = selectors.why_pending(pod=found)
    if found.state != BatchPod.PENDING or why is None:
        raise HttpError(404, f"{name!r} is {found.state}" + ("" if found.state != BatchPod.PENDING
                                                            else " and has not been through a scheduling pass yet"))
    return {"pod": name, "time_s": why.time_s, **why.record}


@router.post("/clusters/{cluster}/batch/{namespace}/{pod}/complete", response=answers({200: BatchOut}, 403, 404, 409),
             summary="Report a batch pod completed")
def complete(request: HttpRequest, cluster: ClusterName, namespace: Namespace, pod: PodName):
    """The pod's job finished (reported by the job itself; refused where the orchestrator
    observes completion): it leaves every ledger at once. Completing a completed pod changes
    nothing."""
    _operator(request)
    name = f"{namespace}/{pod}"
    c, found = _pod(cluster, name)
    try:
        services.batch_complete(pod=found, orchestrator_kind=settings.KALENA_ORCHESTRATOR, now_s=time.time())
    except services.BatchConflict as exc:
        raise HttpError(409, exc.problem) from None
    return pod_out(selectors.batch_pod(cluster=c, name=name))


@router.delete("/clusters/{cluster}/batch/{namespace}/{pod}", response=answers({204: None}, 403, 404, 409, 502),
               summary="Delete a batch pod")
def delete(request: HttpRequest, cluster: ClusterName, namespace: Namespace, pod: PodName):
    _operator(request)
    c, found = _pod(cluster, f"{namespace}/{pod}")
    try:
        services.batch_delete(pod=found, orchestrator=lambda: orchestrator_for(c), now_s=time.time(),
                              by="through the API")
    except services.BatchConflict as exc:
        raise HttpError(409, exc.problem) from None
    except services.BatchNotStopped as exc:
        raise HttpError(502, exc.problem) from None
    return Status(204, None)
