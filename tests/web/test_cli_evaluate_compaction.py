"""``kalena evaluate compaction`` as a user runs it: a short quiet window of the real data,
two seeds; its JSON figures, its report, its determinism and its refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KALENA = [sys.executable, "-m", "kalena_web.cli"]
SHORT = ["--hours", "0.25", "--window-start-h", "12", "--seeds", "2", "--no-progress"]
KEYS = ("nodes_needed_p90_on", "nodes_needed_p90_off", "extra_nodes_without_reclamation_p90",
        "nodes_needed_on_min", "nodes_needed_on_max", "nodes_needed_off_min", "nodes_needed_off_max",
        "extra_nodes_without_reclamation_min", "extra_nodes_without_reclamation_max", "seeds", "window_hours")


def run(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KALENA, "evaluate", "compaction", *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "KALENA_DATA_DIR": str(data_dir)})


@pytest.fixture(scope="module")
def compaction(tmp_path_factory, data_dir: Path):
    out = tmp_path_factory.mktemp("compaction")
    runs = {}
    for jobs in ("2", "1"):
        folder = out / f"jobs{jobs}"
        result = run(*SHORT, "--jobs", jobs, "--summary-json", str(folder / "summary.json"),
                     "--report-html", str(folder / "report.html"), data_dir=data_dir)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[jobs] = (result, folder)
    return runs


def test_the_figures_the_issue_names_and_what_they_mean(compaction) -> None:
    result, folder = compaction["2"]
    summary = json.loads((folder / "summary.json").read_text())
    for key in KEYS:
        assert key in summary, key
    assert summary["seeds"] == [0, 1] and summary["window_hours"] == 0.25 and summary["window_start_h"] == 12
    for trial in summary["trials"]:
        assert trial["nodes_needed_on"] <= trial["nodes_needed_off"]  # reclamation never costs nodes here
        assert trial["production_floor"] <= trial["nodes_needed_on"]
        fitted = {(p["arm"], p["nodes"]) for p in trial["probes"] if p["fits"]}
        assert ("on", trial["nodes_needed_on"]) in fitted and ("off", trial["nodes_needed_off"]) in fitted
        for p in trial["probes"]:  # a verdict is the allowance applied to what was measured
            if p["production_fits"]:
                assert p["fits"] == (p["unserved_fraction"] <= summary["allowance"])
    assert summary["nodes_needed_on_min"] <= summary["nodes_needed_p90_on"] <= summary["nodes_needed_on_max"]
    assert "window: 12 h – 12.25 h" in result.stdout
    assert "not by Kuberina's solver" in result.stdout  # said plainly
    assert "extra nodes without reclamation" in result.stdout


def test_results_do_not_depend_on_jobs_and_the_report_is_self_contained(compaction) -> None:
    (_, two), (_, one) = compaction["2"], compaction["1"]
    a, b = (json.loads((f / "summary.json").read_text()) for f in (two, one))
    for summary in (a, b):
        for key in ("wall_seconds", "load_seconds"):
            summary.pop(key)
        for trial in summary["trials"]:
            trial.pop("wall_seconds")
    assert a == b
    html = (two / "report.html").read_text()
    assert html == (one / "report.html").read_text()
    assert "<script src=" not in html
    for div in ("nodes-needed", "probes"):
        assert f'id="{div}"' in html


@pytest.mark.parametrize("args, fragment", [
    (["--hours", "30"], "--hours: 30 is longer than the trace day"),
    (["--hours", "6", "--window-start-h", "20"], "--window-start-h: 20 + --hours 6 ends after the trace day"),
    (["--seeds", "0"], "argument --seeds: 0 is not a finite number ≥ 1"),
    (["--allowance", "-0.1"], "argument --allowance: -0.1 is not a finite number ≥ 0"),
], ids=["hours", "window", "seeds", "allowance"])
def test_bad_flags_are_refused_naming_the_flag(tmp_path: Path, data_dir: Path, args, fragment) -> None:
    out = tmp_path / "summary.json"
    result = run("--no-progress", "--summary-json", str(out), *args, data_dir=data_dir)
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in result.stderr, result.stderr
    assert not out.exists()
