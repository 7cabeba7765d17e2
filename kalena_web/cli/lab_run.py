"""``kalena lab run``: a lab day and its replay, figure by figure (docs/lab.md "A measured day";
:mod:`agents.lab.run` brings the lab up, plays and collects the day, :mod:`agents.lab.runfigures`
compares). This module replays the same slice, persists the replay as a run the console shows
(marked as a lab run: ``sources["lab_run"]`` and ``summary["lab_run"]``), and writes the table,
the summary JSON and the HTML report. Exit status 1 when a gate fails."""

from __future__ import annotations

import argparse
import json
import time
from datetime import datetime, timezone
from pathlib import Path

from kalena_web.cli.argtypes import POSITIVE


def add_arguments(run: argparse.ArgumentParser) -> None:
    run.add_argument("--hours", type=POSITIVE, default=6.0, help="hours of trace time the day covers (6: 36 min at 10×)")
    run.add_argument("--speed", type=POSITIVE, default=10.0, help="time compression k (10)")
    run.add_argument("--seed", type=int, default=0, help="the slice's seed (0)")
    run.add_argument("--load-factor", type=POSITIVE, default=1.0, help="batch cpu demand over the lab's slack (1)")
    run.add_argument("--nodes", type=int, default=2, help="nodes (2)")
    run.add_argument("--cpu-m", type=int, default=400, help="each node's cpu in millicores (400)")
    run.add_argument("--memory-mib", type=int, default=512, help="each node's memory in MiB (512)")
    run.add_argument("--max-pods-per-node", type=int, default=12, help="as `kalena lab up` (12)")
    run.add_argument("--max-batch-pods", type=int, default=60, help="as `kalena lab up` (60)")
    run.add_argument("--name", default="lab", help="lab name (lab)")
    run.add_argument("--subnet", default="127.0.0", help="loopback /24 of the lab (127.0.0)")
    run.add_argument("--redis-url", default=None, help="the control plane's Redis (default $REDIS_URL)")
    run.add_argument("--database-url", default=None, help="PostgreSQL server of the lab's database ($DATABASE_URL)")
    run.add_argument("--policy", type=Path, default=None, metavar="FILE",
                     help="the policy on the trace's clock (default: the shipped default); divided by k like every "
                          "other clock")
    run.add_argument("--faults", choices=("none", "default"), default="none",
                     help="default: agent-restart at 20 %%, leader-kill at 40 %%, engine-stop of one node for a "
                          "simulated hour at 60 %%, db-restart at 80 %% of the day (`kalena lab fault`)")
    run.add_argument("--summary-json", type=Path, required=True, metavar="F", help="write the summary JSON here")
    run.add_argument("--report", type=Path, default=None, metavar="F.html", help="write the HTML report here")
    run.add_argument("--keep", action="store_true", help="leave the lab up after the day")
    run.add_argument("--no-persist", action="store_true", help="do not persist the replay as a console run")
    run.add_argument("--run-name", default=None, help="the persisted run's name (lab-<name>-<UTC time>)")
    run.add_argument("--from-day", type=Path, default=None, metavar="run-day.json",
                     help="no lab: recompute the replay and the comparison from a day a previous run saved "
                          "(<state dir>/run-day.json; its slice folder must still exist)")
    # what --from-day ignores (the saved day has its own), to say so when one is given
    run.set_defaults(day_flag_defaults={dest: run.get_default(dest) for dest in DAY_FLAGS})


#: the flags that shape a day; a recomputed day (--from-day) keeps the saved day's own
DAY_FLAGS = ("hours", "speed", "seed", "load_factor", "nodes", "cpu_m", "memory_mib", "max_pods_per_node",
             "max_batch_pods", "policy", "faults", "keep")


def up_arguments(args: argparse.Namespace) -> list[str]:
    """``kalena lab up`` flags for the day."""
    out = ["--nodes", str(args.nodes), "--cpu-m", str(args.cpu_m), "--memory-mib", str(args.memory_mib),
           "--name", args.name, "--subnet", args.subnet, "--speed", f"{args.speed:g}", "--seed", str(args.seed),
           "--load-factor", f"{args.load_factor:g}", "--hours", f"{args.hours:g}",
           "--max-pods-per-node", str(args.max_pods_per_node), "--max-batch-pods", str(args.max_batch_pods)]
    for flag, value in (("--redis-url", args.redis_url), ("--database-url", args.database_url)):
        if value is not None:
            out += [flag, value]
    if args.policy is not None:
        out += ["--policy", str(args.policy.resolve())]
    return out


