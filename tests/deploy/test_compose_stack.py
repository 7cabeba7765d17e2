"""deploy/compose as written, on a private engine standing for one node: the stack's own file
brought up with Debian's docker-compose (v1) and only the file's variables — the images built
here (scripts/build-images; postgres and redis from Debian's packages, scripts/build-service-images,
through KALENA_POSTGRES_IMAGE / KALENA_REDIS_IMAGE), the engine's socket path and cgroup parent,
the console's address — with its secrets as Docker secrets. The agent joins with the stack's
join secret, the watch service registers the engine as the node, and batch submitted with
`kalena batch` goes through its whole life on the node, production being a real burner
(kalena/lab-burner:test) started on the engine beside the stack: placed and running; throttled
when production bursts (the batch container's CFS quota, read from its cgroup, shrinks);
evicted when production takes the node's memory, with the reason in `kalena batch describe`;
requeued and placed again once the memory is back; completed, and freed in the ledger. A stack
without its secrets is refused before anything starts. (The first test is the short life: placed,
run, completed, freed; the second the whole one, minutes long: ``scripts/test -m long``. Its
eviction needs the agent to count the stack's own containers — in the node's group but no
workload of its — in the eviction ledger.)"""

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
from agents.lab.images import BURNER_IMAGE, ensure_lab_images
from kalena_web.cli.benchenv import free_port

pytestmark = [pytest.mark.docker, pytest.mark.cgroup]
REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "deploy/compose/docker-compose.yml"
IMAGES_HOST = os.environ.get("KALENA_TEST_IMAGES_DOCKER_HOST", f"unix://{REPO}/var/dockerd/docker.sock")
IMAGES = ["kalena/control-plane:0.1.0", "kalena/agent:0.1.0", "kalena/postgres:15-debian", "kalena/redis:7-debian"]
SUBNET = os.environ.get("KALENA_TEST_LAB_SUBNET", "127.0.0")
DOCKER = "/usr/bin/docker"
CGROUP = Path("/sys/fs/cgroup")
MIB = 2**20
#: what the agent is told the node has (the engine's cgroup allows 2 cpus and 3 GiB: room above
#: it, so a node "full" for the agent is not the kernel's OOM)
CAPACITY_CPU_M, CAPACITY_MIB = 1000, 2048
#: the node's cpu weight against the rest of the host (cgroup v1 ``cpu.shares``; 1024 = one busy
#: host process): the node stands for a machine with cpus of its own, and on a shared test host
#: with dozens of runnable processes a group of weight 1024 gets a few percent of a cpu — a
#: production burst could not burn and the stack would start for minutes. Its cpuset (2 cpus)
#: still bounds it; on an idle host the weight changes nothing.
NODE_CPU_SHARES = 32768
#: the batch job: its first placement runs until it is evicted, a re-placement finishes at once
#: (KALENA_ATTEMPT: set by the orchestrator on every batch container)
BATCH_COMMAND = """sh -c 'if [ "$KALENA_ATTEMPT" = 0 ]; then sleep 3600; else sleep 5; fi'"""


def docker_compose() -> str:
    path = shutil.which("docker-compose")
    if path is None:   # what an operator runs: `scripts/services up` installs it the same way
        subprocess.run([str(REPO / "scripts/services"), "compose"], check=True, capture_output=True)
        path = shutil.which("docker-compose")
    assert path, "Debian's docker-compose is not installed (scripts/services compose)"
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
        (CGROUP / "cpu" / engine.node_cgroup / "cpu.shares").write_text(str(NODE_CPU_SHARES))
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

    def health(self) -> dict[str, str]:
        """service → its container's health (``healthy``, ``unhealthy``, ``starting``; ``none``:
        no health check), for the running services of this project."""
        ids = subprocess.run([DOCKER, "ps", "-q", "-f", f"label=com.docker.compose.project={self.project}"],
                             env=self.env, capture_output=True, text=True).stdout.split()
        if not ids:
            return {}
        fmt = '{{index .Config.Labels "com.docker.compose.service"}} {{if .State.Health}}{{.State.Health.Status}}{{else}}none{{end}}'
        out = subprocess.run([DOCKER, "inspect", "--format", fmt, *ids], env=self.env, capture_output=True,
                             text=True).stdout
        return dict(line.split() for line in out.splitlines() if line.strip())


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
       'running': p and p.running_s, 'outcome': p and p.outcome, 'requeues': p and p.requeues,
       'ledgers': [dict(node=l.node.name, stale=l.stale, batch_cpu=float(list(l.batch_request)[0]))
                   for l in LiveNodeLedger.objects.select_related('node')]}
