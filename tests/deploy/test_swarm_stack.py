"""deploy/swarm as written, on the lab's multi-node Swarm (`kalena lab up --orchestrator swarm
--machines-only`: 1 manager and 2 workers, each a private engine in its own cgroup node on its
own loopback address): the stack deployed with `docker stack deploy` against the manager, with
the images of scripts/build-images (postgres and redis from Debian's packages) loaded on every
node, its secrets as Docker secrets, and nothing changed but the variables `kalena lab status`
prints — parsed from its output here. Each node's agent joins with the stack's join secret and
holds its own node token; batch submitted with `kalena batch` (pinned by node selector to a
worker) is placed there by Kalena, runs as a Swarm task on the worker's engine, completes, and
is freed in the ledger. The second test (minutes long: ``scripts/test -m long``) is the whole life
on a worker: production (a burner container on the worker's engine) bursts and the task's CFS
quota falls; it takes the node's memory and the worker's agent evicts the task, the reason in
`kalena batch describe`; with production gone the pod is placed on the worker again, completes
and is freed."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from types import SimpleNamespace

import docker
import pytest

from agents.lab.images import BURNER_IMAGE, ensure_lab_images
from kalena_web.cli.benchenv import free_port
from tests.deploy.test_compose_stack import (
    BATCH_COMMAND, CGROUP, COOLDOWN, DOCKER, IMAGES, IMAGES_HOST, MIB, NODE_CPU_SHARES, SUBNET, batch_containers,
    cpu_quota_us, cpu_used_mcpu, images_built, replaced_completed_freed, wait_until, working_set_bytes,
)

pytestmark = [pytest.mark.docker, pytest.mark.cgroup]
REPO = Path(__file__).resolve().parents[2]
STACK = REPO / "deploy/swarm/stack.yml"
#: `docker stack deploy` of a file with a `replicated-job` (migrate) needs a newer CLI than Debian
#: bookworm's 20.10 ("Unknown mode: replicated-job"); the engines stay Debian's
STACK_CLI = next((p for p in (shutil.which("docker"), "/usr/local/bin/docker") if p and p != DOCKER
                  and Path(p).exists()), DOCKER)
POD = """
from kalena_web.scheduling.models import BatchPod
from kalena_web.ledger.models import LiveNodeLedger
p = BatchPod.objects.select_related('workload__node').filter(workload__name='batch/sw-1').first()
out = {'state': p and p.state, 'node': p and p.workload.node_id and p.workload.node.name,
       'running': p and p.running_s, 'outcome': p and p.outcome,
       'ledgers': {l.node.name: dict(stale=l.stale, batch_cpu=float(list(l.batch_request)[0]))
                   for l in LiveNodeLedger.objects.select_related('node')}}
"""


def kalena_lab(*args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kalena_web.cli", "lab", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=timeout_s)


def substitutions(status: str) -> dict[str, str]:
    """``KEY=VALUE`` of the lines `kalena lab status` prints for the stacks, for the Swarm: the
    images, the first node's cgroup root, and the Swarm's own lines (every node, the agents)."""
    env: dict[str, str] = {}
    for line in status.splitlines():
        if line.strip().startswith(("stacks: images", "stacks on the Swarm")):
            env.update(re.findall(r"\b(KALENA_[A-Z_]+)=(\S+)", line))
    return env


class Swarm:
    def __init__(self, manager_socket: str, env: dict[str, str]) -> None:
        self.env = {**os.environ, "DOCKER_HOST": f"unix://{manager_socket}", **env}

    def docker(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([DOCKER, *args], env=self.env, input=stdin, capture_output=True, text=True,
                                timeout=300)
        assert not check or result.returncode == 0, result.stdout + result.stderr
        return result

    def console(self) -> str:
        return self.docker("ps", "-q", "-f", "label=com.docker.swarm.service.name=kalena_console").stdout.strip()

    def kalena(self, *args: str) -> str:
        return self.docker("exec", self.console(), "kalena", *args).stdout

    def query(self, code: str):
        program = ("import django, json, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'kalena_web.settings'); "
                   "django.setup()\n" + code + "\nprint(json.dumps(out, default=str))")
        return json.loads(self.docker("exec", self.console(), "python3", "-c", program).stdout.splitlines()[-1])


def load_images(nodes: dict[str, list[str]]) -> None:
    """Images from the build engine into nodes' engines (no registry here): engine socket → images."""
    loads = []
    for socket, images in nodes.items():
        save = subprocess.Popen([DOCKER, "save", *images], stdout=subprocess.PIPE,
                                env={**os.environ, "DOCKER_HOST": IMAGES_HOST})
        load = subprocess.Popen([DOCKER, "load", "-q"], stdin=save.stdout, stdout=subprocess.DEVNULL,
                                env={**os.environ, "DOCKER_HOST": f"unix://{socket}"})
        save.stdout.close()
        loads.append((save, load))
    for save, load in loads:
        assert load.wait(timeout=600) == 0 and save.wait(timeout=60) == 0


