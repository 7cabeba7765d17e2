"""``manage.py run_delete NAME``: delete a persisted run and everything it recorded."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from kalena_web.archive.errors import ArchiveError
from kalena_web.archive.services import run_delete


class Command(BaseCommand):
    help = "Delete a persisted replay run (its cluster, series, events and ledgers), atomically."

    def add_arguments(self, parser) -> None:
        parser.add_argument("name", help="the run's name")

    def handle(self, *args, **options) -> None:
        try:
            run_delete(name=options["name"])
        except ArchiveError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"deleted run {options['name']!r}")
