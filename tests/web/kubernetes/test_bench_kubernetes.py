"""The short version of ``kalena bench kubernetes`` (the full one is a benchmark, not a test:
docs/kubernetes.md has its figures): a small cluster end to end with the test API server in its
own process, a 410 re-list and a leader kill mid-run — every pod bound once, none lost, every
summary field written, and a teardown that logs no errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

FIELDS = ("pods_bound_per_s", "created_to_bound_p50_ms", "created_to_bound_p99_ms", "engine_only_per_s",
          "pods_lost", "pods_double_bound", "failover_gap_s", "events_drained_after_last_binding_s",
          "bind_concurrency", "api_server_cpu_s", "process_cpu_s", "end_to_end_over_engine")


def _bench_database_url() -> str:
    base = urlsplit(os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/kalena"))
    if not base.scheme.startswith("postgres"):
        pytest.skip("the benchmark recreates a PostgreSQL database")
    return urlunsplit(base._replace(path=f"{base.path.rstrip('/') or '/kalena'}_bench_k8s_{os.getpid()}"))


def test_short_bench_binds_every_pod_once_and_tears_down_cleanly(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "k8s.json"
    env = {**os.environ, "KALENA_DATA_DIR": str(data_dir)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [sys.executable, "-m", "kalena_web.cli", "bench", "kubernetes", "--nodes", "100", "--pods", "120",
         "--jobs", "5", "--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.5",
         "--timeout", "240", "--database-url", _bench_database_url(), "--summary-json", str(out)],
        capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "test API server in its own process" in result.stdout
    assert "ERROR 410 sent to every watch" in result.stdout and "leader kalena-a killed" in result.stdout
    summary = json.loads(out.read_text())
    for field in FIELDS:
        assert field in summary, field
    assert summary["pods_bound"] == 120
    assert summary["pods_lost"] == 0 and summary["pods_double_bound"] == 0
    assert summary["api_calls"]["POST pods/binding"] == 120  # one Binding per pod, none repeated
    assert summary["watch_410_expired"] >= 1
    errors = [line for line in result.stderr.splitlines() if '"level": "ERROR"' in line]
    assert not errors, errors[:3]


def test_short_sharded_bench_loses_nothing_through_a_killed_instance(tmp_path: Path, data_dir: Path) -> None:
    """``--shards 2``: two instances in processes of their own, one SIGKILLed at two thirds; the
    survivor takes its share and every pod is bound once (issue 32)."""
    out = tmp_path / "shards.json"
    env = {**os.environ, "KALENA_DATA_DIR": str(data_dir)}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    result = subprocess.run(
        [sys.executable, "-m", "kalena_web.cli", "bench", "kubernetes", "--shards", "2", "--nodes", "60", "--pods",
         "90", "--jobs", "5", "--lease-duration", "3", "--renew-deadline", "2", "--retry-period", "0.5",
         "--timeout", "300", "--database-url", _bench_database_url() + "_s", "--summary-json", str(out)],
        capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "instance kalena-1 killed" in result.stdout and "pods/cpu s" in result.stdout
    summary = json.loads(out.read_text())
    assert summary["pods_bound"] == 90 and summary["pods_lost"] == 0 and summary["pods_double_bound"] == 0
    assert summary["reassignment_s"] is not None       # the killed share was acted on again
    assert set(summary["instances"]) == {"kalena-0", "kalena-1"}
    assert summary["instances"]["kalena-1"]["killed"] and summary["per_instance_pods_per_cpu_s_mean"] > 0


def test_wire_cost_binds_every_pod_once_and_prints_the_cpu_per_call(tmp_path: Path) -> None:
    """``--wire-cost N``: N Bindings and their Events through the scheduler's own client, beside
    plain POSTs, against the test API server in its own process; no database. What it prints is
    measured (every figure positive), and every pod was bound — a refused Binding stops the run."""
    out = tmp_path / "wire.json"
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL")}
    result = subprocess.run([sys.executable, "-m", "kalena_web.cli", "bench", "kubernetes", "--wire-cost", "40",
                             "--summary-json", str(out)], capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["pods"] == 40 and figures["floor_allowance_us_per_pod"] == pytest.approx(666.7)
    for key in ("bind_and_event_us_per_pod", "event_post_urllib3_us", "event_post_http_client_us"):
        assert figures[key] > 0, key
    assert "left per pod for the watch" in result.stdout


@pytest.mark.parametrize("flags, says", [
    (["--shards", "3", "--lease-duration", "2", "--renew-deadline", "4"], "--renew-deadline 4 < --lease-duration 2"),
    (["--shards", "-1"], "--shards -1: need 0"),
])
def test_bad_bench_arguments_are_refused_before_anything_is_created(tmp_path: Path, flags, says) -> None:
    """A sharded run whose Lease timings do not hold used to start its instances, which died in
    their own processes while the benchmark waited for them; ``--shards -1`` was refused only
    after the database and the cluster were made. Both are refused first, naming the flag."""
    url = _bench_database_url()
    result = subprocess.run([sys.executable, "-m", "kalena_web.cli", "bench", "kubernetes", "--nodes", "5",
                             "--pods", "5", "--database-url", url, *flags],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and says in result.stderr, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "setup:" not in result.stdout
    import psycopg

    with psycopg.connect(urlunsplit(urlsplit(url)._replace(path="/postgres"))) as conn:
        made = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [urlsplit(url).path.lstrip("/")]).fetchone()
    assert made is None, "the benchmark's database was created"
