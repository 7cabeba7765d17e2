"""The two control-plane benchmarks run end to end at a small size and report what they must:
``bench ingest`` (sent, acked, stored counted in the database, lost = sent − stored, ingest →
ledger latency, workers, CPU) and ``bench estimation`` (samples/s per worker count)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.web.telemetry.conftest import require_redis


def kalena(*argv: str, tmp_path: Path) -> dict:
    out = tmp_path / "summary.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    result = subprocess.run([sys.executable, "-m", "kalena_web.cli", "bench", *argv, "--summary-json", str(out),
                             "--database-url", "postgres://postgres@127.0.0.1:5432/kalena_test_bench",
                             "--redis-url", "redis://127.0.0.1:6379/12", "--no-progress"],
                            env=env, capture_output=True, text=True, timeout=600,
                            cwd=Path(__file__).resolve().parents[3])
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


def test_bench_ingest_reports_sent_acked_stored_lost_and_latency(tmp_path: Path) -> None:
    require_redis()
    s = kalena("ingest", "--agents", "12", "--rate", "200", "--seconds", "3", tmp_path=tmp_path)
    assert (s["agents"], s["connected"], s["workers"]) == (12, 12, 1)
    assert s["samples_sent"] > 300 and s["samples_acked"] == s["samples_sent"] == s["samples_stored"]
    assert s["samples_lost"] == 0 and s["batches_pending_after_drain"] == 0
    assert 0 < s["ingest_to_ledger_p50_ms"] <= s["ingest_to_ledger_p99_ms"] < 30_000
    assert set(s["cpu"]["cores_by_component"]) >= {"daphne", "estimation-0", "postgres"}


def test_bench_estimation_reports_samples_per_second_per_worker_count(tmp_path: Path) -> None:
    require_redis()
    s = kalena("estimation", "--workers", "1", "2", "--samples", "3000", "--nodes", "40", tmp_path=tmp_path)
    assert [r["workers"] for r in s["rounds"]] == [1, 2]
    assert all(r["samples"] >= 3000 and r["samples_per_s"] > 0 and r["estimation_runs"] > 0 for r in s["rounds"])
