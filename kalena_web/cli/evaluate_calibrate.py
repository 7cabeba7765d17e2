"""``kalena evaluate calibrate``: the margin × half-life sweep on the same full diurnal cycle,
the safety curve and its knee, written as a calibration policy file (docs/design.md §10; Borg
Fig. 12; docs/evaluation.md). Settings run in parallel processes (the policy evaluation's
machinery); the knee is compared with the shipped default at every load factor swept.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from typing import NoReturn

from kalena_engine.policy import Policy
from kalena_engine.policy_file import dump_policy_text
from kalena_engine.replay import ReplayConfig
from kalena_engine.replay.calibration import (
    HALF_LIVES, KNEE_RATE, MARGINS, MAX_CONTENTION_SHARE, MAX_EVICTIONS_PER_100, WIDEN_ROUNDS, better_on_both_axes,
    calibration_document, frontier, frontier_across_loads, grid_edges, knee, point, setting_name, shipped,
    sweep_configs, widen_grid,
)
from kalena_web.cli.argtypes import NON_NEGATIVE, SEED, number
from kalena_web.cli.evaluate import add_jobs_argument, add_output_arguments, add_run_arguments, fail, policy_work
from kalena_web.cli.inputs import add_input_arguments, load_inputs
from kalena_web.cli.parallel import run_parallel
from kalena_web.cli.policy_args import add_policy_arguments, policy_or_exit
from kalena_web.cli.replay import input_sources, summary_path_check, write_summary

COMMAND = "evaluate calibrate"


def numbers_list(flag: str, minimum: float):
    def parse(text: str) -> tuple[float, ...]:
        parts = [p.strip() for p in text.split(",") if p.strip()]
        if not parts:
            raise argparse.ArgumentTypeError("expected a comma-separated list of numbers")
        return tuple(number(minimum=minimum)(p) for p in parts)
    return parse


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        "calibrate", help="margin × half-life sweep: the safety curve, its knee, a calibration policy file",
        description="Run the same replay (inputs, seed, full diurnal cycle) once per margin × half-life setting, "
                    "draw the safety curve of reclaimed cpu against batch evictions per 100 pod-hours (production "
                    "contention beside it), mark the knee and write it as a policy file with metadata.calibration.",
    )
    add_input_arguments(parser)
    run = add_run_arguments(parser, hours=24.0)
    run.add_argument("--margins", type=numbers_list("--margins", 1.0), default=MARGINS,
                     help=f"margin ratios μ to sweep (default {','.join(f'{m:g}' for m in MARGINS)})")
    run.add_argument("--half-lives", type=numbers_list("--half-lives", 1.0), default=HALF_LIVES,
                     help=f"half-lives h (s) to sweep (default {','.join(f'{h:g}' for h in HALF_LIVES)})")
    run.add_argument("--load-factors", type=numbers_list("--load-factors", 1e-9), default=(1.0, 4.0),
                     help="load factors, each a full sweep (default 1,4); the knee is taken on the first")
    run.add_argument("--knee-rate", type=NON_NEGATIVE, default=KNEE_RATE,
                     help="evictions per 100 batch pod-hours one more %% of reclaimed cpu may cost (default 0.5)")
    run.add_argument("--max-evictions", type=NON_NEGATIVE, default=MAX_EVICTIONS_PER_100,
                     help="the operator's tolerance: batch evictions per 100 batch pod-hours a shipped setting may "
                          f"have at every load factor (default {MAX_EVICTIONS_PER_100:g})")
    run.add_argument("--max-contention-share", type=NON_NEGATIVE, default=MAX_CONTENTION_SHARE,
                     help="the operator's tolerance: production contention core-hours as a share of production cpu "
                          f"core-hours, at every load factor (default {MAX_CONTENTION_SHARE:g} = 0.01 %%)")
    run.add_argument("--widen-rounds", type=number(minimum=0, integer=True), default=WIDEN_ROUNDS,
                     help=f"while the knee lies on the grid's edge, widen the grid that way and sweep the new settings, "
                          f"at most this many times (default {WIDEN_ROUNDS}; 0: only warn)")
    run.add_argument("--seed", type=SEED, default=0, help="seed (the same for every setting: a paired comparison)")
    run.add_argument("--offset", type=NON_NEGATIVE, default=86_400.0, help="batch trace time of replay start (s)")
    add_jobs_argument(run, "settings")
    add_output_arguments(parser, summary="the points, frontier, knee and verdict", files=(
        ("--out", "write the knee as a calibration policy file (YAML)"),))
    add_policy_arguments(parser)
    parser.set_defaults(handler=handle)
    return parser


def _fail(message: str) -> NoReturn:
    fail(COMMAND, message)


def format_points(points: list[dict[str, float]], chosen: dict[str, float], front: list[dict[str, float]],
                  own_knee: dict[str, float] | None = None, load: str = "") -> str:
    """One load factor's points as a table; ``chosen`` (the knee taken on the first load factor, the
    one written and compared) is marked ``knee`` at every load, this load's own knee (when it is
    another setting) ``knee of ×<load>``, other frontier points ``frontier``."""
    headers = ["μ", "h (s)", "reclaimed cpu", "reclaimed ram", "evictions /100 pod-h", "prod contention core-h",
               "OOM kills", ""]
    on_front = {(p["margin_ratio"], p["half_life_s"]) for p in front}
    rows = []
    for p in points:
        key = (p["margin_ratio"], p["half_life_s"])
        own = own_knee is not None and key == (own_knee["margin_ratio"], own_knee["half_life_s"])
        mark = ("knee" if key == (chosen["margin_ratio"], chosen["half_life_s"]) else f"knee of ×{load}" if own
                else "frontier" if key in on_front else "")
        rows.append([f"{p['margin_ratio']:g}", f"{p['half_life_s']:g}", f"{p['reclaimed_fraction_cpu']:.2%}",
                     f"{p['reclaimed_fraction_ram']:.2%}", f"{p['batch_evictions_per_100_pod_hours']:.3f}",
                     f"{p['production_contention_core_hours']:,.1f}", f"{p['oom_kills']:.0f}", mark])
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _per_load(results: dict[str, dict[str, object]], margins: tuple[float, ...], half_lives: tuple[float, ...],
              load_factors: tuple[float, ...], rate: float) -> dict[str, dict[str, object]]:
    """Per load factor: the grid's points, their frontier and knee."""
    per_load: dict[str, dict[str, object]] = {}
    for load in load_factors:
        points = [point(mu, h, results[setting_name(mu, h, load)]["summary"]) for h in half_lives for mu in margins]
        per_load[f"{load:g}"] = {"points": points, "frontier": frontier(points), "knee": knee(points, rate)}
    return per_load


