"""``kalena bench cli``: wall time per ``kalena batch …`` / ``kalena get nodes`` call against a
console, as an operator's shell pays it — each call a fresh ``kalena`` process (interpreter
start, imports, the HTTP round trips, printing the table).

Calls through the console's REST API (``--server``, the thin client) and, with ``--database``,
the same commands opening the database directly (Django set up in the process) for comparison.
Prints the median, minimum and maximum wall time per command and the process's own CPU time
(user + system, from ``os.wait4``: on a busy machine wall minus CPU is time spent waiting for
the console, the database or other processes); ``--summary-json`` writes the same figures.
Figures only; nothing is asserted on time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from kalena_web.cli.remote import SERVER_ENV, TOKEN_ENV


def add_parsers(which: argparse._SubParsersAction) -> None:
    parser = which.add_parser("cli", help="time per `kalena batch`/`kalena get nodes` call against a console",
                              description=__doc__.split("\n\n")[1])
    parser.add_argument("cluster", help="a live cluster of that console")
    parser.add_argument("--server", default=None, help=f"the console's URL (default ${SERVER_ENV})")
    parser.add_argument("--token", default=None, help=f"an API token (default ${TOKEN_ENV})")
    parser.add_argument("--repeat", type=int, default=5, help="calls per command; the median is reported (5)")
    parser.add_argument("--writes", action="store_true",
                        help="also time submit and delete (queues and deletes pods named batch/kalena-bench-cli-N)")
    parser.add_argument("--database", action="store_true",
                        help="also time the same reads opening the database directly ($DATABASE_URL)")
    parser.add_argument("--summary-json", type=Path, help="also write the figures to this JSON file")
    parser.set_defaults(handler=handle)


def _kalena() -> list[str]:
    """The ``kalena`` console script beside this interpreter (else on PATH)."""
    beside = Path(sys.executable).with_name("kalena")
    found = str(beside) if beside.exists() else shutil.which("kalena")
    return [found] if found else [sys.executable, "-m", "kalena_web.cli"]


def _wait4(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """One call timed with ``os.wait4`` (its own CPU time, not its children's siblings')."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read() if proc.stderr else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, proc.returncode, err.decode(errors="replace")


def run_bench(args: argparse.Namespace) -> dict[str, object]:
    url = (args.server or os.environ.get(SERVER_ENV, "")).rstrip("/")
    token = args.token or os.environ.get(TOKEN_ENV, "")
    if not url or not token:
        raise SystemExit(f"kalena bench cli: needs --server (or ${SERVER_ENV}) and --token (or ${TOKEN_ENV})")
    if args.repeat < 1:
        raise SystemExit("kalena bench cli: --repeat must be at least 1")
    base = _kalena()
    remote_env = {**os.environ, SERVER_ENV: url, TOKEN_ENV: token}
    db_env = {k: v for k, v in os.environ.items() if k not in (SERVER_ENV, TOKEN_ENV)}
    c = args.cluster
    probe = subprocess.run([*base, "batch", "get", c, "--state", "all", "-o", "json"], env=remote_env,
                           capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise SystemExit(f"kalena bench cli: `kalena batch get {c}` against {url} failed: {probe.stderr.strip()}")
    pods = json.loads(probe.stdout)
    one = pods[0]["name"] if pods else None
    commands: list[tuple[str, list[str]]] = [("batch get", ["batch", "get", c]), ("get nodes", ["get", "nodes", c])]
    if one:
        commands += [("batch get NAME", ["batch", "get", c, one]), ("batch describe NAME", ["batch", "describe", c, one])]
    figures: dict[str, dict[str, object]] = {}

    def measure(label: str, argv_for, env) -> None:  # type: ignore[no-untyped-def]
        walls, cpus = [], []
        for i in range(args.repeat):
            wall, cpu, status, err = _wait4([*base, *argv_for(i)], env)
            if status != 0:
                raise SystemExit(f"kalena bench cli: `kalena {' '.join(argv_for(i))}` exited {status}: {err.strip()}")
            walls.append(wall)
            cpus.append(cpu)
        figures[label] = {"calls": len(walls), "median_s": statistics.median(walls), "min_s": min(walls),
                          "max_s": max(walls), "median_cpu_s": statistics.median(cpus)}

    for label, argv in commands:
        measure(f"{label} (REST)", lambda _i, a=argv: a, remote_env)
    if args.writes:
        stamp = int(time.time())
        measure("batch submit (REST)", lambda i: ["batch", "submit", c, f"batch/kalena-bench-cli-{stamp}-{i}",
                                                   "--request", "cpu=10m,ram=16Mi"], remote_env)
        measure("batch delete (REST)", lambda i: ["batch", "delete", c, f"batch/kalena-bench-cli-{stamp}-{i}"],
                remote_env)
    if args.database:
        for label, argv in commands:
            measure(f"{label} (database)", lambda _i, a=argv: a, db_env)
    return {"server": url, "cluster": c, "repeat": args.repeat, "commands": figures,
            "load_average": list(os.getloadavg()), "cpus": os.cpu_count()}


def format_summary(summary: dict[str, object]) -> str:
    lines = [f"kalena bench cli: {summary['server']}, cluster {summary['cluster']}, {summary['repeat']} call(s) "
             f"each, a fresh process per call (load average {summary['load_average'][0]:.2f} on "
             f"{summary['cpus']} cpus)",
             f"{'command':<32}{'median':>9}{'min':>9}{'max':>9}{'cpu':>9}"]
    for label, f in summary["commands"].items():  # type: ignore[union-attr]
        lines.append(f"{label:<32}{f['median_s']:>8.3f}s{f['min_s']:>8.3f}s{f['max_s']:>8.3f}s"
                     f"{f['median_cpu_s']:>8.3f}s")
    return "\n".join(lines)


def handle(args: argparse.Namespace) -> int:
    summary = run_bench(args)
    print(format_summary(summary))
    print(json.dumps(summary, sort_keys=True))
    if args.summary_json:
        args.summary_json.parent.mkdir(parents=True, exist_ok=True)
        args.summary_json.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return 0
