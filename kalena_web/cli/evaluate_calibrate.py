"""``kalena evaluate calibrate``: the predictor × margin × half-life sweep on the same full
diurnal cycle, the safety curve, its knee and the setting the operator's tolerance ships,
written as a calibration policy file (docs/design.md §10; Borg Fig. 12; docs/evaluation.md). Settings
run in parallel processes (the policy evaluation's machinery); the baselines (``oracle-60m``
first) run beside them at every load factor, so each setting's harvest reads against the
oracle's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from typing import NoReturn

from dataclasses import replace

from kalena_engine.policy import Policy
from kalena_engine.policy_file import dump_policy_text
from kalena_engine.replay import ReplayConfig
from kalena_engine.replay.calibration import (
    ASYMMETRIC, DEFAULT_PREDICTORS, GRIDS, HALF_LIVES, KNEE_RATE, MARGIN_FLOOR, MARGINS, MAX_CONTENTION_SHARE, MAX_EVICTIONS_PER_100,
    PREDICTOR_VARIANTS, WIDEN_ROUNDS, _key, calibration_document, contention_share, describe, frontier,
    frontier_across_loads, grid_edges, knee, parse_variant, point, setting_name, settings_configs, shipped,
    sweep_settings, variant_estimator, widen_grid,
)
from kalena_engine.replay.evaluate import policy_configs
from kalena_engine.replay.rules import RULES
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


def predictors_list(text: str) -> tuple[str, ...]:
    """``--predictors``: comma-separated variants ``name[:key=value…]``, each checked now;
    ``all`` stands for :data:`PREDICTOR_VARIANTS`."""
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    parts = tuple(v for p in parts for v in (PREDICTOR_VARIANTS if p == "all" else (p,)))
    if not parts:
        raise argparse.ArgumentTypeError("expected a comma-separated list of predictors")
    try:
        return tuple(parse_variant(p)[0] for p in parts)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def baselines_list(text: str) -> tuple[str, ...]:
    """``--baselines``: comma-separated reservation rules other than ``kalena`` (may be empty)."""
    parts = tuple(p.strip() for p in text.split(",") if p.strip())
    bad = [p for p in parts if p not in RULES or p == "kalena"]
    if bad:
        raise argparse.ArgumentTypeError(f"{', '.join(bad)}: each must be one of "
                                         f"{', '.join(r for r in RULES if r != 'kalena')}")
    if len(set(parts)) != len(parts):
        raise argparse.ArgumentTypeError(f"a baseline is named twice in {text!r}")
    return parts


#: Baselines run beside the sweep at every load factor by default: the oracle the harvest is read
#: against. The peers the safety curve can show (``vpa``, ``koordinator``; docs/design.md §11) are
#: named with ``--baselines`` (each is two more 24-h replays).
BASELINES = ("oracle-60m",)


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
    run.add_argument("--grid", choices=GRIDS, default="cross",
                     help="cross: every margin at the middle half-life and every half-life at the middle margin, "
                          "grown towards the knee while it lies on an edge (default); full: every margin × half-life")
    run.add_argument("--predictors", type=predictors_list, default=DEFAULT_PREDICTORS,
                     help="predictor variants to sweep, each name[:key=value…] with keys of spec.estimator "
                          "(members joined by +), e.g. nsigma:n_sigma=5:window_s=3600; 'all' for "
                          f"{','.join(PREDICTOR_VARIANTS)} (default {','.join(DEFAULT_PREDICTORS)})")
    run.add_argument("--baselines", type=baselines_list, default=BASELINES,
                     help="reservation rules run beside the sweep at every load factor, drawn on the safety curve; "
                          f"oracle-60m gives each setting's harvest ratio (default {','.join(BASELINES)}; e.g. "
                          "oracle-60m,vpa,koordinator for the peers too; '' for none)")
    run.add_argument("--usage-offset-h", type=NON_NEGATIVE, default=0.0,
                     help="hours after the usage series' start that replay time 0 maps to (another window of the "
                          "series, e.g. 168 for the next week; default 0)")
    run.add_argument("--warm-h", type=NON_NEGATIVE, default=0.0,
                     help="hours of each production pod's usage before the window fed to the estimator first, as a "
                          "live cluster's estimator holds the days before any window (the periodic member needs whole "
                          "days); at most --usage-offset-h (default 0: the replay starts from nothing)")
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
                     help=f"while the knee lies on the swept settings' edge, add the settings beside it that way (past "
                          f"the grid: widened) and sweep them, at most this many times (default {WIDEN_ROUNDS}; 0: only "
                          f"warn)")
    run.add_argument("--seed", type=SEED, default=0, help="seed (the same for every setting: a paired comparison)")
    run.add_argument("--offset", type=NON_NEGATIVE, default=86_400.0, help="batch trace time of replay start (s)")
    add_jobs_argument(run, "settings")
    add_output_arguments(parser, summary="the points, frontier, knee and verdict", files=(
        ("--out", "write the shipped setting (the knee's, or the tolerance rule's choice) as a calibration "
                  "policy file (YAML)"),))
    add_policy_arguments(parser)
    parser.set_defaults(handler=handle)
    return parser


def _fail(message: str) -> NoReturn:
    fail(COMMAND, message)


def format_points(points: list[dict[str, float]], chosen: dict[str, float], front: list[dict[str, float]],
                  own_knee: dict[str, float] | None = None, load: str = "",
                  to_ship: dict[str, object] | None = None, oracle: float | None = None) -> str:
    """One load factor's points as a table; ``chosen`` (the knee taken on the first load factor)
    is marked ``knee`` at every load, this load's own knee (when it is another setting) ``knee of
    ×<load>``, the setting the tolerance ships ``shipped``, other frontier points ``frontier``;
    ``oracle`` (oracle-60m's reclaimed cpu at this load) adds the harvest ratio."""
    headers = ["predictor", "μ", "h (s)", "reclaimed cpu", "÷ oracle-60m", "reclaimed ram", "evictions /100 pod-h",
               "prod contention core-h", "share", "OOM kills", ""]
    on_front = {_key(p) for p in front}
    rows = []
    for p in points:
        key = _key(p)
        marks = []
        if to_ship is not None and key == _key(to_ship):
            marks.append("shipped")
        if key == _key(chosen):
            marks.append("knee")
        elif own_knee is not None and key == _key(own_knee):
            marks.append(f"knee of ×{load}")
        if not marks and key in on_front:
            marks.append("frontier")
        ratio = f"{p['reclaimed_fraction_cpu'] / oracle:.3f}" if oracle else "—"
        rows.append([key[0], f"{key[1]:g}", f"{key[2]:g}", f"{p['reclaimed_fraction_cpu']:.2%}", ratio,
                     f"{p['reclaimed_fraction_ram']:.2%}", f"{p['batch_evictions_per_100_pod_hours']:.3f}",
                     f"{p['production_contention_core_hours']:,.1f}", f"{contention_share(p):.4%}",
                     f"{p['oom_kills']:.0f}", ", ".join(marks)])
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def _per_load(results: dict[str, dict[str, object]], settings: dict[str, list[tuple[float, float]]],
              load_factors: tuple[float, ...], rate: float, baselines: tuple[str, ...]) -> dict[str, dict[str, object]]:
    """Per load factor: the swept settings' points, their frontier and knee, and the baselines' points."""
    per_load: dict[str, dict[str, object]] = {}
    for load in load_factors:
        points = [point(mu, h, results[setting_name(mu, h, load, v)]["summary"], v)
                  for v, pairs in settings.items() for mu, h in pairs]
        base = {rule: point(0.0, 0.0, results[baseline_name(rule, load)]["summary"], ASYMMETRIC)
                for rule in baselines}
        for rule, row in base.items():
            row.pop("margin_ratio"), row.pop("half_life_s")
            row["predictor"] = rule
        per_load[f"{load:g}"] = {"points": points, "frontier": frontier(points), "knee": knee(points, rate),
                                 "baselines": base}
    return per_load


def baseline_name(rule: str, load: float) -> str:
    """A baseline replay's name in the sweep, e.g. ``oracle-60m ×4``."""
    return f"{rule} ×{load:g}"


def format_frontier(front: list[dict[str, object]]) -> str:
    """The frontier as a table: predictor, μ, h and, per load factor, reclaimed cpu / evictions
    per 100 pod-h."""
    if not front:
        return "  (empty)"
    loads = list(front[0]["loads"])
    headers = ["predictor", "μ", "h (s)"] + [f"×{load} reclaimed cpu / evictions" for load in loads]
    rows = [[str(f["predictor"]), f"{f['margin_ratio']:g}", f"{f['half_life_s']:g}"]
            + [f"{f['loads'][load]['reclaimed_fraction_cpu']:.2%} / {f['loads'][load]['batch_evictions_per_100_pod_hours']:.3f}"
               if load in f["loads"] else "" for load in loads] for f in front]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def verdict(to_ship: dict[str, object], base: Policy) -> tuple[bool, str]:
    """Whether the setting the tolerance picks differs from the default the sweep started from
    (``base``, the shipped :class:`Policy` unless ``--policy`` says otherwise), and a sentence."""
    default = base.estimator
    chosen = variant_estimator(default, to_ship)
    if chosen == default:
        return False, f"the rule's setting ({describe(to_ship)}) is the default already: nothing to change"
    def named(p: dict[str, object]) -> str:  # the predictor always named: both sides may differ in it alone
        return f"{p.get('predictor', ASYMMETRIC)}, μ {float(p['margin_ratio']):g}, h {float(p['half_life_s']):g} s"

    return True, (f"change the default from {named({'predictor': default.predictor, 'margin_ratio': default.margin_ratio, 'half_life_s': default.half_life_s})} "
                  f"to {named(to_ship)}")


def shipped_rows(per_load: dict[str, dict[str, object]], to_ship: dict[str, object]) -> dict[str, dict[str, object]]:
    """The shipped setting's figures at every load factor (issue table): reclaimed cpu, its ratio
    to oracle-60m (None without that baseline), evictions per 100 batch pod-hours, production
    contention core-hours and share, OOM kills."""
    out = {}
    for load, result in per_load.items():
        p = next(q for q in result["points"] if _key(q) == _key(to_ship))
        oracle = result["baselines"].get("oracle-60m")
        ratio = (p["reclaimed_fraction_cpu"] / oracle["reclaimed_fraction_cpu"]
                 if oracle and oracle["reclaimed_fraction_cpu"] > 0 else None)
        out[load] = {"reclaimed_fraction_cpu": p["reclaimed_fraction_cpu"],
                     "harvest_ratio_vs_oracle_60m": None if ratio is None else round(ratio, 4),
                     "batch_evictions_per_100_pod_hours": p["batch_evictions_per_100_pod_hours"],
                     "production_contention_core_hours": p["production_contention_core_hours"],
                     "production_contention_share": contention_share(p), "oom_kills": p["oom_kills"]}
    return out


def format_shipped(rows: dict[str, dict[str, object]]) -> str:
    """The shipped setting's table, one row per load factor."""
    headers = ["load", "reclaimed cpu", "÷ oracle-60m", "evictions /100 pod-h", "prod contention core-h",
               "contention share", "OOM kills"]
    body = [[f"×{load}", f"{r['reclaimed_fraction_cpu']:.2%}",
             "—" if r["harvest_ratio_vs_oracle_60m"] is None else f"{r['harvest_ratio_vs_oracle_60m']:.3f}",
             f"{r['batch_evictions_per_100_pod_hours']:.3f}", f"{r['production_contention_core_hours']:,.1f}",
             f"{r['production_contention_share']:.4%}", f"{r['oom_kills']:.0f}"] for load, r in rows.items()]
    widths = [max(len(r[i]) for r in [headers, *body]) for i in range(len(headers))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in [headers, *body])


def _check_window(inputs, base: ReplayConfig) -> None:
    """Refuse, naming the flags, a usage window no production usage series covers (before any
    replay starts, as ``kalena replay`` does in its one process)."""
    usage = inputs.bitbrains
    start = usage.earliest_start_s() + base.usage_offset_s
    if usage.covering(start, start + base.hours * 3600.0, tolerance_s=base.coverage_tolerance_s):
        return
    ends = [float(vm.timestamp_s[-1]) for vm in usage.series if len(vm)]
    span_h = (max(ends) - usage.earliest_start_s()) / 3600.0 if ends else 0.0
    _fail(f"--usage-offset-h/--hours: no production usage series covers {base.hours:g} h from "
          f"{base.usage_offset_s / 3600.0:g} h into {usage.directory} (its series span {span_h:.1f} h from its "
          f"start; accepted: --usage-offset-h + --hours within that)")


def handle(args: argparse.Namespace) -> int:
    for flag, path in (("--summary-json", args.summary_json), ("--report-html", args.report_html), ("--out", args.out)):
        summary_path_check(path, flag, COMMAND)
    document = policy_or_exit(args, COMMAND)
    if args.warm_h > args.usage_offset_h:
        _fail(f"--warm-h {args.warm_h:g} is longer than --usage-offset-h {args.usage_offset_h:g}: the warm-up is the "
              "usage before the window, so the window must start at least that far into the series "
              "(e.g. --usage-offset-h 168 --warm-h 72)")
    try:
        base = ReplayConfig(hours=args.hours, step_s=args.step, seed=args.seed, usage_mapping=args.usage_mapping,
                            batch_offset_s=args.offset, batch_usage_ratio=args.batch_usage_ratio, policy=document.policy,
                            usage_offset_s=args.usage_offset_h * 3600.0, warm_s=args.warm_h * 3600.0)
    except ValueError as exc:
        _fail(str(exc))
    predictors = tuple(args.predictors)
    baselines = tuple(args.baselines)
    loads = tuple(float(x) for x in args.load_factors)
    try:
        settings = sweep_settings(args.margins, args.half_lives, predictors, args.grid)
        settings_configs(base, settings, loads)
    except ValueError as exc:
        _fail(f"--predictors/--margins/--half-lives/--load-factors: {exc}")
    started = time.perf_counter()
    inputs = load_inputs(args, progress=not args.no_progress)
    loaded = time.perf_counter() - started
    _check_window(inputs, base)
    margins, half_lives = tuple(args.margins), tuple(args.half_lives)
    results: dict[str, dict[str, object]] = {}
    widened: list[str] = []
    rounds = 0

    def run(configs: dict[str, ReplayConfig]) -> None:
        try:
            results.update(run_parallel({n: policy_work(n, inputs, c) for n, c in configs.items()},
                                        {n: c.steps for n, c in configs.items()}, jobs=int(args.jobs),
                                        progress=not args.no_progress, what="setting"))
        except RuntimeError as exc:
            _fail(str(exc))

    # The knee is taken on the first load factor, so the search runs that load only (with the
    # baselines at that load in its first wave); every other load factor of the settings and of
    # the baselines runs once the settings are known, in one batch (the heaviest first).
    first = loads[0]
    count = sum(len(pairs) for pairs in settings.values())
    later = [part for part in (
        f"×{', ×'.join(f'{x:g}' for x in loads[1:])} of every setting swept" if loads[1:] else "",
        f"{len(baselines)} baseline(s) at every load factor" if baselines else "") if part]
    print(f"calibration sweep: {len(predictors)} predictor(s) on a {args.grid} grid of {len(margins)} margins × "
          f"{len(half_lives)} half-lives — {count} settings at ×{first:g}, {args.hours:g} h each (seed {args.seed}, the "
          f"same cycle for every setting), {args.jobs} at a time; the knee is found there"
          f"{', then ' + ' and '.join(later) if later else ''}")
    while True:
        configs = {n: c for n, c in settings_configs(base, settings, (first,)).items() if n not in results}
        if not rounds:  # the baselines at the first load factor fill the first wave (no core idles)
            configs.update({baseline_name(rule, first): config for rule, config in
                            policy_configs(replace(base, load_factor=first), baselines).items()})
        run(configs)
        points = [point(mu, h, results[setting_name(mu, h, first, v)]["summary"], v)
                  for v, pairs in settings.items() for mu, h in pairs]
        chosen = knee(points, float(args.knee_rate))
        label = str(chosen["predictor"])
        if rounds >= args.widen_rounds or not grid_edges(chosen, settings[label]):
            break
        added, said = widen_grid(chosen, settings[label])
        widened += said
        if not added:
            break
        print(f"the knee ({describe(chosen)}) lies on the swept settings' edge: " + "; ".join(said))
        settings[label] = settings[label] + added
        pins = dict(parse_variant(label)[1])
        if "margin_ratio" not in pins:
            margins = tuple(sorted({*margins, *(mu for mu, _ in added)}))
        if "half_life_s" not in pins:
            half_lives = tuple(sorted({*half_lives, *(h for _, h in added)}))
        rounds += 1
    rest = settings_configs(base, settings, tuple(sorted(loads[1:], reverse=True))) if loads[1:] else {}
    for load in sorted(loads[1:], reverse=True):
        for rule, config in policy_configs(replace(base, load_factor=float(load)), baselines).items():
            rest[baseline_name(rule, load)] = config
    if rest:
        print(f"every other load factor and the baselines: {len(rest)} replays")
        run(rest)
    per_load = _per_load(results, settings, loads, float(args.knee_rate), baselines)
    chosen = per_load[f"{first:g}"]["knee"]  # the same points: the same knee
    to_ship, within, ship_why = shipped({load: result["points"] for load, result in per_load.items()},
                                        max_evictions=float(args.max_evictions),
                                        max_contention_share=float(args.max_contention_share))
    change, why = verdict(to_ship, document.policy)
    wall = time.perf_counter() - started
    sources = input_sources(args)
    print(f"Kalena calibration: {args.hours:g} h from {args.usage_offset_h:g} h into the usage series"
          f"{f' (estimator warmed with the {args.warm_h:g} h before it)' if args.warm_h else ''}, seed "
          f"{args.seed}, {len(results)} replays in {wall:.0f} s (inputs {loaded:.0f} s); knee rate {args.knee_rate:g} "
          f"evictions/100 pod-h per % of reclaimed cpu")
    print(f"usage source: {sources.get('usage_dir') or sources.get('cluster') or '—'}")
    for load, result in per_load.items():
        oracle = result["baselines"].get("oracle-60m")
        print(f"\nload ×{load}")
        print(format_points(result["points"], chosen, result["frontier"], result["knee"], f"{load}", to_ship,
                            oracle["reclaimed_fraction_cpu"] if oracle else None))
        for rule, b in result["baselines"].items():
            print(f"  baseline {rule}: reclaimed cpu {b['reclaimed_fraction_cpu']:.2%}, "
                  f"{b['batch_evictions_per_100_pod_hours']:.3f} evictions/100 pod-h, contention "
                  f"{b['production_contention_core_hours']:,.1f} core-h ({contention_share(b):.4%})")
    print(f"\nknee (×{args.load_factors[0]:g}): {describe(chosen)} — "
          f"reclaimed cpu {chosen['reclaimed_fraction_cpu']:.2%}, "
          f"{chosen['batch_evictions_per_100_pod_hours']:.3f} evictions/100 pod-h")
    edges = grid_edges(chosen, settings[str(chosen["predictor"])])
    front = frontier_across_loads({load: result["points"] for load, result in per_load.items()})
    print(f"\nfrontier (non-dominated at ×{args.load_factors[0]:g}) with every load factor's figures")
    print(format_frontier(front))
    # the smallest margin at μ = 1 is no edge to widen past: a smaller margin reserves below usage
    floor = float(chosen["margin_ratio"]) <= MARGIN_FLOOR
    open_edges = [e for e in edges if not (floor and e.startswith("the smallest --margins"))]
    if floor and len(open_edges) < len(edges):
        print(f"the knee is at the smallest margin the estimator allows (μ {MARGIN_FLOOR:g}): nothing lies "
              "beyond that edge", file=sys.stderr)
    if open_edges:
        print(f"warning: the knee lies on the swept grid's edge ({' and '.join(open_edges)}) after {rounds} widening "
              f"round(s); the true knee may be outside the grid — widen the sweep that way", file=sys.stderr)
    elif not edges:
        print(f"the knee is interior to the swept grid{f' after {rounds} widening round(s)' if rounds else ''}: "
              "the curve bends inside it, not at its edge")
    print(f"\nshipped default (the operator's tolerance): {ship_why}")
    rows = shipped_rows(per_load, to_ship)
    print(format_shipped(rows))
    if not within:
        print("warning: no setting is within the operator's tolerance at every load factor — the shipped setting is "
              "the fallback (the fewest evictions near the best harvest)", file=sys.stderr)
    print(f"ship as default: {'yes' if change else 'no'} — {why}")
    summary = {"load_factors": per_load, "knee": chosen,
               "shipped": {"setting": to_ship, "within_tolerance": within, "why": ship_why, "loads": rows,
                           "max_evictions_per_100_pod_hours": float(args.max_evictions),
                           "max_contention_share": float(args.max_contention_share)}, "knee_rate": float(args.knee_rate),
               "change_default": change, "verdict": why, "knee_grid_edges": edges, "hours": float(args.hours),
               "seed": int(args.seed), "usage_offset_h": float(args.usage_offset_h),
               "warm_h": float(args.warm_h),
               "knee_interior": not edges, "widening_rounds": rounds, "widened": widened,
               "frontier": front, "replays": len(results), "predictors": list(predictors), "baselines": list(baselines),
               "requested_margins": list(args.margins), "requested_half_lives_s": list(args.half_lives),
               "margins": list(margins), "half_lives_s": list(half_lives), "grid": args.grid,
               "settings": {v: [list(pair) for pair in pairs] for v, pairs in settings.items()},
               "default": {"predictor": document.policy.estimator.predictor,
                           "margin_ratio": document.policy.estimator.margin_ratio,
                           "half_life_s": document.policy.estimator.half_life_s},
               "wall_seconds": round(wall, 1), "load_seconds": round(loaded, 1), "inputs": sources,
               "policy_name": document.metadata.name, "policy_version": document.metadata.version}
    line = write_summary(summary, args.summary_json)
    if line:
        print(line)
    if args.out:
        created = dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        out_doc = calibration_document(document, per_load, chosen, to_ship, within, margins=margins,
                                       half_lives=half_lives, predictors=predictors, created=created,
                                       max_evictions=float(args.max_evictions),
                                       max_contention_share=float(args.max_contention_share))
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(dump_policy_text(out_doc))
        print(f"  calibration policy (the shipped setting) written to {args.out} (kalena replay --policy {args.out}; "
              "the console's calibration page imports it)")
    if args.report_html:
        from kalena_web.cli.evaluate_report import write_calibration_report  # plotly: import on demand

        print(write_calibration_report(args.report_html, summary, title=(
            f"Kalena calibration — predictor × μ × h sweep, {args.hours:g} h, seed {args.seed}")))
    return 0
