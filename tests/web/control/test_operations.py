"""Conventions an operator's tooling expects: worker and beat liveness from heartbeats (a real
worker and beat on Redis), the agent's own /healthz and /metrics, structured logs, refused weak
secret keys, ``check --deploy`` clean, and every metric documented."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.health import AgentMetrics, HealthServer
from agents.logs import log_context, logging_config
from agents.pressure.events import PressureEvent
from tests.web.telemetry.conftest import require_redis, wait_until

ROOT = Path(__file__).resolve().parents[3]
DOCS = (ROOT / "docs" / "metrics.md").read_text()


def _kalena(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kalena_web.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("role", ["worker", "beat"])
def test_a_frozen_worker_or_beat_fails_its_probe_and_recovers(role: str, tmp_path: Path) -> None:
    redis_url = require_redis()
    env = {**os.environ, "REDIS_URL": redis_url, "KALENA_HEARTBEAT_DIR": str(tmp_path / "hb"),
           "KALENA_HEARTBEAT_S": "1", "DJANGO_SETTINGS_MODULE": "kalena_web.settings"}
    assert _kalena("probe", role, env=env).returncode == 1          # never started: no heartbeat
    argv = [sys.executable, "-m", "celery", "-A", "kalena_web", role, "--loglevel=INFO"]
    argv += ["--pool=solo"] if role == "worker" else [f"--schedule={tmp_path / 'beat-schedule'}"]
    log = (tmp_path / f"{role}.log").open("w")
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: _kalena("probe", role, "--max-age", "3", env=env).returncode == 0, 90,
                   what=f"{role} heartbeat")
        proc.send_signal(signal.SIGSTOP)                               # wedged: alive, doing nothing
        time.sleep(4.5)
        frozen = _kalena("probe", role, "--max-age", "3", env=env)
        assert frozen.returncode == 1 and "s ago" in frozen.stderr
        proc.send_signal(signal.SIGCONT)
        wait_until(lambda: _kalena("probe", role, "--max-age", "3", env=env).returncode == 0, 60,
                   what=f"{role} heartbeat after SIGCONT")
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(timeout=60)
        log.close()
    assert proc.returncode is not None


def test_agent_serves_healthz_while_its_loop_ticks_and_metrics_by_kind() -> None:
    now = [1000.0]
    metrics = AgentMetrics()
    server = HealthServer("127.0.0.1:0", metrics, max_tick_age_s=10.0, clock=lambda: now[0],
                          link_state=lambda: {"configured": True, "connected": False, "buffered": 7})
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        metrics.ticked(1000.0)
        ok = httpx.get(f"{base}/healthz")
        assert ok.status_code == 200 and ok.json()["link"]["buffered"] == 7   # a lost link is not a failure
        now[0] = 1011.0                                                         # 11 s without a tick
        stalled = httpx.get(f"{base}/healthz")
        assert stalled.status_code == 503 and stalled.json()["status"] == "stalled"
        metrics.action_emitted({"type": "action", "action": "throttle"})
        metrics.action_emitted({"type": "action", "action": "throttle"})
        metrics.action_emitted({"type": "samples"})
        event = PressureEvent(source="psi-trigger", resource="cpu", scope="node", detected_mono=5.0,
                              detected_s=1000.0, detail={})
        metrics.events_handled([event], started_mono=5.001, finished_mono=5.003)
        got = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for f in text_string_to_metric_families(httpx.get(f"{base}/metrics").text) for s in f.samples}
        assert got[("kalena_agent_actions_total", (("action", "throttle"),))] == 2
        assert got[("kalena_agent_pressure_events_total", (("resource", "cpu"), ("source", "psi-trigger")))] == 1
        assert got[("kalena_agent_decision_duration_seconds_bucket", (("le", "0.005"),))] == 1   # 3 ms
        assert got[("kalena_agent_decision_duration_seconds_bucket", (("le", "0.002"),))] == 0
        assert got[("kalena_agent_link_buffered_messages", ())] == 7
        assert httpx.get(f"{base}/other").status_code == 404
    finally:
        server.stop()


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_log_lines_carry_time_level_logger_and_context(fmt: str) -> None:
    config = logging_config(fmt=fmt, level="INFO", defaults={"node": "n-1"})
    stream = io.StringIO()
    config["handlers"]["console"]["stream"] = stream
    logging.config.dictConfig(config)
    try:
        with log_context(cluster="home"):
            logging.getLogger("kalena.test").warning("evicted %s", "batch/a", extra={"pod": "batch/a"})
    finally:
        logging.config.dictConfig(logging_config(fmt="text", level="WARNING"))
    line = stream.getvalue().strip()
    if fmt == "json":
        record = json.loads(line)
        assert record["level"] == "WARNING" and record["logger"] == "kalena.test"
        assert record["message"] == "evicted batch/a"
        assert (record["cluster"], record["node"], record["pod"]) == ("home", "n-1", "batch/a")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["timestamp"])
    else:
        assert re.fullmatch(r"\S+Z WARNING kalena.test: evicted batch/a cluster=home node=n-1 pod=batch/a", line)
    with pytest.raises(ValueError, match="KALENA_LOG_FORMAT"):
        logging_config(fmt="xml", level="INFO")


@pytest.mark.parametrize("key", ["", "change-me", "short-but-not-empty", "django-insecure-" + "x" * 60, "a" * 60])
def test_a_weak_secret_key_is_refused_at_start(key: str, tmp_path: Path) -> None:
    env = {**os.environ, "KALENA_SECRET_KEY": key, "KALENA_VAR_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode != 0
    assert "KALENA_SECRET_KEY is empty, an example value or too weak" in result.stderr


def test_production_settings_pass_the_deploy_check(tmp_path: Path) -> None:
    import secrets

    env = {**os.environ, "KALENA_SECRET_KEY": secrets.token_urlsafe(50), "KALENA_HTTPS": "1",
           "KALENA_STATIC_MANIFEST": "1", "KALENA_ALLOWED_HOSTS": "kalena.example.com", "KALENA_VAR_DIR": str(tmp_path)}
    env.pop("KALENA_DEBUG", None)
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)   # set by the suite's live-server tests, never in deployment
    result = subprocess.run([sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"], cwd=ROOT,
                            env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


@pytest.mark.django_db
def test_every_served_metric_is_documented(client, live) -> None:
    from kalena_web.control.services import metric_increment, metric_observe

    metric_observe(name="kalena_scheduling_bind_latency_seconds", labels={"cluster": "home"}, values_s=[0.3])
    metric_increment(name="kalena_scheduling_attempts", labels={"cluster": "home", "result": "scheduled"})
    served = set()
    for path in ("/metrics/cluster", "/metrics"):
        served |= {f.name for f in text_string_to_metric_families(client.get(path).content.decode())}
    served |= {m.name for m in AgentMetrics().registry.collect()}
    # prometheus_client's `<counter|histogram>_created` companions are standard, not Kalena's own
    kalena = {n for n in served if n.startswith("kalena_") and not n.endswith("_created")}
    assert len(kalena) > 25
    missing = sorted(n for n in kalena if f"`{n}" not in DOCS)
    assert not missing, f"not in docs/metrics.md: {missing}"