def replay_of_day(day: dict):
    """The replay of the day's slice (inputs, config, built replay, observer), simulated clock:
    memory held as the lab's burner holds it, with its own pages as the day measured them
    (:func:`agents.lab.runfigures.burner_own_bytes`; 0 for a day recorded before the sampler read
    the pods' groups), and each node holding the day's median of its memory outside every pod's
    row."""
    from agents.lab.kubelet.spec import BURNER_OVERHEAD_MIB
    from agents.lab.runfigures import ReplayObserver, burner_own_bytes, median_unaccounted
    from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads
    from kalena_engine.labslice.compression import policy_on_clock
    from kalena_engine.labslice.replay import build_slice_replay, hold_like_burner, slice_replay_inputs
    from kalena_engine.policy_file import parse_policy_text
    from kalena_engine.traces.bitbrains import load_bitbrains
    from kalena_engine.traces.google import production_peak_ratios, read_task_events, read_task_usage

    slice_dir = Path(day["slice_dir"])
    summary = day["slice_summary"]
    workloads = load_workloads(slice_dir / "ir" / "workloads.yaml")
    scaled = parse_policy_text((slice_dir / "policy-scaled.yaml").read_text(), source="policy-scaled.yaml").policy
    paths = summary["inputs"]
    ratios = production_peak_ratios(read_task_events(Path(paths["google_events"])),
                                    read_task_usage(Path(paths["google_usage"]))).ratios
    inputs, config = slice_replay_inputs(
        infra=load_infrastructure(slice_dir / "ir" / "infra.yaml"), workloads=workloads,
        blueprint=load_blueprint(slice_dir / "ir" / "blueprint.yaml", workloads),
        bitbrains=load_bitbrains(Path(paths["usage_dir"])), peak_ratios=ratios,
        arrivals=json.loads((slice_dir / "batch-schedule.json").read_text())["arrivals"],
        slice_config=summary["config"], policy=policy_on_clock(scaled, day["compression"]["clocks"]))
    replay = build_slice_replay(inputs, config, offsets=lambda ids: _offsets(day, workloads, inputs, config, ids))
    # memory as the burner holds it: at most the limit less its overhead, plus its own pages as measured
    own = burner_own_bytes(day, BURNER_OVERHEAD_MIB)
    hold_like_burner(replay, overhead_mib=BURNER_OVERHEAD_MIB, own_bytes=own["bytes"] if own else 0.0)
    names = list(replay.simulator.state.node_names)
    # the memory each live node held outside its pods' rows, which the agents' ledgers count
    t0, speed = float(day["play_start_s"]), float(summary["config"]["speed"])
    replay.simulator.unaccounted_ram = median_unaccounted(day.get("samples") or [], names, t0,
                                                          t0 + config.steps * config.step_s / speed)
    observer = ReplayObserver(names)
    return inputs, config, replay, observer


#: Per-pod memory shifts (MiB) :func:`replay_sensitivity` replays the day's batch with: the replay
#: holds each pod as the burner does (:func:`kalena_engine.labslice.replay.hold_like_burner`) with
#: the own pages the day measured (p10–p90 about 0.2 MiB apart; production's about 0.1 MiB under
#: batch's): half a MiB and a MiB either way bound what that leaves unknown.
SENSITIVITY_MIB = (-1.0, -0.5, 0.5, 1.0)
#: Shifts (MiB) of each node's held unaccounted memory (the day's median of what its pods group holds
#: outside every pod's row; the agent reads it each second, its interquartile range about 1 MiB).
UNACCOUNTED_SENSITIVITY_MIB = (-0.5, -0.25, 0.25, 0.5)
SENSITIVITY_KEYS = ("reclaimed_fraction_cpu", "batch_evictions_per_100_pod_hours")


