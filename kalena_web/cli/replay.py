"""``kalena replay``: replay a Kuberina blueprint with real usage and real batch arrivals;
``--persist`` also records it as a named run for the console."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from kalena_engine.replay import MAPPINGS, NODE_SETS, Replay, ReplayConfig, ReplayInputs, build_replay
from kalena_engine.replay.rules import RULES
from kalena_web.cli.argtypes import NON_NEGATIVE, POSITIVE, SEED
from kalena_web.cli.inputs import add_input_arguments, load_inputs
from kalena_web.cli.policy_args import add_policy_arguments, policy_or_exit


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "replay", help="replay the Irina blueprint with Bitbrains usage and Alibaba batch",
        description="Deterministic replay: production from the blueprint driven by real VM usage, "
                    "batch arrivals from a real trace placed into reclaimed slack.",
    )
    add_replay_arguments(parser)
    parser.set_defaults(handler=handle)
    return parser


def add_replay_arguments(parser: argparse.ArgumentParser, *, persist_implied: bool = False) -> None:
    """Every flag of ``kalena replay`` — shared with ``manage.py replay_persist``.

    ``persist_implied``: the command always persists (``--persist`` is then accepted and a no-op).
    """
    add_input_arguments(parser)
    run = parser.add_argument_group("replay")
    run.add_argument("--usage-mapping", choices=MAPPINGS, default="peak",
                     help="peak: VM shape scaled to a real production peak/request ratio (default); raw: usage/provisioned")
    run.add_argument("--offset", type=NON_NEGATIVE, default=86_400.0, help="batch trace time of replay start (s)")
    run.add_argument("--load-factor", type=POSITIVE, default=1.0, help="multiply batch instance counts")
    run.add_argument("--node-set", choices=NODE_SETS, default="active",
                     help="nodes batch may use: the blueprint's active nodes (default) or all")
    run.add_argument("--hours", type=POSITIVE, default=24.0, help="simulated hours")
    run.add_argument("--step", type=POSITIVE, default=60.0, help="step (s)")
    run.add_argument("--seed", type=SEED, default=0, help="seed for VM and ratio draws and load scaling")
    run.add_argument("--batch-usage-ratio", type=NON_NEGATIVE, default=1.0,
                     help="batch usage as a fraction of its request (the trace has no usage)")
    run.add_argument("--reservation-rule", choices=RULES, default="kalena",
                     help="production reservations the ledgers read: kalena (the estimator, default), a baseline "
                          "or an oracle (see docs/evaluation.md)")
    run.add_argument("--summary-json", type=Path, help="also write the summary to this JSON file")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_policy_arguments(parser)
    keep = parser.add_argument_group("persistence (the console's database: $DATABASE_URL, else var/kalena.sqlite3)")
    keep.add_argument("--persist", action="store_true", default=persist_implied,
                      help="record the run in the database for the console (all or nothing)"
                      + (" — always on for this command" if persist_implied else ""))
    keep.add_argument("--run-name", metavar="NAME",
                      help="name of the persisted run (letters, digits, . _ -; default <cluster>-<hours>h-seed<seed>-<time>)")
    keep.add_argument("--replace", action="store_true", help="overwrite a persisted run of the same name")


def config_from_args(args: argparse.Namespace, command: str = "replay") -> ReplayConfig:
    """The replay configuration named by ``args``, policy file and flags included.

    Raises:
        SystemExit: a bad value or policy, naming it (nothing has been loaded yet).
    """
    policy = policy_or_exit(args, command).policy
    try:
        return ReplayConfig(
            hours=args.hours, step_s=args.step, seed=args.seed, usage_mapping=args.usage_mapping,
            batch_offset_s=args.offset, load_factor=args.load_factor, node_set=args.node_set,
            batch_usage_ratio=args.batch_usage_ratio, policy=policy,
            reservation_rule=getattr(args, "reservation_rule", "kalena"),
        )
    except ValueError as exc:
        raise SystemExit(f"kalena {command}: error: {exc}") from None


@dataclass(eq=False)
class PreparedReplay:
    """A loaded and built replay, ready to run (nothing simulated yet)."""

    config: ReplayConfig
    inputs: ReplayInputs
    replay: Replay
    sources: dict[str, str]
    load_seconds: float


def input_sources(args: argparse.Namespace) -> dict[str, str]:
    """The input files named by ``args`` (as given, relative to the data folder)."""
    cluster = getattr(args, "cluster", "irina")
    if cluster != "irina":
        return {"cluster": cluster, "usage_dir": str(args.usage_dir)}
    return {k: str(getattr(args, k)) for k in ("infra", "workloads", "blueprint", "usage_dir", "batch_trace")}


def prepare_replay(args: argparse.Namespace) -> PreparedReplay:
    """Load every input named by ``args`` and build the replay."""
    config = config_from_args(args)
    started = time.perf_counter()
    inputs = load_inputs(args, progress=not args.no_progress)
    loaded = time.perf_counter() - started
    return PreparedReplay(config=config, inputs=inputs, replay=build_replay(inputs, config),
                          sources=input_sources(args), load_seconds=loaded)


def execute_replay(prepared: PreparedReplay, on_step=None, *, progress: bool = True) -> dict[str, object]:
    """Run a prepared replay with a progress bar; ``on_step`` sees every StepRecord. Returns the
    summary with the timing fields (``wall_seconds``, ``load_seconds``,
    ``sim_seconds_per_wall_second``) and ``inputs``."""
    config = prepared.config
    bar = tqdm(total=config.steps, desc="replay", unit="step", disable=not progress)

    def observe(record) -> None:
        bar.update(1)
        if record.step % 30 == 0:
            bar.set_postfix(running=record.running_instances, pending=record.pending_instances, refresh=False)
        if on_step is not None:
            on_step(record)

    run_started = time.perf_counter()
    summary = prepared.replay.run(observe)
    bar.close()
    wall = time.perf_counter() - run_started
    summary["wall_seconds"] = round(wall, 3)
    summary["load_seconds"] = round(prepared.load_seconds, 3)
    summary["sim_seconds_per_wall_second"] = round(summary["sim_seconds"] / wall, 1) if wall > 0 else None
    summary["inputs"] = dict(prepared.sources)
    return summary


def run_replay(args: argparse.Namespace, on_step=None) -> tuple[dict[str, object], object]:
    """Load, build and run a replay; returns ``(summary, replay)``."""
    prepared = prepare_replay(args)
    return execute_replay(prepared, on_step, progress=not args.no_progress), prepared.replay


def _evicted(summary: dict[str, object]) -> str:
    """``1,234 pods: 1,200 memory pressure, 34 CPU pressure; victims: 1,230 lowest priority, 4 over their limit``."""
    from kalena_web.console.formatting import CONDITIONS

    total = f"{summary['batch_evicted']:,} pods"
    conditions = summary.get("batch_evicted_pods_by_condition") or {}
    if not summary["batch_evicted"]:
        return total
    named = ", ".join(f"{n:,} {CONDITIONS.get(c.split()[0], c)}" for c, n in sorted(conditions.items()))
    how = {"priority": "lowest priority", "limit_breach": "over their limit"}
    victims = ", ".join(f"{n:,} {how.get(r, r)}" for r, n in sorted((summary.get("batch_evicted_by_reason") or {}).items()))
    return f"{total}: {named}; victims chosen: {victims}" if named else f"{total}; victims chosen: {victims}"


def format_summary(summary: dict[str, object]) -> str:
    """A readable block of the summary, headline figures first."""
    headline = [
        ("reservation rule", summary["reservation_rule"]),
        ("nodes / active / taking batch", f"{summary['nodes']} / {summary['active_nodes']} / {summary['batch_nodes']}"),
        ("production pods", summary["production_pods"]),
        ("blueprint violations (hard / soft)", f"{summary['blueprint_violations']} / {summary['blueprint_soft_violations']} {summary['blueprint_soft_violations_by_kind']}"),
        ("batch submitted / placed / completed", f"{summary['batch_submitted']:,} / {summary['batch_placed']:,} / {summary['batch_completed']:,}"),
        ("batch evicted (pods)", _evicted(summary)),
        ("production evictions", summary["production_evictions"]),
        ("OOM kills batch / service", f"{summary['oom_kills_by_tier']['batch']:,} / {summary['oom_kills_by_tier']['service']:,}"),
        ("escalations", f"{summary['escalations']:,} {summary['escalations_by_reason']}"),
        ("batch pod-hours / evictions per 100", f"{summary['batch_pod_hours']:,.1f} / {summary['batch_evictions_per_100_pod_hours']:.3f}"),
        ("throttled batch core-hours", f"{summary['throttled_batch_core_hours']:,.2f}"),
        ("completion inflation p50 / p99", f"{summary['completion_inflation_p50']:.3f} / {summary['completion_inflation_p99']:.3f}"),
        ("production contention core-h / node-steps", f"{summary['production_contention_core_hours']:,.2f} / {summary['production_contention_node_steps']:,}"),
        ("production over-capacity node-steps", summary["production_over_capacity_steps"]),
        ("reclaimed fraction cpu / ram", f"{summary['reclaimed_fraction_cpu']:.2%} / {summary['reclaimed_fraction_ram']:.2%}"),
        ("mean reclaimed in use", f"{summary['mean_reclaimed_cores']:,} cores / {summary['mean_reclaimed_ram_gib']:,} GiB"),
        ("usage fill cpu / ram", f"{summary['usage_fill_cpu']:.2%} / {summary['usage_fill_ram']:.2%}"),
        ("slack fill cpu / ram", f"{summary['slack_fill_cpu']:.2%} / {summary['slack_fill_ram']:.2%}"),
        ("clipped at limit cpu / ram", f"{summary['clipped_fraction_cpu']:.3%} / {summary['clipped_fraction_ram']:.3%}"),
        ("batch pods running mean / peak", f"{summary['mean_running_batch_pods']:,} / {summary['peak_running_batch_pods']:,}"),
        ("batch pods pending mean / peak", f"{summary['mean_pending_batch_pods']:,} / {summary['peak_pending_batch_pods']:,}"),
        ("simulated / wall seconds", f"{summary['sim_seconds']:,.0f} / {summary['wall_seconds']} ({summary['sim_seconds_per_wall_second']:,} sim s per wall s)"),
        ("data anomalies", ", ".join(f"{k}={v:,}" for k, v in summary["data_anomalies"].items()) or "none"),
    ]
    width = max(len(k) for k, _ in headline)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in headline)


def summary_path_check(path: Path | None, flag: str = "--summary-json", command: str = "replay") -> None:
    """Refuse an output path (``flag``: ``--summary-json``, ``--report-html``, ``--out``…) that could
    not be written, before anything runs: prints ``kalena <command>: error: <flag> <path>: …``.

    Raises:
        SystemExit: status 2 (as a bad flag), after naming the flag, the path and why.
    """
    if not path:
        return
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if path.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        why = "is a folder" if path.is_dir() else f"{folder} is not a writable folder"
        print(f"kalena {command}: error: {flag} {path}: {why}", file=sys.stderr)
        raise SystemExit(2)


def write_summary(summary: dict[str, object], path: Path | None) -> str | None:
    """Write the summary as JSON to ``path`` (if given; whole or not at all); returns a line
    saying so."""
    if not path:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp")
    partial.write_text(json.dumps(summary, indent=2, sort_keys=True, default=float) + "\n")
    os.replace(partial, path)
    return f"  summary written to {path}"


def handle(args: argparse.Namespace) -> int:
    if not args.persist and (args.run_name or args.replace):
        raise SystemExit("kalena replay: error: --run-name and --replace need --persist")
    summary_path_check(args.summary_json)
    if args.persist:
        from kalena_web.cli.persist import persist_replay, persisted_line  # needs Django: import on demand

        summary, run = persist_replay(args)
    else:
        summary, run = run_replay(args)[0], None
    print("Kalena replay summary")
    print(format_summary(summary))
    line = write_summary(summary, args.summary_json)
    if line:
        print(line)
    if run is not None:
        print(persisted_line(run))
    return 0
