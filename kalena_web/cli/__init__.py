"""The ``kalena`` command: ``kalena replay``, ``kalena bench scheduler``, and more as the console grows."""

from __future__ import annotations

import argparse
import sys

from agents import __version__
from kalena_engine.errors import KalenaError
from kalena_web.cli import (
    agent_token,
    batch,
    bench,
    cluster,
    evaluate,
    export,
    lab,
    migrate,
    probe,
    replay,
    serve,
    users,
    watch,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kalena", description="Kalena: slack harvesting downstream of Kuberina.")
    parser.add_argument("--version", action="version", version=f"kalena {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    replay.add_parser(commands)
    bench.add_parser(commands)
    cluster.add_parser(commands)
    serve.add_parser(commands)
    export.add_parser(commands)
    users.add_parser(commands)
    agent_token.add_parser(commands)
    probe.add_parser(commands)
    migrate.add_parser(commands)
    batch.add_parser(commands)
    watch.add_parser(commands)
    evaluate.add_parser(commands)
    lab.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kalena`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KalenaError as exc:
        print(f"kalena: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kalena: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
