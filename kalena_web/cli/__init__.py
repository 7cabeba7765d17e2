"""The ``kalena`` command: ``kalena replay``, ``kalena bench scheduler``, ``kalena batch get``, and
more as the console grows.

Start-up is kept short: ``kalena COMMAND …`` imports only COMMAND's module (``kalena batch get``
does not load the replay, benchmark and evaluation code); ``kalena --help`` and a call without a
known command build the whole parser.
"""

from __future__ import annotations

import argparse
import importlib
import sys

#: command → its module (in ``kalena --help`` order); each module has ``add_parser(commands)``, which
#: adds its command(s)
COMMANDS = {
    "replay": "kalena_web.cli.replay", "bench": "kalena_web.cli.bench", "cluster": "kalena_web.cli.cluster",
    "serve": "kalena_web.cli.serve", "export": "kalena_web.cli.export", "user": "kalena_web.cli.users",
    "agent-token": "kalena_web.cli.agent_token", "probe": "kalena_web.cli.probe", "migrate": "kalena_web.cli.migrate",
    "batch": "kalena_web.cli.batch", "watch": "kalena_web.cli.watch", "evaluate": "kalena_web.cli.evaluate",
    "lab": "kalena_web.cli.lab", "get": "kalena_web.cli.get", "api-token": "kalena_web.cli.users",
}


def _version() -> str:
    from agents import __version__

    return __version__


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``kalena`` parser: every command, or only ``only`` (the one being run)."""
    parser = argparse.ArgumentParser(prog="kalena", description="Kalena: slack harvesting downstream of Kuberina.")
    parser.add_argument("--version", action="version", version=f"kalena {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = [COMMANDS[only]] if only is not None else list(dict.fromkeys(COMMANDS.values()))
    for module in modules:  # a module may add more than one command (users: user, api-token)
        importlib.import_module(module).add_parser(commands)
    return parser


def _command(argv: list[str]) -> str | None:
    """The command named in ``argv`` (its first word not starting with ``-``), if known."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kalena`` console script; returns the exit status: 0 done, 1 not
    found, 2 refused input, 130 interrupted."""
    from kalena_engine.errors import KalenaError

    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(_command(argv))
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except KalenaError as exc:
        print(f"kalena: error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        print("kalena: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        db = sys.modules.get("django.db.utils")
        if db is None or not isinstance(exc, db.OperationalError):
            raise
        # a server that does not answer, a database that does not exist, a refused login
        print(f"kalena: error: the database named by DATABASE_URL cannot be used: {str(exc).strip()}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