@contextlib.contextmanager
def deployed(tmp_path: Path, marks: dict, *, memory_mib: int = 2048, env: dict[str, str] | None = None):
    """The lab's 3-node Swarm with deploy/swarm deployed, every agent joined and reporting:
    yields ``(swarm, lab)``; the stack removed and the lab down afterwards."""
    images_built()
    state_dir = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))   # short: the engines' sockets live under it
    name = f"sw{uuid.uuid4().hex[:4]}"
    up = kalena_lab("up", "--orchestrator", "swarm", "--machines-only", "--nodes", "3", "--cpu-m", "600",
                    "--memory-mib", str(memory_mib), "--budget-ratio", "1", "--name", name, "--subnet", SUBNET,
                    "--console-port", str(free_port()), "--state-dir", str(state_dir))
    swarm = None
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        lab = json.loads((state_dir / "lab.json").read_text())
        # the lab's nodes stand for machines with cpus of their own: their weight against the rest
        # of a shared test host (test_compose_stack.NODE_CPU_SHARES); their quotas still bound them
        (CGROUP / "cpu" / lab["cgroup_root"] / "cpu.shares").write_text(str(NODE_CPU_SHARES))
        manager, *workers = lab["nodes"]
        assert [n["swarm"]["role"] for n in lab["nodes"]] == ["manager", "worker", "worker"]
        marks["lab"] = time.monotonic()
        status = kalena_lab("status", "--state-dir", str(state_dir)).stdout
        printed = substitutions(status)
        # the per-node values are one template for every node; the agents take the host network
        assert "{{.Node.ID}}" in printed["KALENA_DOCKER_SOCK"] and printed["KALENA_NODE_CGROUP"] == "@parent"
        assert printed["KALENA_AGENT_NETWORK"] == "host", status
        # the control plane runs on managers (the stack's placement): workers need the agent only
        load_images({manager["socket"]: IMAGES, **{w["socket"]: ["kalena/agent:0.1.0"] for w in workers}})
        marks["images"] = time.monotonic()
        swarm = Swarm(manager["socket"], {**printed, **(env or {})})
        password = secrets.token_urlsafe(24)
        for secret, value in (("kalena_secret_key", secrets.token_urlsafe(50)), ("kalena_db_password", password),
                              ("kalena_database_url", f"postgres://kalena:{password}@postgres:5432/kalena"),
                              ("kalena_metrics_token", secrets.token_urlsafe(32)),
                              ("kalena_agent_join_secret", secrets.token_urlsafe(32))):
            swarm.docker("secret", "create", secret, "-", stdin=value)
        deployed = subprocess.run([STACK_CLI, "stack", "deploy", "--detach=true", "-c", str(STACK), "kalena"],
                                  env=swarm.env, capture_output=True, text=True, timeout=300)
        assert deployed.returncode == 0, f"{STACK_CLI}: {deployed.stdout}{deployed.stderr}"

        def console_ready() -> bool:
            return bool(swarm.console()) and swarm.docker("exec", swarm.console(), "kalena", "probe", "url",
                                                          "http://127.0.0.1:8000/livez", check=False).returncode == 0
        wait_until(console_ready, timeout_s=420, what="the console answering /livez",
                   why=lambda: swarm.docker("stack", "ps", "kalena", "--no-trunc", check=False).stdout)
        marks["live"] = time.monotonic()
        # a page, opened where `status` says the console is (any Host not in KALENA_ALLOWED_HOSTS is 400)
        page = f"http://{manager['address']}:{printed['KALENA_CONSOLE_PORT']}/accounts/login/"
        assert urllib.request.urlopen(page, timeout=10).status == 200
        # every node's agent joined with the stack's secret and holds its own node token
        wait_until(lambda: "3 token(s)" in swarm.kalena("agent-token", "list"), timeout_s=240,
                   what="the three agents joining", why=lambda: swarm.kalena("agent-token", "list") + swarm.docker(
                       "service", "logs", "--tail", "10", "kalena_agent", check=False).stdout)
        listing = swarm.kalena("agent-token", "list")
        assert all(f" {n['name']} " in listing for n in lab["nodes"]), listing
        wait_until(lambda: not any(v["stale"] for v in swarm.query(POD)["ledgers"].values())
                   and len(swarm.query(POD)["ledgers"]) == 3, timeout_s=180, what="every node's agent reporting",
                   why=lambda: swarm.query(POD)["ledgers"])
        marks["joined"] = time.monotonic()
        yield swarm, lab
    finally:
        if swarm is not None:
            logs = swarm.docker("service", "logs", "--tail", "30", "kalena_agent", check=False).stdout
            (tmp_path / "agent.log").write_text(logs)
            swarm.docker("stack", "rm", "kalena", check=False)
        down = kalena_lab("down", "--state-dir", str(state_dir), timeout_s=900)   # engines leave, then stop
        if down.returncode == 0:     # otherwise the record stays for another `kalena lab down`
            shutil.rmtree(state_dir, ignore_errors=True)
    assert down.returncode == 0, f"kalena lab down --state-dir {state_dir}: " + down.stdout + down.stderr


