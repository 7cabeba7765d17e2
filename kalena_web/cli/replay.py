"""``kalena replay``: replay a Kuberina blueprint with real usage and real batch arrivals."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tqdm import tqdm

from kalena_engine.replay import MAPPINGS, NODE_SETS, ReplayConfig, build_replay
from kalena_web.cli.inputs import add_input_arguments, load_inputs


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "replay", help="replay the Irina blueprint with Bitbrains usage and Alibaba batch",
        description="Deterministic replay: production from the blueprint driven by real VM usage, "
                    "batch arrivals from a real trace placed into reclaimed slack.",
    )
    add_input_arguments(parser)
    run = parser.add_argument_group("replay")
    run.add_argument("--usage-mapping", choices=MAPPINGS, default="peak",
                     help="peak: VM shape scaled to a real production peak/request ratio (default); raw: usage/provisioned")
    run.add_argument("--offset", type=float, default=86_400.0, help="batch trace time of replay start (s)")
    run.add_argument("--load-factor", type=float, default=1.0, help="multiply batch instance counts")
    run.add_argument("--node-set", choices=NODE_SETS, default="active",
                     help="nodes batch may use: the blueprint's active nodes (default) or all")
    run.add_argument("--hours", type=float, default=24.0, help="simulated hours")
    run.add_argument("--step", type=float, default=60.0, help="step (s)")
    run.add_argument("--seed", type=int, default=0, help="seed for VM and ratio draws and load scaling")
    run.add_argument("--batch-usage-ratio", type=float, default=1.0,
                     help="batch usage as a fraction of its request (the trace has no usage)")
    run.add_argument("--summary-json", type=Path, help="also write the summary to this JSON file")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(handler=handle)
    return parser


def config_from_args(args: argparse.Namespace) -> ReplayConfig:
    try:
        return ReplayConfig(
            hours=args.hours, step_s=args.step, seed=args.seed, usage_mapping=args.usage_mapping,
            batch_offset_s=args.offset, load_factor=args.load_factor, node_set=args.node_set,
            batch_usage_ratio=args.batch_usage_ratio,
        )
    except ValueError as exc:
        raise SystemExit(f"kalena replay: error: {exc}") from None


def run_replay(args: argparse.Namespace, on_step=None) -> tuple[dict[str, object], object]:
    """Load, build and run a replay; returns ``(summary, replay)``."""
    config = config_from_args(args)
    progress = not args.no_progress
    started = time.perf_counter()
    inputs = load_inputs(args, progress=progress)
    loaded = time.perf_counter()
    replay = build_replay(inputs, config)
    bar = tqdm(total=config.steps, desc="replay", unit="step", disable=not progress)

    def observe(record) -> None:
        bar.update(1)
        if record.step % 30 == 0:
            bar.set_postfix(running=record.running_instances, pending=record.pending_instances, refresh=False)
        if on_step is not None:
            on_step(record)

    run_started = time.perf_counter()
    summary = replay.run(observe)
    bar.close()
    wall = time.perf_counter() - run_started
    summary["wall_seconds"] = round(wall, 3)
    summary["load_seconds"] = round(loaded - started, 3)
    summary["sim_seconds_per_wall_second"] = round(summary["sim_seconds"] / wall, 1) if wall > 0 else None
    summary["inputs"] = {k: str(getattr(args, k)) for k in ("infra", "workloads", "blueprint", "usage_dir", "batch_trace")}
    return summary, replay


def format_summary(summary: dict[str, object]) -> str:
    """A readable block of the summary, headline figures first."""
    headline = [
        ("nodes / active / taking batch", f"{summary['nodes']} / {summary['active_nodes']} / {summary['batch_nodes']}"),
        ("production pods", summary["production_pods"]),
        ("blueprint violations (hard / soft)", f"{summary['blueprint_violations']} / {summary['blueprint_soft_violations']} {summary['blueprint_soft_violations_by_kind']}"),
        ("batch submitted / placed / completed", f"{summary['batch_submitted']:,} / {summary['batch_placed']:,} / {summary['batch_completed']:,}"),
        ("batch evicted (events)", f"{summary['batch_evicted']:,} {summary['batch_evicted_by_reason']}"),
        ("production evictions", summary["production_evictions"]),
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


def handle(args: argparse.Namespace) -> int:
    summary, _ = run_replay(args)
    print("Kalena replay summary")
    print(format_summary(summary))
    if args.summary_json:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        print(f"  summary written to {args.summary_json}")
    return 0
