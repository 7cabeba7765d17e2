"""``kalena replay --persist`` and ``manage.py replay_persist`` as a user runs them: a fresh
SQLite file, the same flags, clear errors."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path: Path, data_dir: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL",)}
    environ.update(KALENA_DATA_DIR=str(data_dir), KALENA_VAR_DIR=str(tmp_path / "var"),
                   DJANGO_SETTINGS_MODULE="kalena_web.settings")
    return environ


def run(cmd: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def test_persist_from_the_command_line_and_the_management_command(env, tmp_path) -> None:
    kalena = [sys.executable, "-m", "kalena_web.cli", "replay", "--hours", "0.25", "--no-progress"]
    manage = [sys.executable, str(ROOT / "manage.py")]
    unmigrated = run([*kalena, "--persist", "--run-name", "early"], env)
    assert unmigrated.returncode == 2
    assert "unapplied migration" in unmigrated.stderr and "manage.py migrate" in unmigrated.stderr

    assert run([*manage, "migrate", "--noinput", "-v", "0"], env).returncode == 0
    first = run([*kalena, "--persist", "--run-name", "cli-run"], env)
    assert first.returncode == 0, first.stderr
    assert "persisted run 'cli-run'" in first.stdout and "/runs/cli-run/" in first.stdout

    again = run([*kalena, "--persist", "--run-name", "cli-run"], env)
    assert again.returncode == 2 and "already exists" in again.stderr and "--replace" in again.stderr
    bad = run([*kalena, "--persist", "--run-name", "no spaces"], env)
    assert bad.returncode == 2 and "is not accepted" in bad.stderr
    orphan = run([*kalena, "--run-name", "x"], env)
    assert orphan.returncode != 0 and "need --persist" in orphan.stderr

    managed = run([*manage, "replay_persist", "--hours", "0.25", "--no-progress", "--run-name", "mgmt-run",
                   "--seed", "3"], env)
    assert managed.returncode == 0, managed.stderr
    assert "persisted run 'mgmt-run'" in managed.stdout
    dup = run([*manage, "replay_persist", "--hours", "0.25", "--no-progress", "--run-name", "mgmt-run"], env)
    assert dup.returncode != 0 and "already exists" in dup.stderr

    db = sqlite3.connect(tmp_path / "var" / "kalena.sqlite3")
    rows = dict(db.execute("select name, config from archive_run").fetchall())
    assert set(rows) == {"cli-run", "mgmt-run"}
    assert '"seed": 3' in rows["mgmt-run"] and '"seed": 0' in rows["cli-run"]

    timings = run([*manage, "console_timings", "cli-run", "--repeat", "1"], env)
    assert timings.returncode == 0, timings.stderr
    assert "overview" in timings.stdout and "queries" in timings.stdout
    login = run([*manage, "demo_login", "--password", "pw-for-test-1"], env)
    assert "user: demo  password: pw-for-test-1" in login.stdout
    deleted = run([*manage, "run_delete", "cli-run"], env)
    assert deleted.returncode == 0
    assert [r[0] for r in db.execute("select name from archive_run")] == ["mgmt-run"]
