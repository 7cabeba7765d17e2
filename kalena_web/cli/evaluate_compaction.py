"""``kalena evaluate compaction``: the smallest cluster that fits the workload with reclamation
on and off, over 11 seeds in parallel processes (Borg §5.1; docs/design.md §11; docs/evaluation.md).

Production is repacked by first-fit decreasing, which is *not Kuberina's solver*: its node
counts are not comparable with Kuberina's 152 active Irina nodes. The window defaults to the
6 h of the trace day that receive the most batch demand (the daily peak); it is printed.
"""

from __future__ import annotations

import argparse
import time
from typing import NoReturn

from kalena_engine.replay import ReplayConfig, ReplayInputs
from kalena_engine.replay.compaction import ALLOWANCE, compaction_trial, peak_window_start_s, summarise_trials
from kalena_web.cli.argtypes import NON_NEGATIVE, SEED, number
from kalena_web.cli.evaluate import add_jobs_argument, add_output_arguments, add_run_arguments, fail
from kalena_web.cli.inputs import add_input_arguments, load_inputs
from kalena_web.cli.parallel import run_parallel
from kalena_web.cli.policy_args import add_policy_arguments, policy_or_exit
from kalena_web.cli.replay import input_sources, summary_path_check, write_summary

COMMAND = "evaluate compaction"
SOLVER_NOTE = ("production is repacked by first-fit decreasing, not by Kuberina's solver: these node counts are "
               "not comparable with Kuberina's 152 active Irina nodes")
DAY_START_S = 86_400.0  # the Alibaba 2018 trace's first full day (docs/traces.md)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "compaction", help="smallest cluster that fits the workload, reclamation on vs off (11 seeds)",
        description="Remove nodes at random and repack from scratch (production by first-fit decreasing — not "
                    "Kuberina's solver — then batch by Kalena's scheduler) to find the smallest cluster that fits: "
                    "production placed and at most 0.2 % of batch core-hours unserved at the window's end. "
                    "Reports the 90th percentile over seeds with min–max, and the extra nodes needed with "
                    "reclamation off.",
    )
    add_input_arguments(parser)
    run = add_run_arguments(parser, hours=6.0)
    run.add_argument("--window-start-h", type=NON_NEGATIVE, default=None,
                     help="hours after the trace day's start where the window begins "
                          "(default: the window with the most batch demand, the daily peak)")
    run.add_argument("--seeds", type=number(minimum=1, integer=True), default=11, help="trials (default 11)")
    run.add_argument("--first-seed", type=SEED, default=0, help="seed of the first trial (default 0)")
    run.add_argument("--allowance", type=number(minimum=0.0), default=ALLOWANCE,
                     help="unserved share of batch core-hours a fitting cluster may leave (default 0.002)")
    run.add_argument("--max-added-nodes", type=number(minimum=0, integer=True), default=2_000,
                     help="copies of infrastructure nodes a trial may add (default 2000)")
    add_jobs_argument(run, "trials")
    add_output_arguments(parser, summary="the figures")
    add_policy_arguments(parser)
    parser.set_defaults(handler=handle)
    return parser


def _fail(message: str) -> NoReturn:
    fail(COMMAND, message)


def window(args: argparse.Namespace, inputs: ReplayInputs) -> float:
    """The window's start (s after the trace day's start): the flag, or the daily peak."""
    if args.window_start_h is not None:
        if args.window_start_h + args.hours > 24:
            _fail(f"--window-start-h: {args.window_start_h:g} + --hours {args.hours:g} ends after the trace day "
                  "(accepted: start + hours ≤ 24)")
        return args.window_start_h * 3600.0
    return peak_window_start_s(inputs.batch, DAY_START_S, args.hours)


def _trial_work(inputs: ReplayInputs, config: ReplayConfig, seed: int, args: argparse.Namespace):
    def work(report) -> dict[str, object]:
        started = time.perf_counter()
        probes = []

        def on_probe(probe) -> None:
            probes.append(probe)
            report(len(probes))

        trial = compaction_trial(inputs, config, seed, max_copies=int(args.max_added_nodes),
                                 allowance=float(args.allowance), on_probe=on_probe)
        trial["wall_seconds"] = round(time.perf_counter() - started, 3)
        return trial
    return work


