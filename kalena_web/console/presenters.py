"""Shape selector results for templates: which figures a page shows, in which order, with
which words and units. Pure functions of their arguments (no queries)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena_engine.resources import CPU, RAM
from kalena_web.archive.mappers import NodeTimeSeries
from kalena_web.console.formatting import clock, cores, duration, gib, integer, pct, quantity

GIB = float(2**30)


@dataclass(frozen=True)
class Figure:
    """One headline number: ``value`` with a ``label`` and an optional ``note`` below it."""

    label: str
    value: str
    note: str = ""
    tone: str = ""  # "", "good", "bad"


def headline(summary: dict) -> list[Figure]:
    """The overview's headline figures, from the replay summary."""
    s = summary
    evicted = s.get("batch_evicted", 0)
    reasons = ", ".join(f"{k.replace('_', ' ')} {v:,}" for k, v in (s.get("batch_evicted_by_reason") or {}).items())
    prod_evictions = s.get("production_evictions", 0)
    over = s.get("production_over_capacity_steps", 0)
    hard = s.get("blueprint_violations", 0)
    return [
        Figure("Reclaimed · cpu", pct(s.get("reclaimed_fraction_cpu")),
               f"{s.get('mean_reclaimed_cores', 0):,.1f} cores in use on average"),
        Figure("Reclaimed · ram", pct(s.get("reclaimed_fraction_ram")),
               f"{s.get('mean_reclaimed_ram_gib', 0):,.1f} GiB in use on average"),
        Figure("Usage fill · cpu / ram", f"{pct(s.get('usage_fill_cpu'))} / {pct(s.get('usage_fill_ram'))}",
               "Σ usage / Σ capacity on nodes taking batch"),
        Figure("Slack left · cpu / ram", f"{pct(s.get('slack_fill_cpu'))} / {pct(s.get('slack_fill_ram'))}",
               "(Σ C − Σ reservations) / Σ C"),
        Figure("Batch pods submitted", integer(s.get("batch_submitted")),
               f"{integer(s.get('batch_placed'))} placed · {integer(s.get('batch_completed'))} completed"),
        Figure("Batch pods evicted", integer(evicted), reasons or "none", "bad" if evicted else "good"),
        Figure("Production evictions", integer(prod_evictions),
               f"{integer(over)} node-steps with production usage over capacity",
               "bad" if prod_evictions or over else "good"),
        Figure("Blueprint violations", integer(hard),
               f"{integer(s.get('blueprint_soft_violations'))} soft (affinity, spread) reported apart",
               "bad" if hard else "good"),
    ]


def run_facts(run) -> list[tuple[str, str]]:
    """Short facts about how a run was replayed."""
    s, c = run.summary, run.config
    return [
        ("cluster", run.cluster.name),
        ("nodes", f"{s.get('nodes', '–')} · {s.get('active_nodes', '–')} active · {s.get('batch_nodes', '–')} taking batch"),
        ("production pods", integer(s.get("production_pods"))),
        ("replayed", f"{duration(run.steps * run.step_s)} in {duration(run.step_s)} steps"),
        ("usage mapping", str(c.get("usage_mapping", "–"))),
        ("seed · load factor", f"{c.get('seed', '–')} · {c.get('load_factor', '–')}"),
        ("batch trace", str((c.get("sources") or {}).get("batch_trace", "–"))),
        ("batch pods running", f"{s.get('mean_running_batch_pods', 0):,.0f} mean · {integer(s.get('peak_running_batch_pods'))} peak"),
        ("batch pods pending", f"{s.get('mean_pending_batch_pods', 0):,.0f} mean · {integer(s.get('peak_pending_batch_pods'))} peak"),
    ]


@dataclass(frozen=True)
class AtRow:
    """One row of a node's at-a-moment table: a quantity in cores and GiB, with its
    production / batch split where it has one."""

    label: str
    formula: str
    cpu: str
    ram: str
    cpu_split: str = ""
    ram_split: str = ""
    tone: str = ""


def at_table(ts: NodeTimeSeries, step: int) -> list[AtRow]:
    """The node's ledger at ``step``: capacity, the four aggregates, slack, headroom, reclaimed."""
    led = ts.ledgers()

    def split(name: str) -> tuple[str, str]:
        prod, batch = ts.get(f"prod_{name}")[step], ts.get(f"batch_{name}")[step]
        return (f"production {cores(prod[CPU])} + batch {cores(batch[CPU])}",
                f"production {gib(prod[RAM])} + batch {gib(batch[RAM])}")

    rows = [AtRow("Capacity", "C (post-Phase-0)", cores(led.capacity[step, CPU]), gib(led.capacity[step, RAM]))]
    for name, label in (("limit", "Limits"), ("request", "Requests"), ("reservation", "Reservations"), ("usage", "Usage")):
        total = ts.total(name)[step]
        c_split, r_split = split(name)
        rows.append(AtRow(label, f"Σ {name}", cores(total[CPU]), gib(total[RAM]), c_split, r_split))
    slack = led.slack[step]
    rows.append(AtRow("Slack", "C − Σ reservations", cores(slack[CPU]), gib(slack[RAM]),
                      tone="bad" if (slack[[CPU, RAM]] < 0).any() else ""))
    rows.append(AtRow("Headroom", "C − Σ production requests", cores(led.headroom[step, CPU]), gib(led.headroom[step, RAM])))
    rows.append(AtRow("Reclaimed in use", "max(0, Σ requests − C)", cores(led.reclaimed[step, CPU]), gib(led.reclaimed[step, RAM])))
    return rows


