"""``kalena serve`` on a fresh install, as the console Deployment runs it with
``KALENA_ORCHESTRATOR=kubernetes``: no live cluster yet → it serves the console and says what to
do next (instead of exiting, which crash-loops the Deployment); once a cluster is imported the
watch starts without a restart; with several clusters it serves too."""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from agents.orchestrators.kubernetes.testserver import TestAPIServer, node

ROOT = Path(__file__).resolve().parents[3]
DEADLINE_S = 90.0


@pytest.fixture
def env(tmp_path: Path, data_dir: Path) -> dict[str, str]:
    env = {**os.environ, "KALENA_DB_PATH": str(tmp_path / "k.sqlite3"), "KALENA_VAR_DIR": str(tmp_path / "var"),
           "KALENA_DATA_DIR": str(data_dir), "DJANGO_SETTINGS_MODULE": "kalena_web.settings",
           "KALENA_ORCHESTRATOR": "kubernetes", "PYTHONUNBUFFERED": "1"}
    for name in ("DATABASE_URL", "REDIS_URL", "KUBERNETES_SERVICE_HOST"):
        env.pop(name, None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], check=True, env=env, cwd=ROOT)
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    """A ``kalena serve`` subprocess whose stdout lines are collected on a thread."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "kalena_web.cli", "serve", "--port", str(self.port),
                                      *args], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self._queue.put(line) for line in self.proc.stdout], daemon=True).start()

    def said(self, text: str) -> str:
        """The first line containing ``text``, waiting for it (fails if the process exits first)."""
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            for line in self.lines:
                if text in line:
                    return line
            try:
                self.lines.append(self._queue.get(timeout=0.2))
            except queue.Empty:
                assert self.proc.poll() is None, f"kalena serve exited {self.proc.returncode}:\n" + "".join(self.lines)
        raise AssertionError(f"kalena serve never said {text!r}:\n" + "".join(self.lines))

    def get(self, path: str) -> tuple[int, str]:
        """GET ``path``, waiting for the server to listen (it says where before Daphne binds)."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=10) as answer:
                    return answer.status, answer.read().decode()
            except urllib.error.URLError as exc:
                if not isinstance(exc.reason, ConnectionRefusedError) or time.monotonic() > deadline:
                    raise
                assert self.proc.poll() is None, f"kalena serve exited {self.proc.returncode}"
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def kalena(env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kalena_web.cli", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)


def homelab_args(tmp_path: Path) -> list[str]:
    spread = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]
    pods = ["dns/pihole-0", "smart-home/home-assistant-0", "smart-home/zigbee2mqtt-0", "smart-home/mosquitto-0",
            "media/jellyfin-0", "cloud/nextcloud-0", "database/postgres-0", "monitoring/grafana-0",
            "monitoring/prometheus-0", "security/vaultwarden-0"]
    bp = tmp_path / "bp.yaml"
    bp.write_text("solution:\n" + "".join(
        f"  {p}: {'thinkcentre-beta' if p.startswith('smart-home/') and 'mosquitto' not in p else spread[i % 3]}\n"
        for i, p in enumerate(pods)))
    return ["--infra", "kuberina/homelab/homelab_infra.yaml", "--workloads", "kuberina/homelab/homelab_workloads.yaml",
            "--blueprint", str(bp)]


def test_a_fresh_install_serves_and_says_what_next_then_watches_the_imported_cluster(env, tmp_path) -> None:
    with TestAPIServer() as api:
        for name in ("thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"):
            api.create("nodes", node(name, cpu="4", memory="16Gi"))
        kubeconfig = api.kubeconfig(tmp_path / "kubeconfig")
        env["KUBECONFIG"] = str(kubeconfig)
        served = Served(env)
        try:
            hint = served.said("no live cluster yet")
            assert "kalena cluster import NAME" in hint  # the log line says what to do next
            served.said("console on http://")
            status, body = served.get("/accounts/login/")
            assert status == 200 and "Log in to the Kalena console" in body
            status, body = served.get("/readyz")
            assert status == 200 and '"status": "ok"' in body
            assert served.proc.poll() is None  # still serving: no crash loop
            # the operator imports the cluster: the running console starts watching it, no restart
            imported = kalena(env, "cluster", "import", "home", *homelab_args(tmp_path))
            assert imported.returncode == 0, imported.stderr
            served.said("kubernetes watch running for live cluster 'home'")
            deadline = time.monotonic() + DEADLINE_S
            while not any(verb == "GET" and path == "/api/v1/pods" for verb, path, _ in api.requests):
                assert time.monotonic() < deadline, "the watch never listed the pods"
                time.sleep(0.1)
        finally:
            served.stop()


def test_several_clusters_serve_too_and_say_how_to_choose(env, tmp_path) -> None:
    for name in ("east", "west"):
        assert kalena(env, "cluster", "import", name, *homelab_args(tmp_path)).returncode == 0
    served = Served(env, "--no-loops")  # the console alone serves whatever exists
    try:
        served.said("console on http://")
        assert served.get("/livez")[0] == 200
    finally:
        served.stop()
    served = Served(env)
    try:
        line = served.said("2 live clusters (east, west)")
        assert "kalena serve --cluster NAME" in line
        assert served.get("/accounts/login/")[0] == 200
    finally:
        served.stop()


def test_the_console_of_a_fresh_install_lands_on_what_to_do_next(db, client, django_user_model) -> None:
    from django.db import transaction

    from kalena_web.archive.models import Run

    user = django_user_model.objects.create_user(username="ops", password="pw-0123456789")
    client.force_login(user)
    with transaction.atomic():  # a fresh install: no run either (the session's recorded runs come back after)
        Run.objects.all().delete()
        landing = client.get("/", follow=True)
        transaction.set_rollback(True)
    assert landing.status_code == 200 and landing.redirect_chain[-1][0] == "/live/"
    page = landing.content.decode()
    assert 'id="what-next"' in page and "kalena cluster import" in page
