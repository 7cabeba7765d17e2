"""The HTML reports of ``kalena evaluate`` (one page writer, :func:`render_page`); the policy
evaluation's: one self-contained file (Plotly's script
inlined, no network), deterministic for a seed (fixed element ids).

Charts: reclaimed cpu and ram in use over time per policy; evictions against harvest (each
policy a point; marker size is production contention); throttled batch cpu over time; the
proposal's metrics 6–8 per policy (reservation/request and usage/request CDFs, throttled time
and inflation CDFs, Pareto-reserve yield by hour); and the comparison table.
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

from kalena_engine.replay.evaluate import TABLE_COLUMNS

COLOURS = {"kalena": "#1f77b4", "none": "#7f7f7f", "koordinator": "#ff7f0e", "vpa": "#2ca02c",
           "oracle-60m": "#9467bd", "oracle-exact": "#d62728"}


def _over_time(timelines: dict[str, dict[str, list[float]]], key: str, title: str, unit: str) -> go.Figure:
    fig = go.Figure()
    for name, line in timelines.items():
        hours = [t / 3600.0 for t in line["time_s"]]
        dash = "dot" if name.startswith("oracle") else "solid"
        fig.add_trace(go.Scatter(x=hours, y=line[key], name=name, mode="lines",
                                 line={"color": COLOURS.get(name), "dash": dash, "width": 1.5}))
    fig.update_layout(title=title, xaxis_title="replay time (h)", yaxis_title=unit, template="plotly_white",
                      height=420, legend={"orientation": "h"})
    return fig


def _evictions_vs_harvest(summaries: dict[str, dict[str, object]]) -> go.Figure:
    fig = go.Figure()
    for name, s in summaries.items():
        contention = float(s["production_contention_core_hours"])
        fig.add_trace(go.Scatter(
            x=[float(s["batch_evictions_per_100_pod_hours"])], y=[100.0 * float(s["reclaimed_fraction_cpu"])],
            name=name, mode="markers+text", text=[name], textposition="top center",
            marker={"size": 12 + min(40.0, contention ** 0.5), "color": COLOURS.get(name), "line": {"width": 1}},
            hovertemplate=(f"{name}<br>evictions per 100 pod-h %{{x:.3f}}<br>reclaimed cpu %{{y:.2f}} %"
                           f"<br>production contention {contention:,.1f} core-h"
                           f"<br>OOM kills {s['oom_kills']}<extra></extra>"),
        ))
    fig.update_layout(title="Evictions against harvest (marker size: production contention core-hours)",
                      xaxis_title="batch evictions per 100 pod-hours", yaxis_title="reclaimed fraction of cpu requests (%)",
                      template="plotly_white", height=460, showlegend=False)
    return fig


def _table(summaries: dict[str, dict[str, object]]) -> str:
    rows = [[name] + ["—" if s.get(key) is None else fmt.format(s.get(key)) for key, _, fmt in TABLE_COLUMNS]
            for name, s in summaries.items()]
    return html_table(["policy"] + [h for _, h, _ in TABLE_COLUMNS], rows)


STYLE = ("body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;"
         "font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
         "td:first-child,th:first-child{text-align:left}th{background:#f4f4f4}")


def html_table(headers: list[str], rows: list[list[str]]) -> str:
    """A plain HTML table (cells escaped; the first column bold)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td><b>{html.escape(c)}</b></td>" if i == 0 else f"<td>{html.escape(c)}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_page(title: str, intro: str, table: str, figures: list[tuple[str, go.Figure]]) -> str:
    """One self-contained report page: title, an intro paragraph (HTML), a table (HTML) and
    Plotly figures with fixed div ids (Plotly's script inlined once, no network)."""
    parts = []
    for i, (div_id, fig) in enumerate(figures):
        parts.append(pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False, div_id=div_id,
                                 config={"displaylogo": False}))
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1><p>{intro}</p>"
            f"{table}{''.join(parts)}</body></html>\n")


