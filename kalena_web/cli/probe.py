"""``kalena probe``: liveness checks for exec probes and container health checks.

``kalena probe worker`` / ``beat`` / ``watch`` read the heartbeat file the Celery worker / beat /
``kalena watch`` (while it watches) refreshes (:mod:`kalena_web.control.heartbeat`) and fail when it is missing or older than
``--max-age`` (default three heartbeat periods). ``kalena probe url URL`` GETs a URL (``/livez``,
``/readyz``, the agent's ``/healthz``) and fails unless it answers 2xx within ``--timeout`` — for
images that carry no curl. ``kalena probe migrations --wait S`` succeeds once every migration is
applied (Swarm ignores ``depends_on``: entrypoints wait with it for the migrate job). Exit status: 0 healthy, 1 unhealthy (the reason on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import urllib.error
import urllib.request

from kalena_web.cli.argtypes import NON_NEGATIVE, POSITIVE


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("probe", help="liveness checks for exec probes and health checks (exit 0 = healthy)")
    which = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    for role, whose in (("worker", "the Celery worker's"), ("beat", "Celery beat's"),
                        ("watch", "the Docker/Swarm `kalena watch`'s (refreshed while it watches)")):
        sub = which.add_parser(role, help=f"{whose} heartbeat is fresh")
        sub.add_argument("--max-age", type=POSITIVE, default=None, metavar="S",
                         help="oldest acceptable heartbeat in seconds (default 3 × KALENA_HEARTBEAT_S)")
        sub.set_defaults(handler=_heartbeat, role=role)
    migrations = which.add_parser("migrations", help="every migration is applied (waiting up to --wait)")
    migrations.add_argument("--wait", type=NON_NEGATIVE, default=0.0, metavar="S",
                            help="keep checking for this long (database down or migrations pending) before failing")
    migrations.set_defaults(handler=_migrations)
    url = which.add_parser("url", help="a URL answers 2xx")
    url.add_argument("url")
    url.add_argument("--timeout", type=POSITIVE, default=3.0, metavar="S")
    url.set_defaults(handler=_url)
    return parser


def _heartbeat(args: argparse.Namespace) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kalena_web.settings")
    import django

    django.setup()
    from django.conf import settings

    from kalena_web.control.heartbeat import heartbeat_age_s, heartbeat_path

    max_age = args.max_age if args.max_age is not None else 3 * settings.KALENA_HEARTBEAT_S
    age = heartbeat_age_s(args.role)
    if age is None:
        print(f"kalena probe {args.role}: no heartbeat at {heartbeat_path(args.role)}", file=sys.stderr)
        return 1
    if age > max_age:
        print(f"kalena probe {args.role}: last heartbeat {age:.1f} s ago (> {max_age:g} s)", file=sys.stderr)
        return 1
    return 0


def _migrations(args: argparse.Namespace) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kalena_web.settings")
    import django

    django.setup()
    from kalena_web.control.health import readiness_checks

    deadline = time.monotonic() + args.wait
    while True:
        checks = readiness_checks()
        if checks["migrations"] == "ok":
            return 0
        if time.monotonic() >= deadline:
            print(f"kalena probe migrations: database {checks['database']}; migrations {checks['migrations']}",
                  file=sys.stderr)
            return 1
        time.sleep(2.0)


def _url(args: argparse.Namespace) -> int:
    try:
        with urllib.request.urlopen(args.url, timeout=args.timeout) as response:  # noqa: S310 - operator's URL
            if 200 <= response.status < 300:
                return 0
            print(f"kalena probe url: {args.url} answered {response.status}", file=sys.stderr)
    except urllib.error.HTTPError as exc:
        print(f"kalena probe url: {args.url} answered {exc.code}", file=sys.stderr)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"kalena probe url: {args.url}: {getattr(exc, 'reason', exc)}", file=sys.stderr)
    return 1
