"""``kalena lab run`` end to end on this machine, as a user runs it: a very short day on a 2-node
Kubernetes-mode lab (the lab's own up, play, collection, the replay of the same slice, down).
What a user notices: the scaled policy and its floors printed, a table with every figure beside
the replay's and live ÷ replay, a summary JSON and an HTML report, the replay persisted as a lab
run the console lists, the exit status saying whether the gates passed, and no lab left behind.

Real cgroups, engines, kubelet doubles, control plane, agents and kubectl; the CPU is shared, so
facts are asserted, not timings.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from agents.lab.kubernetes import KUBECTL

PROJECT_ROOT = Path(__file__).resolve().parents[3]
SUBNET = os.environ.get("KALENA_TEST_LAB_SUBNET", "127.0.0")
FIGURES = {"reclaimed_fraction_cpu", "reclaimed_fraction_ram", "batch_pod_hours", "batch_placed", "batch_completed",
           "run_time_inflation_p50", "batch_evicted",
           "batch_evictions_per_100_pod_hours", "production_evictions", "production_oom_kills", "blueprint_findings",
           "production_waited_node_steps", "batch_pods_lost", "batch_pods_double_bound"}


def test_a_short_day_runs_end_to_end_beside_its_replay(tmp_path) -> None:
    if not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"Debian's kubectl is not at {KUBECTL}: run scripts/services kubectl (scripts/test does)")
    redis = os.environ.get("KALENA_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
    name = "r" + uuid.uuid4().hex[:6]
    state_dir = Path(f"/tmp/kr-{name}")     # unix socket paths are limited to 108 bytes
    summary, report = tmp_path / "day.json", tmp_path / "day.html"
    # the console the run is persisted into: its own migrated database, as an operator's console has
    # (the lab's own control plane keeps its database on the PostgreSQL server given)
    server = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
    console = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "DATABASE_URL_FILE")}
    console["KALENA_DB_PATH"] = str(tmp_path / "console.sqlite3")
    migrated = subprocess.run([sys.executable, "-m", "kalena_web.cli", "migrate"], cwd=PROJECT_ROOT, env=console,
                              capture_output=True, text=True, timeout=600)
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    try:
        done = subprocess.run(
            [sys.executable, "-m", "kalena_web.cli", "lab", "run", "--state-dir", str(state_dir), "--name", name,
             "--database-url", server,
             "--subnet", SUBNET, "--redis-url", redis, "--nodes", "2", "--cpu-m", "400", "--memory-mib", "512",
             # 12 minutes of trace at 60×: 12 s of wall time, a few pods
             "--hours", "0.2", "--speed", "60", "--load-factor", "0.3", "--max-batch-pods", "6",
             "--max-pods-per-node", "12", "--summary-json", str(summary), "--report", str(report),
             "--run-name", f"lab-{name}"],
            cwd=PROJECT_ROOT, env=console, capture_output=True, text=True, timeout=1800)
        out = done.stdout + done.stderr
        assert done.returncode in (0, 1), out[-4000:]
        assert "time compression k = 60" in out and "agent.psi_window_s" in out      # the floors, reported
        data = json.loads(summary.read_text())
        rows = {r["figure"]: r for r in data["comparison"]["rows"]}
        assert set(rows) == FIGURES
        # the gated figures replayed again with the batch pods' memory shifted: the replay's own spread
        spread = data["replay_sensitivity"]
        assert spread["deltas_mib"] == [-1.0, -0.5, 0.5, 1.0] and len(spread["reclaimed_fraction_cpu"]) == 4
        assert spread["unaccounted_deltas_mib"] == [-0.5, -0.25, 0.25, 0.5]
        assert len(spread["unaccounted"]["batch_evictions_per_100_pod_hours"]) == 4
        assert ("replay sensitivity (every batch pod's memory -1/-0.5/+0.5/+1 MiB; every node's memory outside "
                "its pods -0.5/-0.25/+0.25/+0.5 MiB)") in out and "the gate passes against" in out
        # the replay holds memory as the burner does, its own pages measured on the day's pod groups
        own = data["replay_burner_own_pages"]
        assert own is None or (own["pods"] >= 1 and 0 < own["bytes"] < 8 * 2**20), own
        assert "replay holds memory as the burner does" in out
        assert rows["production_evictions"]["replay"] == 0 and rows["production_evictions"]["live"] == 0, rows
        assert data["replay"]["batch_pod_hours"] > 0 and data["live"]["batch_pod_hours"] > 0, rows
        assert (done.returncode == 0) == data["comparison"]["gates_passed"]
        assert ("gates: all passed" in out) == data["comparison"]["gates_passed"]
        assert "plotly" in report.read_text()[:200_000].lower()
        assert data["persisted_run"] == f"lab-{name}"
        listed = subprocess.run([sys.executable, "-c", (
            "import django, json, sys; django.setup(); from kalena_web.archive.models import Run; "
            "r = Run.objects.get(name=sys.argv[1]); print(json.dumps([r.config['sources'].get('lab_run'), "
            "'lab_run' in r.summary])); r.cluster.delete()"), f"lab-{name}"],
            cwd=PROJECT_ROOT, env=console, capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr[-2000:]
        assert json.loads(listed.stdout) == [str(state_dir), True]
        assert not (state_dir / "lab.json").exists()        # taken down without --keep
    finally:
        if (state_dir / "lab.json").exists():
            subprocess.run([sys.executable, "-m", "kalena_web.cli", "lab", "down", "--state-dir", str(state_dir)],
                           cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
        if not (state_dir / "lab.json").exists():
            shutil.rmtree(state_dir, ignore_errors=True)
