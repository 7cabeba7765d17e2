"""``kalena bench scheduler`` as a user runs it (small sizes: this checks the figures are there,
it times nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIELDS = (
    "placements_per_s", "decisions_per_s", "p50_decision_ms", "p99_decision_ms", "naive_placements_per_s",
    "placed", "pending", "reclaimed_fraction_cpu", "naive_placed", "naive_reclaimed_fraction_cpu", "speedup",
)


def test_bench_scheduler_writes_every_field(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "kalena_web.cli", "bench", "scheduler", "--nodes", "200", "--pending", "600",
         "--instant-hours", "1", "--no-progress", "--summary-json", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "KALENA_DATA_DIR": str(data_dir)},
    )
    assert result.returncode == 0, result.stderr
    assert "placements/s" in result.stdout
    summary = json.loads(out.read_text())
    for field in FIELDS:
        assert field in summary, field
    assert summary["nodes"] == 200 and summary["pending_pods"] == 600
    assert summary["placed"] + summary["pending"] == 600
    assert 0 <= summary["reclaimed_fraction_cpu"] < 1


def test_bench_rejects_bad_sizes(data_dir: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "kalena_web.cli", "bench", "scheduler", "--nodes", "0",
                             "--no-progress"], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "KALENA_DATA_DIR": str(data_dir)})
    assert result.returncode != 0 and "--nodes (0)" in result.stderr
