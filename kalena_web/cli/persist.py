"""``--persist``: set Django up for the command line and record a replay as a named run."""

from __future__ import annotations

import argparse
import os
from datetime import datetime, timezone

from kalena_web.archive.errors import ArchiveError


def django_setup() -> None:
    """Configure Django (``DJANGO_SETTINGS_MODULE``, default ``kalena_web.settings``) and make
    sure the database is migrated.

    Raises:
        ArchiveError: migrations are pending (naming the database and the command to run).
    """
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kalena_web.settings")
    import django

    django.setup()
    from django.db import connection

    if _every_migration_file_applied(connection):
        return
    from django.db.migrations.executor import MigrationExecutor

    executor = MigrationExecutor(connection)
    pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if pending:
        raise ArchiveError(
            f"the database {connection.settings_dict['NAME']} has {len(pending)} unapplied migration(s): "
            "run `kalena migrate` (or `python manage.py migrate` in a checkout) first")


def _every_migration_file_applied(connection) -> bool:  # type: ignore[no-untyped-def]
    """Whether every migration file of every installed app is recorded as applied — one query
    and a directory listing per app, without importing the migration modules (the full check
    builds the migration graph: half a second on every command). ``False`` sends the caller to
    that full check, which also names what is pending."""
    from django.apps import apps
    from django.db.utils import DatabaseError

    on_disk: set[tuple[str, str]] = set()
    for config in apps.get_app_configs():
        folder = os.path.join(config.path, "migrations")
        if os.path.isdir(folder):
            on_disk.update((config.label, f[:-3]) for f in os.listdir(folder)
                           if f.endswith(".py") and f[0].isdigit())
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT app, name FROM django_migrations")
            applied = set(cursor.fetchall())
    except DatabaseError:
        return False
    return on_disk <= applied


def persist_replay(args: argparse.Namespace, *, setup: bool = True):
    """Prepare, run and persist the replay named by ``args``; returns ``(summary, run)``.

    Raises:
        RunNameInvalid, RunExists: before the inputs are even loaded.
    """
    if setup:
        django_setup()
    from kalena_web.archive.services import run_default_name, run_name_validate, run_persist
    from kalena_web.archive.selectors import run_exists
    from kalena_web.archive.errors import RunExists
    from kalena_web.cli.replay import config_from_args, execute_replay, prepare_replay

    if args.run_name:
        run_name_validate(args.run_name)
        if not args.replace and run_exists(name=args.run_name):
            raise RunExists(f"a run named {args.run_name!r} already exists; choose another --run-name or pass --replace")
    prepared = prepare_replay(args)
    cluster_name = (os.path.basename(os.path.dirname(os.path.abspath(str(args.infra)))) or "cluster"
                    if getattr(args, "cluster", "irina") == "irina" else args.cluster)
    name = args.run_name or run_default_name(cluster_name=cluster_name, config=config_from_args(args),
                                             now=datetime.now(timezone.utc))
    progress = not args.no_progress
    run = run_persist(
        name=name, replay=prepared.replay, inputs=prepared.inputs, config=prepared.config,
        cluster_name=cluster_name, sources=prepared.sources, replace=args.replace,
        execute=lambda on_step: execute_replay(prepared, on_step, progress=progress),
    )
    return run.summary, run


def persisted_line(run) -> str:
    """One line saying what was persisted, where to look, and how long writing took."""
    written = getattr(run, "written", {})
    parts = ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in written.items())
    writes = run.summary.get("archive_write_seconds")
    return (f"  persisted run '{run.name}' in {run.persist_seconds:.1f} s (replay and writes; {writes:.1f} s of it "
            f"writing {parts})\n"
            f"  console page: /runs/{run.name}/ (`kalena serve` serves it, as ./scripts/demo does on the port it prints)")