def format_trials(trials: list[dict[str, object]]) -> str:
    """Per-seed table: nodes needed on / off, extra, probes (replays) and wall time."""
    headers = ["seed", "nodes on", "nodes off", "extra", "prod floor", "replays", "wall s"]
    rows = []
    for t in trials:
        on, off = t["nodes_needed_on"], t["nodes_needed_off"]
        rows.append([str(t["seed"]), "—" if on is None else str(on), "—" if off is None else str(off),
                     "—" if on is None or off is None else str(off - on), str(t["production_floor"]),
                     str(len(t["probes"])), f"{t['wall_seconds']:.0f}"])
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def headline(summary: dict[str, object]) -> str:
    """The result in one sentence (p90 with min–max)."""
    def part(key: str, stem: str) -> str:
        if summary[key] is None:
            return "— (never fitted)"
        return f"{summary[key]} (min {summary[stem + '_min']}, max {summary[stem + '_max']})"
    return (f"nodes needed, p90 over {len(summary['seeds'])} seeds: reclamation on "
            f"{part('nodes_needed_p90_on', 'nodes_needed_on')}, off {part('nodes_needed_p90_off', 'nodes_needed_off')}; "
            f"extra nodes without reclamation {part('extra_nodes_without_reclamation_p90', 'extra_nodes_without_reclamation')}")


def handle(args: argparse.Namespace) -> int:
    for flag, path in (("--summary-json", args.summary_json), ("--report-html", args.report_html)):
        summary_path_check(path, flag, "evaluate compaction")
    document = policy_or_exit(args, COMMAND)
    if args.hours > 24:
        _fail(f"--hours: {args.hours:g} is longer than the trace day (accepted: 0 < hours ≤ 24)")
    started = time.perf_counter()
    inputs = load_inputs(args, progress=not args.no_progress)
    loaded = time.perf_counter() - started
    start_s = window(args, inputs)
    try:
        config = ReplayConfig(hours=args.hours, step_s=args.step, usage_mapping=args.usage_mapping,
                              batch_offset_s=DAY_START_S + start_s, usage_offset_s=start_s,
                              load_factor=args.load_factor, batch_usage_ratio=args.batch_usage_ratio,
                              policy=document.policy)
    except ValueError as exc:
        _fail(str(exc))
    seeds = [int(args.first_seed) + i for i in range(int(args.seeds))]
    print(f"window: {start_s / 3600:g} h – {(start_s / 3600 + args.hours):g} h of the trace day "
          f"({'--window-start-h' if args.window_start_h is not None else 'the daily peak: the hour-aligned window with the most batch demand'}"
          f"; batch trace {DAY_START_S + start_s:.0f} s, usage {start_s / 3600:g} h after its start), "
          f"{len(seeds)} seeds, {args.jobs} at a time")
    print(f"note: {SOLVER_NOTE}")
    work = {f"seed {s}": _trial_work(inputs, config, s, args) for s in seeds}
    try:
        results = run_parallel(work, {name: None for name in work}, jobs=int(args.jobs),
                               progress=not args.no_progress, unit="replay", what="trial")
    except RuntimeError as exc:
        _fail(str(exc))
    trials = [results[name] for name in work]
    summary = summarise_trials(trials)
    wall = time.perf_counter() - started
    summary.update({
        "window_hours": float(args.hours), "window_start_h": start_s / 3600.0, "allowance": float(args.allowance),
        "load_factor": float(args.load_factor), "solver": "first-fit decreasing (not Kuberina's solver)",
        "active_nodes_blueprint": trials[0]["active_nodes"], "trials": trials, "wall_seconds": round(wall, 1),
        "load_seconds": round(loaded, 1), "inputs": input_sources(args),
        "policy_name": document.metadata.name, "policy_version": document.metadata.version,
    })
    print(f"Kalena cluster compaction: {args.hours:g} h window, load ×{args.load_factor:g}, "
          f"{len(seeds)} seeds in {wall:.0f} s (inputs {loaded:.0f} s)")
    print(format_trials(trials))
    print(headline(summary))
    line = write_summary(summary, args.summary_json)
    if line:
        print(line)
    if args.report_html:
        from kalena_web.cli.evaluate_report import write_compaction_report  # plotly: import on demand

        print(write_compaction_report(args.report_html, summary, title=(
            f"Kalena cluster compaction — {args.hours:g} h from {start_s / 3600:g} h, load ×{args.load_factor:g}, "
            f"{len(seeds)} seeds")))
    return 0