def render_report(summaries: dict[str, dict[str, object]], timelines: dict[str, dict[str, list[float]]],
                  *, title: str) -> str:
    """The policy evaluation's HTML text (see module doc)."""
    figures = [
        ("reclaimed-cpu", _over_time(timelines, "reclaimed_cores", "Reclaimed cpu in use (Σ X_n, docs/design.md §6)", "cores")),
        ("reclaimed-ram", _over_time(timelines, "reclaimed_ram_gib", "Reclaimed ram in use", "GiB")),
        ("evictions-harvest", _evictions_vs_harvest(summaries)),
        ("throttled", _over_time(timelines, "throttled_cores", "Batch cpu throttled (demand − granted)", "cores")),
    ]
    from kalena_web.console.proposal_figures import proposal_figures  # metrics 6–8, as the run page draws them

    figures += [(f"metrics-{key}", fig) for key, fig in proposal_figures(summaries)]
    return render_page(title, "Same inputs, seed and scheduler for every policy; only the production reservation rule "
                              "differs (docs/evaluation.md). Oracles are dotted.", _table(summaries), figures)


def write_page(path: Path, text: str) -> str:
    """Write a report whole (or not at all); returns a line saying where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, path)
    return f"  report written to {path}"


def write_report(path: Path, summaries: dict[str, dict[str, object]], timelines: dict[str, dict[str, list[float]]],
                 *, title: str) -> str:
    """Write the policy evaluation's report whole (or not at all); returns a line saying where."""
    return write_page(path, render_report(summaries, timelines, title=title))


def render_compaction_report(summary: dict[str, object], *, title: str) -> str:
    """The compaction report: nodes needed per seed with reclamation on and off (the p90 as
    dashed lines), and every probe's unserved share of batch core-hours against cluster size
    (the allowance as a dotted line)."""
    trials = summary["trials"]
    seeds = [str(t["seed"]) for t in trials]
    needed = go.Figure()
    for arm, colour in (("on", COLOURS["kalena"]), ("off", COLOURS["none"])):
        needed.add_trace(go.Bar(x=seeds, y=[t[f"nodes_needed_{arm}"] for t in trials], name=f"reclamation {arm}",
                                marker={"color": colour}))
        p90 = summary[f"nodes_needed_p90_{arm}"]
        if p90 is not None:
            needed.add_hline(y=p90, line={"color": colour, "dash": "dash"}, annotation_text=f"p90 {arm}: {p90}")
    needed.update_layout(title="Nodes needed per seed", xaxis_title="seed", yaxis_title="nodes", barmode="group",
                         template="plotly_white", height=440, legend={"orientation": "h"})
    probes = go.Figure()
    for arm, colour in (("on", COLOURS["kalena"]), ("off", COLOURS["none"])):
        points = [(p["nodes"], 100.0 * p["unserved_fraction"], t["seed"]) for t in trials for p in t["probes"]
                  if p["arm"] == arm and p["unserved_fraction"] is not None]
        points.sort()
        probes.add_trace(go.Scatter(x=[p[0] for p in points], y=[p[1] for p in points], mode="markers",
                                    name=f"reclamation {arm}", marker={"color": colour, "size": 7},
                                    text=[f"seed {p[2]}" for p in points],
                                    hovertemplate="%{text}<br>%{x} nodes<br>unserved %{y:.3f} %<extra></extra>"))
    allowance_pct = 100.0 * float(summary["allowance"])
    probes.add_hline(y=allowance_pct, line={"color": "#d62728", "dash": "dot"})
    if allowance_pct > 0:  # placed by hand: add_hline's annotation ignores the log axis (plotly.py #3273)
        probes.add_annotation(x=1, xref="paper", xanchor="right", y=math.log10(allowance_pct), yref="y",
                              yanchor="bottom", text=f"allowance {allowance_pct:g} %", showarrow=False)
    probes.update_layout(title="Every repack tried: unserved batch core-hours at the window's end",
                         xaxis_title="cluster nodes", yaxis_title="unserved share of batch demand (%)",
                         yaxis_type="log", template="plotly_white", height=460, legend={"orientation": "h"})
    rows = [[str(t["seed"]), str(t["nodes_needed_on"]), str(t["nodes_needed_off"]),
             "—" if t["nodes_needed_on"] is None or t["nodes_needed_off"] is None
             else str(t["nodes_needed_off"] - t["nodes_needed_on"]), str(len(t["probes"]))] for t in trials]
    table = html_table(["seed", "nodes on", "nodes off", "extra", "replays"], rows)
    intro = (f"Window {summary['window_hours']:g} h from {summary['window_start_h']:g} h of the trace day; "
             f"a cluster fits when production is placed and at most {100 * float(summary['allowance']):g} % of batch "
             f"core-hours is unserved at the end. p90 (nearest rank) over {len(trials)} seeds: on "
             f"{summary['nodes_needed_p90_on']}, off {summary['nodes_needed_p90_off']}, extra without reclamation "
             f"{summary['extra_nodes_without_reclamation_p90']}. Production is repacked by first-fit decreasing, "
             "<b>not Kuberina's solver</b>: these counts are not comparable with Kuberina's 152 active nodes.")
    return render_page(title, intro, table, [("nodes-needed", needed), ("probes", probes)])


