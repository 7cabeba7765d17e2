"""``kalena export CLUSTER --out DIR``: the two-part export back to Kuberina (docs/design.md §3)."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from kalena_engine.errors import InputError
from kalena_web.cli.persist import django_setup


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "export", help="write the workloads IR with observed: blocks and the Kalena report for a live cluster",
        description="Writes DIR/workloads-observed.yaml (the imported workloads file with an IR v1 observed: block "
                    "per production declaration) and DIR/kalena-report.json (per workload and per node figures the IR "
                    "has no field for).")
    parser.add_argument("cluster", help="live cluster name")
    parser.add_argument("--out", type=Path, required=True, help="output folder (created)")
    parser.add_argument("--window-s", type=float, default=86_400.0, help="window the statistics cover (s)")
    parser.set_defaults(handler=handle)
    return parser


def handle(args: argparse.Namespace) -> int:
    django_setup()
    from kalena_web.inventory.models import Cluster
    from kalena_web.replan.services import build_export, export_window_check

    export_window_check(args.window_s, field="--window-s")
    try:
        cluster = Cluster.objects.get(kind=Cluster.LIVE, name=args.cluster)
    except Cluster.DoesNotExist:
        raise InputError(f"no live cluster named {args.cluster!r}", source="command line", field="cluster",
                         accepted=", ".join(Cluster.objects.filter(kind=Cluster.LIVE).values_list("name", flat=True))
                         or "import one with `kalena cluster import`") from None
    if args.out.exists() and not args.out.is_dir():
        raise InputError(f"{args.out} exists and is not a folder", source="command line", field="--out")
    export = build_export(cluster=cluster, now_s=time.time(), window_s=args.window_s)
    files = {"workloads-observed.yaml": export.workloads_yaml,
             "kalena-report.json": json.dumps(export.report, indent=2) + "\n"}
    for name in files:
        if (args.out / name).is_dir():
            raise InputError(f"{args.out / name} is a folder", source="command line", field="--out")
    try:  # both files or neither: written beside their targets, then renamed
        args.out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (args.out / f".{name}.tmp").write_text(text, encoding="utf-8")
        for name in files:
            os.replace(args.out / f".{name}.tmp", args.out / name)
    except OSError as exc:
        for name in files:
            (args.out / f".{name}.tmp").unlink(missing_ok=True)
        raise InputError(f"cannot write the export: {exc}", source="command line", field="--out") from None
    print(f"wrote {args.out / 'workloads-observed.yaml'} and {args.out / 'kalena-report.json'} "
          f"({len(export.steady)} workloads with steady statistics)")
    return 0
