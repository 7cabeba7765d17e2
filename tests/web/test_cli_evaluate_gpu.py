"""``kalena evaluate policies --cluster alibaba-gpu-2023``: the second real cluster through the
same evaluation (a short slice), and a bad --cluster refused naming the flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

KALENA = [sys.executable, "-m", "kalena_web.cli"]


def run(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KALENA, *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "KALENA_DATA_DIR": str(data_dir)})


def test_policies_run_on_the_gpu_cluster(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "gpu.json"
    # 2.5 h from the compressed day's 2nd hour: BE arrivals have begun
    result = run("evaluate", "policies", "--cluster", "alibaba-gpu-2023", "--policies", "kalena,none",
                 "--hours", "0.5", "--offset", str(86_400 + 2 * 3600), "--no-progress", "--summary-json", str(out),
                 data_dir=data_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    summaries = json.loads(out.read_text())
    assert set(summaries) == {"kalena", "none"}
    for s in summaries.values():
        assert s["nodes"] == 1523 and s["production_pods"] == 4754
        assert s["blueprint_violations"] == 0  # first-fit placed every production pod within capacity
        assert s["inputs"]["cluster"] == "alibaba-gpu-2023"
        assert s["batch_submitted"] > 0
        assert s["production_memory_source"].startswith("alibaba-genai-2026")
    assert summaries["none"]["reclaimed_fraction_cpu"] == 0.0
    assert summaries["kalena"]["production_evictions"] == 0


def test_an_unknown_cluster_is_refused_naming_the_flag(data_dir: Path) -> None:
    result = run("evaluate", "policies", "--cluster", "borg-cell", "--no-progress", data_dir=data_dir)
    assert result.returncode == 2 and "argument --cluster: invalid choice: 'borg-cell'" in result.stderr
