"""Plotly figure of a live node: the Borg Fig. 12 series (capacity, limits, requests,
reservations, usage) for cpu and ram over the archive's last hours, on a UTC clock axis.

Trace order (the page's live updates extend them by index): cpu capacity, limits, requests,
reservations, usage, then the same five for ram.

Unlike the replay figures, x and y are sent as plain JSON lists, not plotly's base64 typed
arrays: ``Plotly.extendTraces`` only extends arrays it holds as plain arrays of the same kind as
the points it is given (a typed-array spec is "a missing or non-array attribute" to it), and the
page extends these traces with every ledger point it receives.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from kalena_web.console.figures import COLOURS, DIMS, GRID, _layout, _to_json, _yaxis

SERIES = (("capacity", "Capacity"), ("limit", "Limits (Σ)"), ("request", "Requests (Σ)"),
          ("reservation", "Reservations (Σ)"), ("usage", "Usage (Σ)"))
STYLE = {"capacity": dict(width=2.5, shape="hv"), "limit": dict(width=1.2, dash="dash", shape="hv"),
         "request": dict(width=1.4, dash="dot", shape="hv"), "reservation": dict(width=1.8, shape="hv"),
         "usage": dict(width=1.2, shape="hv")}

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
    x in epoch milliseconds, y in cores and GiB, every array a plain list (module doc)."""
    x = _plain(history["times_s"] * 1000.0)
    traces = []
    for panel, (_dim, d, scale, unit) in enumerate(DIMS):
        for key, label in SERIES:
            values = history[key][:, d] / scale if len(x) else np.zeros(0)
            traces.append(go.Scatter(
                x=x, y=_plain(values), name=label, legendgroup=key,
                showlegend=panel == 0, mode="lines", line=dict(color=COLOURS[key], **STYLE[key]),
                xaxis="x", yaxis="y" if panel == 0 else "y2",
                fill="tozeroy" if key == "usage" else None,
                fillcolor="rgba(234, 88, 12, 0.13)" if key == "usage" else None,
                hovertemplate=f"%{{y:,.2f}} {unit}<extra>{label}</extra>"))
    title = dict(xref="paper", yref="paper", x=0, xanchor="left", yanchor="bottom", showarrow=False,
                 font=dict(size=13, color="#334155"))
    layout = _layout(
        height=600,
        xaxis=dict(type="date", anchor="y2", gridcolor=GRID, tickformatstops=TICK_FORMATS, hoverformat="%H:%M:%S UTC",
                   title=dict(text="time (UTC)"), showline=True, linecolor="#cbd5e1", zeroline=False),
        yaxis=_yaxis(domain=[0.56, 1.0], title=dict(text="cores")),
        yaxis2=_yaxis(domain=[0.0, 0.44], title=dict(text="GiB")),
        annotations=[dict(title, text="<b>CPU</b> · cores", y=1.0), dict(title, text="<b>RAM</b> · GiB", y=0.44)],
    )
    layout.legend.y = 1.06
    return _to_json(go.Figure(data=traces, layout=layout))
