"""A ``sqlite://`` DATABASE_URL — what the lab's Kubernetes mode, and so ``./scripts/demo``'s lab,
gives its console, scheduler, workers and beat — gets the embedded SQLite's settings: WAL and a
30 s busy timeout. Without them Django's 5 s default and the rollback journal left the demo lab's
loops failing with "database is locked" (estimation, archive, publish, escalation) every minute."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROBE = """
import django
django.setup()
from django.db import connection
with connection.cursor() as c:
    c.execute("PRAGMA journal_mode"); mode = c.fetchone()[0]
    c.execute("PRAGMA busy_timeout"); busy = c.fetchone()[0]
print(mode, busy)
"""


def _pragmas(env_extra: dict[str, str]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "KALENA_DB_PATH")}
    env.update(DJANGO_SETTINGS_MODULE="kalena_web.settings", **env_extra)
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    return out.stdout.split()


def test_a_sqlite_database_url_gets_wal_and_a_30_s_busy_timeout(tmp_path: Path) -> None:
    mode, busy = _pragmas({"DATABASE_URL": f"sqlite:///{tmp_path / 'lab.sqlite3'}"})
    assert mode == "wal" and busy == "30000"


def test_the_embedded_sqlite_keeps_them(tmp_path: Path) -> None:
    assert _pragmas({"KALENA_DB_PATH": str(tmp_path / "kalena.sqlite3")}) == ["wal", "30000"]