"""


def batch_containers(client, *, attempt: int, all_: bool = False, workload: str = "batch/stk-1") -> list:
    """The containers of ``workload``'s attempt ``attempt`` on the node's engine."""
    return client.containers.list(all=all_, filters={"label": [f"kalena.naughtian.io/workload={workload}",
                                                               f"kalena.naughtian.io/attempt={attempt}"]})


def cpu_quota_us(engine, container) -> int:
    """The container's CFS quota as the kernel enforces it (its cgroup under the node's), µs per 100 ms."""
    return int((CGROUP / "cpu" / engine.node_cgroup / container.id / "cpu.cfs_quota_us").read_text())


def cpu_used_mcpu(engine, container, span_s: float = 3.0) -> float:
    """The container's cpu use over ``span_s`` (mcpu), from its cgroup's ``cpuacct.usage``."""
    path = CGROUP / "cpuacct" / engine.node_cgroup / container.id / "cpuacct.usage"
    a = int(path.read_text())
    time.sleep(span_s)
    return (int(path.read_text()) - a) / (span_s * 1e6)


THROTTLE = """
from kalena_web.telemetry.models import MitigationEvent
e = MitigationEvent.objects.filter(action='throttle').order_by('-ts').first()
out = e and {'ts': e.ts, 'reason': e.reason, 'numbers': e.numbers}
"""


COOLDOWN = """
from kalena_engine.policy_file import parse_policy_text
from kalena_web.inventory.models import Cluster
from kalena_web.policy.services import policy_version_create
text = 'apiVersion: kalena.naughtian.io/v1\\nkind: Policy\\nspec:\\n  eviction: {cooldown_s: 20}\\n'
policy_version_create(cluster=Cluster.objects.get(name='docker'), document=parse_policy_text(text, source='test'),
                      user='compose stack test')
out = True
"""

MEMORY_ACTIONS = """
from kalena_web.telemetry.models import MitigationEvent
out = [{'ts': e.ts, 'action': e.action, 'reason': e.reason, 'workload': e.workload_name, 'numbers': e.numbers}
       for e in MitigationEvent.objects.exclude(action__in=('throttle', 'memory_cap')).order_by('-ts')[:4]]
"""


def working_set_bytes(engine) -> int:
    """The node's working set (bytes): its memory cgroup's usage less inactive file pages."""
    group = CGROUP / "memory" / engine.node_cgroup
    stat = dict(line.split() for line in (group / "memory.stat").read_text().splitlines())
    return int((group / "memory.usage_in_bytes").read_text()) - int(stat.get("total_inactive_file", 0))


def replaced_completed_freed(pod, batch_cpu, describe, marks: dict, timeout_s: float) -> None:
    """After an eviction and production gone: the requeued pod (``pod()`` → the POD query's
    dict) is placed again and completes — the first placement never finishes by itself (sleep
    3600), so success is the re-placement's — and ``batch_cpu(pod())`` falls to 0 in the ledger."""
    wait_until(lambda: pod()["state"] == "completed", timeout_s=timeout_s,
               what="the requeued pod placed again and completed", why=describe)
    marks["completed"] = time.monotonic()
    done = pod()
    assert done["outcome"] == "succeeded" and done["requeues"] >= 1
    wait_until(lambda: batch_cpu(pod()) == 0, timeout_s=120, what="the completed pod freed in the ledger",
               why=lambda: pod()["ledgers"])
    marks["freed"] = time.monotonic()


