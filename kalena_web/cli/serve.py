"""``kalena serve``: the console (HTTP + WebSockets on Daphne) and, in the embedded default,
the control loops on a thread of the same process."""

from __future__ import annotations

import argparse
import sys

from kalena_web.cli.argtypes import port
from kalena_web.cli.persist import django_setup


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser(
        "serve", help="serve the console and API (and, without REDIS_URL, run the control loops in-process)",
        description="Daphne on HOST:PORT. Embedded default (REDIS_URL unset): the estimation sweep, scheduling, "
                    "escalation, drift and archive loops run on a thread of this process. With REDIS_URL set, run "
                    "`celery -A kalena_web worker` and `celery -A kalena_web beat` beside it instead.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=port, default=8000)
    parser.add_argument("--no-loops", action="store_true", help="do not run the embedded loops")
    parser.set_defaults(handler=handle)
    return parser


def handle(args: argparse.Namespace) -> int:
    django_setup()
    from daphne.endpoints import build_endpoint_description_strings
    from daphne.server import Server
    from django.conf import settings

    from kalena_web.asgi import application
    from kalena_web.control.embedded import EmbeddedLoops

    loops = None
    if settings.EMBEDDED and not args.no_loops:
        loops = EmbeddedLoops()
        loops.start()
        print("kalena serve: embedded control loops running in this process")
    watching = None
    if settings.KALENA_ORCHESTRATOR in ("kubernetes", "docker", "swarm") and not args.no_loops:
        from kalena_web.cli import watch

        watching = watch.start(watch.defaults())
        print(f"kalena serve: {settings.KALENA_ORCHESTRATOR} watch running in this process")
    print(f"kalena serve: console on http://{args.host}:{args.port}/")
    from kalena_web.telemetry.consumers import transport_max_message_bytes

    server = Server(application=application,
                    endpoints=build_endpoint_description_strings(host=args.host, port=args.port),
                    websocket_max_message_size=transport_max_message_bytes())
    try:
        server.run()
    finally:
        if loops is not None:
            loops.stop()
        if watching is not None:
            watching.stop()
    if not server.listening_addresses:  # Daphne logs a listen failure and returns: say so in the status
        print(f"kalena serve: error: could not listen on {args.host}:{args.port}", file=sys.stderr)
        return 2
    return 0
