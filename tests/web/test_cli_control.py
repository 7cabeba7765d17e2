"""The control-plane commands as an operator runs them: cluster import, users and API tokens,
export — each against a fresh SQLite database, bad input exiting 2 with a message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml


@pytest.fixture
def env(tmp_path: Path, data_dir: Path) -> dict[str, str]:
    env = {**os.environ, "KALENA_DB_PATH": str(tmp_path / "k.sqlite3"), "KALENA_VAR_DIR": str(tmp_path / "var"),
           "KALENA_DATA_DIR": str(data_dir), "DJANGO_SETTINGS_MODULE": "kalena_web.settings"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], check=True, env=env,
                   cwd=Path(__file__).resolve().parents[2])
    return env


def kalena(env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kalena_web.cli", *args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_import_users_tokens_and_export(env, tmp_path: Path) -> None:
    homelab = "kuberina/homelab"
    bp = tmp_path / "bp.yaml"
    bp.write_text("solution:\n" + "".join(f"  {p}: thinkcentre-beta\n" for p in (
        "dns/pihole-0", "smart-home/home-assistant-0", "smart-home/zigbee2mqtt-0", "smart-home/mosquitto-0",
        "media/jellyfin-0", "cloud/nextcloud-0", "database/postgres-0", "monitoring/grafana-0",
        "monitoring/prometheus-0", "security/vaultwarden-0")))
    args = ["--infra", f"{homelab}/homelab_infra.yaml", "--workloads", f"{homelab}/homelab_workloads.yaml",
            "--blueprint", str(bp)]
    result = kalena(env, "cluster", "import", "home", *args)
    # everything on one 3.55-core node: the request ledger overflows → refused, nothing created
    assert result.returncode == 2 and "over_capacity" in result.stderr
    spread = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]
    pods = yaml.safe_load(bp.read_text())["solution"]
    bp.write_text("solution:\n" + "".join(
        f"  {p}: {'thinkcentre-beta' if p.startswith('smart-home/') and 'mosquitto' not in p else spread[i % 3]}\n"
        for i, p in enumerate(pods)))
    result = kalena(env, "cluster", "import", "home", *args)
    assert result.returncode == 0, result.stderr
    assert "3 nodes, 10 production pods" in result.stdout
    assert kalena(env, "cluster", "import", "home", *args).returncode == 2  # the name is taken
    for bad in ("", "bad name/with slash"):
        refused = kalena(env, "cluster", "import", bad, *args)
        assert refused.returncode == 2 and "cluster name" in refused.stderr
    assert kalena(env, "user", "add", "", "--password", "x" * 12).returncode == 2
    assert kalena(env, "user", "add", "short", "--password", "x").returncode == 2
    assert kalena(env, "cluster", "import", "spare", *args).returncode == 0
    assert kalena(env, "cluster", "delete", "nope", "--yes").returncode == 2
    for extra in ((), ("--yes",)):  # no terminal: a clear refusal naming what exists, no traceback
        nosuch = kalena(env, "cluster", "delete", "nosuch", *extra)
        assert nosuch.returncode == 2 and "no live cluster named 'nosuch'" in nosuch.stderr, nosuch.stderr
        assert "Traceback" not in nosuch.stderr
    unconfirmed = kalena(env, "cluster", "delete", "spare")
    assert unconfirmed.returncode == 2 and "--yes" in unconfirmed.stderr and "Traceback" not in unconfirmed.stderr
    deleted = kalena(env, "cluster", "delete", "spare", "--yes")
    assert deleted.returncode == 0 and "deleted" in deleted.stdout
    assert kalena(env, "cluster", "import", "spare", *args).returncode == 0  # the name is free again
    env["KALENA_PASSWORD"] = "pw-0123456789"
    assert kalena(env, "user", "add", "ops", "--role", "operator").returncode == 0
    token = kalena(env, "api-token", "create", "ops", "--name", "ci")
    assert token.returncode == 0 and "kal_" in token.stdout and "scopes: read write approve" in token.stdout
    read_only = kalena(env, "api-token", "create", "ops", "--name", "ro", "--scope", "read")
    assert read_only.returncode == 0 and "scopes: read)" in read_only.stdout
    assert kalena(env, "api-token", "create", "nobody").returncode == 2
    out = tmp_path / "export"
    result = kalena(env, "export", "home", "--out", str(out))
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "kalena-report.json").read_text())
    assert report["kind"] == "KalenaReport" and len(report["nodes"]) == 3
    assert (out / "workloads-observed.yaml").read_text().startswith("namespaces:")
    assert kalena(env, "export", "nope", "--out", str(out)).returncode == 2
    a_file = tmp_path / "a-file"
    a_file.write_text("keep")
    refused = kalena(env, "export", "home", "--out", str(a_file))
    assert refused.returncode == 2 and "not a folder" in refused.stderr and a_file.read_text() == "keep"
    blocked = tmp_path / "blocked"
    (blocked / "kalena-report.json").mkdir(parents=True)  # the second file cannot be written
    refused = kalena(env, "export", "home", "--out", str(blocked))
    assert refused.returncode == 2 and not (blocked / "workloads-observed.yaml").exists()  # neither file


def test_a_serving_process_runs_every_loop_of_the_schedule(env) -> None:
    """`kalena serve` imports no task module itself: the embedded loops must find every task of
    the schedule in a fresh process, and each must run (no live cluster: nothing to do)."""
    code = ("from kalena_web.cli.persist import django_setup; django_setup()\n"
            "from kalena_web.control.embedded import EmbeddedLoops\n"
            "from kalena_web.control.schedules import PERIODS_S\n"
            "loops = EmbeddedLoops(clock=lambda: 0.0)\n"
            "ran = loops.run_due()\n"
            "print(sorted(ran) == sorted(PERIODS_S), sorted(set(PERIODS_S) - set(ran)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120,
                         cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True []", out.stdout + out.stderr


def test_serve_says_so_when_it_cannot_listen(env) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        result = kalena(env, "serve", "--port", str(taken), "--no-loops")
    assert result.returncode == 2 and f"could not listen on 127.0.0.1:{taken}" in result.stderr
    assert kalena(env, "serve", "--port", "99999").returncode == 2


def test_a_database_that_cannot_be_used_is_named_not_a_traceback(tmp_path: Path) -> None:
    env = {**os.environ, "DATABASE_URL": "postgres://postgres@127.0.0.1:1/kalena_nowhere",
           "KALENA_VAR_DIR": str(tmp_path / "var"), "DJANGO_SETTINGS_MODULE": "kalena_web.settings"}
    done = kalena(env, "agent-token", "list")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("kalena: error: the database named by DATABASE_URL cannot be used:"), done.stderr
    assert "Traceback" not in done.stderr
