"""Scheduling REST API (one ninja ``Router``): submit batch, list it, why-pending, delete.

Quantities in requests are Kuberina resource blocks in IR units (``{"cpu": 0.5, "ram": "2Gi"}``,
parsed by the planner's rules); answers give IR units too.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema, Status
from ninja.errors import HttpError

from kalena_engine.errors import InputError
from kalena_engine.resources import to_ir_block
from kalena_web.api.services import permission_refusal
from kalena_web.api.errors import ApiError
from kalena_web.api.lists import ListQuery, order_by, page_of
from kalena_web.api.times import iso
from kalena_web.inventory.models import Cluster
from kalena_web.scheduling import selectors, services
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.scheduling.models import BatchPod

router = Router(tags=["scheduling"])


class BatchIn(Schema):
    name: str
    owner: str = ""
    request: dict[str, Any]
    limit: dict[str, Any] | None = None
    priority: int = 0
    labels: dict[str, str] = {}
    constraints: dict[str, Any] = {}
    image: str = ""
    command: list[str] = []
    gang: str = ""
    min_member: int | None = None


class BatchOut(Schema):
    name: str
    owner: str
    state: str
    node: str | None
    priority: int
    request: dict[str, Any]
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
    return BatchOut(name=w.name, owner=w.owner, state=pod.state, node=w.node.name if w.node_id else None,
                    priority=w.priority, request=to_ir_block(np.asarray(w.request)), submitted_s=pod.submitted_s,
                    queued_s=pod.queued_s, bound_s=pod.bound_s, submitted_at=iso(pod.submitted_s),
                    queued_at=iso(pod.queued_s), bound_at=iso(pod.bound_s), requeues=pod.requeues,
                    binding=why.binding if why else None)


@router.post("/clusters/{cluster}/batch", response={201: BatchOut}, summary="Queue a batch pod")
def submit(request: HttpRequest, cluster: str, body: BatchIn):
    _operator(request)
    c = _cluster(cluster)
    try:
        pod = services.batch_queue(
            cluster=c, orchestrator_kind=settings.KALENA_ORCHESTRATOR, name=body.name, owner=body.owner,
            request=body.request, limit=body.limit, priority=body.priority, labels=body.labels,
            constraints=body.constraints, image=body.image, command=body.command, gang=body.gang,
            min_member=body.min_member, now_s=time.time())
    except services.BatchConflict as exc:
        raise HttpError(409, exc.problem) from None
    except InputError as exc:
        raise HttpError(400, str(exc)) from None
    out = pod_out(selectors.batch_pod(cluster=c, name=pod.workload.name))
    return Status(201, out)


BATCH_SORTS = {"queued": ("queued_s", "id"), "submitted": ("submitted_s", "id"), "name": ("workload__name", "id"),
               "priority": ("workload__priority", "id"), "bound": ("bound_s", "id")}


@router.get("/clusters/{cluster}/batch", response=list[BatchOut],
            summary="Batch pods, oldest first; paginated (X-Total-Count, Link), filtered, sorted")
def batch_list(request: HttpRequest, response: HttpResponse, cluster: str, page: Query[ListQuery],
               state: str = "pending", q: str | None = None, node: str | None = None, owner: str | None = None):
    """``state``: pending, bound, completed, deleted, or all; ``q``: part of the name; ``node``:
    the node it is bound to; ``owner``: exact owner. ``sort``: queued, submitted, name, priority, bound."""
    if state not in dict(BatchPod.STATES) and state != "all":
        raise ApiError(400, f"unknown state {state!r}; accepted: {', '.join(dict(BatchPod.STATES))}, all",
                       code="invalid_filter")
    c = _cluster(cluster)
    pods = BatchPod.objects.filter(cluster=c).select_related("workload", "workload__node", "why_pending")
    if state != "all":
        pods = pods.filter(state=state)
    if q:
        pods = pods.filter(workload__name__icontains=q[:253])
    if node:
        pods = pods.filter(workload__node__name=node[:253])
    if owner:
        pods = pods.filter(workload__owner=owner[:200])
    pods = pods.order_by(*order_by(page, BATCH_SORTS, "queued"))
    return [pod_out(p) for p in page_of(pods, page, request, response)]


@router.get("/clusters/{cluster}/batch/{path:name}/why-pending", summary="Why a batch pod is pending")
def why_pending(request: HttpRequest, cluster: str, name: str):
    _, pod = _pod(cluster, name)
    why = selectors.why_pending(pod=pod)
    if pod.state != BatchPod.PENDING or why is None:
        raise HttpError(404, f"{name!r} is {pod.state}" + ("" if pod.state != BatchPod.PENDING
                                                          else " and has not been through a scheduling pass yet"))
    return {"pod": name, "time_s": why.time_s, **why.record}


@router.post("/clusters/{cluster}/batch/{path:name}/complete", response={200: BatchOut},
             summary="Report a batch pod completed")
def complete(request: HttpRequest, cluster: str, name: str):
    """The pod's job finished (reported by the job itself; refused where the orchestrator
    observes completion): it leaves every ledger at once. Completing a completed pod changes
    nothing."""
    _operator(request)
    c, pod = _pod(cluster, name)
    try:
        services.batch_complete(pod=pod, orchestrator_kind=settings.KALENA_ORCHESTRATOR, now_s=time.time())
    except services.BatchConflict as exc:
        raise HttpError(409, exc.problem) from None
    return pod_out(selectors.batch_pod(cluster=c, name=name))


@router.delete("/clusters/{cluster}/batch/{path:name}", response={204: None}, summary="Delete a batch pod")
def delete(request: HttpRequest, cluster: str, name: str):
    _operator(request)
    c, pod = _pod(cluster, name)
    try:
        services.batch_delete(pod=pod, orchestrator=lambda: orchestrator_for(c), now_s=time.time(),
                              by="through the API")
    except services.BatchConflict as exc:
        raise HttpError(409, exc.problem) from None
    except services.BatchNotStopped as exc:
        raise HttpError(502, exc.problem) from None
    return Status(204, None)
