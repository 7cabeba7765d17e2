"""``kalena lab slice --out DIR``: render the lab's cluster from real inputs — a Kuberina
blueprint slice as Kubernetes manifests and Docker container specs, its IR for the console, the
batch schedule and a summary (docs/lab.md "The slice"; :mod:`agents.lab.slice`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kalena_web.cli.argtypes import POSITIVE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``kalena lab slice``."""
    parser.add_argument("--out", type=Path, required=True, help="folder to write (new or empty)")
    parser.add_argument("--nodes", type=int, default=4, help="lab nodes (4)")
    parser.add_argument("--cpu-m", type=int, default=250, help="each lab node's cpu in millicores (250)")
    parser.add_argument("--memory-mib", type=int, default=256, help="each lab node's memory in MiB (256)")
    parser.add_argument("--name", default="lab", help="lab name: nodes are <name>-1 … (lab)")
    parser.add_argument("--speed", type=POSITIVE, default=10.0,
                        help="time compression k: trace clocks run k times faster in the lab (10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of every draw (0)")
    parser.add_argument("--load-factor", type=POSITIVE, default=1.0,
                        help="batch cpu demand over the lab's slack, both in m·s over the run (1.0)")
    parser.add_argument("--hours", type=POSITIVE, default=6.0, help="hours of trace time the slice covers (6)")
    parser.add_argument("--step-s", type=POSITIVE, default=60.0, help="usage step in trace seconds, as the replay's (60)")
    parser.add_argument("--usage-offset-h", type=float, default=0.0,
                        help="hours after the usage series' earliest start that the run begins (0)")
    parser.add_argument("--batch-offset-s", type=float, default=86_400.0,
                        help="batch trace time the run begins at (86400)")
    parser.add_argument("--min-wall-s", type=POSITIVE, default=10.0,
                        help="floor of a batch pod's wall duration after compression (10 s)")
    parser.add_argument("--max-pods-per-node", type=int, default=16,
                        help="take only blueprint nodes with at most this many production pods (16)")
    parser.add_argument("--max-batch-pods", type=int, default=300,
                        help="bundle trace instances so about this many batch pods run (300)")
    inputs = parser.add_argument_group("inputs (relative paths resolve under $KALENA_DATA_DIR or ../shared/data)")
    inputs.add_argument("--ir", dest="workloads", default=None, help="Kuberina workloads file (irina-186-3d)")
    inputs.add_argument("--infra", default=None, help="Kuberina infrastructure file (irina-186-3d)")
    inputs.add_argument("--blueprint", default=None, help="Kuberina solution (blueprint) file (irina-186-3d)")
    inputs.add_argument("--usage-dir", default=None, help="Bitbrains VM series folder")
    inputs.add_argument("--batch-trace", default=None, help="Alibaba 2018 batch_task file")
    inputs.add_argument("--google-events", default=None, help="Google 2011 task_events shard (peak ratios)")
    inputs.add_argument("--google-usage", default=None, help="Google 2011 task_usage rows (peak ratios)")


def handle_slice(args: argparse.Namespace) -> int:
    from agents.lab.slice import SliceConfig, render_slice, resolve_inputs, write_slice
    from kalena_engine.errors import InputError
    from kalena_web.cli.paths import data_root

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):   # before minutes of reading
        raise InputError("exists and is not an empty folder", source=str(out), field="--out",
                         accepted="a new or empty folder")
    inputs = resolve_inputs(data_root(), {k: getattr(args, k) for k in (
        "infra", "workloads", "blueprint", "usage_dir", "batch_trace", "google_events", "google_usage")})
    config = SliceConfig(nodes=args.nodes, cpu_m=args.cpu_m, memory_mib=args.memory_mib, lab_name=args.name,
                         speed=args.speed, seed=args.seed, load_factor=args.load_factor, hours=args.hours,
                         step_s=args.step_s, usage_offset_s=args.usage_offset_h * 3600.0,
                         batch_offset_s=args.batch_offset_s, min_wall_s=args.min_wall_s,
                         max_pods_per_node=args.max_pods_per_node, max_batch_pods=args.max_batch_pods)
    rendered = render_slice(config, inputs)
    write_slice(rendered, out)
    print(rendered.files["summary.txt"], end="")
    print(f"written: {len(rendered.files)} files under {out}")
    return 0
