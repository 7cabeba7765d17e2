"""``kalena serve``: the console (HTTP + WebSockets on Daphne) and, in the embedded default,
the control loops on a thread of the same process. With ``--tls-port``, the hooks listener too:
the admission webhook and the scheduler extender on their own mutual-TLS port
(:mod:`kalena_web.kubehooks.listener`), never on the console's."""

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
    parser.add_argument("--no-loops", action="store_true", help="do not run the embedded loops (nor the watch)")
    parser.add_argument("--no-watch", action="store_true",
                        help="do not watch the orchestrator on a thread: a `kalena watch` process (the stacks' "
                             "`watch` service, which holds the engine socket the console must not have) does")
    parser.add_argument("--cluster", default="",
                        help="live cluster the orchestrator's watch feeds (default: the only one; with none yet, "
                             "or several and none named, the console serves and the watch waits)")
    parser.add_argument("--tls-port", type=port, default=None,
                        help="serve the admission webhook and scheduler extender (and nothing else) on "
                             "HOST:TLS_PORT over mutual TLS; needs --tls-cert, --tls-key and --tls-client-ca")
    parser.add_argument("--tls-host", default="",
                        help="address the --tls-port listener binds (default: --host); e.g. --host 127.0.0.1 "
                             "--tls-host 0.0.0.0 serves the hooks to the cluster and the console to this host only")
    parser.add_argument("--tls-cert", default="", help="PEM certificate (chain) for --tls-port")
    parser.add_argument("--tls-key", default="", help="PEM private key for --tls-port")
    parser.add_argument("--tls-client-ca", default="",
                        help="PEM CA certificate(s) that sign the client certificates kube-apiserver and "
                             "kube-scheduler present on --tls-port (a caller without one is refused)")
    parser.set_defaults(handler=handle)
    return parser


def handle(args: argparse.Namespace) -> int:
    if args.tls_port is not None and not (args.tls_cert and args.tls_key and args.tls_client_ca):
        print("kalena serve: error: --tls-port needs --tls-cert, --tls-key and --tls-client-ca", file=sys.stderr)
        return 2
    if args.tls_port is not None and args.tls_port == args.port:
        print(f"kalena serve: error: --tls-port {args.tls_port} is the console's --port", file=sys.stderr)
        return 2
    from kalena_web.kubehooks.listener import HooksListener, HooksTLSError, KalenaServer, hooks_tls_options

    hooks = None
    if args.tls_port is not None:  # checked before anything starts: a bad file changes nothing
        try:
            hooks = HooksListener(args.tls_host or args.host, args.tls_port, hooks_tls_options(
                cert_path=args.tls_cert, key_path=args.tls_key, client_ca_path=args.tls_client_ca))
        except HooksTLSError as exc:
            print(f"kalena serve: error: {exc}", file=sys.stderr)
            return 2
    django_setup()
    from daphne.endpoints import build_endpoint_description_strings
    from django.conf import settings

    from kalena_web.asgi import application
    from kalena_web.cli.watch import startup_frozen
    from kalena_web.control.embedded import EmbeddedLoops

    startup_frozen()  # the loops and the watch below run for long: their collections skip the start's objects
    import faulthandler
    import signal

    # `kill -USR1 PID`: every thread's stack on stderr, the process goes on (what a stuck server does)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    loops = None
    if settings.EMBEDDED and not args.no_loops:
        loops = EmbeddedLoops()
        loops.start()
        print("kalena serve: embedded control loops running in this process")
    watching = None
    if settings.KALENA_ORCHESTRATOR in ("kubernetes", "docker", "swarm") and not (args.no_loops or args.no_watch):
        from kalena_web.cli import watch

        # a fresh install has no live cluster yet: serve the console, start the watch once one exists
        watching = watch.WaitingWatch(watch.defaults(args.cluster), say=lambda line: print(line, flush=True)).start()
    print(f"kalena serve: console on http://{args.host}:{args.port}/", flush=True)
    from kalena_web.telemetry.consumers import transport_max_message_bytes

    endpoints = build_endpoint_description_strings(host=args.host, port=args.port)
    if hooks is not None:
        print(f"kalena serve: webhook and extender on https://{args.tls_host or args.host}:{args.tls_port}/kubernetes/ "
              "(mutual TLS, nothing else served there)")
    # both of Daphne's limits, message and frame (each 1 MiB by default): a client may send a
    # message as one frame, and a frame over Daphne's frame limit is dropped like an oversize message
    server = KalenaServer(application=application, endpoints=endpoints, hooks=hooks,
                          websocket_max_message_size=transport_max_message_bytes(),
                          websocket_max_frame_size=transport_max_message_bytes())
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

