"""deploy/compose as written, on a private engine standing for one node: the stack's own file
brought up with Debian's docker-compose (v1) and only the file's variables — the images built
here (scripts/build-images; postgres and redis from Debian's packages, scripts/build-service-images,
through KALENA_POSTGRES_IMAGE / KALENA_REDIS_IMAGE), the engine's socket path and cgroup parent,
the console's address — with its secrets as Docker secrets. The agent joins with the stack's
join secret, the watch service registers the engine as the node, batch submitted with
`kalena batch` is placed, runs, completes and leaves the ledger; a stack without its secrets is
refused before anything starts."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from agents.bench.dockerd import PrivateEngines
from kalena_web.cli.benchenv import free_port

pytestmark = [pytest.mark.docker, pytest.mark.cgroup]
REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "deploy/compose/docker-compose.yml"
IMAGES_HOST = os.environ.get("KALENA_TEST_IMAGES_DOCKER_HOST", f"unix://{REPO}/var/dockerd/docker.sock")
IMAGES = ["kalena/control-plane:0.1.0", "kalena/agent:0.1.0", "kalena/postgres:15-debian", "kalena/redis:7-debian"]
SUBNET = os.environ.get("KALENA_TEST_LAB_SUBNET", "127.0.0")
DOCKER = "/usr/bin/docker"


def docker_compose() -> str:
    path = shutil.which("docker-compose")
    if path is None:
        subprocess.run(["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-q", "docker-compose"],
                       check=True, capture_output=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        path = shutil.which("docker-compose")
    assert path, "Debian's docker-compose is not installed"
    return path


def images_built() -> None:
    """The stack's images on the build engine; built (minutes, once) when missing."""
    env = {**os.environ, "DOCKER_HOST": IMAGES_HOST}
    missing = [i for i in IMAGES if subprocess.run([DOCKER, "image", "inspect", i], env=env,
                                                   capture_output=True).returncode]
    if any(i.startswith("kalena/control-plane") or i.startswith("kalena/agent") for i in missing):
        subprocess.run([str(REPO / "scripts/build-images")], check=True, cwd=REPO)
    if any(i.startswith(("kalena/postgres", "kalena/redis")) for i in missing):
        subprocess.run([str(REPO / "scripts/build-service-images")], check=True, cwd=REPO, env=env)


@pytest.fixture
def node(tmp_path):
    """One private engine (own socket, cgroup parent, 2 cpus, 3 GiB) holding the stack's images."""
    images_built()
    tag = uuid.uuid4().hex[:6]
    with PrivateEngines(REPO / "var" / f"stack-{tag}", ("stack-node",), ("0-1",), memory="3Gi", tag=tag) as pe:
        engine = pe.engines[0]
        save = subprocess.Popen([DOCKER, "save", *IMAGES], stdout=subprocess.PIPE,
                                env={**os.environ, "DOCKER_HOST": IMAGES_HOST})
        subprocess.run([DOCKER, "load", "-q"], stdin=save.stdout, check=True, capture_output=True,
                       env={**os.environ, "DOCKER_HOST": engine.url})
        assert save.wait() == 0
        yield engine
    shutil.rmtree(pe.root, ignore_errors=True)
    assert pe.cgroup_leftovers() == []


def secrets_dir(path: Path) -> Path:
    path.mkdir()
    password = secrets.token_urlsafe(24)
    files = {"secret_key": secrets.token_urlsafe(50), "db_password": password,
             "database_url": f"postgres://kalena:{password}@postgres:5432/kalena",
             "metrics_token": secrets.token_urlsafe(32), "agent_join_secret": secrets.token_urlsafe(32)}
    for name, value in files.items():
        (path / name).write_text(value)
        (path / name).chmod(0o444)            # bind-mounted as is: the image users (10001, postgres) read it
    return path