def node_story(ts: NodeTimeSeries, ledger) -> list[Figure]:
    """Four sentences of a node's run, from its series and ledger."""
    cap = ts.get("capacity")[-1] if len(ts.times_s) else np.zeros(8)
    prod_req = ts.get("prod_request")[-1] if len(ts.times_s) else np.zeros(8)
    share = [prod_req[d] / cap[d] if cap[d] > 0 else 0.0 for d in (CPU, RAM)]
    if ledger is None:
        return []
    return [
        Figure("Blueprint requests", f"{cores(prod_req[CPU])} cores · {gib(prod_req[RAM])} GiB",
               f"{pct(share[0], 0)} / {pct(share[1], 0)} of capacity · {ledger.pods} production pods"),
        Figure("Usage (mean · peak)", f"{cores(ledger.usage_mean_cpu_mcpu)} · {cores(ledger.usage_peak_cpu_mcpu)} cores",
               f"{gib(ledger.usage_mean_ram_bytes)} · {gib(ledger.usage_peak_ram_bytes)} GiB"),
        Figure("Slack (mean · min)", f"{cores(ledger.slack_mean_cpu_mcpu)} · {cores(ledger.slack_min_cpu_mcpu)} cores",
               f"{gib(ledger.slack_mean_ram_bytes)} · {gib(ledger.slack_min_ram_bytes)} GiB"),
        Figure("Batch", f"{integer(ledger.batch_placed)} placed · {integer(ledger.batch_evicted)} evicted",
               f"reclaimed in use: {cores(ledger.reclaimed_mean_cpu_mcpu)} cores · {gib(ledger.reclaimed_mean_ram_bytes)} GiB mean",
               "bad" if ledger.batch_evicted else ""),
    ]


def eviction_text(detail: dict, reason: str) -> str:
    """Why a batch group was evicted, with the numbers (DESIGN §7), e.g. ``priority: ram
    working set 241.2 GiB ≥ 95 % of capacity 253.25 GiB; Σ reservations 260 → 254.9 GiB …``."""
    dim = str(detail.get("dimension") or "ram")
    q = lambda key: quantity(dim, detail.get(key))  # noqa: E731
    cap = detail.get("capacity") or 0.0
    ws = detail.get("working_set") or 0.0
    why = {"priority": "lowest priority first (youngest on ties)", "limit_breach": "used more than its own limit"}
    parts = [
        f"{why.get(reason, reason.replace('_', ' '))}",
        f"{dim} working set {q('working_set')} = {pct(ws / cap if cap else None)} of capacity {q('capacity')}"
        + (" (acute)" if detail.get("acute") else ""),
        f"Σ reservations {q('ledger_before')} → {q('ledger_after')}",
        f"this group reserved {q('reservation')}, used {q('usage')} (limit {q('limit')}), priority {detail.get('priority', '–')}",
    ]
    return "; ".join(parts)


def placement_window(started_s: float, ends_s: float, now_s: float) -> str:
    """``since 12:03 · ends 13:40`` for a running batch task."""
    return f"since {clock(started_s)} · ends {clock(ends_s)}" + (" (within this step)" if ends_s - now_s < 60 else "")


COMPARE_ROWS = (
    ("reclaimed_fraction_cpu", "Reclaimed · cpu", "pct"), ("reclaimed_fraction_ram", "Reclaimed · ram", "pct"),
    ("mean_reclaimed_cores", "Reclaimed in use · cores (mean)", "num"),
    ("mean_reclaimed_ram_gib", "Reclaimed in use · GiB (mean)", "num"),
    ("usage_fill_cpu", "Usage fill · cpu", "pct"), ("usage_fill_ram", "Usage fill · ram", "pct"),
    ("slack_fill_cpu", "Slack left · cpu", "pct"), ("slack_fill_ram", "Slack left · ram", "pct"),
    ("batch_submitted", "Batch pods submitted", "int"), ("batch_placed", "Batch pods placed", "int"),
    ("batch_completed", "Batch pods completed", "int"), ("batch_evicted", "Batch pods evicted", "int"),
    ("production_evictions", "Production evictions", "int"),
    ("production_over_capacity_steps", "Production over capacity (node-steps)", "int"),
    ("mean_running_batch_pods", "Batch pods running (mean)", "num"),
    ("mean_pending_batch_pods", "Batch pods pending (mean)", "num"),
    ("nodes", "Nodes", "int"), ("batch_nodes", "Nodes taking batch", "int"), ("production_pods", "Production pods", "int"),
    ("load_factor", "Load factor", "num"), ("seed", "Seed", "int"), ("sim_seconds", "Simulated seconds", "int"),
)


def compare_rows(runs) -> list[tuple[str, list[str]]]:
    """``(label, [value per run])`` rows of the comparison table."""
    def fmt(kind: str, value) -> str:
        if value is None:
            return "–"
        return pct(value) if kind == "pct" else integer(value) if kind == "int" else f"{value:,.1f}"
    return [(label, [fmt(kind, r.summary.get(key)) for r in runs]) for key, label, kind in COMPARE_ROWS]