def write_compaction_report(path: Path, summary: dict[str, object], *, title: str) -> str:
    """Write the compaction report whole (or not at all); returns a line saying where."""
    return write_page(path, render_compaction_report(summary, title=title))


PREDICTOR_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
                     "#ff7f0e", "#7f7f7f")


def safety_curve_figure(points: list[dict[str, object]], baselines: dict[str, dict[str, object]],
                        shipped: dict[str, object] | None, *, max_evictions: float, load: str) -> go.Figure:
    """One load factor's safety curve as a frontier: every setting a point coloured by predictor
    (dominated ones hollow and apart), the frontier a line through its points sorted by
    evictions, the baselines as labelled squares, the shipped setting a large diamond and the
    eviction tolerance a dashed vertical line."""
    from kalena_engine.replay.calibration import _key, describe, frontier

    front = frontier(points)
    on_front = {_key(p) for p in front}
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=[p["batch_evictions_per_100_pod_hours"] for p in sorted(front, key=lambda p: p["batch_evictions_per_100_pod_hours"])],
        y=[100 * p["reclaimed_fraction_cpu"] for p in sorted(front, key=lambda p: p["batch_evictions_per_100_pod_hours"])],
        mode="lines", name="frontier (non-dominated, by evictions)", line={"color": "#111827", "width": 2}))
    predictors = list(dict.fromkeys(str(p.get("predictor", "asymmetric")) for p in points))
    for i, name in enumerate(predictors):
        colour = PREDICTOR_COLOURS[i % len(PREDICTOR_COLOURS)]
        for dominated in (False, True):
            rows = [p for p in points if str(p.get("predictor", "asymmetric")) == name
                    and (_key(p) not in on_front) == dominated]
            if not rows:
                continue
            fig.add_trace(go.Scatter(
                x=[p["batch_evictions_per_100_pod_hours"] for p in rows], y=[100 * p["reclaimed_fraction_cpu"] for p in rows],
                mode="markers", name=f"{name}{' (dominated)' if dominated else ''}", legendgroup=name,
                text=[describe(p) for p in rows],
                marker={"color": "white" if dominated else colour, "size": 9 if dominated else 11,
                        "line": {"color": colour, "width": 2}, "symbol": "circle"},
                hovertemplate="%{text}<br>evictions/100 pod-h %{x:.3f}<br>reclaimed cpu %{y:.2f} %<extra></extra>"))
    for rule, b in baselines.items():
        fig.add_trace(go.Scatter(
            x=[b["batch_evictions_per_100_pod_hours"]], y=[100 * b["reclaimed_fraction_cpu"]], mode="markers+text",
            name=rule, text=[rule], textposition="bottom center",
            marker={"symbol": "square", "size": 12, "color": COLOURS.get(rule, "#7f7f7f")},
            hovertemplate=f"{rule}<br>evictions/100 pod-h %{{x:.3f}}<br>reclaimed cpu %{{y:.2f}} %<extra></extra>"))
    if shipped is not None:
        here = [p for p in points if _key(p) == _key(shipped)]
        if here:
            fig.add_trace(go.Scatter(
                x=[here[0]["batch_evictions_per_100_pod_hours"]], y=[100 * here[0]["reclaimed_fraction_cpu"]],
                mode="markers", name=f"shipped: {describe(shipped)}",
                marker={"symbol": "diamond", "size": 20, "color": "#f59e0b", "line": {"width": 2, "color": "#111827"}}))
    fig.add_vline(x=max_evictions, line_dash="dash", line_color="#dc2626",
                  annotation_text=f"tolerance {max_evictions:g} evictions/100 pod-h", annotation_position="top right")
    fig.update_layout(title=f"Safety curve at ×{load}: reclaimed cpu against batch evictions", template="plotly_white",
                      xaxis_title="batch evictions per 100 batch pod-hours",
                      yaxis_title="reclaimed fraction of cpu requests (%)", height=560, legend={"orientation": "h", "y": -0.22})
    return fig