def format_frontier(front: list[dict[str, object]]) -> str:
    """The frontier as a table: μ, h and, per load factor, reclaimed cpu / evictions per 100 pod-h."""
    if not front:
        return "  (empty)"
    loads = list(front[0]["loads"])
    headers = ["μ", "h (s)"] + [f"×{load} reclaimed cpu / evictions" for load in loads]
    rows = [[f"{f['margin_ratio']:g}", f"{f['half_life_s']:g}"]
            + [f"{f['loads'][load]['reclaimed_fraction_cpu']:.2%} / {f['loads'][load]['batch_evictions_per_100_pod_hours']:.3f}"
               if load in f["loads"] else "" for load in loads] for f in front]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def verdict(per_load: dict[str, dict[str, object]], chosen: dict[str, float]) -> tuple[bool | None, str]:
    """Ship the knee as the default only if it beats the shipped default on both axes at every
    load factor swept; otherwise say why the default stays."""
    default = Policy().estimator
    key = (default.margin_ratio, default.half_life_s)
    if (chosen["margin_ratio"], chosen["half_life_s"]) == key:
        return False, f"the knee is the shipped default (μ {key[0]:g}, h {key[1]:g} s): nothing to change"
    reasons = []
    for load, result in per_load.items():
        by_key = {(p["margin_ratio"], p["half_life_s"]): p for p in result["points"]}
        if key not in by_key:
            return None, f"the shipped default (μ {key[0]:g}, h {key[1]:g} s) was not swept: no comparison"
        knee_here = by_key[(chosen["margin_ratio"], chosen["half_life_s"])]
        ref = by_key[key]
        if not better_on_both_axes(knee_here, ref):
            reasons.append(
                f"at ×{load} the knee reclaims {knee_here['reclaimed_fraction_cpu']:.2%} with "
                f"{knee_here['batch_evictions_per_100_pod_hours']:.3f} evictions/100 pod-h against the default's "
                f"{ref['reclaimed_fraction_cpu']:.2%} with {ref['batch_evictions_per_100_pod_hours']:.3f}")
    if reasons:
        return False, "the default stays: the knee is not better on both axes — " + "; ".join(reasons)
    return True, "the knee is better than the shipped default on both axes at every load factor swept"


