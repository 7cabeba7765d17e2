"""``kalena evaluate pareto`` as a user runs it: a short slice; useful work per setting, a setting
whose production cannot fit the capped capacity, the report, and refusals naming the flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

KALENA = [sys.executable, "-m", "kalena_web.cli", "evaluate", "pareto"]


def run(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KALENA, *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "KALENA_DATA_DIR": str(data_dir)})


def test_useful_work_per_setting(tmp_path: Path, data_dir: Path) -> None:
    out, report = tmp_path / "pareto.json", tmp_path / "pareto.html"
    result = run("--percents", "50,90,100", "--hours", "0.25", "--no-progress", "--summary-json", str(out),
                 "--report-html", str(report), data_dir=data_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(out.read_text())
    rows = summary["settings"]
    assert set(rows) == {"50 %", "90 %", "100 %"}
    assert rows["50 %"]["production_fits"] is False  # half of every node cannot hold Irina's production
    for name in ("90 %", "100 %"):
        r = rows[name]
        assert r["production_fits"] and r["pareto_percent"] == float(name.split()[0])
        assert r["useful_core_hours"] == pytest.approx(r["production_cpu_core_hours"] + r["batch_cpu_core_hours"], abs=0.01)
        assert r["batch_cpu_core_hours"] > 0
    assert rows["90 %"]["active_nodes"] > rows["100 %"]["active_nodes"]  # the reserve costs nodes
    assert summary["most_useful_work"] in ("90 %", "100 %")
    assert "standing in for Kuberina's solver" in result.stdout
    html = report.read_text()
    assert "<script src=" not in html and 'id="useful-work"' in html


@pytest.mark.parametrize("args, fragment", [
    (["--percents", "120"], "--percents: 120 is above 100"),
    (["--percents", "90,90"], "--percents: a setting is named twice"),
    (["--percents", "0.5"], "argument --percents: 0.5 is not a finite number ≥ 1"),
], ids=["above", "twice", "below"])
def test_bad_settings_are_refused_naming_the_flag(tmp_path: Path, data_dir: Path, args, fragment) -> None:
    out = tmp_path / "pareto.json"
    result = run("--hours", "0.1", "--no-progress", "--summary-json", str(out), *args, data_dir=data_dir)
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in result.stderr, result.stderr
    assert not out.exists()
