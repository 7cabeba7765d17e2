"""The HTML reports of ``kalena evaluate`` (one page writer, :func:`render_page`); the policy
evaluation's: one self-contained file (Plotly's script
inlined, no network), deterministic for a seed (fixed element ids).

Charts: reclaimed cpu and ram in use over time per policy; evictions against harvest (each
policy a point; marker size is production contention); throttled batch cpu over time; and the
comparison table.
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


def render_calibration_report(summary: dict[str, object], *, title: str) -> str:
    """The calibration report: the safety curve per load factor (every setting a point, the
    frontier a line, the knee a star, the shipped default a diamond) and production
    contention against reclaimed cpu."""
    default = summary["default"]
    curve, contention = go.Figure(), go.Figure()
    palette = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd")
    for i, (load, result) in enumerate(summary["load_factors"].items()):
        colour = palette[i % len(palette)]
        pts = result["points"]
        labels = [f"μ {p['margin_ratio']:g}, h {p['half_life_s']:g} s" for p in pts]
        curve.add_trace(go.Scatter(
            x=[p["batch_evictions_per_100_pod_hours"] for p in pts], y=[100 * p["reclaimed_fraction_cpu"] for p in pts],
            mode="markers", name=f"×{load} settings", text=labels, marker={"color": colour, "size": 9, "opacity": 0.6},
            hovertemplate="%{text}<br>evictions/100 pod-h %{x:.3f}<br>reclaimed cpu %{y:.2f} %<extra></extra>"))
        front = result["frontier"]
        curve.add_trace(go.Scatter(x=[p["batch_evictions_per_100_pod_hours"] for p in front],
                                   y=[100 * p["reclaimed_fraction_cpu"] for p in front], mode="lines",
                                   name=f"×{load} frontier", line={"color": colour}))
        k = summary["knee"]
        here = [p for p in pts if (p["margin_ratio"], p["half_life_s"]) == (k["margin_ratio"], k["half_life_s"])]
        ref = [p for p in pts if (p["margin_ratio"], p["half_life_s"]) == (default["margin_ratio"], default["half_life_s"])]
        for rows, symbol, name in ((here, "star", "at the knee setting"), (ref, "diamond", "shipped default")):
            if rows:
                curve.add_trace(go.Scatter(
                    x=[rows[0]["batch_evictions_per_100_pod_hours"]], y=[100 * rows[0]["reclaimed_fraction_cpu"]],
                    mode="markers", name=f"×{load} {name} (μ {rows[0]['margin_ratio']:g}, h {rows[0]['half_life_s']:g} s)",
                    marker={"color": colour, "size": 18, "symbol": symbol, "line": {"width": 1, "color": "#222"}}))
        contention.add_trace(go.Scatter(
            x=[100 * p["reclaimed_fraction_cpu"] for p in pts], y=[p["production_contention_core_hours"] for p in pts],
            mode="markers", name=f"×{load}", text=labels, marker={"color": colour, "size": 9},
            hovertemplate="%{text}<br>reclaimed cpu %{x:.2f} %<br>contention %{y:.1f} core-h<extra></extra>"))
    curve.update_layout(title="Safety curve: reclaimed cpu against batch evictions", template="plotly_white",
                        xaxis_title="batch evictions per 100 batch pod-hours",
                        yaxis_title="reclaimed fraction of cpu requests (%)", height=500, legend={"orientation": "h"})
    contention.update_layout(title="Production contention against reclaimed cpu", template="plotly_white",
                             xaxis_title="reclaimed fraction of cpu requests (%)",
                             yaxis_title="production contention (core-hours)", height=440, legend={"orientation": "h"})
    rows = []
    for load, result in summary["load_factors"].items():
        for p in result["points"]:
            rows.append([f"×{load}", f"{p['margin_ratio']:g}", f"{p['half_life_s']:g}",
                         f"{p['reclaimed_fraction_cpu']:.2%}", f"{p['reclaimed_fraction_ram']:.2%}",
                         f"{p['batch_evictions_per_100_pod_hours']:.3f}", f"{p['production_contention_core_hours']:,.1f}"])
    table = html_table(["load", "μ", "h (s)", "reclaimed cpu", "reclaimed ram", "evictions /100 pod-h",
                        "prod contention core-h"], rows)
    k = summary["knee"]
    intro = (f"Every setting replays the same {summary['hours']:g} h (seed {summary['seed']}). Knee: the last frontier "
             f"point reached while one more % of reclaimed cpu costs at most {summary['knee_rate']:g} evictions per "
             f"100 batch pod-hours — μ {k['margin_ratio']:g}, h {k['half_life_s']:g} s. Ship as default: "
             f"{'yes' if summary['ship_knee_as_default'] else 'no'} — {html.escape(str(summary['verdict']))}.")
    return render_page(title, intro, table, [("safety-curve", curve), ("contention", contention)])


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
