"""Re-plan REST API: the two-part export and the recommendations."""

from __future__ import annotations

import time
from typing import Any, Literal

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from kalena_engine.errors import InputError, KalenaError
from kalena_web.api.services import permission_refusal
from kalena_web.api.errors import answers
from kalena_web.api.lists import list_query, order_by, page_of
from kalena_web.api.params import TEXT, ClusterName, RowId
from kalena_web.api.times import iso
from kalena_web.inventory.models import Cluster
from kalena_web.replan.models import ReplanRecommendation
from kalena_web.replan.services import (
    NOTE_MAX, RecommendationClosed, build_export, export_window_check, recommendation_adopt, recommendation_decide,
)

router = Router(tags=["replan"])
RecommendationListQuery = list_query("RecommendationListQuery", ("created",), "-created")


def _window_param():
    """``window_s``: 60 s up to the archive's minute-row retention (:func:`export_window_check`)."""
    longest = float(settings.KALENA_RETENTION_MINUTE_S)
    return Query(min(86_400.0, longest), ge=60, le=longest,
                 description=f"seconds of history, 60–{longest:g} (KALENA_RETENTION_MINUTE_S)")


def _cluster(name: str) -> Cluster:
    try:
        return Cluster.objects.get(kind=Cluster.LIVE, name=name)
    except Cluster.DoesNotExist:
        raise HttpError(404, f"no live cluster named {name!r}") from None


def _window(window_s: float) -> float:
    try:
        return export_window_check(window_s, field="window_s")
    except InputError as exc:
        raise HttpError(400, str(exc)) from None


@router.get("/clusters/{cluster}/export", response=answers({200: dict[str, Any]}, 404),
            summary="Kalena report (JSON) beside the IR")
def export_report(request: HttpRequest, cluster: ClusterName, window_s: float = _window_param()):
    return build_export(cluster=_cluster(cluster), now_s=time.time(), window_s=_window(window_s)).report


@router.get("/clusters/{cluster}/export/workloads.yaml", response=answers({200: None}, 404),
            summary="The workloads IR with observed: blocks",
            openapi_extra={"responses": {200: {"description": "the workloads IR (YAML)", "content": {
                "application/yaml": {"schema": {"type": "object", "description": "the Kuberina workloads IR"}}}}}})
def export_workloads(request: HttpRequest, cluster: ClusterName, window_s: float = _window_param()):
    text = build_export(cluster=_cluster(cluster), now_s=time.time(), window_s=_window(window_s)).workloads_yaml
    return HttpResponse(text, content_type="application/yaml; charset=utf-8")


class RecommendationOut(Schema):
    id: int
    created_s: float
    created_at: str | None = None  # ISO 8601 (UTC) of created_s
    decided_s: float | None = None
    decided_at: str | None = None
    state: str
    drift: dict
    threshold: float
    top_nodes: list
    decided_by: str | None
    note: str


class DecisionIn(Schema):
    approve: bool
    note: str = Field("", max_length=NOTE_MAX, pattern=TEXT)
    blueprint: str = ""  # Kuberina's re-plan (solution YAML): approving adopts it (live_cluster_blueprint_replace)


def _out(rec: ReplanRecommendation) -> RecommendationOut:
    return RecommendationOut(id=rec.id, created_s=rec.created_s, created_at=iso(rec.created_s),
                             decided_s=rec.decided_s, decided_at=iso(rec.decided_s), state=rec.state, drift=rec.drift,
                             threshold=rec.threshold, top_nodes=rec.top_nodes,
                             decided_by=rec.decided_by.get_username() if rec.decided_by else None, note=rec.note)


@router.get("/clusters/{cluster}/recommendations", response=answers({200: list[RecommendationOut]}, 404),
            summary="Re-plan recommendations, newest first; paginated (X-Total-Count, Link), filtered by state")
def recommendations(request: HttpRequest, response: HttpResponse, cluster: ClusterName,
                    page: Query[RecommendationListQuery],  # type: ignore[valid-type]
                    state: Literal["all", "open", "approved", "rejected"] = Query(
                        "all", description="all, open, approved or rejected")):
    """``state``: all (default), open, approved, rejected. ``sort``: created (default ``-created``)."""
    rows = ReplanRecommendation.objects.filter(cluster=_cluster(cluster)).select_related("decided_by")
    if state != "all":
        rows = rows.filter(state=state)
    rows = rows.order_by(*order_by(page, {"created": ("created_s", "id")}, "-created"))
    return [_out(r) for r in page_of(rows, page, request, response)]


@router.post("/clusters/{cluster}/recommendations/{rec_id}/decision",
             response=answers({200: RecommendationOut}, 403, 404, 409, 413),
             summary="Approve or reject a re-plan recommendation")
def decide(request: HttpRequest, cluster: ClusterName, rec_id: RowId, body: DecisionIn):
    if not request.user.has_perm("replan.approve_replan"):
        raise HttpError(403, permission_refusal(request.user, "replan.approve_replan",
                                                "approving a re-plan needs the approver role (permission replan.approve_replan)"))
    try:
        rec = ReplanRecommendation.objects.get(cluster=_cluster(cluster), id=rec_id)
    except ReplanRecommendation.DoesNotExist:
        raise HttpError(404, f"no recommendation {rec_id} in {cluster!r}") from None
    try:
        if body.approve and body.blueprint.strip():
            recommendation_adopt(recommendation=rec, user=request.user, blueprint_text=body.blueprint,
                                 filename="the request's blueprint", note=body.note, now_s=time.time())
        else:
            recommendation_decide(recommendation=rec, user=request.user, approve=body.approve, note=body.note,
                                  now_s=time.time())
    except RecommendationClosed as exc:
        raise HttpError(409, str(exc)) from None
    except KalenaError as exc:
        raise HttpError(400, str(exc)) from None
    rec.refresh_from_db()
    return _out(rec)