def submit_on(swarm: Swarm, worker: str, command: str, limit: str) -> None:
    swarm.kalena("batch", "submit", "swarm", "batch/sw-1", "--request", "cpu=0.1,ram=32Mi", "--limit", limit,
                 "--image", "kalena/busybox:test", "--command", command,
                 "--constraints", json.dumps({"node_selector": {"kalena.naughtian.io/node": worker}}))


def test_the_swarm_stack_runs_as_written_on_the_labs_three_node_swarm(tmp_path) -> None:
    marks = {"start": time.monotonic()}
    with deployed(tmp_path, marks) as (swarm, lab):
        worker = lab["nodes"][-1]["name"]
        submit_on(swarm, worker, "sh -c 'sleep 20'", "cpu=0.5,ram=64Mi")
        wait_until(lambda: swarm.query(POD)["running"] is not None, timeout_s=240, what="the batch pod running",
                   why=lambda: swarm.kalena("batch", "describe", "swarm", "batch/sw-1"))
        running = swarm.query(POD)
        assert running["node"] == worker and running["ledgers"][worker]["batch_cpu"] == pytest.approx(100)
        # the task runs on the worker's own engine
        tasks = subprocess.run([DOCKER, "ps", "-q", "-f", "label=kalena.naughtian.io/workload=batch/sw-1"],
                               env={**os.environ, "DOCKER_HOST": f"unix://{lab['nodes'][-1]['socket']}"},
                               capture_output=True, text=True).stdout.split()
        assert len(tasks) == 1
        marks["running"] = time.monotonic()
        wait_until(lambda: swarm.query(POD)["state"] == "completed", timeout_s=180, what="the batch pod completed",
                   why=lambda: swarm.kalena("batch", "describe", "swarm", "batch/sw-1"))
        assert swarm.query(POD)["outcome"] == "succeeded"
        wait_until(lambda: swarm.query(POD)["ledgers"][worker]["batch_cpu"] == 0, timeout_s=120,
                   what="the completed pod freed in the ledger", why=lambda: swarm.query(POD)["ledgers"])
        marks["freed"] = time.monotonic()
    steps = list(marks)
    print("swarm stack:", ", ".join(f"{b} +{marks[b] - marks[a]:.0f} s" for a, b in zip(steps, steps[1:])))


#: the whole life: each agent is told 600 m and 2 GiB, its node's cgroup allows 3 GiB (room above
#: it, so a node "full" for the agent is not the kernel's OOM)
CAPACITY_CPU_M, CAPACITY_MIB, NODE_MIB = 600, 2048, 3072
REQUEUES = POD.replace("'outcome': p and p.outcome,", "'outcome': p and p.outcome, 'requeues': p and p.requeues,")