def replay_sensitivity(day: dict, deltas_mib=SENSITIVITY_MIB, unaccounted_deltas_mib=UNACCOUNTED_SENSITIVITY_MIB) -> dict:
    """The gated replay figures again under differences the lab cannot rule out (docs/lab.md,
    *What a day's eviction count can tell*): every batch pod's memory working set shifted by each
    of ``deltas_mib`` (clipped to ``[0, its limit]``), then every node's held unaccounted memory by
    each of ``unaccounted_deltas_mib`` (never below 0). Each shift replays the whole day again.
    Returns ``{"deltas_mib": [...], "<figure>": [value per delta], "unaccounted_deltas_mib": [...],
    "unaccounted": {"<figure>": [value per delta]}}`` for reclaimed cpu and batch evictions per
    100 pod-hours. Example (day I of docs/lab.md): a replay at 23.4 evictions per 100 pod-hours
    stayed there with every batch pod 0.5–1 MiB lighter, read 49.7 with it 0.5–1 MiB heavier and
    101.3 with each node holding 0.25 MiB more outside its pods — a count that turns on a fraction
    of a MiB."""
    import numpy as np

    from agents.lab.runfigures import replay_figures
    from kalena_engine.resources import RAM

    def figures_with(shift) -> dict:
        _inputs, _config, replay, observer = replay_of_day(day)
        shift(replay.simulator)
        figures = replay_figures(replay.run(observer), observer)
        return {k: figures[k] for k in SENSITIVITY_KEYS}

    def batch_shift(delta):
        def apply(sim):
            tasks = sim.state.tasks
            tasks.usage[:, RAM] = np.clip(tasks.usage[:, RAM] + delta * 2**20, 0.0, tasks.limit[:, RAM])
        return apply

    def unaccounted_shift(delta):
        def apply(sim):
            held = sim.unaccounted_ram if sim.unaccounted_ram is not None else np.zeros(len(sim.state.node_names))
            sim.unaccounted_ram = np.maximum(0.0, held + delta * 2**20)
        return apply

    out: dict = {"deltas_mib": list(deltas_mib), **{k: [] for k in SENSITIVITY_KEYS},
                 "unaccounted_deltas_mib": list(unaccounted_deltas_mib), "unaccounted": {k: [] for k in SENSITIVITY_KEYS}}
    for delta in deltas_mib:
        for k, v in figures_with(batch_shift(delta)).items():
            out[k].append(v)
    for delta in unaccounted_deltas_mib:
        for k, v in figures_with(unaccounted_shift(delta)).items():
            out["unaccounted"][k].append(v)
    return out


def format_sensitivity(sensitivity: dict, live: dict, replay: dict) -> str:
    """The line ``kalena lab run`` prints for :func:`replay_sensitivity`: per gated figure the
    range over the unshifted and every shifted replay, whether live falls inside it, and against
    how many of those replays the live ÷ replay gate passes."""
    from agents.lab.runfigures import BAND, ratio

    parts = []
    for key, label, fmt in (("batch_evictions_per_100_pod_hours", "batch evictions per 100 pod-hours", "{:.1f}"),
                            ("reclaimed_fraction_cpu", "reclaimed cpu", "{:.3f}")):
        values = [v for v in [replay.get(key), *sensitivity[key], *(sensitivity.get("unaccounted") or {}).get(key, [])]
                  if v is not None]
        lo, hi = min(values), max(values)
        inside = live.get(key) is not None and lo <= live[key] <= hi
        passing = sum(1 for v in values if (r := ratio(live.get(key), v)) is not None and BAND[0] <= r <= BAND[1])
        parts.append(f"{label} {fmt.format(lo)}–{fmt.format(hi)} (live {fmt.format(live[key])}: "
                     f"{'inside' if inside else 'outside'}; the gate passes against {passing} of {len(values)})")
    shifts = "/".join(f"{d:+g}" for d in sensitivity["deltas_mib"])
    held = "/".join(f"{d:+g}" for d in sensitivity.get("unaccounted_deltas_mib") or [])
    return (f"replay sensitivity (every batch pod's memory {shifts} MiB"
            + (f"; every node's memory outside its pods {held} MiB" if held else "") + "): " + "; ".join(parts))


