"""Plotly figure of a live node: the Borg Fig. 12 series (capacity, limits, requests,
reservations, usage) for cpu and ram over the archive's last hours, on a UTC clock axis, with
usage split into production and batch and, for cpu, the batch pods' throttling.

Usage is what the agents measured, so it is what the node served: production's usage is drawn
filled from zero, batch's stacked on it up to the Σ usage line (the band between the two lines
is batch). RAM is split the same way. "Batch throttled" is how much of the time the CFS quota
held the node's batch pods back: Σ over them of Δ(``cpu.stat`` throttled time) / Δt
(:func:`kalena_web.ledger.mappers.throttled_rates`), in seconds per second — about the number of
batch runqueues waiting at any moment. It is drawn on its own right-hand axis, not in cores: a pod
throttled through every period counts about 1 whatever its demand (ten pods each held to a few
millicores read near 10 on a 0.4-core node), so it says how much batch waits, not how many cores it
would use. A pod restart resets its counter; that interval counts nothing (never a negative rate).

Trace order (the page's live updates extend them by index, ``static/console/live.js``):
cpu capacity, limits, requests, reservations, usage (Σ), production usage, batch throttled; then
ram capacity, limits, requests, reservations, usage (Σ), production usage.

Unlike the replay figures, x and y are sent as plain JSON lists, not plotly's base64 typed
arrays: ``Plotly.extendTraces`` only extends arrays it holds as plain arrays of the same kind as
the points it is given (a typed-array spec is "a missing or non-array attribute" to it), and the
page extends these traces with every ledger point it receives. A missing value (an archive row
written before batch usage and throttling were recorded) is ``null``: a gap.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from kalena_engine.resources import CPU
from kalena_web.console.figures import COLOURS, DIMS, GRID, HOVER, _layout, _to_json, _yaxis

SERIES = (("capacity", "Capacity"), ("limit", "Limits (Σ)"), ("request", "Requests (Σ)"),
          ("reservation", "Reservations (Σ)"), ("usage", "Usage (Σ)"), ("prod_usage", "Production usage"))
#: cpu only, after the panel's :data:`SERIES`
THROTTLED = ("batch_throttled", "Batch throttled")
STYLE = {"capacity": dict(width=2.5, shape="hv"), "limit": dict(width=1.2, dash="dash", shape="hv"),
         "request": dict(width=1.4, dash="dot", shape="hv"), "reservation": dict(width=1.8, shape="hv"),
         "usage": dict(width=1.2, shape="hv"), "prod_usage": dict(width=1.2, shape="hv"),
         "batch_throttled": dict(width=1.4, dash="dot", shape="hv")}
FILL = {"usage": "rgba(234, 88, 12, 0.13)", "prod_usage": "rgba(154, 52, 18, 0.22)"}
LIVE_HOVER = {("cpu", "batch_throttled"): "Batch throttled (CFS quota)"}

# Tick labels by tick spacing (ms): a few minutes of history ticks every 10 s or so, which
# "%H:%M" printed as the same label over and over (issue 16); seconds appear below a minute.
TICK_FORMATS = [dict(dtickrange=[None, 60_000], value="%H:%M:%S"),
                dict(dtickrange=[60_000, 86_400_000], value="%H:%M"),
                dict(dtickrange=[86_400_000, None], value="%b %d")]


def _plain(values: np.ndarray) -> list[float | None]:
    """A JSON list, NaN and ±inf as ``None`` (a gap): extendable by ``Plotly.extendTraces``."""
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, dtype=np.float64)]


def live_node_figure(history: dict[str, np.ndarray]) -> str:
    """JSON of the live node figure from :func:`kalena_web.control.selectors.node_history`:
    x in epoch milliseconds, y in cores and GiB (batch throttled in seconds per second on the cpu
    panel's right-hand axis), every array a plain list (module doc). A series
    the history lacks is drawn as gaps."""
    x = _plain(history["times_s"] * 1000.0)
    m = len(x)
    traces = []
    for panel, (dim, d, scale, unit) in enumerate(DIMS):
        series = [*SERIES, THROTTLED] if d == CPU else list(SERIES)
        for key, label in series:
            if key == "batch_throttled":  # (m,) mcpu
                values = np.asarray(history.get(key, np.full(m, np.nan)), dtype=np.float64) / scale
            else:
                values = np.asarray(history.get(key, np.full((m, 8), np.nan)), dtype=np.float64)
                values = values.reshape(m, 8)[:, d] / scale
            hover = LIVE_HOVER.get((dim, key)) or HOVER.get((dim, key), label)
            traces.append(go.Scatter(
                x=x, y=_plain(values), name=label, legendgroup=key,
                showlegend=panel == 0, mode="lines", line=dict(color=COLOURS[key], **STYLE[key]),
                xaxis="x", yaxis=("y3" if key == "batch_throttled" else "y") if panel == 0 else "y2",
                fill="tozeroy" if key in FILL else None, fillcolor=FILL.get(key),
                hovertemplate=f"%{{y:,.2f}} {'s/s' if key == 'batch_throttled' else unit}<extra>{hover}</extra>"))
    title = dict(xref="paper", yref="paper", x=0, xanchor="left", yanchor="bottom", showarrow=False,
                 font=dict(size=13, color="#334155"))
    layout = _layout(
        height=600,
        xaxis=dict(type="date", anchor="y2", gridcolor=GRID, tickformatstops=TICK_FORMATS, hoverformat="%H:%M:%S UTC",
                   title=dict(text="time (UTC)"), showline=True, linecolor="#cbd5e1", zeroline=False),
        yaxis=_yaxis(domain=[0.56, 1.0], title=dict(text="cores")),
        yaxis2=_yaxis(domain=[0.0, 0.44], title=dict(text="GiB")),
        yaxis3=dict(overlaying="y", side="right", rangemode="tozero", showgrid=False, zeroline=False,
                    title=dict(text="batch throttled, s/s", font=dict(color=COLOURS["batch_throttled"])),
                    tickfont=dict(color=COLOURS["batch_throttled"])),
        annotations=[dict(title, text="<b>CPU</b> · cores", y=1.0), dict(title, text="<b>RAM</b> · GiB", y=0.44)],
    )
    layout.legend.y = 1.06
    return _to_json(go.Figure(data=traces, layout=layout))
