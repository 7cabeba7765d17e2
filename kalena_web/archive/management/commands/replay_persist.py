"""``manage.py replay_persist``: run a replay and record it as a named run (the same flags as
``kalena replay``; persistence is always on)."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from kalena_engine.errors import KalenaError
from kalena_web.cli.persist import persist_replay, persisted_line
from kalena_web.cli.replay import add_replay_arguments, format_summary, summary_path_check, write_summary


class Command(BaseCommand):
    help = ("Replay the Kuberina blueprint with real usage and batch arrivals, and persist it as a named run "
            "for the console (all or nothing). Flags as for `kalena replay`.")

    def add_arguments(self, parser) -> None:
        add_replay_arguments(parser, persist_implied=True)

    def handle(self, *args, **options) -> None:
        from argparse import Namespace

        ns = Namespace(**options)
        ns.persist = True
        try:
            summary_path_check(ns.summary_json)
            summary, run = persist_replay(ns, setup=False)
        except KalenaError as exc:
            raise CommandError(str(exc)) from exc
        except SystemExit as exc:  # config errors from the shared argument handling
            raise CommandError(str(exc)) from exc
        self.stdout.write("Kalena replay summary")
        self.stdout.write(format_summary(summary))
        line = write_summary(summary, ns.summary_json)
        if line:
            self.stdout.write(line)
        self.stdout.write(persisted_line(run))
