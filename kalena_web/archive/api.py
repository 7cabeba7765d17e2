"""Archive REST API (one ninja ``Router``): runs, their summaries and node series."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.errors import HttpError

from kalena_engine.resources import DIM_INDEX, IR_TO_INTERNAL
from kalena_web.archive import selectors
from kalena_web.archive.errors import NotFound
from kalena_web.archive.series import NODE_SERIES

router = Router(tags=["archive"])


class RunOut(Schema):
    name: str
    cluster: str
    created_at: str
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
    return RunOut(name=run.name, cluster=run.cluster.name, created_at=run.created_at.isoformat(),
                  hours=run.steps * run.step_s / 3600.0, step_s=run.step_s, steps=run.steps, summary=run.summary)


@router.get("/runs", response=list[RunOut], summary="Persisted replay runs, newest first")
def runs(request: HttpRequest):
    return [_run_out(r) for r in selectors.run_list()]


@router.get("/runs/{name}", response=RunOut, summary="One run with its replay summary")
def run(request: HttpRequest, name: str):
    try:
        return _run_out(selectors.run_get(name=name))
    except NotFound as exc:
        raise HttpError(404, str(exc)) from None


@router.get("/runs/{name}/nodes/{node}/series", response=NodeSeriesOut,
            summary="A node's capacity and production/batch aggregates over the run, in IR units")
def node_series(request: HttpRequest, name: str, node: str, dimension: str = "cpu"):
    if dimension not in DIM_INDEX:
        raise HttpError(400, f"unknown dimension {dimension!r}; accepted: {', '.join(DIM_INDEX)}")
    try:
        r = selectors.run_get(name=name)
        ts = selectors.node_series(run=r, node=selectors.node_get(run=r, name=node))
    except NotFound as exc:
        raise HttpError(404, str(exc)) from None
    d = DIM_INDEX[dimension]
    scale = IR_TO_INTERNAL[d]
    from kalena_engine.resources import IR_UNITS

    def clean(values):
        return [None if v == float("inf") else v / scale for v in values.tolist()]

    return NodeSeriesOut(run=name, node=node, dimension=dimension, unit=IR_UNITS[d], times_s=ts.times_s.tolist(),
                         series={s: clean(ts.get(s)[:, d]) for s in NODE_SERIES})