def test_the_compose_stack_runs_as_written_on_one_engine(node, tmp_path) -> None:
    port = free_port()
    env = {"KALENA_POSTGRES_IMAGE": "kalena/postgres:15-debian", "KALENA_REDIS_IMAGE": "kalena/redis:7-debian",
           "KALENA_DOCKER_SOCK": str(node.socket), "KALENA_NODE_CGROUP": node.node_cgroup,
           "KALENA_CONSOLE_ADDRESS": f"{SUBNET}.1", "KALENA_CONSOLE_PORT": str(port),
           "KALENA_ALLOWED_HOSTS": f"{SUBNET}.1", "KALENA_AGENT_CAPACITY": "cpu=2,memory=3Gi"}
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
        # a page, opened by the address the console is published on (KALENA_ALLOWED_HOSTS: any
        # other Host is 400), and the cluster's metrics with the stack's token (docs/deploy-docker.md)
        assert urllib.request.urlopen(f"http://{SUBNET}.1:{port}/accounts/login/", timeout=10).status == 200
        token = (tmp_path / "secrets" / "metrics_token").read_text()
        metrics = urllib.request.Request(f"http://{SUBNET}.1:{port}/metrics/cluster",
                                         headers={"Authorization": f"Bearer {token}"})
        assert urllib.request.urlopen(metrics, timeout=10).status == 200
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
        # every long-running service answers its own health check, the watch included (it once
        # inherited the image's /livez check and stayed unhealthy)
        kalena = ("console", "worker", "beat", "watch", "agent")
        wait_until(lambda: all(stack.health().get(s) == "healthy" for s in kalena), timeout_s=120,
                   what="every Kalena service healthy", why=stack.health)
        steps = list(marks)
        print("compose stack:", ", ".join(f"{b} +{marks[b] - marks[a]:.0f} s" for a, b in zip(steps, steps[1:])))
    finally:
        logs = stack.compose("logs", "--tail", "40", check=False).stdout
        stack.compose("down", "-v", "--timeout", "5", check=False)
        (tmp_path / "stack.log").write_text(logs)
    assert stack.containers() == []


