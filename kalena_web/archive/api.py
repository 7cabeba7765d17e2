"""Archive REST API (one ninja ``Router``): runs, their summaries and node series."""

from __future__ import annotations

from typing import Literal

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema
from ninja.errors import HttpError

from kalena_engine.resources import DIM_INDEX, DIMS, IR_TO_INTERNAL, IR_UNITS
from kalena_web.api.errors import answers
from kalena_web.api.lists import list_query, order_by, page_of
from kalena_web.api.params import NodeName, RunName, text
from kalena_web.api.times import iso
from kalena_web.archive import selectors
from kalena_web.archive.errors import NotFound
from kalena_web.archive.series import NODE_SERIES

router = Router(tags=["archive"])


class RunOut(Schema):
    name: str
    cluster: str
    created_at: str  # ISO 8601 (UTC)
    created_s: float
    hours: float
    step_s: float
    steps: int
    summary: dict


class NodeSeriesOut(Schema):
    run: str
    node: str
    dimension: str
    unit: str
    times_s: list[float]
    series: dict[str, list[float | None]]


def _run_out(run) -> RunOut:
    return RunOut(name=run.name, cluster=run.cluster.name, created_at=iso(run.created_at.timestamp()),
                  created_s=run.created_at.timestamp(),
                  hours=run.steps * run.step_s / 3600.0, step_s=run.step_s, steps=run.steps, summary=run.summary)


RUN_SORTS = {"created": ("created_at", "id"), "name": ("name", "id")}
RunListQuery = list_query("RunListQuery", tuple(RUN_SORTS), "-created")
Dimension = Literal["cpu", "ram", "gpu", "storage", "disk_read", "disk_write", "net_in", "net_out"]
assert Dimension.__args__ == DIMS  # the enum follows the engine's dimensions


@router.get("/runs", response=answers({200: list[RunOut]}),
            summary="Persisted replay runs, newest first; paginated (X-Total-Count, Link), filtered by name")
def runs(request: HttpRequest, response: HttpResponse, page: Query[RunListQuery],  # type: ignore[valid-type]
         q: str = text(200, "part of the run name")):
    """``q``: part of the run name. ``sort``: created (default ``-created``), name."""
    rows = selectors.run_list()
    if q:
        rows = rows.filter(name__icontains=q)
    rows = rows.order_by(*order_by(page, RUN_SORTS, "-created"))
    return [_run_out(r) for r in page_of(rows, page, request, response)]


@router.get("/runs/{name}", response=answers({200: RunOut}, 404), summary="One run with its replay summary")
def run(request: HttpRequest, name: RunName):
    try:
        return _run_out(selectors.run_get(name=name))
    except NotFound as exc:
        raise HttpError(404, str(exc)) from None


@router.get("/runs/{name}/nodes/{node}/series", response=answers({200: NodeSeriesOut}, 404),
            summary="A node's capacity and production/batch aggregates over the run, in IR units")
def node_series(request: HttpRequest, name: RunName, node: NodeName,
                dimension: Dimension = Query("cpu", description=", ".join(DIMS))):
    try:
        r = selectors.run_get(name=name)
        ts = selectors.node_series(run=r, node=selectors.node_get(run=r, name=node))
    except NotFound as exc:
        raise HttpError(404, str(exc)) from None
    d = DIM_INDEX[dimension]
    scale = IR_TO_INTERNAL[d]

    def clean(values):
        return [None if v == float("inf") else v / scale for v in values.tolist()]

    return NodeSeriesOut(run=name, node=node, dimension=dimension, unit=IR_UNITS[d], times_s=ts.times_s.tolist(),
                         series={s: clean(ts.get(s)[:, d]) for s in NODE_SERIES})
