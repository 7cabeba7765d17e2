"""``kalena-agent``: ``run`` (the node agent), ``bench mitigation`` and ``bench interference`` (the benchmarks).

Exit status: 0 on a clean stop, 2 for a configuration error (the message names the flag or
variable), 3 when a facility is missing (cgroup hierarchy, Docker engine).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from agents.errors import ConfigError, FacilityUnavailable
from agents.logs import configure as configure_logs


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: kalena-agent run [flags…] | kalena-agent bench mitigation|interference [flags…] | kalena-agent probe\n"
              "  kalena-agent run --help       agent flags (each also KALENA_AGENT_<FLAG>)\n"
              "  kalena-agent bench mitigation --help\n"
              "  kalena-agent bench interference --help\n"
              "  kalena-agent probe [--address HOST:PORT]   exit 0 when the agent's /healthz answers 200")
        return 0 if argv else 2
    if argv[0] == "--version":
        from agents import __version__

        print(f"kalena-agent {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command == "run":
        from agents.config import parse_run_args
        from agents.runner import run

        try:
            config = parse_run_args(rest)
        except ConfigError as exc:
            print(f"kalena-agent: configuration error: {exc}", file=sys.stderr)
            return 2
        try:
            configure_logs(fmt=os.environ.get("KALENA_LOG_FORMAT", "json"), level=config.log_level,
                           defaults={"node": config.node_name})
        except ValueError as exc:
            print(f"kalena-agent: configuration error: {exc}", file=sys.stderr)
            return 2
        try:
            return run(config)
        except ConfigError as exc:
            print(f"kalena-agent: configuration error: {exc}", file=sys.stderr)
            return 2
        except FacilityUnavailable as exc:
            print(f"kalena-agent: {exc}", file=sys.stderr)
            return 3
    if command == "bench":
        from agents.bench import interference, mitigation

        parser = argparse.ArgumentParser(prog="kalena-agent bench")
        sub = parser.add_subparsers(dest="which", required=True)
        mitigation.add_arguments(sub.add_parser("mitigation", help="cpu contention → relief on real cgroups"))
        interference.add_arguments(sub.add_parser(
            "interference", help="service latency and scheduling delay: isolated vs co-located, with and without the agent"))
        args = parser.parse_args(rest)
        try:
            return interference.main(args) if args.which == "interference" else mitigation.main(args)
        except FacilityUnavailable as exc:
            print(f"kalena-agent bench: {exc}", file=sys.stderr)
            return 3
    if command == "probe":
        return _probe(rest)
    print(f"kalena-agent: unknown command {command!r} (run, bench, probe)", file=sys.stderr)
    return 2


def _probe(argv: Sequence[str]) -> int:
    """GET the agent's ``/healthz`` (a container health check; the image carries no curl)."""
    import urllib.error
    import urllib.request

    parser = argparse.ArgumentParser(prog="kalena-agent probe")
    parser.add_argument("--address", default=os.environ.get("KALENA_AGENT_HEALTH_ADDRESS", "127.0.0.1:9640"))
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args(argv)
    from agents.config import resolve_health_address
    from agents.errors import ConfigError

    try:   # @node:PORT (the node's Swarm address): asked of the engine, as the agent did
        address = resolve_health_address(args.address, os.environ.get("DOCKER_HOST"))
    except ConfigError as exc:
        print(f"kalena-agent probe: {exc}", file=sys.stderr)
        return 1
    host, _, port = address.rpartition(":")
    host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    url = f"http://{host}:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=args.timeout) as response:  # noqa: S310 - local address
            return 0 if response.status == 200 else 1
    except urllib.error.HTTPError as exc:
        print(f"kalena-agent probe: {url} answered {exc.code}: {exc.read().decode(errors='replace')}", file=sys.stderr)
    except (urllib.error.URLError, OSError) as exc:
        print(f"kalena-agent probe: {url}: {getattr(exc, 'reason', exc)}", file=sys.stderr)
    return 1


WEB_EXTRA_MODULES = ("django", "ninja", "celery", "channels", "daphne", "plotly", "whitenoise", "dj_database_url")


def kalena_main() -> int:
    """The ``kalena`` console script: the console and control plane (``kalena_web.cli``), which
    need the ``web`` extra; without it, say so and exit 2 instead of a traceback."""
    import importlib
    import importlib.util

    def refuse(missing: str) -> int:
        print(f"kalena: the console and control plane need the web extra ({missing} is not installed): "
              "pip install 'kalena[web]'. The node agent alone is kalena-agent.", file=sys.stderr)
        return 2

    # looked up, not imported: the command line's thin client imports none of the web stack
    missing = next((m for m in WEB_EXTRA_MODULES if importlib.util.find_spec(m) is None), None)
    if missing is not None:
        return refuse(missing)
    try:
        cli = importlib.import_module("kalena_web.cli")  # dynamic: the agent never imports the web stack
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in WEB_EXTRA_MODULES:
            raise
        return refuse(exc.name or "")
    try:
        return cli.main()
    except BrokenPipeError:
        # the reader left (`kalena batch get C | head`): stop quietly, as kubectl does, with the
        # status a process killed by SIGPIPE gives, and no traceback; stdout is pointed at
        # /dev/null so the interpreter's final flush does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13


if __name__ == "__main__":
    raise SystemExit(main())
