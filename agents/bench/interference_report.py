"""The printed table and the plotly HTML report of ``kalena-agent bench interference``.

The report (one self-contained HTML file, plotly.js inline) has three charts: p99 per 1 s window
over time per arm with the spike shaded, the latency CDF per arm (every request, log scale), and
the share of the service threads' runnable time spent in waits > 5 ms / > 10 ms by node cpu
utilisation bucket. plotly comes with the ``web`` extra; the agent alone does not need it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agents.bench.interference_stats import UTIL_BUCKETS

ARM_LABELS = {"isolated": "isolated", "colocated_unmanaged": "co-located, unmanaged",
              "colocated_kalena": "co-located, Kalena agent"}
ARM_COLOURS = {"isolated": "#2ca02c", "colocated_unmanaged": "#d62728", "colocated_kalena": "#1f77b4"}


def require_plotly() -> None:
    """Raise ``SystemExit`` (exit text names the fix) when plotly is not installed."""
    try:
        import plotly  # noqa: F401
    except ModuleNotFoundError:
        raise SystemExit("kalena-agent bench interference: --report-html needs plotly "
                         "(pip install 'kalena[web]' or pip install plotly)") from None


def _f(value: float | None, digits: int = 1) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _span(arm: dict[str, Any], key: str, digits: int = 1) -> str:
    s = arm["span"][key]
    return "—" if s["min"] is None else f"{s['min']:.{digits}f}–{s['max']:.{digits}f}"


def print_table(summary: dict[str, Any], out: Any = print) -> None:
    """Print the per-arm table, the ratios and the goal (both halves, so the trade is visible)."""
    arms = summary["arms"]
    out(f"{'arm':26s} {'p50 ms':>7s} {'p99 ms':>7s} {'p99 min–max':>13s} {'p99.9 ms':>9s} {'rps':>6s} "
        f"{'served':>7s} {'batch cpu-s':>11s} {'wait>5ms':>9s} {'wait>10ms':>9s} {'spike p99':>9s} {'restored s':>12s}")
    for name, arm in arms.items():
        restored = ",".join("—" if x is None else f"{x:.0f}" for x in arm["spike_restored_after_s"])
        out(f"{ARM_LABELS[name]:26s} {_f(arm['p50_ms'], 2):>7s} {_f(arm['p99_ms'], 2):>7s} "
            f"{_span(arm, 'steady.p99_ms'):>13s} {_f(arm['p999_ms'], 1):>9s} {_f(arm['throughput_rps']):>6s} "
            f"{_f(100 * (arm['served_ratio'] or 0), 1) + '%':>7s} {_f(arm['batch_cpu_seconds']):>11s} "
            f"{_f(100 * arm['wait_over_5ms_share'] if arm['wait_over_5ms_share'] is not None else None, 2) + '%':>9s} "
            f"{_f(100 * arm['wait_over_10ms_share'] if arm['wait_over_10ms_share'] is not None else None, 2) + '%':>9s} "
            f"{_f(arm['spike_p99_ms'], 1):>9s} {restored or '—':>12s}")
    out("")
    out("wait > 5 ms share by node cpu utilisation (runnable s in the bucket):")
    for name, arm in arms.items():
        cells = []
        for b in arm["wait_by_utilisation"]:
            share = b["wait_over_5ms_share"]
            cells.append(f"{b['bucket']}: {'—' if share is None else f'{100 * share:.2f}%'} ({b['runnable_s']:.1f} s)")
        out(f"  {ARM_LABELS[name]:26s} " + "  ".join(cells))
    out("")
    out(f"p99 co-located ÷ isolated: Kalena {_f(summary['p99_ratio_kalena_vs_isolated'], 3)}, "
        f"unmanaged {_f(summary['p99_ratio_unmanaged_vs_isolated'], 3)}; p99.9: Kalena "
        f"{_f(summary['p999_ratio_kalena_vs_isolated'], 3)}, unmanaged {_f(summary['p999_ratio_unmanaged_vs_isolated'], 3)}")
    out(f"spike p99 ÷ isolated spike p99: Kalena {_f(summary['spike_p99_ratio_kalena_vs_isolated'], 3)}, "
        f"unmanaged {_f(summary['spike_p99_ratio_unmanaged_vs_isolated'], 3)}")
    out(f"batch work, Kalena ÷ unmanaged: {_f(summary['batch_work_ratio_kalena_vs_unmanaged'], 3)}")
    goal = summary["goal"]
    out(f"goal: Kalena p99 within 10 % of isolated: {'yes' if goal['kalena_p99_within_10pct_of_isolated'] else 'no'}; "
        f"batch ≥ half the unmanaged work: {'yes' if goal['kalena_batch_at_least_half_of_unmanaged'] else 'no'}")
    m = summary["machine"]
    out(f"machine: {m['cpu_model']}, {m['cpus_online']} cpus, kernel {m['kernel']}; node cpus {m['node_cpus']}, "
        f"client cpus {m['client_cpus']}; PSI trigger window {m['psi_trigger_window_s']:g} s; {m['load_generator']}")
    for r in summary["per_arm_run"]:
        out(f"  rep {r['repetition']} {r['arm']:20s} load {r['loadavg_before'][0]:.2f}→{r['loadavg_after'][0]:.2f}, "
            f"node util {_f(r['node_util_mean_pct'], 0)} % (machine's other load {_f(r['other_load_on_node_cpus_mean_pct'], 0)} %)")


def write_report(summary: dict[str, Any], series: dict[str, list[dict[str, Any]]], path: Path) -> None:
    """Write the HTML report (module docstring) to ``path``."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=3, cols=1, vertical_spacing=0.09, subplot_titles=(
        "p99 latency per 1 s window (every repetition; spike shaded)",
        "latency CDF per arm (all requests of all repetitions)",
        "share of runnable time in waits > 5 ms (solid) and > 10 ms (hatched), by node cpu utilisation"))
    spike_shown = False
    for arm, runs in series.items():
        for i, s in enumerate(runs):
            xs = [w[0] for w in s["windows"]]
            ys = [w[1] for w in s["windows"]]
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=ARM_LABELS[arm], legendgroup=arm,
                                     showlegend=i == 0, line={"color": ARM_COLOURS[arm], "width": 1.5},
                                     opacity=0.9 if i == 0 else 0.55), row=1, col=1)
            if not spike_shown and s["spike_s"] > 0:
                fig.add_vrect(x0=s["spike_start_s"], x1=s["spike_start_s"] + s["spike_s"], fillcolor="orange",
                              opacity=0.15, line_width=0, annotation_text="offered load ×2", row=1, col=1)
                spike_shown = True
        lat = np.sort(np.concatenate([s["latency_ms"] for s in runs])) if runs else np.array([])
        if lat.size:
            step = max(1, lat.size // 4000)
            ys = (np.arange(lat.size) + 1) / lat.size
            fig.add_trace(go.Scatter(x=lat[::step], y=ys[::step], mode="lines", name=ARM_LABELS[arm], legendgroup=arm,
                                     showlegend=False, line={"color": ARM_COLOURS[arm]}), row=2, col=1)
    buckets = [f"{lo}-{hi}%" for lo, hi in UTIL_BUCKETS]
    for arm, data in summary["arms"].items():
        by = {b["bucket"]: b for b in data["wait_by_utilisation"]}
        for key, pattern in (("wait_over_5ms_share", ""), ("wait_over_10ms_share", "/")):
            values = [100 * by[b][key] if by[b][key] is not None else None for b in buckets]
            fig.add_trace(go.Bar(x=buckets, y=values, name=ARM_LABELS[arm], legendgroup=arm, showlegend=False,
                                 marker={"color": ARM_COLOURS[arm], "pattern": {"shape": pattern}},
                                 hovertemplate=f"{ARM_LABELS[arm]} {key}: %{{y:.2f}} %<extra></extra>"), row=3, col=1)
    fig.update_xaxes(title_text="seconds since the load started", row=1, col=1)
    fig.update_yaxes(title_text="p99 ms (log)", type="log", dtick="D2", row=1, col=1)
    fig.update_xaxes(title_text="latency ms (log)", type="log", dtick="D2", row=2, col=1)
    fig.update_yaxes(title_text="fraction of requests", row=2, col=1)
    fig.update_xaxes(title_text="node cpu utilisation (the node cpus, per second)", row=3, col=1)
    fig.update_yaxes(title_text="% of runnable time", row=3, col=1)
    m = summary["machine"]
    title = (f"Interference: p99 Kalena ÷ isolated {_f(summary['p99_ratio_kalena_vs_isolated'], 2)}, unmanaged ÷ "
             f"isolated {_f(summary['p99_ratio_unmanaged_vs_isolated'], 2)}; batch Kalena ÷ unmanaged "
             f"{_f(summary['batch_work_ratio_kalena_vs_unmanaged'], 2)}<br><sup>{m['cpu_model']}, kernel {m['kernel']}, "
             f"node cpus {m['node_cpus']}, PSI window {m['psi_trigger_window_s']:g} s, {m['load_generator']}; "
             "figures from this shared 2-core machine are indicative</sup>")
    fig.update_layout(title=title, barmode="group", height=1300, width=1100, template="plotly_white",
                      legend={"orientation": "h", "y": 1.045, "yanchor": "bottom", "x": 0},
                      margin={"t": 170})
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.write_html(str(path), include_plotlyjs="inline", full_html=True)