def contention_figure(points: list[dict[str, object]], baselines: dict[str, dict[str, object]],
                      shipped: dict[str, object] | None, *, max_share: float, load: str) -> go.Figure:
    """Production contention (share of production cpu core-hours) against reclaimed cpu, the
    tolerance a dashed horizontal line."""
    from kalena_engine.replay.calibration import _key, contention_share, describe

    fig = go.Figure()
    predictors = list(dict.fromkeys(str(p.get("predictor", "asymmetric")) for p in points))
    for i, name in enumerate(predictors):
        rows = [p for p in points if str(p.get("predictor", "asymmetric")) == name]
        fig.add_trace(go.Scatter(
            x=[100 * p["reclaimed_fraction_cpu"] for p in rows], y=[100 * contention_share(p) for p in rows],
            mode="markers", name=name, text=[describe(p) for p in rows],
            marker={"color": PREDICTOR_COLOURS[i % len(PREDICTOR_COLOURS)], "size": 10},
            hovertemplate="%{text}<br>reclaimed cpu %{x:.2f} %<br>contention %{y:.4f} %<extra></extra>"))
    for rule, b in baselines.items():
        fig.add_trace(go.Scatter(x=[100 * b["reclaimed_fraction_cpu"]], y=[100 * contention_share(b)],
                                 mode="markers+text", name=rule, text=[rule], textposition="bottom center",
                                 marker={"symbol": "square", "size": 12, "color": COLOURS.get(rule, "#7f7f7f")}))
    if shipped is not None:
        here = [p for p in points if _key(p) == _key(shipped)]
        if here:
            fig.add_trace(go.Scatter(x=[100 * here[0]["reclaimed_fraction_cpu"]], y=[100 * contention_share(here[0])],
                                     mode="markers", name="shipped",
                                     marker={"symbol": "diamond", "size": 20, "color": "#f59e0b",
                                             "line": {"width": 2, "color": "#111827"}}))
    fig.add_hline(y=100 * max_share, line_dash="dash", line_color="#dc2626",
                  annotation_text=f"tolerance {100 * max_share:g} % of production cpu")
    fig.update_layout(title=f"Production contention against reclaimed cpu at ×{load}", template="plotly_white",
                      xaxis_title="reclaimed fraction of cpu requests (%)",
                      yaxis_title="production contention (% of production cpu core-hours)", height=440,
                      legend={"orientation": "h"})
    return fig


def render_calibration_report(summary: dict[str, object], *, title: str) -> str:
    """The calibration report: per load factor, the safety curve as a frontier (every setting
    and baseline a point, dominated settings hollow, the shipped setting a diamond, the eviction
    tolerance a line) and production contention against reclaimed cpu (its tolerance a line);
    the shipped setting's table and every point's."""
    from kalena_engine.replay.calibration import contention_share, describe

    ship = summary["shipped"]
    charts = []
    for load, result in summary["load_factors"].items():
        baselines = result.get("baselines", {})
        charts.append((f"safety-curve-x{load}", safety_curve_figure(
            result["points"], baselines, ship["setting"], max_evictions=float(ship["max_evictions_per_100_pod_hours"]),
            load=load)))
        charts.append((f"contention-x{load}", contention_figure(
            result["points"], baselines, ship["setting"], max_share=float(ship["max_contention_share"]), load=load)))
    rows = []
    for load, result in summary["load_factors"].items():
        oracle = result.get("baselines", {}).get("oracle-60m")
        for p in [*result["points"], *result.get("baselines", {}).values()]:
            ratio = (f"{p['reclaimed_fraction_cpu'] / oracle['reclaimed_fraction_cpu']:.3f}"
                     if oracle and oracle["reclaimed_fraction_cpu"] > 0 else "—")
            rows.append([f"×{load}", str(p.get("predictor", "asymmetric")),
                         f"{p['margin_ratio']:g}" if "margin_ratio" in p else "", f"{p['half_life_s']:g}" if "half_life_s" in p else "",
                         f"{p['reclaimed_fraction_cpu']:.2%}", ratio, f"{p['reclaimed_fraction_ram']:.2%}",
                         f"{p['batch_evictions_per_100_pod_hours']:.3f}", f"{p['production_contention_core_hours']:,.1f}",
                         f"{contention_share(p):.4%}", f"{p['oom_kills']:.0f}"])
    table = html_table(["load", "predictor / policy", "μ", "h (s)", "reclaimed cpu", "÷ oracle-60m", "reclaimed ram",
                        "evictions /100 pod-h", "prod contention core-h", "share", "OOM kills"], rows)
    shipped_rows = [[f"×{load}", f"{r['reclaimed_fraction_cpu']:.2%}",
                     "—" if r["harvest_ratio_vs_oracle_60m"] is None else f"{r['harvest_ratio_vs_oracle_60m']:.3f}",
                     f"{r['batch_evictions_per_100_pod_hours']:.3f}", f"{r['production_contention_core_hours']:,.1f}",
                     f"{r['production_contention_share']:.4%}", f"{r['oom_kills']:.0f}"]
                    for load, r in ship.get("loads", {}).items()]
    shipped_table = html_table(["load", "reclaimed cpu", "÷ oracle-60m", "evictions /100 pod-h", "prod contention core-h",
                                "contention share", "OOM kills"], shipped_rows)
    k = summary["knee"]
    intro = (f"Every setting replays the same {summary['hours']:g} h (seed {summary['seed']}, usage from "
             f"{html.escape(str(summary.get('inputs', {}).get('usage_dir', '')))}, "
             f"{summary.get('usage_offset_h', 0):g} h into it"
             + (f"; the estimator warmed with the {summary['warm_h']:g} h before it" if summary.get("warm_h") else
                "; the estimator starts from nothing")
             + f"). <b>Shipped (the operator's tolerance):</b> "
             f"{html.escape(describe(ship['setting']))} — {html.escape(str(ship['why']))}. Knee (rate "
             f"{summary['knee_rate']:g}): {html.escape(describe(k))}. {html.escape(str(summary['verdict']))}."
             f"</p>{shipped_table}<p>")
    return render_page(title, intro, table, charts)