def live_starts(pods: list[dict]) -> dict[tuple[str, str, str], list[float]]:
    """Start times (Unix s) of the live production containers, by (namespace, app, node)."""
    out: dict[tuple[str, str, str], list[float]] = {}
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        start = (pod.get("status") or {}).get("startTime")
        if labels.get("kalena.naughtian.io/tier") != "service" or not start or not pod["spec"].get("nodeName"):
            continue
        key = (pod["metadata"]["namespace"], labels.get("app", ""), pod["spec"]["nodeName"])
        out.setdefault(key, []).append(datetime.fromisoformat(start.replace("Z", "+00:00")).timestamp())
    return out


def _offsets(day: dict, workloads, inputs, config, ids):
    """Each production pod's step in its series at the day's start (the containers started
    during ``up``, before the play): :func:`kalena_engine.labslice.replay.series_offsets`."""
    from kalena_engine.labslice.replay import series_offsets

    by_id = {p.id: p for p in workloads.pods}
    node_of = {pod: node for pod, node in inputs.blueprint.assignment.items()}
    speed = float(day["slice_summary"]["config"]["speed"])
    return series_offsets(ids, {i: (by_id[i].namespace, by_id[i].declaration) for i in ids}, node_of,
                          live_starts(day.get("pods") or []), day_start_s=float(day["play_start_s"]),
                          step_wall_s=config.step_s / speed, steps=config.steps)