@pytest.mark.long
def test_the_swarm_stack_lives_through_throttling_eviction_and_replacement_on_a_worker(tmp_path) -> None:
    marks = {"start": time.monotonic()}
    production = None
    with deployed(tmp_path, marks, memory_mib=NODE_MIB,
                  env={"KALENA_AGENT_CAPACITY": f"cpu={CAPACITY_CPU_M}m,memory={CAPACITY_MIB}Mi"}) as (swarm, lab):
        try:
            target = lab["nodes"][-1]
            worker, node = target["name"], SimpleNamespace(node_cgroup=target["cgroup"])
            swarm.query(COOLDOWN.replace("name='docker'", "name='swarm'"))   # one node: the cooldown shortened
            client = docker.DockerClient(base_url=f"unix://{target['socket']}", timeout=120)
            ensure_lab_images(client)
            # production on the worker: idle until it bursts; it may take the whole cpu Kalena counts and
            # the node's memory (its burst below passes Kalena's capacity by 64 MiB, so a limit at that
            # capacity would OOM-kill it when little else runs on the worker)
            production = client.containers.run(
                BURNER_IMAGE, ["/bin/burner", "series", "1", "0", "50", "16"], name="web-0", detach=True, init=True,
                network_mode="none", nano_cpus=CAPACITY_CPU_M * 1_000_000, mem_limit=f"{NODE_MIB}m",
                labels={"kalena.naughtian.io/tier": "service", "kalena.naughtian.io/request-cpu": "100m",
                        "kalena.naughtian.io/request-memory": "64Mi"})
            submit_on(swarm, worker, BATCH_COMMAND, "cpu=0.6,ram=64Mi")
            wait_until(lambda: swarm.query(REQUEUES)["running"] is not None, timeout_s=240,
                       what="the batch pod running", why=lambda: swarm.kalena("batch", "describe", "swarm", "batch/sw-1"))
            marks["running"] = time.monotonic()
            assert swarm.query(REQUEUES)["node"] == worker
            (first,) = batch_containers(client, attempt=0, workload="batch/sw-1")

            # production bursts to the whole cpu: the batch task's CFS quota falls
            before = cpu_quota_us(node, first)
            production.exec_run(["/bin/burner", "series", "1", "0", str(CAPACITY_CPU_M), "0"], detach=True)
            wait_until(lambda: cpu_quota_us(node, first) < min(before, 30_000), timeout_s=150,
                       what="the batch quota lowered", why=lambda: f"quota {cpu_quota_us(node, first)} µs, before "
                       f"{before} µs; production used {cpu_used_mcpu(node, production):.0f} m")
            throttled = cpu_quota_us(node, first)
            marks["throttled"] = time.monotonic()

            # production takes the node's memory: the batch task is evicted and requeued
            baseline = working_set_bytes(node)
            hold_mib = int((CAPACITY_MIB * MIB - baseline) / MIB) + 64
            production.exec_run(["/bin/burner", "series", "1", "0", "0", str(hold_mib)], detach=True)
            wait_until(lambda: swarm.query(REQUEUES)["requeues"] >= 1, timeout_s=180,
                       what="the batch pod evicted and requeued",
                       why=lambda: f"working set {working_set_bytes(node) / MIB:.0f} MiB; "
                                   + swarm.kalena("batch", "describe", "swarm", "batch/sw-1"))
            marks["evicted"] = time.monotonic()
            wait_until(lambda: "memory pressure" in swarm.kalena("batch", "describe", "swarm", "batch/sw-1"),
                       timeout_s=120, what="the agent's eviction and its reason in `kalena batch describe`",
                       why=lambda: swarm.kalena("batch", "describe", "swarm", "batch/sw-1"))
            described = swarm.kalena("batch", "describe", "swarm", "batch/sw-1")
            assert f"from {worker}: memory pressure" in described.split("Evictions:", 1)[1], described

            # the memory back: placed again on the worker, the re-placement completes and is freed
            production.remove(force=True)
            production = None
            replaced_completed_freed(lambda: swarm.query(REQUEUES), lambda p: p["ledgers"][worker]["batch_cpu"],
                                     lambda: swarm.kalena("batch", "describe", "swarm", "batch/sw-1"), marks, 300)
            print(f"swarm worker: batch quota {before} µs → {throttled} µs under the burst; the node alone "
                  f"{baseline / MIB:.0f} MiB, production held {hold_mib} MiB more")
        finally:
            if production is not None:
                production.remove(force=True)
    steps = list(marks)
    print("swarm stack:", ", ".join(f"{b} +{marks[b] - marks[a]:.0f} s" for a, b in zip(steps, steps[1:])))
