"""``kalena bench replay``: whole-process wall and cpu seconds of ``kalena replay`` — cold (an empty
parsed-input cache: every file read and the cache written) and with the cache — and, on demand,
of the default ``kalena evaluate calibrate`` and ``compaction`` sweeps; the machine's load average
beside every figure (the figures of a shared machine mean little without it).

Each run is a separate ``python -m kalena_web.cli …`` process (imports, input loading, the replay,
the summary: what a user waits for). Wall is measured around the process; cpu is its user + system
time and its peak RSS from ``wait4``. Cold runs use a fresh state
folder each (``KALENA_VAR_DIR`` in a temporary folder, removed afterwards); the cached runs reuse
the folder the first cold run filled. The median of ``--repeat`` runs is reported, with every run
in the JSON, and the cold and cached summaries are compared (they must be equal but for timing).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kalena_web.cli.argtypes import number

#: Summary fields that measure the run, not the replay (left out of the cold/cached comparison).
TIMING_FIELDS = ("wall_seconds", "load_seconds", "sim_seconds_per_wall_second")


def add_parsers(which: argparse._SubParsersAction) -> None:
    parser = which.add_parser("replay", help="kalena replay's whole-process wall and cpu, cold and with the input cache",
                              description=__doc__.split("\n\n")[0])
    parser.add_argument("--hours", type=float, default=24.0, help="simulated hours of the replay (24)")
    parser.add_argument("--repeat", type=number(minimum=1, integer=True), default=3, help="runs of each kind; the median is reported (3)")
    parser.add_argument("--calibrate", action="store_true",
                        help="also time the default `kalena evaluate calibrate` sweep once (≈ 2 minutes on 2 idle cores)")
    parser.add_argument("--compaction", action="store_true",
                        help="also time the default `kalena evaluate compaction` once (minutes)")
    parser.add_argument("--jobs", type=number(minimum=1, integer=True), default=None,
                        help="--jobs of the timed sweeps (default: theirs, the machine's cores)")
    parser.add_argument("--summary-json", type=Path, help="also write the figures to this JSON file")
    parser.set_defaults(handler=handle)


def timed_process(argv: list[str], *, env: dict[str, str]) -> dict[str, object]:
    """Run ``python -m kalena_web.cli <argv>`` and measure it (module doc): wall around it, its own
    cpu and peak RSS from ``wait4`` (that process and the children it waited for).

    Raises:
        RuntimeError: the command failed (its stderr's tail in the message).
    """
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "kalena_web.cli", *argv], env=env,
                                   stdout=subprocess.DEVNULL, stderr=err, text=True)
        _, status, usage = os.wait4(process.pid, 0)
        wall = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"kalena {' '.join(argv)} exited {process.returncode}: {err.read()[-2000:]}")
    return {
        "wall_seconds": round(wall, 2),
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "user_seconds": round(usage.ru_utime, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),  # Linux: KiB
        "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def _median(runs: list[dict[str, object]], key: str) -> float:
    return round(statistics.median(float(r[key]) for r in runs), 2)


def _comparable(path: Path) -> dict[str, object]:
    summary = json.loads(path.read_text())
    return {k: v for k, v in summary.items() if k not in TIMING_FIELDS}


def run_bench(args: argparse.Namespace, *, progress=print) -> dict[str, object]:
    """Every timed run (module doc); ``progress(line)`` after each."""
    if args.repeat < 1 or args.hours <= 0:
        raise ValueError(f"--repeat ({args.repeat}) must be ≥ 1 and --hours ({args.hours:g}) > 0")
    scratch = Path(tempfile.mkdtemp(prefix="kalena-bench-replay-"))
    env = {k: v for k, v in os.environ.items() if k != "KALENA_INPUT_CACHE"}
    replay = ["replay", "--hours", f"{args.hours:g}", "--no-progress"]
    runs: dict[str, list[dict[str, object]]] = {"cold": [], "cached": []}
    try:
        warm = scratch / "state-warm"
        for i in range(args.repeat):
            state = warm if i == 0 else scratch / f"state-cold-{i}"
            out = scratch / f"cold-{i}.json"
            run = timed_process([*replay, "--summary-json", str(out)], env={**env, "KALENA_VAR_DIR": str(state)})
            runs["cold"].append(run)
            progress(f"  cold {i + 1}/{args.repeat}: wall {run['wall_seconds']} s, cpu {run['cpu_seconds']} s "
                     f"(load {run['load_average_1m'][0]:g})")
            if state != warm:
                shutil.rmtree(state, ignore_errors=True)
        for i in range(args.repeat):
            out = scratch / f"cached-{i}.json"
            run = timed_process([*replay, "--summary-json", str(out)], env={**env, "KALENA_VAR_DIR": str(warm)})
            runs["cached"].append(run)
            progress(f"  cached {i + 1}/{args.repeat}: wall {run['wall_seconds']} s, cpu {run['cpu_seconds']} s "
                     f"(load {run['load_average_1m'][0]:g})")
        same = all(_comparable(scratch / f"{kind}-{i}.json") == _comparable(scratch / "cold-0.json")
                   for kind in ("cold", "cached") for i in range(args.repeat))
        summary: dict[str, object] = {
            "command": "kalena " + " ".join(replay), "hours": args.hours, "repeat": args.repeat,
            "cpus": os.cpu_count(), "same_summary_cold_and_cached": same, "runs": runs,
        }
        for kind in ("cold", "cached"):
            for key in ("wall_seconds", "cpu_seconds", "peak_rss_mb"):
                summary[f"{kind}_{key}"] = _median(runs[kind], key)
        jobs = [] if args.jobs is None else ["--jobs", str(args.jobs)]
        for flag, argv in (("calibrate", ["evaluate", "calibrate", "--no-progress", *jobs]),
                           ("compaction", ["evaluate", "compaction", "--no-progress", *jobs])):
            if getattr(args, flag):
                run = timed_process(argv, env={**env, "KALENA_VAR_DIR": str(warm)})
                summary[flag] = {"command": "kalena " + " ".join(argv), **run}
                progress(f"  {flag}: wall {run['wall_seconds']} s, cpu {run['cpu_seconds']} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return summary


def format_summary(summary: dict[str, object]) -> str:
    def loads(kind: str) -> str:
        values = [v for r in summary["runs"][kind] for v in r["load_average_1m"]]   # before and after each run
        return f"{min(values):g}–{max(values):g}"

    lines = [
        ("command", summary["command"]),
        ("cold (empty input cache)", f"wall {summary['cold_wall_seconds']} s, cpu {summary['cold_cpu_seconds']} s, "
                                     f"peak RSS {summary['cold_peak_rss_mb']} MB (load {loads('cold')})"),
        ("with the input cache", f"wall {summary['cached_wall_seconds']} s, cpu {summary['cached_cpu_seconds']} s, "
                                 f"peak RSS {summary['cached_peak_rss_mb']} MB (load {loads('cached')})"),
        ("same summary cold and cached", "yes" if summary["same_summary_cold_and_cached"] else "NO"),
    ]
    for flag in ("calibrate", "compaction"):
        if flag in summary:
            run = summary[flag]
            lines.append((run["command"], f"wall {run['wall_seconds']} s, cpu {run['cpu_seconds']} s "
                                          f"(load {run['load_average_1m'][0]:g}–{run['load_average_1m'][1]:g})"))
    width = max(len(k) for k, _ in lines)
    return "\n".join(f"  {k.ljust(width)}  {v}" for k, v in lines)


def handle(args: argparse.Namespace) -> int:
    print(f"Kalena replay benchmark: median of {args.repeat} whole-process runs ({os.cpu_count()} cpus, "
          f"load average {os.getloadavg()[0]:.2f} at the start)")
    try:
        summary = run_bench(args)
    except (ValueError, RuntimeError) as exc:
        raise SystemExit(f"kalena bench replay: error: {exc}") from None
    print(format_summary(summary))
    if args.summary_json:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        print(f"  summary written to {args.summary_json}")
    return 0 if summary["same_summary_cold_and_cached"] else 1


__all__ = ["add_parsers", "handle", "run_bench"]
