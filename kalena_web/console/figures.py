"""Plotly figures for the console, built server-side (plotly Python) and drawn in the browser
by the plotly.js the project serves from its own static files.

Every figure is returned as JSON text that a page embeds in a ``<script
type="application/json">`` block; ``static/console/console.js`` draws it. Values are in IR
units (cores, GiB). Time is a date axis that starts at 1970-01-01 00:00 UTC = replay start,
so ticks and hovers read as clock times since the start (``13:45``; ``day 2, 01:00`` past a
day); x values are milliseconds, given as ``x0``/``dx`` (steps are regular). Arrays are numpy float64, which plotly encodes as base64 typed arrays
(``{"dtype": "f8", "bdata": …}``): compact, and the page carries the exact numbers the archive
holds. An unconstrained (+inf) value is sent as NaN (a gap).

Figures are assembled as one :class:`plotly.graph_objects.Figure` with explicit axes and no
theme template (a template deep-copies hundreds of properties and costs tens of
milliseconds per page); the styling below is the whole look.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from kalena_engine.resources import CPU, RAM
from kalena_web.archive.mappers import NodeTimeSeries
from kalena_web.console.formatting import GIB

#: Colours shared with the CSS legend chips (static/console/console.css).
COLOURS = {
    "capacity": "#111827", "limit": "#7c3aed", "request": "#64748b", "reservation": "#2563eb",
    "usage": "#ea580c", "eviction": "#dc2626", "running": "#0d9488", "pending": "#d97706",
    "throttled": "#be123c", "prod_usage": "#9a3412", "batch_throttled": "#be123c",
}
#: hover names where a panel's line means more than its legend says
HOVER = {("cpu", "usage"): "Usage (Σ, served)", ("cpu", "throttled"): "Batch demand throttled"}
RUN_COLOURS = ("#2563eb", "#ea580c", "#0d9488", "#7c3aed")
DIMS = (("cpu", CPU, 1000.0, "cores"), ("ram", RAM, GIB, "GiB"))
FONT = dict(family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size=12, color="#1f2937")
GRID = "#e9edf3"


def _to_json(fig: go.Figure) -> str:
    """The figure as JSON safe to place inside a ``<script>`` element: ``<``, ``>`` and ``&``
    are escaped (``\\u003c`` …), so no name taken from an input file can close the element."""
    text = fig.to_json()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


MS = 1000.0


def _xaxis(hours: float, **extra) -> dict:
    """A date axis over ``[0, hours]`` of replay time, ticks and hovers as clock times."""
    fmt = "%H:%M" if hours <= 24 else "day %-j, %H:%M"
    minutes = next((m for limit, m in ((1.5, 10), (3, 30), (6, 60), (24, 120), (96, 360)) if hours <= limit), 1440)
    return dict(type="date", range=[0, hours * 3600 * MS * 0.999], dtick=minutes * 60 * MS, tickformat=fmt, hoverformat=fmt,
                gridcolor=GRID, zeroline=False, showline=True, linecolor="#cbd5e1", **extra)


def _yaxis(**extra) -> dict:
    return dict(gridcolor=GRID, zeroline=False, rangemode="tozero", showline=True, linecolor="#cbd5e1",
                separatethousands=True, **extra)


def _layout(*, height: int, **extra) -> go.Layout:
    return go.Layout(
        template=None, height=height, font=FONT, hovermode="x unified", plot_bgcolor="#ffffff",
        paper_bgcolor="#ffffff", margin=dict(l=64, r=28, t=40, b=44),
        legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom", bgcolor="rgba(255,255,255,0)"),
        hoverlabel=dict(bgcolor="#ffffff", bordercolor="#cbd5e1", font=dict(size=12)), **extra,
    )


def _finite(values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isfinite(values), values, np.nan)


def _timing(times_s: np.ndarray) -> dict:
    """``x0``/``dx`` in milliseconds for a regular time axis."""
    times_s = np.asarray(times_s, dtype=np.float64)
    dx = float(times_s[1] - times_s[0]) * MS if len(times_s) > 1 else MS
    return dict(x0=float(times_s[0]) * MS if len(times_s) else 0.0, dx=dx)


def served_cpu(capacity: np.ndarray, prod_usage: np.ndarray, batch_usage: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CPU a node served and the batch demand it throttled, per step (any shape, one unit).

    CPU is compressible: when production and batch together want more than the node has, the
    node serves production first (its requests are guaranteed) and batch gets what is left; the
    rest of batch's demand waits (throttled), it is not used. So

        served = min(P, C) + min(B, max(C − min(P, C), 0))
        throttled batch = B − min(B, max(C − min(P, C), 0))

    Example: C = 61.75, P = 50, B = 15.89 cores → served 50 + 11.75 = 61.75, throttled 4.14
    (the replay's demand 65.89 never shows above capacity)."""
    capacity = np.asarray(capacity, dtype=np.float64)
    prod = np.minimum(np.asarray(prod_usage, dtype=np.float64), capacity)
    batch = np.minimum(np.asarray(batch_usage, dtype=np.float64), np.maximum(capacity - prod, 0.0))
    return prod + batch, np.asarray(batch_usage, dtype=np.float64) - batch


