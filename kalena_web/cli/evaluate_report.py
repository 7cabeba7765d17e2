"""The HTML report of ``kalena evaluate policies``: one self-contained file (Plotly's script
inlined, no network), deterministic for a seed (fixed element ids).

Charts: reclaimed cpu and ram in use over time per policy; evictions against harvest (each
policy a point; marker size is production contention); throttled batch cpu over time; and the
comparison table.
"""

from __future__ import annotations

import html
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
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ["policy"] + [h for _, h, _ in TABLE_COLUMNS])
    rows = []
    for name, s in summaries.items():
        cells = [f"<td><b>{html.escape(name)}</b></td>"]
        for key, _, fmt in TABLE_COLUMNS:
            value = s.get(key)
            cells.append(f"<td>{'—' if value is None else html.escape(fmt.format(value))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def render_report(summaries: dict[str, dict[str, object]], timelines: dict[str, dict[str, list[float]]],
                  *, title: str) -> str:
    """The report's HTML text (see module doc)."""
    figures = [
        ("reclaimed-cpu", _over_time(timelines, "reclaimed_cores", "Reclaimed cpu in use (Σ X_n, DESIGN §6)", "cores")),
        ("reclaimed-ram", _over_time(timelines, "reclaimed_ram_gib", "Reclaimed ram in use", "GiB")),
        ("evictions-harvest", _evictions_vs_harvest(summaries)),
        ("throttled", _over_time(timelines, "throttled_cores", "Batch cpu throttled (demand − granted)", "cores")),
    ]
    parts = []
    for i, (div_id, fig) in enumerate(figures):
        parts.append(pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False, div_id=div_id,
                                 config={"displaylogo": False}))
    style = ("body{font-family:system-ui,sans-serif;margin:24px;color:#222}table{border-collapse:collapse;"
             "font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
             "td:first-child,th:first-child{text-align:left}th{background:#f4f4f4}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
            "<p>Same inputs, seed and scheduler for every policy; only the production reservation rule differs "
            "(docs/evaluation.md). Oracles are dotted.</p>"
            f"{_table(summaries)}{''.join(parts)}</body></html>\n")


def write_report(path: Path, summaries: dict[str, dict[str, object]], timelines: dict[str, dict[str, list[float]]],
                 *, title: str) -> str:
    """Write the report whole (or not at all); returns a line saying where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(render_report(summaries, timelines, title=title), encoding="utf-8")
    os.replace(partial, path)
    return f"  report written to {path}"