def handle(args: argparse.Namespace) -> int:
    for flag, path in (("--summary-json", args.summary_json), ("--report-html", args.report_html), ("--out", args.out)):
        summary_path_check(path, flag, COMMAND)
    document = policy_or_exit(args, COMMAND)
    try:
        base = ReplayConfig(hours=args.hours, step_s=args.step, seed=args.seed, usage_mapping=args.usage_mapping,
                            batch_offset_s=args.offset, batch_usage_ratio=args.batch_usage_ratio, policy=document.policy)
    except ValueError as exc:
        _fail(str(exc))
    try:
        sweep_configs(base, args.margins, args.half_lives, args.load_factors)
    except ValueError as exc:
        _fail(f"--margins/--half-lives/--load-factors: {exc}")
    started = time.perf_counter()
    inputs = load_inputs(args, progress=not args.no_progress)
    loaded = time.perf_counter() - started
    margins, half_lives = tuple(args.margins), tuple(args.half_lives)
    results: dict[str, dict[str, object]] = {}
    widened: list[str] = []
    rounds = 0
    while True:
        configs = {n: c for n, c in sweep_configs(base, margins, half_lives, args.load_factors).items() if n not in results}
        print(f"calibration sweep{f' (widening round {rounds})' if rounds else ''}: {len(margins)} margins × "
              f"{len(half_lives)} half-lives × {len(args.load_factors)} load factors — {len(configs)} new replays of "
              f"{args.hours:g} h (seed {args.seed}, the same cycle for every setting), {args.jobs} at a time")
        try:
            results.update(run_parallel({n: policy_work(n, inputs, c) for n, c in configs.items()},
                                        {n: c.steps for n, c in configs.items()}, jobs=int(args.jobs),
                                        progress=not args.no_progress, what="setting"))
        except RuntimeError as exc:
            _fail(str(exc))
        per_load = _per_load(results, margins, half_lives, args.load_factors, float(args.knee_rate))
        chosen = per_load[f"{args.load_factors[0]:g}"]["knee"]
        if rounds >= args.widen_rounds or not grid_edges(chosen, margins, half_lives):
            break
        wider_m, wider_h, said = widen_grid(chosen, margins, half_lives)
        widened += said
        if (wider_m, wider_h) == (margins, half_lives):
            break
        print("the knee lies on the grid's edge: " + "; ".join(said))
        margins, half_lives = wider_m, wider_h
        rounds += 1
    first = per_load[f"{args.load_factors[0]:g}"]
    ship, why = verdict(per_load, chosen)
    wall = time.perf_counter() - started
    print(f"Kalena calibration: {args.hours:g} h, seed {args.seed}, {len(configs)} replays in {wall:.0f} s "
          f"(inputs {loaded:.0f} s); knee rate {args.knee_rate:g} evictions/100 pod-h per % of reclaimed cpu")
    for load, result in per_load.items():
        print(f"\nload ×{load}")
        print(format_points(result["points"], chosen, result["frontier"], result["knee"], f"{load}"))
    print(f"\nknee (×{args.load_factors[0]:g}): μ {chosen['margin_ratio']:g}, h {chosen['half_life_s']:g} s — "
          f"reclaimed cpu {chosen['reclaimed_fraction_cpu']:.2%}, "
          f"{chosen['batch_evictions_per_100_pod_hours']:.3f} evictions/100 pod-h")
    edges = grid_edges(chosen, margins, half_lives)
    front = frontier_across_loads({load: result["points"] for load, result in per_load.items()})
    print(f"\nfrontier (non-dominated at ×{args.load_factors[0]:g}) with every load factor's figures")
    print(format_frontier(front))
    if edges:
        print(f"warning: the knee lies on the swept grid's edge ({' and '.join(edges)}) after {rounds} widening "
              f"round(s); the true knee may be outside the grid — widen the sweep that way", file=sys.stderr)
    else:
        print(f"the knee is interior to the swept grid{f' after {rounds} widening round(s)' if rounds else ''}: "
              "the curve bends inside it, not at its edge")
    print(f"ship as default: {'yes' if ship else 'no'} — {why}")
    to_ship, within, ship_why = shipped({load: result["points"] for load, result in per_load.items()},
                                        max_evictions=float(args.max_evictions),
                                        max_contention_share=float(args.max_contention_share))
    print(f"shipped default (the operator's tolerance): {ship_why}")
    summary = {"load_factors": per_load, "knee": chosen,
               "shipped": {"setting": to_ship, "within_tolerance": within, "why": ship_why,
                           "max_evictions_per_100_pod_hours": float(args.max_evictions),
                           "max_contention_share": float(args.max_contention_share)}, "knee_rate": float(args.knee_rate),
               "ship_knee_as_default": ship, "verdict": why, "knee_grid_edges": edges, "hours": float(args.hours), "seed": int(args.seed),
               "knee_interior": not edges, "widening_rounds": rounds, "widened": widened,
               "frontier": front, "replays": len(results),
               "requested_margins": list(args.margins), "requested_half_lives_s": list(args.half_lives),
               "margins": list(margins), "half_lives_s": list(half_lives),
               "default": {"margin_ratio": Policy().estimator.margin_ratio, "half_life_s": Policy().estimator.half_life_s},
               "wall_seconds": round(wall, 1), "load_seconds": round(loaded, 1), "inputs": input_sources(args),
               "policy_name": document.metadata.name, "policy_version": document.metadata.version}
    line = write_summary(summary, args.summary_json)
    if line:
        print(line)
    if args.out:
        created = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        out_doc = calibration_document(document, first["points"], chosen, margins=margins,
                                       half_lives=half_lives, created=created)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(dump_policy_text(out_doc))
        print(f"  calibration policy written to {args.out} (kalena replay --policy {args.out}; the console's "
              "calibration page imports it)")
    if args.report_html:
        from kalena_web.cli.evaluate_report import write_calibration_report  # plotly: import on demand

        print(write_calibration_report(args.report_html, summary, title=(
            f"Kalena calibration — μ × h sweep, {args.hours:g} h, seed {args.seed}")))
    return 0
