"""``GET /api/clusters``: the clusters the control plane knows, for automation to start from."""

from __future__ import annotations

from django.db.models import Count, IntegerField, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.http import HttpRequest, HttpResponse
from typing import Literal

from ninja import Field, Query, Router, Schema

from kalena_web.api.errors import ApiError, answers
from kalena_web.api.lists import list_query, order_by, page_of
from kalena_web.api.params import TEXT, ClusterName
from kalena_web.api.times import iso
from kalena_web.inventory.models import Cluster, Node
from kalena_web.scheduling.models import BatchPod

router = Router(tags=["clusters"])


class ClusterOut(Schema):
    name: str
    kind: str = Field(description="live (run by the control plane) or replay (a recorded run's cluster)")
    created_at: str = Field(description="ISO 8601, UTC")
    created_s: float = Field(description="the same instant, epoch seconds")
    nodes: int
    batch_pending: int
    batch_bound: int


class ClusterFilter(Schema):
    kind: Literal["live", "replay", "all"] = Field("live", description="live, replay or all")
    q: str = Field("", pattern=TEXT, max_length=200, description="part of the name, any case")


SORTS = {"name": ("name", "id"), "created": ("created_at", "id"), "nodes": ("node_count", "id")}
ClusterListQuery = list_query("ClusterListQuery", tuple(SORTS), "name")


def _clusters(filters: ClusterFilter):
    rows = Cluster.objects.all()
    if filters.kind != "all":
        rows = rows.filter(kind=filters.kind)
    if filters.q:
        rows = rows.filter(name__icontains=filters.q)
    return rows.annotate(node_count=_count(Node.objects.all()),
                         pending=_count(BatchPod.objects.filter(state=BatchPod.PENDING)),
                         bound=_count(BatchPod.objects.filter(state=BatchPod.BOUND)))


def _count(rows):
    """A correlated ``COUNT(*)`` of ``rows`` in the outer cluster (one query for the whole page)."""
    counted = rows.filter(cluster=OuterRef("pk")).order_by().values("cluster").annotate(n=Count("id")).values("n")
    return Coalesce(Subquery(counted, output_field=IntegerField()), 0)


def _out(c) -> ClusterOut:
    return ClusterOut(name=c.name, kind=c.kind, created_at=iso(c.created_at.timestamp()),
                      created_s=c.created_at.timestamp(), nodes=c.node_count, batch_pending=c.pending,
                      batch_bound=c.bound)


@router.get("/clusters", response=answers({200: list[ClusterOut]}), summary="Clusters (live by default), paginated")
def clusters(request: HttpRequest, response: HttpResponse, filters: Query[ClusterFilter],
             page: Query[ClusterListQuery]):  # type: ignore[valid-type]
    rows = _clusters(filters).order_by(*order_by(page, SORTS, "name"))
    return [_out(c) for c in page_of(rows, page, request, response)]


@router.get("/clusters/{cluster}", response=answers({200: ClusterOut}, 404), summary="One live cluster")
def cluster(request: HttpRequest, cluster: ClusterName):
    row = _clusters(ClusterFilter(kind="live")).filter(name=cluster).first()
    if row is None:
        raise ApiError(404, f"no live cluster named {cluster!r}")
    return _out(row)