@pytest.mark.long
def test_the_compose_stack_lives_through_placement_throttling_eviction_and_replacement(node, tmp_path) -> None:
    port = free_port()
    env = {"KALENA_POSTGRES_IMAGE": "kalena/postgres:15-debian", "KALENA_REDIS_IMAGE": "kalena/redis:7-debian",
           "KALENA_DOCKER_SOCK": str(node.socket), "KALENA_NODE_CGROUP": node.node_cgroup,
           "KALENA_CONSOLE_ADDRESS": f"{SUBNET}.1", "KALENA_CONSOLE_PORT": str(port),
           "KALENA_AGENT_CAPACITY": f"cpu={CAPACITY_CPU_M}m,memory={CAPACITY_MIB}Mi"}
    project = f"kalena-stk-{uuid.uuid4().hex[:6]}"
    # without its secrets the stack is refused before anything is created
    bare = Stack(node, env, project)
    refused = bare.compose("up", "-d", check=False)
    assert refused.returncode != 0 and "set KALENA_SECRETS_DIR" in refused.stderr
    assert bare.containers() == []
    stack = Stack(node, {**env, "KALENA_SECRETS_DIR": str(secrets_dir(tmp_path / "secrets"))}, project)
    marks = {"start": time.monotonic()}
    production = None
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
        # one node: the eviction cooldown (owner × node, 600 s by default) shortened so the evicted
        # pod may come back within the test, as an operator would save it in the console
        stack.query(COOLDOWN)
        client = node.client()
        ensure_lab_images(client)
        # production: a service container on the node, idle (50 m, 16 MiB) until the test makes it burst
        production = client.containers.run(
            BURNER_IMAGE, ["/bin/burner", "series", "1", "0", "50", "16"], name="web-0", detach=True, init=True,
            network_mode="none", nano_cpus=CAPACITY_CPU_M * 1_000_000, mem_limit=f"{CAPACITY_MIB}m",
            # a service that may burst to the node's whole cpu and memory declares those limits: its
            # reservation follows its usage up to them (an undeclared limit is limit_ratio × request, so r
            # would stay at 100 m / 64 Mi: batch would yield cpu by weight alone, and the reservation
            # ledger would never show the memory production took)
            labels={"kalena.naughtian.io/tier": "service", "kalena.naughtian.io/request-cpu": "100m",
                    "kalena.naughtian.io/request-memory": "64Mi"})
        stack.kalena("batch", "submit", "docker", "batch/stk-1", "--request", "cpu=0.2,ram=32Mi", "--limit",
                     "cpu=1,ram=64Mi", "--image", "kalena/busybox:test", "--command", BATCH_COMMAND)
        wait_until(lambda: stack.query(POD)["running"] is not None, timeout_s=180, what="the batch pod running",
                   why=lambda: stack.kalena("batch", "show", "docker", "batch/stk-1"))
        marks["running"] = time.monotonic()
        running = stack.query(POD)
        assert running["state"] == "bound" and running["ledgers"][0]["batch_cpu"] == pytest.approx(200)
        (first,) = batch_containers(client, attempt=0)
        assert first.attrs["HostConfig"]["CpuQuota"] == 100_000       # its limit, 1 core, as the worker started it

        # production bursts (the whole cpu the agent was told of): the agent's batch budget
        # B = C − Σ service r falls, and with it the batch container's CFS quota in its cgroup
        before = cpu_quota_us(node, first)
        production.exec_run(["/bin/burner", "series", "1", "0", str(CAPACITY_CPU_M), "0"], detach=True)
        wait_until(lambda: cpu_quota_us(node, first) < min(before, 50_000), timeout_s=150, what="the batch quota lowered",
                   why=lambda: f"quota {cpu_quota_us(node, first)} µs, before the burst {before} µs; production "
                               f"used {cpu_used_mcpu(node, production):.0f} m; the agent's last throttle: "
                               f"{stack.query(THROTTLE)}; agent: "
                               f"{stack.compose('logs', '--tail', '15', 'agent', check=False).stdout[-3000:]}")
        throttled = cpu_quota_us(node, first)
        marks["throttled"] = time.monotonic()

        # production takes the node's memory: its working set past 0.95 of what the agent was
        # told → the batch pod (the lowest priority) is evicted and requeued
        baseline = working_set_bytes(node)
        assert baseline < 0.85 * CAPACITY_MIB * MIB, f"the stack alone holds {baseline / MIB:.0f} MiB"
        hold_mib = int((CAPACITY_MIB * MIB - baseline) / MIB) + 64
        production.exec_run(["/bin/burner", "series", "1", "0", "0", str(hold_mib)], detach=True)
        wait_until(lambda: stack.query(POD)["requeues"] >= 1, timeout_s=180, what="the batch pod evicted and requeued",
                   why=lambda: f"working set {working_set_bytes(node) / MIB:.0f} MiB; the agent's last memory "
                               f"actions: {stack.query(MEMORY_ACTIONS)}; agent: "
                               f"{stack.compose('logs', '--tail', '15', 'agent', check=False).stdout[-3000:]}; "
                               + stack.kalena("batch", "show", "docker", "batch/stk-1"))
        marks["evicted"] = time.monotonic()
        wait_until(lambda: not batch_containers(client, attempt=0), timeout_s=60, what="the evicted container stopped")
        wait_until(lambda: "memory pressure" in stack.kalena("batch", "describe", "docker", "batch/stk-1"),
                   timeout_s=120, what="the agent's eviction and its reason in `kalena batch describe`",
                   why=lambda: stack.kalena("batch", "describe", "docker", "batch/stk-1"))
        described = stack.kalena("batch", "describe", "docker", "batch/stk-1")
        evictions = described.split("Evictions:", 1)[1]
        assert f"from {running['node']}: memory pressure" in evictions, described

        # the memory is back (production gone): the pod is placed again, its re-placement runs and completes
        production.remove(force=True)
        production = None
        replaced_completed_freed(lambda: stack.query(POD), lambda p: p["ledgers"][0]["batch_cpu"],
                                 lambda: stack.kalena("batch", "describe", "docker", "batch/stk-1"), marks, 240)
        print(f"batch quota {before} µs → {throttled} µs under the burst; the stack alone {baseline / MIB:.0f} MiB, "
              f"production held {hold_mib} MiB more; evictions: {evictions.strip()}")
        steps = list(marks)
        print("compose stack:", ", ".join(f"{b} +{marks[b] - marks[a]:.0f} s" for a, b in zip(steps, steps[1:])))
    finally:
        if production is not None:
            production.remove(force=True)
        logs = stack.compose("logs", "--tail", "40", check=False).stdout
        stack.compose("down", "-v", "--timeout", "5", check=False)
        (tmp_path / "stack.log").write_text(logs)
    assert stack.containers() == []