def node_figure(ts: NodeTimeSeries, *, hours: float, at_s: float | None = None,
                evictions: Sequence[tuple[float, str]] = ()) -> str:
    """The four series of Borg's Fig. 12 plus requests, for cpu (top panel) and ram (bottom).

    Args:
        ts: the node's series; each line is the production + batch aggregate.
        hours: the run's length (x axis range).
        at_s: draws a marker line at this replay time (the page's selected moment).
        evictions: ``(time_s, label)`` of batch evictions on the node, marked on both panels.

    CPU usage is what the node served (:func:`served_cpu`: production first, batch what was
    left), never above capacity; the batch demand it throttled is its own series. RAM is not
    compressible: its usage is what the pods held.

    Trace order: for cpu — capacity, limits, requests, reservations, usage (served), throttled
    batch; for ram — capacity, limits, requests, reservations, usage (then evictions, when there
    are any, after each panel's lines).
    """
    lines = (
        ("capacity", "Capacity", ts.get("capacity"), dict(width=2.5, shape="hv")),
        ("limit", "Limits (Σ)", ts.total("limit"), dict(width=1.2, dash="dash", shape="hv")),
        ("request", "Requests (Σ)", ts.total("request"), dict(width=1.4, dash="dot", shape="hv")),
        ("reservation", "Reservations (Σ)", ts.total("reservation"), dict(width=1.8, shape="hv")),
        ("usage", "Usage (Σ)", ts.total("usage"), dict(width=1.2, shape="hv")),
    )
    timing = _timing(ts.times_s)
    served, throttled = served_cpu(ts.get("capacity")[:, CPU], ts.get("prod_usage")[:, CPU],
                                   ts.get("batch_usage")[:, CPU])
    traces = []
    for panel, (dim, d, scale, unit) in enumerate(DIMS):
        yaxis = "y" if panel == 0 else "y2"
        panel_lines = list(lines)
        if d == CPU:
            usage = np.array(ts.total("usage"), dtype=np.float64)
            usage[:, CPU] = served
            late = np.zeros_like(usage)
            late[:, CPU] = throttled
            panel_lines[-1] = ("usage", "Usage (Σ)", usage, lines[-1][3])
            panel_lines.append(("throttled", "Batch throttled", late, dict(width=1.4, dash="dot", shape="hv")))
        for key, label, values, style in panel_lines:
            traces.append(go.Scatter(
                **timing, y=_finite(values[:, d] / scale), name=label, legendgroup=key, showlegend=panel == 0,
                mode="lines" if len(ts.times_s) > 2 else "lines+markers",  # a lone point still shows
                line=dict(color=COLOURS[key], **style), xaxis="x", yaxis=yaxis,
                fill="tozeroy" if key == "usage" else None,
                fillcolor="rgba(234, 88, 12, 0.13)" if key == "usage" else None,
                hovertemplate=f"%{{y:,.2f}} {unit}<extra>{HOVER.get((dim, key), label)}</extra>",
            ))
        if evictions:
            cap = _finite(ts.get("capacity")[:, d] / scale)
            top = float(np.nanmax(cap)) if np.isfinite(cap).any() else 0.0
            traces.append(go.Scatter(
                x=np.array([t for t, _ in evictions], dtype=np.float64) * MS, y=np.full(len(evictions), top),
                mode="markers", name="Batch evictions", legendgroup="eviction", showlegend=panel == 0,
                text=[label for _, label in evictions], xaxis="x", yaxis=yaxis,
                marker=dict(symbol="x-thin", size=12, line=dict(width=2.5, color=COLOURS["eviction"])),
                hovertemplate="%{text}<extra>evicted</extra>",
            ))
    shapes = []
    if at_s is not None:
        shapes = [dict(type="line", xref="x", yref="paper", x0=at_s * MS, x1=at_s * MS, y0=0, y1=1,
                       line=dict(color="#0f172a", width=1.2, dash="dot"))]
    title = dict(xref="paper", yref="paper", x=0, xanchor="left", yanchor="bottom", showarrow=False,
                 font=dict(size=13, color="#334155"))
    layout = _layout(
        height=660, shapes=shapes,
        xaxis=_xaxis(hours, anchor="y2", title=dict(text="time since replay start")),
        yaxis=_yaxis(domain=[0.56, 1.0], title=dict(text="cores")),
        yaxis2=_yaxis(domain=[0.0, 0.44], title=dict(text="GiB")),
        annotations=[dict(title, text="<b>CPU</b> · cores", y=1.0), dict(title, text="<b>RAM</b> · GiB", y=0.44)],
    )
    layout.legend.y = 1.06
    return _to_json(go.Figure(data=traces, layout=layout))


