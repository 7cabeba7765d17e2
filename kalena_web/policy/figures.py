"""Plotly figures of the policy pages (drawn by ``static/console/console.js``, as every
console figure): the pre-flight's per-node slack and the calibration safety curve; and the
pre-flight's per-node slack table body (one row per node — 620 rows rendered by the template
language cost more than the pre-flight's engine, so they are joined here, escaped)."""

from __future__ import annotations

import plotly.graph_objects as go
from django.utils.html import format_html_join
from django.utils.safestring import SafeString

from kalena_engine.policy import Policy
from kalena_engine.policy_file import Calibration
from kalena_engine.preflight import Preflight
from kalena_web.console.figures import FONT, GRID, _to_json
from kalena_web.console.formatting import GIB, cores, gib

MAX_NODES = 60  # the chart shows the nodes whose slack moves most; the table lists all


def _axis(**extra) -> dict:
    return dict(gridcolor=GRID, zeroline=True, zerolinecolor="#94a3b8", showline=True, linecolor="#cbd5e1", **extra)


def preflight_chart_caption(preflight: Preflight) -> str:
    """What the slack chart shows: every node, or ``"60 of 186 nodes: the 60 whose slack moves
    most (cores + GiB between now and settled); the table below lists all 186"``."""
    total = len(preflight.nodes)
    if total <= MAX_NODES:
        return f"All {total} node{'s' if total != 1 else ''}, by name."
    return (f"{MAX_NODES} of {total} nodes: the {MAX_NODES} whose slack moves most (cores + GiB between now and "
            f"settled), by name; the table below lists all {total}.")


def _charted(preflight: Preflight) -> list:
    nodes = sorted(preflight.nodes, key=lambda n: -(abs(n.cpu_settled_mcpu - n.cpu_now_mcpu) / 1000.0
                                                    + abs(n.ram_settled_bytes - n.ram_now_bytes) / GIB))[:MAX_NODES]
    return sorted(nodes, key=lambda n: n.node)


def preflight_slack_figure(preflight: Preflight) -> str:
    """Per node: slack now and once the change settles, cpu (cores, top) and ram (GiB, bottom);
    at most :data:`MAX_NODES` nodes; the page says which above the chart (:func:`preflight_chart_caption`)."""
    nodes = _charted(preflight)
    names = [n.node for n in nodes]
    fig = go.Figure()
    for label, colour, cpu, ram in (
            ("now", "#94a3b8", [n.cpu_now_mcpu / 1000.0 for n in nodes], [n.ram_now_bytes / GIB for n in nodes]),
            ("after the change (now)", "#2563eb", [n.cpu_after_mcpu / 1000.0 for n in nodes],
             [n.ram_after_bytes / GIB for n in nodes]),
            ("settled", "#0d9488", [n.cpu_settled_mcpu / 1000.0 for n in nodes],
             [n.ram_settled_bytes / GIB for n in nodes])):
        fig.add_trace(go.Bar(name=f"{label}", x=names, y=cpu, marker_color=colour, yaxis="y", legendgroup=label))
        fig.add_trace(go.Bar(name=f"{label}", x=names, y=ram, marker_color=colour, yaxis="y2", legendgroup=label,
                             showlegend=False, xaxis="x2"))
    fig.update_layout(barmode="group", height=480, margin=dict(l=60, r=20, t=30, b=90), font=FONT,
                      paper_bgcolor="white", plot_bgcolor="white", legend=dict(orientation="h", y=1.08),
                      xaxis=_axis(anchor="y", showticklabels=False, matches="x2"),
                      xaxis2=_axis(anchor="y2", tickangle=-45),
                      yaxis=_axis(domain=[0.55, 1.0], title="slack cpu (cores)"),
                      yaxis2=_axis(domain=[0.0, 0.45], title="slack ram (GiB)"))
    return _to_json(fig)


def preflight_slack_rows(preflight: Preflight) -> SafeString:
    """The ``<tr>`` rows of the slack table: node, cpu now / after / settled (cores), ram now /
    after / settled (GiB), in the pre-flight's node order; names are escaped."""
    return format_html_join("", '<tr><td>{}</td><td class="num">{}</td><td class="num">{}</td><td class="num">{}</td>'
                                '<td class="num">{}</td><td class="num">{}</td><td class="num">{}</td></tr>\n', (
        (n.node, cores(n.cpu_now_mcpu), cores(n.cpu_after_mcpu), cores(n.cpu_settled_mcpu), gib(n.ram_now_bytes),
         gib(n.ram_after_bytes), gib(n.ram_settled_bytes)) for n in preflight.nodes))


def calibration_figure(calibration: Calibration, current: Policy) -> str:
    """The safety curve (Borg Fig. 12): reclaimed fraction (cpu, ram) against batch evictions per
    100 pod-hours, one point per swept setting labelled μ/h, the knee and the current policy
    marked."""
    points = sorted(calibration.points, key=lambda p: (p.margin_ratio, p.half_life_s))
    labels = [f"μ {p.margin_ratio:g} · h {p.half_life_s:g} s" for p in points]
    x = [p.batch_evictions_per_100_pod_hours for p in points]
    fig = go.Figure()
    fig.add_trace(go.Scatter(name="reclaimed cpu", x=x, y=[p.reclaimed_fraction_cpu * 100 for p in points],
                             mode="lines+markers", text=labels, hovertemplate="%{text}<br>%{y:.1f} %<extra></extra>",
                             line=dict(color="#2563eb")))
    fig.add_trace(go.Scatter(name="reclaimed ram", x=x, y=[p.reclaimed_fraction_ram * 100 for p in points],
                             mode="lines+markers", text=labels, hovertemplate="%{text}<br>%{y:.1f} %<extra></extra>",
                             line=dict(color="#ea580c")))
    knee = dict(calibration.knee)
    for name, values, colour, symbol in (
            ("knee", knee, "#dc2626", "star"),
            ("current policy", {"margin_ratio": current.estimator.margin_ratio,
                                "half_life_s": current.estimator.half_life_s}, "#111827", "diamond")):
        match = [p for p in points if all(abs(getattr(p, k) - v) < 1e-9 for k, v in values.items())]
        if match:
            p = match[0]
            fig.add_trace(go.Scatter(name=f"{name} (μ {p.margin_ratio:g}, h {p.half_life_s:g} s)",
                                     x=[p.batch_evictions_per_100_pod_hours], y=[p.reclaimed_fraction_cpu * 100],
                                     mode="markers", marker=dict(size=16, color=colour, symbol=symbol)))
    fig.update_layout(height=420, margin=dict(l=60, r=20, t=30, b=60), font=FONT, paper_bgcolor="white",
                      plot_bgcolor="white", legend=dict(orientation="h", y=1.1),
                      xaxis=_axis(title="batch evictions per 100 pod-hours", rangemode="tozero"),
                      yaxis=_axis(title="reclaimed fraction (%)", rangemode="tozero"))
    return _to_json(fig)