class Stack:
    def __init__(self, engine, env: dict[str, str], project: str) -> None:
        self.engine, self.project = engine, project
        self.env = {**os.environ, "DOCKER_HOST": engine.url, **env}

    def compose(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
        result = subprocess.run([docker_compose(), "-f", str(COMPOSE), "-p", self.project, *args], env=self.env,
                                capture_output=True, text=True, timeout=timeout)
        assert not check or result.returncode == 0, result.stdout + result.stderr
        return result

    def kalena(self, *args: str) -> str:
        return self.compose("exec", "-T", "console", "kalena", *args).stdout

    def query(self, code: str):
        """Run ``code`` (Django set up; assigns ``out``) in the console container → ``out``, from JSON."""
        program = ("import django, json, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'kalena_web.settings'); "
                   "django.setup()\n" + code + "\nprint(json.dumps(out, default=str))")
        return json.loads(self.compose("exec", "-T", "console", "python3", "-c", program).stdout.splitlines()[-1])

    def containers(self) -> list[str]:
        return subprocess.run([DOCKER, "ps", "-aq"], env=self.env, capture_output=True, text=True).stdout.split()


def wait_until(predicate, *, timeout_s: float, what: str, why=None) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(1.0)
    assert predicate(), f"timed out after {timeout_s:.0f} s waiting for {what}" + (f": {why()}" if why else "")


POD = """
from kalena_web.scheduling.models import BatchPod
from kalena_web.ledger.models import LiveNodeLedger
p = BatchPod.objects.select_related('workload__node').filter(workload__name='batch/stk-1').first()
out = {'state': p and p.state, 'node': p and p.workload.node_id and p.workload.node.name,
       'running': p and p.running_s, 'outcome': p and p.outcome,
       'ledgers': [dict(node=l.node.name, stale=l.stale, batch_cpu=float(list(l.batch_request)[0]))
                   for l in LiveNodeLedger.objects.select_related('node')]}
"""


def test_the_compose_stack_runs_as_written_on_one_engine(node, tmp_path) -> None:
    port = free_port()
    env = {"KALENA_POSTGRES_IMAGE": "kalena/postgres:15-debian", "KALENA_REDIS_IMAGE": "kalena/redis:7-debian",
           "KALENA_DOCKER_SOCK": str(node.socket), "KALENA_NODE_CGROUP": node.node_cgroup,
           "KALENA_CONSOLE_ADDRESS": f"{SUBNET}.1", "KALENA_CONSOLE_PORT": str(port),
           "KALENA_AGENT_CAPACITY": "cpu=2,memory=3Gi"}
    project = f"kalena-stk-{uuid.uuid4().hex[:6]}"
    # without its secrets the stack is refused before anything is created
    bare = Stack(node, env, project)
    refused = bare.compose("up", "-d", check=False)
    assert refused.returncode != 0 and "set KALENA_SECRETS_DIR" in refused.stderr
    assert bare.containers() == []
    stack = Stack(node, {**env, "KALENA_SECRETS_DIR": str(secrets_dir(tmp_path / "secrets"))}, project)
    marks = {"start": time.monotonic()}
    try:
        stack.compose("up", "-d")
        marks["up"] = time.monotonic()
        url = f"http://{SUBNET}.1:{port}/livez"

        def live() -> bool:
            try:
                return urllib.request.urlopen(url, timeout=3).status == 200
            except OSError:
                return False
        wait_until(live, timeout_s=300, what="the console answering /livez",
                   why=lambda: stack.compose("ps", check=False).stdout)
        marks["live"] = time.monotonic()
        # the watch created the cluster and registered the engine; the agent joined for its own token
        wait_until(lambda: "1 token(s)" in stack.kalena("agent-token", "list"), timeout_s=180,
                   what="the agent joining", why=lambda: stack.compose("logs", "--tail", "20", "agent", "watch",
                                                                       check=False).stdout)
        marks["joined"] = time.monotonic()
        listing = stack.kalena("agent-token", "list")
        assert " docker " in listing and "active" in listing
        stack.kalena("batch", "submit", "docker", "batch/stk-1", "--request", "cpu=0.2,ram=32Mi", "--limit",
                     "cpu=0.5,ram=64Mi", "--image", "kalena/busybox:test", "--command", "sh -c 'sleep 90'")
        wait_until(lambda: stack.query(POD)["running"] is not None, timeout_s=180, what="the batch pod running",
                   why=lambda: stack.kalena("batch", "show", "docker", "batch/stk-1"))
        marks["running"] = time.monotonic()
        running = stack.query(POD)
        assert running["state"] == "bound" and running["ledgers"][0]["batch_cpu"] == pytest.approx(200)
        wait_until(lambda: stack.query(POD)["state"] == "completed", timeout_s=180, what="the batch pod completed")
        marks["completed"] = time.monotonic()
        done = stack.query(POD)
        assert done["outcome"] == "succeeded"
        wait_until(lambda: stack.query(POD)["ledgers"][0]["batch_cpu"] == 0, timeout_s=120,
                   what="the completed pod freed in the ledger", why=lambda: stack.query(POD)["ledgers"])
        marks["freed"] = time.monotonic()
        steps = list(marks)
        print("compose stack:", ", ".join(f"{b} +{marks[b] - marks[a]:.0f} s" for a, b in zip(steps, steps[1:])))
    finally:
        logs = stack.compose("logs", "--tail", "40", check=False).stdout
        stack.compose("down", "-v", "--timeout", "5", check=False)
        (tmp_path / "stack.log").write_text(logs)
    assert stack.containers() == []
