"""``kalena evaluate policies``: the same replay — inputs, seed, scheduler, node-local
mitigation — once per reservation rule (Kalena, no reclamation, Koordinator, VPA and two
oracles), in parallel processes, with progress, a printed table, ``--summary-json`` and a
self-contained HTML report (docs/design.md §11; docs/evaluation.md).

Processes: the inputs are loaded once, then each policy runs in its own forked process (the
loaded inputs are inherited, not copied through a pipe); at most ``--jobs`` run at a time, so
memory is bounded by ``jobs`` replays. Results come back as summaries and small per-step
timelines; the output is the same whatever ``--jobs`` is.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import NoReturn

from kalena_engine.policy_file import dump_policy_text
from kalena_engine.replay import MAPPINGS, NODE_SETS, ReplayConfig, ReplayInputs, build_replay
from kalena_engine.replay.evaluate import format_proposal_table, format_table, policy_configs, with_harvest_ratios
from kalena_engine.replay.rules import RULES
from kalena_web.cli.argtypes import NON_NEGATIVE, POSITIVE, SEED, number
from kalena_web.cli.inputs import add_input_arguments, load_inputs
from kalena_web.cli.parallel import run_parallel
from kalena_web.cli.policy_args import add_policy_arguments, policy_or_exit
from kalena_web.cli.replay import input_sources, summary_path_check, write_summary

PROGRESS_EVERY_STEPS = 20


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "evaluate", help="compare Kalena with baselines and oracles on the same replay",
        description="Evaluation harnesses (docs/design.md §11).",
    )
    sub = parser.add_subparsers(dest="evaluation", required=True, metavar="EVALUATION")
    policies = sub.add_parser(
        "policies", help="Kalena vs none, Koordinator, VPA, oracle-60m, oracle-exact on one replay",
        description="Run the replay once per reservation rule — same inputs, seed and scheduler, only the "
                    "production reservation rule swapped — and compare harvest, evictions, contention, OOM "
                    "kills and throttling.",
    )
    add_input_arguments(policies)
    run = add_run_arguments(policies, hours=24.0)
    run.add_argument("--policies", default=",".join(RULES),
                     help=f"comma-separated rules to run (default all: {','.join(RULES)})")
    run.add_argument("--seed", type=SEED, default=0, help="seed for VM and ratio draws, load scaling and sampling")
    run.add_argument("--offset", type=NON_NEGATIVE, default=86_400.0, help="batch trace time of replay start (s)")
    run.add_argument("--node-set", choices=NODE_SETS, default="active", help="nodes batch may use")
    add_jobs_argument(run, "policies")
    add_output_arguments(policies, summary="{policy: summary}", files=(
        ("--policy-out", "write the policy the runs used as a policy file (YAML)"),))
    add_policy_arguments(policies)
    policies.set_defaults(handler=handle)
    from kalena_web.cli import evaluate_calibrate, evaluate_compaction, evaluate_pareto  # under ``evaluate``

    evaluate_compaction.add_parser(sub)
    evaluate_calibrate.add_parser(sub)
    evaluate_pareto.add_parser(sub)
    return parser


def add_run_arguments(parser: argparse.ArgumentParser, *, hours: float) -> argparse._ArgumentGroup:
    """The replay flags every evaluation takes (window, step, load, usage); returns the group."""
    run = parser.add_argument_group("replay")
    run.add_argument("--hours", type=POSITIVE, default=hours, help=f"simulated hours (default {hours:g})")
    run.add_argument("--step", type=POSITIVE, default=60.0, help="step (s)")
    run.add_argument("--load-factor", type=POSITIVE, default=1.0, help="multiply batch instance counts")
    run.add_argument("--usage-mapping", choices=MAPPINGS, default="peak", help="production usage mapping")
    run.add_argument("--batch-usage-ratio", type=NON_NEGATIVE, default=1.0,
                     help="batch usage as a fraction of its request (the trace has no usage)")
    return run


def default_jobs() -> int:
    """``--jobs`` by default: the cores this process may run on (at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def add_jobs_argument(run: argparse._ArgumentGroup, what: str) -> None:
    """``--jobs``: how many of the evaluation's ``what`` (settings, trials, policies) run at once."""
    run.add_argument("--jobs", type=number(minimum=1, integer=True), default=default_jobs(),
                     help=f"{what} run at once, one process each (default: the machine's cores, {default_jobs()})")


def add_output_arguments(parser: argparse.ArgumentParser, *, summary: str,
                         files: tuple[tuple[str, str], ...] = ()) -> argparse._ArgumentGroup:
    """The output flags every evaluation takes: ``--summary-json`` (``summary`` says what it
    holds), ``--report-html``, ``--no-progress``, and ``files`` as (flag, help) before them."""
    out = parser.add_argument_group("output")
    for flag, help_text in files:
        out.add_argument(flag, type=Path, help=help_text)
    out.add_argument("--summary-json", type=Path, help=f"write {summary} as JSON")
    out.add_argument("--report-html", type=Path, help="write a self-contained HTML report (Plotly, no network)")
    out.add_argument("--no-progress", action="store_true", help="no progress bars")
    return out


def fail(command: str, message: str) -> NoReturn:
    """Print ``kalena <command>: error: …`` and exit 2 (as a bad input file does)."""
    print(f"kalena {command}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _fail(message: str) -> NoReturn:
    fail("evaluate policies", message)


def _config(args: argparse.Namespace) -> ReplayConfig:
    policy = policy_or_exit(args, "evaluate policies").policy
    try:
        return ReplayConfig(hours=args.hours, step_s=args.step, seed=args.seed, usage_mapping=args.usage_mapping,
                            batch_offset_s=args.offset, load_factor=args.load_factor, node_set=args.node_set,
                            batch_usage_ratio=args.batch_usage_ratio, policy=policy)
    except ValueError as exc:
        _fail(str(exc))


def policy_work(name: str, inputs: ReplayInputs, config: ReplayConfig):
    """One policy's replay as a piece of :func:`run_parallel` work."""
    def work(report) -> dict[str, object]:
        started = time.perf_counter()
        replay = build_replay(inputs, config)

        def observe(record) -> None:
            if (record.step + 1) % PROGRESS_EVERY_STEPS == 0 or record.step + 1 == config.steps:
                report(record.step + 1)

        summary = replay.run(observe)
        summary["wall_seconds"] = round(time.perf_counter() - started, 3)
        return {"summary": summary, "timeline": replay.accumulator.timeline}
    return work


def run_policies(inputs: ReplayInputs, configs: dict[str, ReplayConfig], *, jobs: int,
                 progress: bool = True) -> dict[str, dict[str, object]]:
    """Run every configuration, at most ``jobs`` at once in forked processes
    (:func:`~kalena_web.cli.parallel.run_parallel`); returns
    ``{name: {"summary": …, "timeline": …}}`` in ``configs`` order.

    Raises:
        RuntimeError: a policy's process failed (its traceback in the message) or died.
    """
    return run_parallel({name: policy_work(name, inputs, cfg) for name, cfg in configs.items()},
                        {name: cfg.steps for name, cfg in configs.items()}, jobs=jobs, progress=progress)


def handle(args: argparse.Namespace) -> int:
    for flag, path in (("--summary-json", args.summary_json), ("--report-html", args.report_html),
                       ("--policy-out", args.policy_out)):
        summary_path_check(path, flag, "evaluate policies")
    rules = tuple(r.strip() for r in args.policies.split(",") if r.strip())
    document = policy_or_exit(args, "evaluate policies")
    base = _config(args)
    try:
        configs = policy_configs(base, rules)
    except ValueError as exc:
        _fail(f"--policies: {exc}")
    started = time.perf_counter()
    inputs = load_inputs(args, progress=not args.no_progress)
    loaded = time.perf_counter() - started
    if not args.no_progress:
        print(f"inputs loaded in {loaded:.1f} s; running {len(configs)} policies, {args.jobs} at a time")
    try:
        results = run_policies(inputs, configs, jobs=int(args.jobs), progress=not args.no_progress)
    except RuntimeError as exc:
        _fail(str(exc))
    sources = input_sources(args)
    summaries = with_harvest_ratios({name: r["summary"] for name, r in results.items()})
    for summary in summaries.values():
        summary["inputs"] = dict(sources)
        summary["policy_name"] = document.metadata.name
        summary["policy_version"] = document.metadata.version
    wall = time.perf_counter() - started
    print(f"Kalena policy evaluation: {args.hours:g} h, load factor ×{args.load_factor:g}, seed {args.seed}, "
          f"{len(configs)} policies in {wall:.0f} s (inputs {loaded:.0f} s)")
    print(format_table(summaries))
    print("\nmetrics 6–8 (proposal §6.3): reservation accuracy, batch forward progress, Pareto-reserve yield")
    print(format_proposal_table(summaries))
    line = write_summary(summaries, args.summary_json)
    if line:
        print(line)
    if args.report_html:
        from kalena_web.cli.evaluate_report import write_report  # plotly: import on demand

        print(write_report(args.report_html, summaries, {n: r["timeline"] for n, r in results.items()},
                           title=f"Kalena policy evaluation — {args.hours:g} h, load ×{args.load_factor:g}, seed {args.seed}"))
    if args.policy_out:
        args.policy_out.parent.mkdir(parents=True, exist_ok=True)
        args.policy_out.write_text(dump_policy_text(document))
        print(f"  policy written to {args.policy_out}")
    return 0
