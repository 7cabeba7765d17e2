"""Control REST API: a live cluster's nodes with their ledgers and conditions, and escalations."""

from __future__ import annotations

import time

from django.http import HttpRequest, HttpResponse
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from kalena_engine.resources import to_ir_block
from kalena_web.api.errors import answers
from kalena_web.api.lists import MAX_PAGE_SIZE, list_query, order_by, page_of, sort_items, with_page_size
from kalena_web.api.params import ClusterName, text
from kalena_web.api.times import iso
from kalena_web.control import selectors
from kalena_web.control.models import Escalation

router = Router(tags=["control"])


class NodeOut(Schema):
    name: str
    ready: bool = True
    schedulable: bool = Field(True, description="false: cordoned, or a Swarm node drained or paused (no new pods)")
    telemetry_stale: bool
    last_sample_s: float | None
    last_sample_at: str | None = None  # the *_s times as ISO 8601 (UTC)
    slack_ineligible: bool
    ineligible_until_s: float
    ineligible_until_at: str | None = None
    ineligible_reason: str
    pressure_since_s: float | None
    pressure_since_at: str | None = None
    ledger_version: int
    capacity: dict
    requests: dict
    reservations: dict
    usage: dict
    slack: dict
    headroom: dict
    reclaimed: dict
    batch_pods: int
    batch_usage: dict | None = Field(None, description="Σ usage of the node's batch pods (null until the agent "
                                                          "reported it); production's is usage less this")
    batch_throttled_s_per_s: float | None = Field(None, description="the batch pods' CFS throttled time per second, "
                                                                    "summed over the pods (null while none reported it)")


NODE_SORTS = {"row": lambda v: v.node.row, "name": lambda v: v.node.name, "batch_pods": lambda v: v.batch_pods,
              "slack_cpu": lambda v: float(v.slack[0]), "slack_ram": lambda v: float(v.slack[1]),
              "last_sample": lambda v: v.last_sample_s}
NodeListQuery = list_query("NodeListQuery", tuple(NODE_SORTS), "row")


@router.get("/clusters/{cluster}/nodes", response=answers({200: list[NodeOut]}, 404),
            summary="Nodes with their ledgers (IR units) and why they take no batch, if they don't; paginated "
                    "(X-Total-Count, Link), filtered, sorted")
def nodes(request: HttpRequest, response: HttpResponse, cluster: ClusterName,
          page: Query[NodeListQuery],  # type: ignore[valid-type]
          q: str = text(200, "part of the node name"), stale: bool | None = None,
          slack_ineligible: bool | None = None):
    """``q``: part of the node name; ``stale``: telemetry stale or fresh; ``slack_ineligible``:
    takes no batch now. ``sort``: row (default), name, batch_pods, slack_cpu, slack_ram, last_sample."""
    try:
        c = selectors.live_cluster_get(name=cluster)
    except selectors.NotFound as exc:
        raise HttpError(404, str(exc)) from None
    now = time.time()
    views = selectors.node_views(cluster=c)
    if q:
        views = [v for v in views if q.lower() in v.node.name.lower()]
    if stale is not None:
        views = [v for v in views if v.stale == stale]
    if slack_ineligible is not None:
        views = [v for v in views if (v.ineligible_until_s > now) == slack_ineligible]
    views = sort_items(views, page, NODE_SORTS, "row")
    return [NodeOut(name=v.node.name, ready=v.ready, schedulable=v.schedulable, telemetry_stale=v.stale, last_sample_s=v.last_sample_s,
                    last_sample_at=iso(v.last_sample_s),
                    slack_ineligible=v.ineligible_until_s > now, ineligible_until_s=v.ineligible_until_s,
                    ineligible_until_at=iso(v.ineligible_until_s) if v.ineligible_until_s > 0 else None,
                    ineligible_reason=v.ineligible_reason if v.ineligible_until_s > now else "",
                    pressure_since_s=v.pressure_since_s, pressure_since_at=iso(v.pressure_since_s),
                    ledger_version=v.version,
                    capacity=to_ir_block(v.capacity), requests=to_ir_block(v.request),
                    reservations=to_ir_block(v.reservation), usage=to_ir_block(v.usage), slack=to_ir_block(v.slack),
                    headroom=to_ir_block(v.headroom), reclaimed=to_ir_block(v.reclaimed), batch_pods=v.batch_pods,
                    batch_usage=None if v.batch_usage is None else to_ir_block(v.batch_usage),
                    batch_throttled_s_per_s=None if v.batch_throttled_mcpu is None else v.batch_throttled_mcpu / 1000.0)
            for v in page_of(views, page, request, response)]


class EscalationOut(Schema):
    node: str
    time_s: float
    time_at: str | None = None  # ISO 8601 (UTC) of time_s
    reason: str
    detail: str
    drained: list[str]
    until_s: float
    until_at: str | None = None


ESCALATION_SORTS = {"time": ("time_s", "id"), "node": ("node__name", "time_s", "id")}
EscalationListQuery = list_query("EscalationListQuery", tuple(ESCALATION_SORTS), "-time")


@router.get("/clusters/{cluster}/escalations", response=answers({200: list[EscalationOut]}, 404),
            summary="Escalations, newest first; paginated (X-Total-Count, Link), filtered by node and reason")
def escalations(request: HttpRequest, response: HttpResponse, cluster: ClusterName,
                page: Query[EscalationListQuery],  # type: ignore[valid-type]
                node: str = text(253, "the node's name"), reason: str = text(100, "the escalation's reason"),
                limit: int | None = Query(None, ge=1, le=MAX_PAGE_SIZE, description="page_size, for older clients")):
    """``sort``: time (default newest first: ``-time``), node. ``limit`` (1–1000, older
    clients): the same as ``page_size``."""
    page = with_page_size(page, limit)
    try:
        c = selectors.live_cluster_get(name=cluster)
    except selectors.NotFound as exc:
        raise HttpError(404, str(exc)) from None
    rows = Escalation.objects.filter(node__cluster=c).select_related("node")
    if node:
        rows = rows.filter(node__name=node)
    if reason:
        rows = rows.filter(reason=reason)
    rows = rows.order_by(*order_by(page, ESCALATION_SORTS, "-time"))
    return [EscalationOut(node=e.node.name, time_s=e.time_s, time_at=iso(e.time_s), reason=e.reason, detail=e.detail,
                          drained=e.drained, until_s=e.until_s, until_at=iso(e.until_s))
            for e in page_of(rows, page, request, response)]
