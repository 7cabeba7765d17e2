"""``kalena bench scheduler`` as a user runs it (small sizes: this checks the figures are there,
it times nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_bench_preflight_prints_the_request_beside_the_engine(tmp_path: Path, data_dir: Path) -> None:
    """The short version of ``kalena bench preflight`` (8 nodes): every figure is there; it times nothing."""
    import psycopg

    from kalena_web.cli.benchenv import database_url_with_name

    base = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/kalena")
    name = f"{base.rsplit('/', 1)[1]}_preflight_bench"
    out = tmp_path / "preflight.json"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "kalena_web.cli", "bench", "preflight", "--nodes", "8", "--pending", "20",
             "--repeat", "1", "--database-url", database_url_with_name(base, name), "--summary-json", str(out)],
            capture_output=True, text=True, timeout=600, env={**os.environ, "KALENA_DATA_DIR": str(data_dir)})
    finally:
        with psycopg.connect(database_url_with_name(base, "postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert result.returncode == 0, result.stderr
    assert "pre-flight engine" in result.stdout and "end to end (console POST)" in result.stdout
    summary = json.loads(out.read_text())
    assert summary["nodes"] == 8 and summary["pending"] == 20
    assert 0 <= summary["placeable_current"] <= 20 and 0 <= summary["placeable_proposed"] <= 20
    # the pending pods are real-sized (0.25–2 cores, 0.5–4 GiB), not mcpu and bytes taken as cores and GiB
    assert 0.25 <= summary["pending_request_mean"]["cpu_cores"] <= 2
    assert 0.5 <= summary["pending_request_mean"]["ram_gib"] <= 4
    assert summary["preflight_request_s"] > 0 and summary["preflight_engine_s"] > 0
    assert set(summary["pages"]) == {"pre-flight POST", "policy", "history", "calibration", "export", "audit"}
    assert all(page["queries"] > 0 for page in summary["pages"].values())


def test_bench_replay_times_cold_and_cached_runs_and_compares_their_summaries(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "bench-replay.json"
    result = subprocess.run(
        [sys.executable, "-m", "kalena_web.cli", "bench", "replay", "--hours", "0.1", "--repeat", "1",
         "--summary-json", str(out)],
        capture_output=True, text=True, timeout=600, env={**os.environ, "KALENA_DATA_DIR": str(data_dir)},
    )
    assert result.returncode == 0, result.stderr
    assert "with the input cache" in result.stdout and "same summary cold and cached  yes" in result.stdout
    summary = json.loads(out.read_text())
    assert summary["command"] == "kalena replay --hours 0.1 --no-progress"
    assert summary["same_summary_cold_and_cached"] is True
    for kind in ("cold", "cached"):
        [run] = summary["runs"][kind]
        assert run["wall_seconds"] > 0 and run["cpu_seconds"] > 0 and len(run["load_average_1m"]) == 2
        assert summary[f"{kind}_cpu_seconds"] == run["cpu_seconds"]


@pytest.mark.parametrize(("args", "named"), [(["--repeat", "0"], "--repeat"), (["--jobs", "0", "--calibrate"], "--jobs")])
def test_bench_replay_refuses_a_bad_count_before_running_anything(data_dir: Path, args: list[str], named: str) -> None:
    result = subprocess.run([sys.executable, "-m", "kalena_web.cli", "bench", "replay", *args],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "KALENA_DATA_DIR": str(data_dir)})
    assert result.returncode == 2 and f"argument {named}: 0 is not a finite number ≥ 1" in result.stderr
    assert result.stdout == ""     # refused before the header and before any replay