def write_calibration_report(path: Path, summary: dict[str, object], *, title: str) -> str:
    """Write the calibration report whole (or not at all); returns a line saying where."""
    return write_page(path, render_calibration_report(summary, title=title))


def render_pareto_report(summary: dict[str, object], *, title: str) -> str:
    """The Pareto report: useful work per setting (production and batch stacked) and the active
    nodes the repack used."""
    rows = [r for r in summary["settings"].values() if r["production_fits"]]
    x = [f"{r['pareto_percent']:g} %" for r in rows]
    work = go.Figure()
    work.add_trace(go.Bar(x=x, y=[r["production_cpu_core_hours"] for r in rows], name="production",
                          marker={"color": COLOURS["none"]}))
    work.add_trace(go.Bar(x=x, y=[r["batch_cpu_core_hours"] for r in rows], name="batch",
                          marker={"color": COLOURS["kalena"]}))
    work.update_layout(title="Total useful work per Pareto setting (cpu core-hours)", barmode="stack",
                       xaxis_title="Pareto setting (production packed against this share of capacity)",
                       yaxis_title="core-hours", template="plotly_white", height=440, legend={"orientation": "h"})
    nodes = go.Figure(go.Scatter(x=x, y=[r["active_nodes"] for r in rows], mode="lines+markers", name="active nodes",
                                 line={"color": COLOURS["koordinator"]}))
    nodes.update_layout(title="Active nodes the repack used", xaxis_title="Pareto setting", yaxis_title="nodes",
                        template="plotly_white", height=380)
    table = html_table(["pareto", "active nodes", "useful core-h", "production core-h", "batch core-h", "per node",
                        "reclaimed cpu", "evictions /100 pod-h"],
                       [[f"{r['pareto_percent']:g} %", str(r["active_nodes"]), f"{r['useful_core_hours']:,.0f}",
                         f"{r['production_cpu_core_hours']:,.0f}", f"{r['batch_cpu_core_hours']:,.0f}",
                         f"{r['useful_core_hours_per_active_node']:,.1f}", f"{r['reclaimed_fraction_cpu']:.2%}",
                         f"{r['batch_evictions_per_100_pod_hours']:.3f}"] for r in rows]
                       + [[f"{r['pareto_percent']:g} %", "production does not fit the capped capacity"] + [""] * 6
                          for r in summary["settings"].values() if not r["production_fits"]])
    intro = (f"Reclamation on; {summary['hours']:g} h, seed {summary['seed']}. Production is packed by first-fit "
             "decreasing against the capped capacity, <b>standing in for Kuberina's solver</b>; the replay uses the "
             f"real capacity. Most useful work: {html.escape(str(summary['most_useful_work']))}.")
    return render_page(title, intro, table, [("useful-work", work), ("active-nodes", nodes)])


def write_pareto_report(path: Path, summary: dict[str, object], *, title: str) -> str:
    """Write the Pareto report whole (or not at all); returns a line saying where."""
    return write_page(path, render_pareto_report(summary, title=title))