def handle_run(args: argparse.Namespace) -> int:
    from agents.lab.run import run_day
    from agents.lab.runfigures import (compare, finite, format_divergence, format_livemetrics, format_table,
                                       format_working_sets, html_report, ledger_divergence, live_figures, replay_figures,
                                       working_set_divergence)
    from kalena_web.cli.lab import default_state_dir

    state_dir = (args.state_dir or default_state_dir()).resolve()
    say = lambda line: print(line, flush=True)  # noqa: E731
    started = time.time()
    if args.from_day is not None:
        from agents.lab.run import load_day

        day = load_day(args.from_day)
        state_dir = args.from_day.resolve().parent       # the saved day's own state folder
        defaults = getattr(args, "day_flag_defaults", {}) or {}
        ignored = [f"--{d.replace('_', '-')}" for d in DAY_FLAGS if d in defaults and getattr(args, d) != defaults[d]]
        if ignored:
            say(f"run: --from-day recomputes the saved day as it was recorded: {', '.join(ignored)} ignored")
    else:
        if not args.no_persist:  # refused before the day, not after it (the day's figures are kept either way)
            from kalena_web.cli.persist import django_setup

            django_setup()
        day = run_day(state_dir=state_dir, up_args=up_arguments(args), faults=args.faults, keep=args.keep, say=say)
    say("run: replaying the same slice on the simulated clock")
    inputs, config, replay, observer = replay_of_day(day)
    run_name = None
    if args.no_persist:
        summary = replay.run(observer)
    else:
        summary, run_name = _persist(args, day, inputs, config, replay, observer)
    state = replay.simulator.state
    import numpy as np

    capacity = state.capacity[:, :2]
    prod = np.zeros_like(capacity)
    np.add.at(prod, state.production.node, state.production.request[:, :2])
    live = live_figures(day, node_names=list(state.node_names), capacity=capacity, prod_request=prod,
                        step_s=config.step_s, steps=config.steps, pods=day.get("pods"))
    rep = replay_figures(summary, observer)
    comparison = compare(live, rep)
    speed = float(day["slice_summary"]["config"]["speed"])
    divergence = ledger_divergence(day.get("ledgers") or [], observer, t0=float(day["play_start_s"]), speed=speed,
                                   capacity=capacity)
    working_sets = working_set_divergence(day, observer, unaccounted=replay.simulator.unaccounted_ram,
                                          capacity=capacity,
                                          threshold_ratio=replay.simulator.policy.eviction.evict_threshold_ratio)
    from agents.lab.kubelet.spec import BURNER_OVERHEAD_MIB
    from agents.lab.runfigures import burner_own_bytes

    own_pages = burner_own_bytes(day, BURNER_OVERHEAD_MIB)
    say("run: replaying again with every batch pod's memory shifted (the replay's sensitivity)")
    sensitivity = replay_sensitivity(day)
    report = finite({
        "lab": day["state"]["name"], "state_dir": str(state_dir), "speed": speed,
        "hours": float(day["slice_summary"]["config"]["hours"]), "play_start_s": day["play_start_s"],
        "wall_seconds": round(time.time() - started, 1), "compression": day["compression"],
        "slice": {k: day["slice_summary"][k] for k in ("lab", "batch", "production", "slack")},
        "comparison": comparison, "live": live, "replay": rep, "faults": day["faults"],
        "fault_errors": day["fault_errors"], "livemetrics": day.get("livemetrics"), "persisted_run": run_name,
        "replay_unaccounted_ram_bytes_by_node": None if replay.simulator.unaccounted_ram is None else {
            n: float(v) for n, v in zip(state.node_names, replay.simulator.unaccounted_ram, strict=True)},
        "ledgers": divergence, "replay_sensitivity": sensitivity, "replay_burner_own_pages": own_pages,
        "working_sets": working_sets,
    })
    if run_name:
        _attach(run_name, report)
    args.summary_json.parent.mkdir(parents=True, exist_ok=True)
    args.summary_json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(html_report(report), encoding="utf-8")
    print(format_table(comparison))
    held = report["replay_unaccounted_ram_bytes_by_node"]
    print("replay nodes hold outside their pods (the live day's median of the agents' unaccounted memory): "
          + (", ".join(f"{n} {v / 2**20:.1f} MiB" for n, v in held.items()) if held else
             "nothing (this day was recorded before the sampler measured it)"))
    print(f"replay holds memory as the burner does: each figure at most its limit less {BURNER_OVERHEAD_MIB} MiB, "
          + (f"plus the burner's own pages, {own_pages['bytes'] / 2**20:.2f} MiB (median of {own_pages['pods']} batch "
             f"pods' groups; p10–p90 {own_pages['p10'] / 2**20:.2f}–{own_pages['p90'] / 2**20:.2f})" if own_pages else
             "own pages not measured on this day (recorded before the sampler read the pods' groups): 0"))
    print(format_sensitivity(sensitivity, live, rep))
    print(format_divergence(divergence))
    print(format_working_sets(working_sets))
    print(format_livemetrics(day.get("livemetrics"), rep))
    for e in live["why_evicted"]:
        print(f"  evicted (live) t={e['t_s'] / 3600:.2f} h {e['node']} {e['workload']} ({e['tier']}): {e['reason']} "
              f"{json.dumps(e.get('numbers'), separators=(',', ':'))[:200]}")
    task_ids = state.tasks.task_id
    for e in rep["why_evicted"]:
        task = str(task_ids[e["task"]]) if e.get("task") is not None and 0 <= e["task"] < len(task_ids) else "?"
        print(f"  evicted (replay) t={e['t_s'] / 3600:.2f} h {e.get('node') or '?'} {task} × {e['count']} {e['kind']}: "
              f"{e['reason']} "
              f"{json.dumps(finite(e.get('detail')), separators=(',', ':'), default=str)[:200]}")
    print(f"kalena lab run: summary {args.summary_json}" + (f", report {args.report}" if args.report else "")
          + (f", console run '{run_name}' (/runs/{run_name}/)" if run_name else ""))
    return 0 if comparison["gates_passed"] else 1


def _persist(args, day, inputs, config, replay, observer):
    from kalena_web.cli.persist import django_setup

    django_setup()
    from kalena_web.archive.services import run_persist

    name = args.run_name or f"lab-{args.name}-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}"
    sources = {"lab_run": str(day["slice_dir"].parent), "slice": str(day["slice_dir"]),
               **{k: str(v) for k, v in day["slice_summary"]["inputs"].items()}}

    def execute(on_step):
        return replay.run(lambda record: (on_step(record), observer(record)))
    run = run_persist(name=name, replay=replay, inputs=inputs, config=config, cluster_name=name, sources=sources,
                      execute=execute)
    return run.summary, run.name


def _attach(run_name: str, report: dict) -> None:
    """The live day beside the persisted replay: ``summary["lab_run"]`` (timelines left out)."""
    from kalena_web.archive.models import Run

    run = Run.objects.get(name=run_name)
    slim = {k: v for k, v in report.items() if k not in ("live", "replay")}
    slim["live"] = {k: v for k, v in report["live"].items() if k != "timeline"}
    run.summary = {**run.summary, "lab_run": slim}
    run.save(update_fields=["summary"])

