"""``kalena migrate``: create or update the console's database (Django's ``migrate``), for an
installed package, which has no ``manage.py``."""

from __future__ import annotations

import argparse
import os


def add_parser(commands: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = commands.add_parser("migrate", help="create or update the console's database ($DATABASE_URL, else "
                                                 "the embedded SQLite file)")
    parser.set_defaults(handler=handle)
    return parser


def handle(args: argparse.Namespace) -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kalena_web.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", interactive=False, verbosity=1)
    return 0
