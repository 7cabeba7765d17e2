"""``kalena replay`` as a user runs it: the console script, its summary file, its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REQUIRED = (
    "nodes", "active_nodes", "production_pods", "batch_submitted", "batch_completed", "batch_evicted",
    "production_evictions", "production_over_capacity_steps", "reclaimed_fraction_cpu",
    "reclaimed_fraction_ram", "usage_fill_cpu", "usage_fill_ram", "slack_fill_cpu", "slack_fill_ram",
    "clipped_fraction_cpu", "clipped_fraction_ram", "blueprint_violations", "blueprint_soft_violations",
    "data_anomalies", "sim_seconds", "wall_seconds",
)
KALENA = [sys.executable, "-m", "kalena_web.cli"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KALENA, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})


def test_replay_writes_summary_with_every_field(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "summary.json"
    result = run("replay", "--hours", "0.5", "--no-progress", "--summary-json", str(out),
                 env={"KALENA_DATA_DIR": str(data_dir)})
    assert result.returncode == 0, result.stderr
    assert "reclaimed fraction cpu / ram" in result.stdout
    summary = json.loads(out.read_text())
    for field in REQUIRED:
        assert field in summary, field
    assert summary["nodes"] == 186 and summary["sim_seconds"] == 1800
    assert summary["data_anomalies"]["alibaba.empty_plan"] == 199
    for key in ("reclaimed_fraction_cpu", "usage_fill_ram", "slack_fill_cpu", "clipped_fraction_ram"):
        assert 0 <= summary[key] <= 1


def test_malformed_ir_exits_nonzero_naming_file_line_field(tmp_path: Path, data_dir: Path) -> None:
    bad = tmp_path / "infra.yaml"
    bad.write_text("nodes:\n  - name: a\n    allocatable:\n      cpu: 4\n      ram: 16G\n")
    out = tmp_path / "summary.json"
    result = run("replay", "--infra", str(bad), "--hours", "0.1", "--no-progress", "--summary-json", str(out),
                 env={"KALENA_DATA_DIR": str(data_dir)})
    assert result.returncode == 2
    assert f"{bad}:5: nodes[a].allocatable.ram: '16G'" in result.stderr
    assert "Ki, Mi, Gi, Ti" in result.stderr
    assert not out.exists()  # nothing half-done


def test_missing_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    result = run("replay", "--hours", "0.1", "--no-progress", env={"KALENA_DATA_DIR": str(tmp_path / "nowhere")})
    assert result.returncode == 2
    assert "nowhere" in result.stderr and "file not found" in result.stderr


def test_bundled_sample_is_used_when_shared_data_is_absent(tmp_path: Path, monkeypatch) -> None:
    from kalena_web.cli import paths

    monkeypatch.delenv("KALENA_DATA_DIR", raising=False)
    monkeypatch.setattr(paths, "SHARED_DATA", tmp_path / "absent")
    assert paths.data_root() == paths.SAMPLE_DATA
    assert (paths.data_path("kuberina/irina-186-3d/irina_infra.yaml")).is_file()
    monkeypatch.setattr(paths, "SHARED_DATA", tmp_path)
    assert paths.data_root() == tmp_path  # the shared folder wins when it exists


def test_replay_runs_on_the_bundled_sample(tmp_path: Path) -> None:
    from kalena_web.cli import paths

    out = tmp_path / "s.json"
    result = run("replay", "--hours", "0.5", "--no-progress", "--summary-json", str(out),
                 env={"KALENA_DATA_DIR": str(paths.SAMPLE_DATA)})
    assert result.returncode == 0, result.stderr
    summary = json.loads(out.read_text())
    assert summary["usage_vms"] == 40 and summary["production_pods"] == 2714
    assert summary["batch_submitted"] > 0 and summary["production_evictions"] == 0


def test_bad_numbers_and_an_unwritable_summary_stop_before_anything_loads(tmp_path: Path) -> None:
    """Each refused at once, naming the flag — not after the inputs load, not with a traceback."""
    cases = {("--hours", "nan"): "--hours", ("--hours", "inf"): "--hours", ("--hours", "-1"): "--hours",
             ("--step", "0"): "--step", ("--load-factor", "abc"): "--load-factor", ("--seed", "-1"): "--seed",
             ("--offset", "-1"): "--offset", ("--machine-ram-gib", "0"): "--machine-ram-gib",
             ("--machine-cores", "-3"): "--machine-cores"}
    for (flag, value), named in cases.items():
        result = run("replay", flag, value, "--no-progress", env={"KALENA_DATA_DIR": str(tmp_path / "nowhere")})
        assert result.returncode == 2 and named in result.stderr and "Traceback" not in result.stderr, (flag, value)
    short = run("replay", "--hours", "0.001", "--no-progress", env={"KALENA_DATA_DIR": str(tmp_path / "nowhere")})
    assert short.returncode != 0 and "shorter than one step" in short.stderr
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    for target in (tmp_path, a_file / "s.json"):
        result = run("replay", "--hours", "0.1", "--no-progress", "--summary-json", str(target),
                     env={"KALENA_DATA_DIR": str(tmp_path / "nowhere")})
        assert result.returncode != 0 and "--summary-json" in result.stderr and "Traceback" not in result.stderr