def reclaimed_figure(times_s: np.ndarray, cluster: dict[str, np.ndarray], *, hours: float) -> str:
    """Reclaimed capacity in use over time as a share of all running requests (Σ_n X_n / Σ q,
    docs/design.md §6 — the headline's quantity), cpu and ram on one axis; the hover gives cores / GiB."""
    timing = _timing(times_s)
    traces = []
    for dim, scale, unit, colour in (("cpu", 1000.0, "cores", COLOURS["reservation"]), ("ram", GIB, "GiB", COLOURS["usage"])):
        reclaimed = np.asarray(cluster[f"reclaimed_{dim}"], dtype=np.float64)
        request = np.asarray(cluster[f"request_{dim}"], dtype=np.float64)
        share = np.divide(reclaimed, request, out=np.zeros_like(request), where=request > 0) * 100.0
        traces.append(go.Scatter(
            **timing, y=share, customdata=reclaimed / scale, name=f"{dim.upper()} reclaimed", mode="lines",
            line=dict(color=colour, width=1.8, shape="hv"),
            fill="tozeroy" if dim == "cpu" else None, fillcolor="rgba(37, 99, 235, 0.08)" if dim == "cpu" else None,
            hovertemplate=f"%{{y:.1f}} % · %{{customdata:,.0f}} {unit}<extra>{dim}</extra>"))
    layout = _layout(height=290, xaxis=_xaxis(hours),
                     yaxis=_yaxis(title=dict(text="share of running requests"), ticksuffix=" %"))
    return _to_json(go.Figure(data=traces, layout=layout))


def task_figure(times_s: np.ndarray, timeline: dict[str, np.ndarray], *, hours: float,
                window_s: tuple[float, float] | None = None) -> str:
    """A batch task's pods running and pending after each step, zoomed on ``window_s`` (the
    task's own lifetime; a double click shows the whole run)."""
    timing = _timing(times_s)
    traces = [
        go.Scatter(**timing, y=np.asarray(timeline["running"], dtype=np.float64), name="running", mode="lines",
                   line=dict(color=COLOURS["running"], width=2, shape="hv"), fill="tozeroy",
                   fillcolor="rgba(13, 148, 136, 0.15)", hovertemplate="%{y:,.0f}<extra>running</extra>"),
        go.Scatter(**timing, y=np.asarray(timeline["pending"], dtype=np.float64), name="pending", mode="lines",
                   line=dict(color=COLOURS["pending"], width=2, shape="hv"), hovertemplate="%{y:,.0f}<extra>pending</extra>"),
    ]
    xaxis = _xaxis(hours)
    if window_s is not None:
        xaxis.update(range=[window_s[0] * MS, window_s[1] * MS], dtick=None)
    layout = _layout(height=250, xaxis=xaxis, yaxis=_yaxis(title=dict(text="pods")))
    return _to_json(go.Figure(data=traces, layout=layout))


def compare_figure(runs: Sequence[tuple[str, np.ndarray, dict[str, np.ndarray]]]) -> str:
    """Reclaimed share of running requests over time (Σ X / Σ q; cpu solid, ram dashed), one
    colour per run."""
    traces = []
    hours = 0.0
    for i, (name, times_s, cluster) in enumerate(runs):
        colour = RUN_COLOURS[i % len(RUN_COLOURS)]
        timing = _timing(times_s)
        hours = max(hours, (float(times_s[-1]) + timing["dx"] / MS) / 3600.0 if len(times_s) else 0.0)
        for dim, dash in (("cpu", None), ("ram", "dash")):
            request = np.asarray(cluster[f"request_{dim}"], dtype=np.float64)
            fraction = np.divide(cluster[f"reclaimed_{dim}"], request, out=np.zeros_like(request), where=request > 0)
            traces.append(go.Scatter(**timing, y=fraction * 100.0, name=f"{name} · {dim}", mode="lines",
                                     line=dict(color=colour, width=2, dash=dash, shape="hv"),
                                     hovertemplate=f"%{{y:.1f}} %<extra>{name} {dim}</extra>"))
    layout = _layout(height=330, xaxis=_xaxis(max(hours, 1e-9)),
                     yaxis=_yaxis(title=dict(text="reclaimed share of requests (%)")))
    return _to_json(go.Figure(data=traces, layout=layout))
