"""The proposal's metrics 6–8 as Plotly figures, from a replay summary
(:mod:`kalena_engine.replay.proposal_metrics`): the run page draws them (as JSON, like every
console figure) and ``kalena evaluate policies --report-html`` draws them per policy.

* reservation accuracy — CDFs of reservation/request and usage/request, cpu and ram;
* batch forward progress — CDFs of completion-time inflation and of throttled seconds per
  completed batch instance;
* Pareto-reserve yield — the cluster's share of headroom ``C − Σ q_prod`` occupied by batch,
  hour by hour, cpu and ram.

Every function takes ``{name: summary}`` (one run on the run page, several policies in a
report) and returns a :class:`plotly.graph_objects.Figure`, or None when no summary holds the
metric (a run persisted before it existed).
"""

from __future__ import annotations

import plotly.graph_objects as go

PALETTE = ("#2563eb", "#ea580c", "#0d9488", "#7c3aed", "#dc2626", "#64748b", "#d97706", "#111827")
FONT = dict(family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif", size=12, color="#1f2937")


def _layout(fig: go.Figure, *, title: str, x: str, y: str, height: int = 380) -> go.Figure:
    axis = dict(gridcolor="#e9edf3", showline=True, linecolor="#cbd5e1", zeroline=False)
    fig.update_layout(title=title, height=height, margin=dict(l=60, r=20, t=50, b=50), font=FONT,
                      paper_bgcolor="white", plot_bgcolor="white", legend=dict(orientation="h", y=-0.2),
                      xaxis=dict(title=x, **axis), yaxis=dict(title=y, **axis))
    return fig


def accuracy_figure(summaries: dict[str, dict]) -> go.Figure | None:
    """CDFs of reservation/request (solid) and usage/request (dotted) over production pod-steps,
    cpu per run (ram dashed when one run), with the over-estimation area in the legend."""
    fig = go.Figure()
    drawn = False
    one = len(summaries) == 1
    for i, (name, s) in enumerate(summaries.items()):
        acc = s.get("reservation_accuracy")
        if not acc:
            continue
        colour = PALETTE[i % len(PALETTE)]
        for dim, dash_r in (("cpu", "solid"), ("ram", "dash")) if one else (("cpu", "solid"),):
            a = acc.get(dim) or {}
            label = f"{name} · {dim}" if not one else dim
            for key, what, dash in (("reservation_over_request", "reservation / request", dash_r),
                                    ("usage_over_request", "usage / request", "dot")):
                cdf = a.get(key) or {}
                if not cdf.get("ratio"):
                    continue
                fig.add_trace(go.Scatter(
                    x=cdf["ratio"], y=cdf["cdf"], mode="lines", line=dict(color=colour if dim == "cpu" else PALETTE[1],
                                                                          dash=dash, width=2),
                    name=f"{label}: {what}" + (f" (over-estimation area {a.get('overestimation_area', 0):.3f})"
                                               if key == "reservation_over_request" else "")))
                drawn = True
    if not drawn:
        return None
    return _layout(fig, title="Reservation accuracy: CDF over production pod-steps", x="ratio to the request",
                   y="share of pod-steps ≤ x")


def progress_figure(summaries: dict[str, dict]) -> go.Figure | None:
    """CDFs of throttled seconds per completed batch instance (and inflation in the hover)."""
    fig = go.Figure()
    drawn = False
    for i, (name, s) in enumerate(summaries.items()):
        p = s.get("batch_forward_progress")
        if not p or not p.get("throttled_seconds", {}).get("value"):
            continue
        t, f = p["throttled_seconds"], p["completion_inflation"]
        fig.add_trace(go.Scatter(
            x=t["value"], y=t["cdf"], mode="lines", line=dict(color=PALETTE[i % len(PALETTE)], width=2),
            name=f"{name}: throttled s per instance ({p.get('slowed_share', 0):.2%} slowed)",
            customdata=f.get("value"), hovertemplate="throttled %{x:,.0f} s<br>inflation at this share "
                                                     "%{customdata:.3f}<br>share %{y:.2f}<extra></extra>"))
        drawn = True
    if not drawn:
        return None
    return _layout(fig, title="Batch forward progress: throttled time per completed instance (CDF)",
                   x="cumulative throttled time (s)", y="share of completed instances ≤ x")


def inflation_figure(summaries: dict[str, dict]) -> go.Figure | None:
    """CDFs of completion-time inflation (actual ÷ undisturbed run time) per completed instance."""
    fig = go.Figure()
    drawn = False
    for i, (name, s) in enumerate(summaries.items()):
        f = (s.get("batch_forward_progress") or {}).get("completion_inflation") or {}
        if not f.get("value"):
            continue
        fig.add_trace(go.Scatter(x=f["value"], y=f["cdf"], mode="lines", name=name,
                                 line=dict(color=PALETTE[i % len(PALETTE)], width=2)))
        drawn = True
    if not drawn:
        return None
    return _layout(fig, title="Batch forward progress: completion-time inflation (CDF)",
                   x="actual ÷ undisturbed run time", y="share of completed instances ≤ x")


def reserve_figure(summaries: dict[str, dict]) -> go.Figure | None:
    """The cluster's Pareto-reserve yield hour by hour (cpu solid, ram dashed when one run)."""
    fig = go.Figure()
    drawn = False
    one = len(summaries) == 1
    for i, (name, s) in enumerate(summaries.items()):
        r = s.get("pareto_reserve_yield")
        if not r:
            continue
        for dim, dash in (("cpu", "solid"), ("ram", "dash")) if one else (("cpu", "solid"),):
            hourly = (r.get(dim) or {}).get("hourly") or {}
            if not hourly.get("hour"):
                continue
            fig.add_trace(go.Scatter(
                x=hourly["hour"], y=[100 * v for v in hourly["yield"]], mode="lines+markers",
                line=dict(color=PALETTE[i % len(PALETTE)] if dim == "cpu" else PALETTE[1], dash=dash, width=2),
                name=f"{name + ' · ' if not one else ''}{dim} (day: {100 * r[dim]['cluster']:.1f} %)"))
            drawn = True
    if not drawn:
        return None
    return _layout(fig, title="Pareto-reserve yield: headroom C − Σ q_prod occupied by batch, by hour",
                   x="replay hour", y="occupied (%)")


def proposal_figures(summaries: dict[str, dict]) -> list[tuple[str, go.Figure]]:
    """Every metric 6–8 figure that has data, as ``(id, figure)``."""
    out = []
    for key, build in (("accuracy", accuracy_figure), ("progress", progress_figure),
                       ("inflation", inflation_figure), ("reserve", reserve_figure)):
        fig = build(summaries)
        if fig is not None:
            out.append((key, fig))
    return out
