"""Probes and scrapes as an orchestrator sees them: a real ``kalena serve`` on a private
PostgreSQL that the test stops and starts again (issue: probes, metrics, logs)."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kalena_web.cli.faultenv import PrivatePostgres

ROOT = Path(__file__).resolve().parents[3]
POD_IP_HOST = "10.244.1.7:8000"   # what a kubelet probe or a Prometheus pod scrape sends as Host


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(predicate, what: str, timeout_s: float = 90.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[tuple[str, PrivatePostgres]]:
    var = tmp_path_factory.mktemp("var")
    pg = PrivatePostgres(_free_port(), database="kalena")
    pg.create()
    try:
        env = {**os.environ, "DATABASE_URL": pg.url, "KALENA_VAR_DIR": str(var),
               "KALENA_ALLOWED_HOSTS": "localhost", "KALENA_LOG_FORMAT": "json", "KALENA_LOG_LEVEL": "INFO"}
        env.pop("REDIS_URL", None)
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True)
        port = _free_port()
        log = (var / "serve.log").open("w")
        proc = subprocess.Popen([sys.executable, "-m", "kalena_web.cli", "serve", "--port", str(port), "--no-loops"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            _wait(lambda: httpx.get(f"{base}/livez", timeout=2).status_code == 200, "kalena serve to answer /livez")
            yield base, pg
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            log.close()
    finally:
        pg.drop()


def _get(base: str, path: str) -> httpx.Response:
    return httpx.get(base + path, headers={"Host": POD_IP_HOST}, timeout=10)


def test_probes_answer_by_pod_ip_and_readiness_follows_the_database(served) -> None:
    base, pg = served
    assert _get(base, "/livez").status_code == 200
    ready = _get(base, "/readyz")
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == {"database": "ok", "migrations": "ok"}
    # every other page still refuses a host it does not know
    assert _get(base, "/accounts/login/").status_code == 400

    pg.stop()                                            # -m immediate, like a crash
    try:
        down = _wait(lambda: (r := _get(base, "/readyz")).status_code == 503 and r, "/readyz to fail")
        assert down.json()["checks"]["database"].startswith("unreachable")
        assert _get(base, "/livez").status_code == 200      # liveness never depends on the database
    finally:
        pg.start()
    _wait(lambda: _get(base, "/readyz").status_code == 200, "/readyz to recover once the database is back")


def test_metrics_by_pod_ip_carry_units_in_their_names(served) -> None:
    base, _ = served
    process = _get(base, "/metrics")
    assert process.status_code == 200
    names = {f.name for f in text_string_to_metric_families(process.text)}
    assert {"process_cpu_seconds", "kalena_build_info"} <= names
    assert not any(n.startswith("kalena_node_") for n in names)   # cluster series are served once, elsewhere

    cluster = _get(base, "/metrics/cluster")
    assert cluster.status_code == 200
    families = {f.name: f.type for f in text_string_to_metric_families(cluster.text)}
    assert {"kalena_node_slack_cores", "kalena_node_slack_bytes", "kalena_node_capacity_cores",
            "kalena_node_last_sample_timestamp_seconds", "kalena_loop_last_success_timestamp_seconds",
            "kalena_scheduling_attempt_duration_seconds", "kalena_scheduling_attempts"} <= set(families)
    # no quantity without its unit, no ages: gauges of quantities end in a base unit
    for name, kind in families.items():
        quantity = re.fullmatch(r"kalena_node_(capacity|requests|reservations|usage|slack)(_[a-z]+)?", name)
        if kind == "gauge" and quantity and quantity.group(2) != "_ineligible":
            assert name.endswith(("_cores", "_bytes")), name
        if "sample" in name and kind == "gauge":
            assert name.endswith("_timestamp_seconds"), name
        assert not name.endswith("_age_seconds"), name
    assert families["kalena_scheduling_attempt_duration_seconds"] == "histogram"
    assert families["kalena_scheduling_attempts"] == "counter"
