"""``kalena evaluate pareto``: Kuberina's ``--pareto`` semantics swept 70–100 % with reclamation
on; total useful work (production + batch cpu core-hours) per setting — the proposal's metric
10 (docs/evaluation.md). A first-fit-decreasing repack stands in for Kuberina's solver.
"""

from __future__ import annotations

import argparse
import time
from typing import NoReturn

from kalena_engine.replay import ReplayConfig, ReplayInputs, build_replay
from kalena_engine.replay.pareto import PERCENTS, best_setting, pareto_inputs
from kalena_web.cli.argtypes import NON_NEGATIVE, SEED
from kalena_web.cli.evaluate import (
    PROGRESS_EVERY_STEPS, add_jobs_argument, add_output_arguments, add_run_arguments, fail,
)
from kalena_web.cli.evaluate_calibrate import numbers_list
from kalena_web.cli.inputs import add_input_arguments, load_inputs
from kalena_web.cli.parallel import run_parallel
from kalena_web.cli.policy_args import add_policy_arguments, policy_or_exit
from kalena_web.cli.replay import input_sources, summary_path_check, write_summary

COMMAND = "evaluate pareto"
SOLVER_NOTE = ("production is packed by first-fit decreasing against the capped capacity, standing in for "
               "Kuberina's solver (the 100 % setting is that repack too, not Kuberina's blueprint)")
FIELDS = ("pareto_percent", "production_fits", "active_nodes", "useful_core_hours", "production_cpu_core_hours",
          "batch_cpu_core_hours", "useful_core_hours_per_active_node", "reclaimed_fraction_cpu",
          "batch_completed", "batch_evictions_per_100_pod_hours", "production_contention_core_hours", "oom_kills")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "pareto", help="Pareto reserve 70–100 %% with reclamation on: total useful work per setting",
        description="Pack production against P % of each node's capacity (first-fit decreasing standing in for "
                    "Kuberina's --pareto), replay with the real capacity and reclamation on, and report production "
                    "+ batch cpu core-hours per setting.",
    )
    add_input_arguments(parser)
    run = add_run_arguments(parser, hours=24.0)
    run.add_argument("--percents", type=numbers_list("--percents", 1.0), default=PERCENTS,
                     help="Pareto settings (%%; default 70,75,…,100)")
    run.add_argument("--seed", type=SEED, default=0, help="seed (the same for every setting)")
    run.add_argument("--offset", type=NON_NEGATIVE, default=86_400.0, help="batch trace time of replay start (s)")
    add_jobs_argument(run, "settings")
    add_output_arguments(parser, summary="{setting: figures}")
    add_policy_arguments(parser)
    parser.set_defaults(handler=handle)
    return parser


def _fail(message: str) -> NoReturn:
    fail(COMMAND, message)


def _work(inputs: ReplayInputs, config: ReplayConfig, percent: float):
    def work(report) -> dict[str, object]:
        packed = pareto_inputs(inputs, percent)
        if packed is None:
            return {"pareto_percent": percent, "production_fits": False}
        replay = build_replay(packed, config)

        def observe(record) -> None:
            if (record.step + 1) % PROGRESS_EVERY_STEPS == 0 or record.step + 1 == config.steps:
                report(record.step + 1)

        summary = replay.run(observe)
        row = {k: summary.get(k) for k in FIELDS if k in summary}
        row.update({"pareto_percent": percent, "production_fits": True, "active_nodes": summary["active_nodes"],
                    "useful_core_hours_per_active_node": round(summary["useful_core_hours"] / summary["active_nodes"], 3)})
        return row
    return work


def format_rows(rows: dict[str, dict[str, object]], best: str | None) -> str:
    headers = ["pareto", "active nodes", "useful core-h", "production core-h", "batch core-h", "per node",
               "reclaimed cpu", "evictions /100 pod-h", "prod contention core-h", ""]
    lines = []
    for name, r in rows.items():
        if not r["production_fits"]:
            lines.append([name, "production does not fit"] + [""] * (len(headers) - 2))
            continue
        lines.append([name, str(r["active_nodes"]), f"{r['useful_core_hours']:,.0f}",
                      f"{r['production_cpu_core_hours']:,.0f}", f"{r['batch_cpu_core_hours']:,.0f}",
                      f"{r['useful_core_hours_per_active_node']:,.1f}", f"{r['reclaimed_fraction_cpu']:.2%}",
                      f"{r['batch_evictions_per_100_pod_hours']:.3f}", f"{r['production_contention_core_hours']:,.1f}",
                      "most useful work" if name == best else ""])
    widths = [max(len(r[i]) for r in [headers, *lines]) for i in range(len(headers))]
    out = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in lines]
    return "\n".join(out)


def handle(args: argparse.Namespace) -> int:
    for flag, path in (("--summary-json", args.summary_json), ("--report-html", args.report_html)):
        summary_path_check(path, flag, "evaluate pareto")
    if any(p > 100 for p in args.percents):
        _fail(f"--percents: {max(args.percents):g} is above 100 (accepted: settings in (0, 100])")
    if len(set(args.percents)) != len(args.percents):
        _fail("--percents: a setting is named twice")
    document = policy_or_exit(args, COMMAND)
    try:
        config = ReplayConfig(hours=args.hours, step_s=args.step, seed=args.seed, usage_mapping=args.usage_mapping,
                              batch_offset_s=args.offset, load_factor=args.load_factor,
                              batch_usage_ratio=args.batch_usage_ratio, policy=document.policy)
    except ValueError as exc:
        _fail(str(exc))
    started = time.perf_counter()
    inputs = load_inputs(args, progress=not args.no_progress)
    loaded = time.perf_counter() - started
    print(f"Pareto sweep: {len(args.percents)} settings, {args.hours:g} h, load ×{args.load_factor:g}, "
          f"seed {args.seed}, reclamation on, {args.jobs} at a time")
    print(f"note: {SOLVER_NOTE}")
    names = {f"{p:g} %": p for p in args.percents}
    try:
        results = run_parallel({n: _work(inputs, config, p) for n, p in names.items()},
                               {n: config.steps for n in names}, jobs=int(args.jobs), progress=not args.no_progress,
                               what="setting")
    except RuntimeError as exc:
        _fail(str(exc))
    best = best_setting(results)
    wall = time.perf_counter() - started
    print(f"Kalena Pareto sweep: {len(names)} settings in {wall:.0f} s (inputs {loaded:.0f} s)")
    print(format_rows(results, best))
    if best:
        print(f"most useful work: pareto {best} ({results[best]['useful_core_hours']:,.0f} core-hours)")
    summary = {"settings": results, "most_useful_work": best, "hours": float(args.hours), "seed": int(args.seed),
               "load_factor": float(args.load_factor), "solver": "first-fit decreasing (stands in for Kuberina's)",
               "wall_seconds": round(wall, 1), "load_seconds": round(loaded, 1), "inputs": input_sources(args)}
    line = write_summary(summary, args.summary_json)
    if line:
        print(line)
    if args.report_html:
        from kalena_web.cli.evaluate_report import write_pareto_report  # plotly: import on demand

        print(write_pareto_report(args.report_html, summary, title=(
            f"Kalena Pareto sweep — {args.hours:g} h, load ×{args.load_factor:g}, seed {args.seed}")))
    return 0
