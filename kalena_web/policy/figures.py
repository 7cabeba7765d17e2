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
    ``?point=``), ``on_frontier``, ``shipped``, ``contention_share`` (None when the file gives
    no production cpu core-hours) and ``over_contention`` (the share is above the contention
    tolerance, :func:`calibration_tolerance`; False when the share is unknown)."""
    from kalena_engine.replay.calibration import _key, frontier

    max_share = calibration_tolerance(calibration)["max_contention_share"][0]

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
            share = (p.production_contention_core_hours / p.production_cpu_core_hours
                     if p.production_cpu_core_hours > 0 else None)
            rows.append({"index": i, "point": p, "load_factor": load, "on_frontier": key in front,
                         "shipped": key == shipped_key, "contention_share": share,
                         "over_contention": share is not None and share > max_share})
    return sorted(rows, key=lambda r: (r["load_factor"], not r["on_frontier"],
                                       r["point"].batch_evictions_per_100_pod_hours, r["index"]))


def calibration_tolerance(calibration: Calibration) -> dict[str, tuple[float, bool]]:
    """The operator's tolerance the figure draws: ``{key: (value, from the file)}`` for
    ``max_evictions_per_100_pod_hours`` and ``max_contention_share`` (a share of production cpu
    core-hours) — the file's ``metadata.calibration.tolerance``, else the engine's defaults
    (:data:`~kalena_engine.replay.calibration.MAX_EVICTIONS_PER_100`, ``MAX_CONTENTION_SHARE``)."""
    from kalena_engine.replay.calibration import MAX_CONTENTION_SHARE, MAX_EVICTIONS_PER_100

    given = dict(calibration.tolerance)
    return {key: ((float(given[key]), True) if key in given else (default, False))
            for key, default in (("max_evictions_per_100_pod_hours", MAX_EVICTIONS_PER_100),
                                 ("max_contention_share", MAX_CONTENTION_SHARE))}


CONTENTION_TITLE = "production contention, % of production cpu core-hours"


def calibration_figure(calibration: Calibration, current: Policy) -> str:
    """The safety curve (Borg Fig. 12) as a frontier, per load factor, in two panels sharing the
    reclaimed-cpu axis. Left: reclaimed cpu against batch evictions per 100 pod-hours; the
    non-dominated settings joined by a line sorted by evictions, dominated settings apart
    (hollow), the shipped setting (a diamond), the current policy (when swept) and the knee (of
    the first load factor) marked, and the eviction tolerance a dashed vertical line. Right: the
    same points and marks against production contention (% of production cpu core-hours) with
    the contention tolerance a dashed vertical line. On both, points over the contention
    tolerance are ringed in red (one legend entry). The tolerances are the file's
    (:func:`calibration_tolerance`; "engine default" when the file gives none). Without any
    point's production cpu core-hours there is no share to draw: the left panel alone."""
    from kalena_engine.replay.calibration import variant_estimator

    rows = calibration_rows(calibration)
    loads = list(dict.fromkeys(r["load_factor"] for r in rows))
    colours = ("#2563eb", "#ea580c", "#0d9488", "#7c3aed")
    fig = go.Figure()
    knee = dict(calibration.knee)
    tolerance = calibration_tolerance(calibration)
    two = any(r["contention_share"] is not None for r in rows)

    def is_current(p) -> bool:
        """The point's setting applied to the current estimator gives it back: the same predictor
        variant (its label may pin keys, ``auto:margin_ratio=1.15:…``), μ and h."""
        try:
            return variant_estimator(current.estimator, _point_dict(p)) == current.estimator
        except ValueError:                                   # a variant this code does not know
            return False

    def share_pct(r) -> float | None:
        return None if r["contention_share"] is None else r["contention_share"] * 100

    def add(group: list, name: str, *, mode: str = "markers", **style) -> None:
        """``group``'s points on the left panel under ``name`` and, when drawn, on the right one
        (same legend entry, no line: the frontier is sorted by evictions)."""
        shares = [share_pct(r) for r in group]
        info = [(_label(r["point"]), "–" if s is None else f"{s:.4f} %") for r, s in zip(group, shares)]
        fig.add_trace(go.Scatter(
            name=name, legendgroup=name, x=[r["point"].batch_evictions_per_100_pod_hours for r in group],
            y=[r["point"].reclaimed_fraction_cpu * 100 for r in group], mode=mode, customdata=info,
            hovertemplate="%{customdata[0]}<br>%{x:.3f} evictions / 100 pod-h<br>%{y:.2f} % reclaimed cpu"
                          "<br>production contention %{customdata[1]} of production cpu<extra></extra>", **style))
        known = [(r, s, i) for r, s, i in zip(group, shares, info) if s is not None]
        if two and known:
            fig.add_trace(go.Scatter(
                name=f"{name} · contention", legendgroup=name, showlegend=False, xaxis="x2", yaxis="y",
                x=[s for _, s, _ in known], y=[r["point"].reclaimed_fraction_cpu * 100 for r, _, _ in known],
                mode="markers", customdata=[i for _, _, i in known],
                hovertemplate="%{customdata[0]}<br>%{x:.4f} % of production cpu core-hours (contention)"
                              "<br>%{y:.2f} % reclaimed cpu<extra></extra>",
                **{k: v for k, v in style.items() if k != "line"}))

    for j, load in enumerate(loads):
        colour = colours[j % len(colours)]
        here = [r for r in rows if r["load_factor"] == load]
        front = sorted((r for r in here if r["on_frontier"]), key=lambda r: r["point"].batch_evictions_per_100_pod_hours)
        apart = [r for r in here if not r["on_frontier"]]
        for group, name, marker, mode in (
                (front, f"×{load:g} frontier", dict(size=9, color=colour), "lines+markers"),
                (apart, f"×{load:g} dominated", dict(size=8, color="white", line=dict(color=colour, width=1.5)),
                 "markers")):
            if group:
                add(group, name, mode=mode, marker=marker, line=dict(color=colour, width=2))
        marks = [("shipped", [r for r in here if r["shipped"]], "#f59e0b", "diamond", 18),
                 ("current policy", [r for r in here if is_current(r["point"])], "#111827",
                  "x", 14)]
        if j == 0 and knee:
            marks.append(("knee", [r for r in here if r["point"].predictor == "asymmetric"
                                   and all(abs(getattr(r["point"], k) - v) < 1e-9 for k, v in knee.items())],
                          "#dc2626", "star", 14))
        for label, match, mcolour, symbol, size in marks:
            if match:
                add(match[:1], f"×{load:g} {label} ({_label(match[0]['point'])})",
                    marker=dict(size=size, color=mcolour, symbol=symbol, line=dict(color="#111827", width=1)))
    max_evictions, evictions_given = tolerance["max_evictions_per_100_pod_hours"]
    max_share, share_given = tolerance["max_contention_share"]
    over = [r for r in rows if r["over_contention"]]
    if over:
        add(over, f"over the contention tolerance (> {max_share * 100:g} %)",
            marker=dict(size=17, color="rgba(0,0,0,0)", symbol="circle", line=dict(color="#dc2626", width=2.5)))
    shapes, notes, ranges = [], [], {}
    for axis, limit, text, values in (
            ("x", max_evictions, f"tolerance {max_evictions:g} evictions / 100 pod-h"
                                 f"{'' if evictions_given else ' (engine default)'}",
             [r["point"].batch_evictions_per_100_pod_hours for r in rows]),
            *((("x2", max_share * 100, f"tolerance {max_share * 100:g} %<br>of production cpu core-hours"
                                       f"{'' if share_given else ' (engine default)'}",
                [share_pct(r) for r in rows if r["contention_share"] is not None]),) if two else ())):
        top = max([*values, limit]) or 1.0
        # from a little left of 0, so a point at 0 is not cut by the axis; the tolerance always in view
        ranges[axis] = [-0.03 * top, 1.05 * top]
        shapes.append(dict(type="line", xref=axis, yref="y domain", x0=limit, x1=limit, y0=0, y1=1,
                           line=dict(color="#dc2626", width=1.5, dash="dash")))
        # the label above the panel (never over a point), running away from the nearer end
        notes.append(dict(xref=axis, yref="y domain", x=limit, y=1, yanchor="bottom", showarrow=False,
                          xanchor="right" if limit > 0.6 * top else "left", align="left", text=text,
                          font=dict(color="#b91c1c")))
    layout = dict(height=500 if two else 460, margin=dict(l=60, r=20, t=48, b=60), font=FONT, paper_bgcolor="white",
                  plot_bgcolor="white", legend=dict(orientation="h", y=-0.2), shapes=shapes, annotations=notes,
                  xaxis=_axis(title="batch evictions per 100 pod-hours", range=ranges["x"],
                              **({"domain": [0.0, 0.56]} if two else {})),
                  yaxis=_axis(title="reclaimed cpu (% of requests)"))
    if two:
        layout["xaxis2"] = _axis(title=CONTENTION_TITLE, range=ranges["x2"], domain=[0.62, 1.0], anchor="y")
    fig.update_layout(**layout)
    return _to_json(fig)


def _label(p) -> str:
    head = "" if p.predictor == "asymmetric" else f"{p.predictor} · "
    return f"{head}μ {p.margin_ratio:g} · h {p.half_life_s:g} s"
