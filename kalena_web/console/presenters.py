"""Shape selector results for templates: which figures a page shows, in which order, with
which words and units. Pure functions of their arguments (no queries)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena_engine.resources import CPU, RAM
from kalena_web.archive.mappers import NodeTimeSeries
from kalena_web.console.figures import served_cpu
from kalena_web.console.formatting import clock, cores, cores_text, duration, gib, integer, pct, quantity

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
        cpu_total = cores(total[CPU])
        if name == "usage":  # cpu is compressible: what the node served, as the chart draws it
            prod, batch = ts.get("prod_usage")[step, CPU], ts.get("batch_usage")[step, CPU]
            served, throttled = served_cpu(led.capacity[step, CPU], prod, batch)
            cpu_total = cores(float(served))
            c_split = f"production {cores(min(prod, led.capacity[step, CPU]))} + batch {cores(float(batch - throttled))}"
            if throttled > 0:
                c_split += f" (batch wanted {cores(throttled)} more: throttled)"
        rows.append(AtRow(label, f"Σ {name}", cpu_total, gib(total[RAM]), c_split, r_split))
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
    usage_mean, usage_peak = ledger.usage_mean_cpu_mcpu, ledger.usage_peak_cpu_mcpu
    if len(ts.times_s):  # cpu served, never above capacity (the ledger's figures are the demand)
        served, _ = served_cpu(ts.get("capacity")[:, CPU], ts.get("prod_usage")[:, CPU], ts.get("batch_usage")[:, CPU])
        usage_mean, usage_peak = float(served.mean()), float(served.max())
    return [
        Figure("Blueprint requests", f"{cores_text(prod_req[CPU])} · {gib(prod_req[RAM])} GiB",
               f"{pct(share[0], 0)} / {pct(share[1], 0)} of capacity · {ledger.pods} production pods"),
        Figure("All usage · mean / peak", f"{cores(usage_mean)} / {cores_text(usage_peak)}",
               f"{gib(ledger.usage_mean_ram_bytes)} / {gib(ledger.usage_peak_ram_bytes)} GiB · production + batch"),
        Figure("Slack · mean / min", f"{cores(ledger.slack_mean_cpu_mcpu)} / {cores_text(ledger.slack_min_cpu_mcpu)}",
               f"{gib(ledger.slack_mean_ram_bytes)} / {gib(ledger.slack_min_ram_bytes)} GiB · C − Σ reservations"),
        Figure("Batch", f"{integer(ledger.batch_placed)} placed · {integer(ledger.batch_evicted)} evicted",
               f"reclaimed in use: {cores_text(ledger.reclaimed_mean_cpu_mcpu)} · {gib(ledger.reclaimed_mean_ram_bytes)} GiB mean",
               "bad" if ledger.batch_evicted else ""),
    ]


@dataclass(frozen=True)
class EvictionWhy:
    """Why a batch group was evicted: a one-line ``lead`` and the numbers (docs/design.md §7)."""

    lead: str
    numbers: str

    def __str__(self) -> str:
        return f"{self.lead}. {self.numbers}"


def node_sentence(node, ts: NodeTimeSeries, ledger) -> str:
    """A node's run in one sentence, e.g. ``11 production pods request 26 cores and 252 GiB
    (42 % and 100 % of capacity) but used 7.6 cores and 58 GiB on average; reservations left
    27.4 cores and 107 GiB of slack on average, where 17,528 batch pods ran; 34 were evicted.``"""
    if ledger is None or not len(ts.times_s):
        return ""
    cap = ts.get("capacity")[-1]
    req = ts.get("prod_request")[-1]
    use = ts.get("prod_usage").mean(axis=0)
    share = [pct(req[d] / cap[d] if cap[d] > 0 else None, 0) for d in (CPU, RAM)]
    if not node.active:
        return (f"No production pod runs here: Kuberina's blueprint left this node empty, so its capacity is "
                f"already freed, not slack to reclaim{'' if node.takes_batch else ', and batch is not placed here'}.")
    text = (f"{ledger.pods} production pod{'s' if ledger.pods != 1 else ''} request {cores_text(req[CPU])} and "
            f"{gib(req[RAM])} GiB ({share[0]} and {share[1]} of capacity) but used {cores_text(use[CPU])} and "
            f"{gib(use[RAM])} GiB on average; reservations left {cores_text(ledger.slack_mean_cpu_mcpu)} and "
            f"{gib(ledger.slack_mean_ram_bytes)} GiB of slack on average")
    if not node.takes_batch:
        return text + "; batch is not placed on this node."
    evicted = f"; {integer(ledger.batch_evicted)} were evicted under pressure" if ledger.batch_evicted else ", none evicted"
    return text + f", where {integer(ledger.batch_placed)} batch pods were placed{evicted}."


def limits_equal_requests(ts: NodeTimeSeries) -> bool:
    """True when every limit equals its request (the Irina IR declares no limits: L = q)."""
    return bool(np.allclose(ts.total("limit")[:, [CPU, RAM]], ts.total("request")[:, [CPU, RAM]]))


def eviction_why(detail: dict, reason: str, count: int = 1) -> EvictionWhy:
    """Explain an eviction from the numbers the engine recorded, e.g. lead ``ram pressure:
    working set 248.86 GiB = 98.3 % of capacity 253.25 GiB while Σ reservations 264.77 GiB >
    capacity`` and numbers ``evicting these 6 pods (each reserved 1.997 GiB, used 1.997 GiB,
    limit 1.997 GiB; priority 0, lowest first, youngest on ties) brought Σ reservations to
    252.79 GiB``."""
    dim = str(detail.get("dimension") or "ram")

    def q(key: str) -> str:
        return quantity(dim, detail.get(key))

    cap = detail.get("capacity") or 0.0
    ws = detail.get("working_set") or 0.0
    share = pct(ws / cap if cap else None)
    acute = " — acute, minimum run time waived" if detail.get("acute") else ""
    # memory no tracked workload accounts for (the node's own processes) counts in the ledger
    unaccounted = f" (of which {q('unaccounted')} held by nothing Kalena tracks)" if detail.get("unaccounted") else ""
    lead = (f"{dim} pressure: working set {q('working_set')} = {share} of capacity {q('capacity')}{acute}, "
            f"while Σ reservations {q('ledger_before')}{unaccounted} > capacity")
    pods = "this pod" if count == 1 else f"these {count:,} pods"
    each = "" if count == 1 else "each "
    if reason == "limit_breach":
        chosen = "used more than its own limit, so it goes first whatever its tier or priority"
    elif reason == "priority":
        chosen = f"priority {detail.get('priority', '–')}, lowest first, youngest on ties"
    else:
        chosen = reason.replace("_", " ")
    numbers = (f"Evicting {pods} ({each}reserved {q('reservation')}, used {q('usage')}, limit {q('limit')}; {chosen}) "
               f"brought Σ reservations to {q('ledger_after')}")
    return EvictionWhy(lead=lead, numbers=numbers)


def placement_window(started_s: float, ends_s: float, now_s: float, step_s: float) -> str:
    """``since 12:03 · ends 13:40`` for a running batch task."""
    return f"since {clock(started_s)} · ends {clock(ends_s)}" + (" (within this step)" if ends_s - now_s < step_s else "")


def task_window(task, outcome, run) -> tuple[float, float]:
    """The part of the run worth charting for a task: from a little before it arrived to a
    little after it last ran (the whole run's end if it never finished)."""
    end_of_run = run.start_s + run.steps * run.step_s
    start = task.arrival_s if task.arrival_s is not None else run.start_s
    if outcome is not None and outcome.finished_s is not None and not (outcome.running_at_end or outcome.pending_at_end):
        end = outcome.finished_s
    else:
        end = end_of_run
    pad = max(10 * run.step_s, 0.1 * (end - start))
    return max(run.start_s, start - pad), min(end_of_run, end + pad)


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


def proposal_rows(summary: dict) -> list[tuple[str, str, str]]:
    """The proposal's metrics 6–8 (§6.3) as ``(metric, value, what it means)`` rows for the run
    page; empty for a run persisted before the replay recorded them."""
    s = summary
    acc, prog, res = s.get("reservation_accuracy"), s.get("batch_forward_progress"), s.get("pareto_reserve_yield")
    if not (acc and prog and res):
        return []

    def q(d: dict, key: str, fmt: str = "{:.2f}") -> str:
        value = (d or {}).get("quantiles", {}).get(key) if "quantiles" in (d or {}) else (d or {}).get(key)
        return "–" if value is None else fmt.format(value)

    cpu, ram = acc.get("cpu", {}), acc.get("ram", {})
    t, f = prog.get("throttled_seconds", {}), prog.get("completion_inflation", {})
    return [
        ("6 · over-estimation area", f"cpu {cpu.get('overestimation_area', 0):.3f} · ram {ram.get('overestimation_area', 0):.3f}",
         "Σ max(0, reservation − usage) ÷ Σ request over production pod-steps (0 = reservations equal usage)"),
        ("6 · under-estimation area", f"cpu {cpu.get('underestimation_area', 0):.4f} · ram {ram.get('underestimation_area', 0):.4f}",
         "Σ max(0, usage − reservation) ÷ Σ request: usage the reservation did not cover"),
        ("6 · reservation / request (cpu)",
         f"p10 {q(cpu.get('reservation_over_request'), 'p10')} · p50 {q(cpu.get('reservation_over_request'), 'p50')} · "
         f"p90 {q(cpu.get('reservation_over_request'), 'p90')}", "what the ledgers reserved, per pod-step"),
        ("6 · usage / request (cpu)",
         f"p10 {q(cpu.get('usage_over_request'), 'p10')} · p50 {q(cpu.get('usage_over_request'), 'p50')} · "
         f"p90 {q(cpu.get('usage_over_request'), 'p90')}", "what production used, per pod-step"),
        ("7 · completion-time inflation",
         f"p50 {q(f, 'p50', '{:.3f}')} · p90 {q(f, 'p90', '{:.3f}')} · p99 {q(f, 'p99', '{:.3f}')} · max {q(f, 'p100', '{:.3f}')}",
         f"actual ÷ undisturbed run time over {prog.get('completed_instances', 0):,} completed batch instances"),
        ("7 · throttled time per instance",
         f"p50 {q(t, 'p50', '{:,.0f}')} s · p99 {q(t, 'p99', '{:,.0f}')} s · max {q(t, 'p100', '{:,.0f}')} s",
         f"{prog.get('slowed_share', 0):.2%} of completed instances were slowed at all; "
         f"{prog.get('throttled_seconds_total', 0) / 3600.0:,.1f} instance-hours in all"),
        ("8 · Pareto-reserve yield",
         f"cpu {res.get('cpu', {}).get('cluster', 0):.1%} · ram {res.get('ram', {}).get('cluster', 0):.1%}",
         "share of the headroom C − Σ production requests (Kuberina's reserve) batch occupied over the run"),
        ("8 · per node (cpu)",
         f"p10 {q(res.get('cpu', {}).get('per_node', {}), 'p10', '{:.0%}')} · p50 "
         f"{q(res.get('cpu', {}).get('per_node', {}), 'p50', '{:.0%}')} · p90 "
         f"{q(res.get('cpu', {}).get('per_node', {}), 'p90', '{:.0%}')}",
         f"over the {res.get('cpu', {}).get('nodes', 0)} batch nodes with headroom"),
    ]
