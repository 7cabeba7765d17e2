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


def _point_dict(p) -> dict[str, object]:
    return {"predictor": p.predictor, "margin_ratio": p.margin_ratio, "half_life_s": p.half_life_s,
            "reclaimed_fraction_cpu": p.reclaimed_fraction_cpu,
            "batch_evictions_per_100_pod_hours": p.batch_evictions_per_100_pod_hours}


def calibration_rows(calibration: Calibration) -> list[dict[str, object]]:
    """The calibration's points for the page's table, by load factor, frontier points first by
    evictions then the dominated ones: each with ``index`` (its place in the file, for
    ``?point=``), ``on_frontier``, ``shipped`` and ``contention_share``."""
    from kalena_engine.replay.calibration import _key, frontier

    shipped = dict(calibration.shipped)
    shipped_key = (_key({k: v for k, v in shipped.items() if k != "qualified"}) if shipped else None)
    by_load: dict[float, list[tuple[int, object]]] = {}
    for i, p in enumerate(calibration.points):
        by_load.setdefault(p.load_factor, []).append((i, p))
    rows = []
    for load in sorted(by_load):
        pairs = by_load[load]
        front = {_key(q) for q in frontier([_point_dict(p) for _, p in pairs])}
        for i, p in pairs:
            key = _key(_point_dict(p))
            rows.append({"index": i, "point": p, "load_factor": load, "on_frontier": key in front,
                         "shipped": key == shipped_key,
                         "contention_share": (p.production_contention_core_hours / p.production_cpu_core_hours
                                              if p.production_cpu_core_hours > 0 else None)})
    return sorted(rows, key=lambda r: (r["load_factor"], not r["on_frontier"],
                                       r["point"].batch_evictions_per_100_pod_hours, r["index"]))


def calibration_figure(calibration: Calibration, current: Policy) -> str:
    """The safety curve (Borg Fig. 12) as a frontier, per load factor: reclaimed cpu against
    batch evictions per 100 pod-hours; the non-dominated settings joined by a line sorted by
    evictions, dominated settings apart (hollow), the shipped setting (a diamond), the current
    policy (when swept) and the knee (of the first load factor) marked, and the eviction
    tolerance a dashed vertical line."""
    from kalena_engine.replay.calibration import variant_estimator

    rows = calibration_rows(calibration)
    loads = list(dict.fromkeys(r["load_factor"] for r in rows))
    colours = ("#2563eb", "#ea580c", "#0d9488", "#7c3aed")
    fig = go.Figure()
    knee = dict(calibration.knee)

    def is_current(p) -> bool:
        """The point's setting applied to the current estimator gives it back: the same predictor
        variant (its label may pin keys, ``auto:margin_ratio=1.15:…``), μ and h."""
        try:
            return variant_estimator(current.estimator, _point_dict(p)) == current.estimator
        except ValueError:                                   # a variant this code does not know
            return False

    for j, load in enumerate(loads):
        colour = colours[j % len(colours)]
        here = [r for r in rows if r["load_factor"] == load]
        front = sorted((r for r in here if r["on_frontier"]), key=lambda r: r["point"].batch_evictions_per_100_pod_hours)
        apart = [r for r in here if not r["on_frontier"]]
        for group, name, marker, mode in (
                (front, f"×{load:g} frontier", dict(size=9, color=colour), "lines+markers"),
                (apart, f"×{load:g} dominated", dict(size=8, color="white", line=dict(color=colour, width=1.5)),
                 "markers")):
            if not group:
                continue
            fig.add_trace(go.Scatter(
                name=name, x=[r["point"].batch_evictions_per_100_pod_hours for r in group],
                y=[r["point"].reclaimed_fraction_cpu * 100 for r in group], mode=mode, marker=marker,
                line=dict(color=colour, width=2), text=[_label(r["point"]) for r in group],
                hovertemplate="%{text}<br>%{x:.3f} evictions / 100 pod-h<br>%{y:.2f} % reclaimed cpu<extra></extra>"))
        marks = [("shipped", [r for r in here if r["shipped"]], "#f59e0b", "diamond", 18),
                 ("current policy", [r for r in here if is_current(r["point"])], "#111827",
                  "x", 14)]
        if j == 0 and knee:
            marks.append(("knee", [r for r in here if r["point"].predictor == "asymmetric"
                                   and all(abs(getattr(r["point"], k) - v) < 1e-9 for k, v in knee.items())],
                          "#dc2626", "star", 14))
        for label, match, mcolour, symbol, size in marks:
            if match:
                p = match[0]["point"]
                fig.add_trace(go.Scatter(
                    name=f"×{load:g} {label} ({_label(p)})", x=[p.batch_evictions_per_100_pod_hours],
                    y=[p.reclaimed_fraction_cpu * 100], mode="markers",
                    marker=dict(size=size, color=mcolour, symbol=symbol, line=dict(color="#111827", width=1))))
    tolerance = dict(calibration.tolerance)
    if "max_evictions_per_100_pod_hours" in tolerance:
        limit = tolerance["max_evictions_per_100_pod_hours"]
        fig.add_vline(x=limit, line_dash="dash", line_color="#dc2626",
                      annotation_text=f"tolerance {limit:g} evictions / 100 pod-h", annotation_position="top right")
    fig.update_layout(height=460, margin=dict(l=60, r=20, t=40, b=60), font=FONT, paper_bgcolor="white",
                      plot_bgcolor="white", legend=dict(orientation="h", y=-0.2),
                      xaxis=_axis(title="batch evictions per 100 pod-hours", rangemode="tozero"),
                      yaxis=_axis(title="reclaimed cpu (% of requests)"))
    return _to_json(fig)


def _label(p) -> str:
    head = "" if p.predictor == "asymmetric" else f"{p.predictor} · "
    return f"{head}μ {p.margin_ratio:g} · h {p.half_life_s:g} s"
