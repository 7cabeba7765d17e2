"""``kalena lab`` on this machine, as a user runs it: ``up`` with 2 small nodes, what the nodes
really are (cgroup capacity, containers inside their node, throttling at the node's quota, real
agents reporting to the console), ``status``, the refusals (a second ``up``, the budget, a port
in use, a start that fails half-way) and a ``down`` that leaves nothing.

Real cgroups, real private Docker engines, real agents and a real console; a missing facility
fails the test with the reason. Facts are asserted, not timings (the CPU is shared).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import pytest

from agents.lab.nodes import shims_of
from agents.lab.state import alive

PROJECT_ROOT = Path(__file__).resolve().parents[3]
CGROUP = Path("/sys/fs/cgroup")
NODE_CPU_M, NODE_MIB = 200, 128
# labs run side by side (parallel test runs on one machine) each take their own loopback /24
SUBNET = os.environ.get("KALENA_TEST_LAB_SUBNET", "127.0.0")


def kalena_lab(*args: str, timeout_s: float = 240.0) -> subprocess.CompletedProcess:
    if args[:1] == ("up",) and "--subnet" not in args:
        args = (*args, "--subnet", SUBNET)
    return subprocess.run([sys.executable, "-m", "kalena_web.cli", "lab", *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=timeout_s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout_s: float, every_s: float = 0.5) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(every_s)
    return bool(predicate())


@contextmanager
def short_state_dir() -> Iterator[Path]:
    # unix socket paths are limited to 108 bytes: the engines' sockets live under the state dir
    path = Path(tempfile.mkdtemp(prefix="kl-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def state_dir() -> Iterator[Path]:
    with short_state_dir() as path:
        yield path


def lab_cgroups(root: str) -> list[str]:
    return [str(top / root) for top in CGROUP.iterdir() if (top / root).is_dir()]


@pytest.fixture(scope="module")
def lab():
    with short_state_dir() as state_dir:
        yield from _lab(state_dir)


def _lab(state_dir: Path):
    name = f"lt{uuid.uuid4().hex[:6]}"
    up = kalena_lab("up", "--nodes", "2", "--cpu-m", str(NODE_CPU_M), "--memory-mib", str(NODE_MIB), "--name", name,
                    "--console-port", str(free_port()), "--state-dir", str(state_dir))
    if up.returncode != 0:
        pytest.fail(f"kalena lab up failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
    state = json.loads((state_dir / "lab.json").read_text())
    yield {"dir": state_dir, "name": name, "state": state, "up": up}
    if (state_dir / "lab.json").exists():  # a test failed before `down`: leave nothing either way
        kalena_lab("down", "--state-dir", str(state_dir))


def test_each_node_is_a_cgroup_subtree_whose_quota_and_limit_are_its_capacity(lab) -> None:
    for node in lab["state"]["nodes"]:
        group = node["cgroup"]
        assert group == f"kalena-{lab['name']}/{node['name']}"
        assert int((CGROUP / "cpu" / group / "cpu.cfs_quota_us").read_text()) == NODE_CPU_M * 100   # 200 m → 20 000 µs
        assert int((CGROUP / "cpu" / group / "cpu.cfs_period_us").read_text()) == 100_000
        assert int((CGROUP / "memory" / group / "memory.limit_in_bytes").read_text()) == NODE_MIB * 2**20
        assert (CGROUP / "unified" / group / "cpu.pressure").read_text().startswith("some ")
    assert [n["address"] for n in lab["state"]["nodes"]] == [f"{SUBNET}.2", f"{SUBNET}.3"]


def test_agents_are_alive_linked_and_their_nodes_report_samples_to_the_console(lab) -> None:
    nodes = lab["state"]["nodes"]
    for node in nodes:
        assert alive(node["agent"])
        with urllib.request.urlopen(node["health_url"], timeout=5) as response:
            body = json.loads(response.read())
        assert body["status"] == "ok"
    database = lab["dir"] / "console" / "kalena.sqlite3"

    def reported() -> dict[str, int]:
        with sqlite3.connect(database, timeout=10) as db:
            return dict(db.execute("select n.name, count(*) from telemetry_nodesample s join inventory_node n "
                                   "on n.id = s.node_id join inventory_cluster c on c.id = n.cluster_id "
                                   "where c.name = ? group by n.name", (lab["name"],)).fetchall())

    assert wait_for(lambda: all(reported().get(n["name"], 0) > 0 for n in nodes), 90), reported()


def test_status_reports_engines_agents_usage_and_node_psi_beside_the_hosts(lab) -> None:
    result = kalena_lab("status", "--json", "--state-dir", str(lab["dir"]))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["host_psi_cpu_some_avg10"] is not None
    for node, record in zip(report["nodes"], lab["state"]["nodes"], strict=True):
        assert node["engine"]["answers"] and node["engine"]["pid"] == record["engine"]["pid"]
        assert node["agent"]["alive"] and node["agent"]["health"] == "ok"
        assert node["cpu_quota_us"] == NODE_CPU_M * 100 and node["memory_limit_bytes"] == NODE_MIB * 2**20
        assert node["psi_cpu_some_avg10"] is not None
        assert any(record["address"] in s and record["socket"] in s for s in report["substitutions"])
    text = kalena_lab("status", "--state-dir", str(lab["dir"])).stdout
    assert "host PSI (/proc/pressure)" in text and "substitutions:" in text
    assert f"KALENA_DB_PATH={lab['dir'] / 'console' / 'kalena.sqlite3'}" in text


def test_batch_submitted_to_the_labs_console_runs_inside_the_node_it_was_bound_to(lab) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(lab["state"]["console"]["env"])
    submit = subprocess.run([sys.executable, "-m", "kalena_web.cli", "batch", "submit", lab["name"], "batch/sleeper-0",
                             "--request", "cpu=50m,ram=16Mi", "--limit", "cpu=100m,ram=32Mi", "--image",
                             "kalena/busybox:test", "--command", "sleep 120", "-o", "json"], cwd=PROJECT_ROOT,
                            env=env, capture_output=True, text=True, timeout=120)
    assert submit.returncode == 0, submit.stdout + submit.stderr
    bound = json.loads(submit.stdout)["node"]     # the embedded console places it as the submit commits
    assert bound, submit.stdout
    node = next(n for n in lab["state"]["nodes"] if n["name"] == bound)
    client = docker.DockerClient(base_url=f"unix://{node['socket']}", timeout=60)

    def running():
        return [c for c in client.containers.list(filters={"label": "kalena.naughtian.io/workload=batch/sleeper-0"})
                if c.status == "running"]

    assert wait_for(lambda: bool(running()), 60), "the bound batch pod never ran on its node's engine"
    pid = running()[0].attrs["State"]["Pid"]
    lines = dict(line.split(":", 2)[1:] for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines())
    assert lines["cpu"].startswith(f"/{node['cgroup']}/") and lines["memory"].startswith(f"/{node['cgroup']}/")
    client.close()


def test_containers_run_inside_their_node_and_a_burner_is_throttled_at_the_node_quota(lab) -> None:
    # after the placement test: once an agent samples the burners, the nodes' reservations hold that
    # usage for minutes (a decayed maximum, as they should), and a batch submitted then stays pending
    first, second = lab["state"]["nodes"]
    burners = []
    for node in (first, second):
        client = docker.DockerClient(base_url=f"unix://{node['socket']}", timeout=60)
        # no cpu limit of its own: only the node's quota holds it
        c = client.containers.run("kalena/busybox:test", ["sh", "-c", "while :; do :; done"], detach=True, init=True,
                                  network_mode="none", name="burner")
        burners.append((node, client, c))
    throttled_before = int(dict(line.split() for line in (CGROUP / "cpu" / first["cgroup"] / "cpu.stat")
                                .read_text().splitlines())["nr_throttled"])
    for node, client, c in burners:
        c.reload()
        text = Path(f"/proc/{c.attrs['State']['Pid']}/cgroup").read_text()
        lines = dict(line.split(":", 2)[1:] for line in text.splitlines())
        for hierarchy in ("cpu", "memory", "cpuacct", ""):   # "" is the unified (v2) tree: the node's PSI
            assert lines[hierarchy].startswith(f"/{node['cgroup']}/"), (hierarchy, lines[hierarchy])

    def throttled() -> int:
        return int(dict(line.split() for line in (CGROUP / "cpu" / first["cgroup"] / "cpu.stat")
                        .read_text().splitlines())["nr_throttled"])

    assert wait_for(lambda: throttled() >= throttled_before + 5, 60), "the node's quota never throttled the burner"
    for _, client, c in burners:
        c.remove(force=True)
        client.close()


def test_a_second_up_is_refused_and_starts_nothing(lab) -> None:
    other = f"lt{uuid.uuid4().hex[:6]}"
    result = kalena_lab("up", "--nodes", "1", "--cpu-m", "100", "--memory-mib", "64", "--name", other,
                        "--console-port", str(free_port()), "--state-dir", str(lab["dir"]))
    assert result.returncode == 2
    assert f"lab '{lab['name']}' is recorded as up" in result.stderr
    assert lab_cgroups(f"kalena-{other}") == []
    assert json.loads((lab["dir"] / "lab.json").read_text())["name"] == lab["name"]


def test_down_leaves_nothing_behind(lab) -> None:
    state = lab["state"]
    result = kalena_lab("down", "--state-dir", str(lab["dir"]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not (lab["dir"] / "lab.json").exists()
    refs = [state["console"]["process"]] + [n[k] for n in state["nodes"] for k in ("engine", "agent")]
    assert [r["pid"] for r in refs if alive(r)] == []
    assert lab_cgroups(state["cgroup_root"]) == []
    for node in state["nodes"]:
        assert not Path(node["socket"]).exists()
        assert shims_of(node["containerd_namespace"]) == []
        assert not Path(node["directory"]).exists()
    with open("/proc/self/mounts") as mounts:
        assert str(lab["dir"]) not in mounts.read()


def test_a_lab_over_the_cpu_budget_is_refused_with_the_numbers_and_starts_nothing(state_dir: Path) -> None:
    name = f"lt{uuid.uuid4().hex[:6]}"
    budget = (os.cpu_count() or 1) * 500
    nodes = budget // 250 + 1
    result = kalena_lab("up", "--nodes", str(nodes), "--cpu-m", "250", "--name", name, "--state-dir", str(state_dir))
    assert result.returncode == 2
    assert f"{nodes} nodes × 250 m = {nodes * 250} m of cpu exceeds the lab's budget of {budget} m" in result.stderr
    assert not (state_dir / "lab.json").exists() and lab_cgroups(f"kalena-{name}") == []


def test_a_port_in_use_is_refused_and_starts_nothing(state_dir: Path) -> None:
    name = f"lt{uuid.uuid4().hex[:6]}"
    fresh = state_dir / "fresh" / "lab"             # a state folder `up` would have to create
    with socket.socket() as busy:
        busy.bind((f"{SUBNET}.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = kalena_lab("up", "--nodes", "1", "--cpu-m", "100", "--memory-mib", "64", "--name", name,
                            "--console-port", str(port), "--state-dir", str(fresh))
    assert result.returncode == 2
    assert f"port(s) in use: {SUBNET}.1:{port} (console)" in result.stderr
    assert not (state_dir / "fresh").exists() and lab_cgroups(f"kalena-{name}") == []   # not even its folder


def test_a_nodes_agent_port_in_use_names_the_subnet_not_the_console_port(state_dir: Path) -> None:
    # another lab (or anything) on this subnet holds node 1's agent port: a new --console-port
    # cannot help, another --subnet does
    name = f"lt{uuid.uuid4().hex[:6]}"
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind((f"{SUBNET}.2", 9640))
        busy.listen()
        result = kalena_lab("up", "--nodes", "1", "--cpu-m", "100", "--memory-mib", "64", "--name", name,
                            "--console-port", str(free_port()), "--state-dir", str(state_dir))
    assert result.returncode == 2
    assert f"--subnet: port(s) in use: {SUBNET}.2:9640 (agent of {name}-1)" in result.stderr, result.stderr
    assert "another --subnet" in result.stderr and "--console-port" not in result.stderr
    assert not (state_dir / "lab.json").exists() and lab_cgroups(f"kalena-{name}") == []


def test_a_redis_that_does_not_answer_is_refused_before_anything_starts(state_dir: Path) -> None:
    # else `up` says "up" while the workers and beat retry a broker that is not there
    name = f"lt{uuid.uuid4().hex[:6]}"
    port = free_port()
    result = kalena_lab("up", "--orchestrator", "kubernetes", "--no-slice", "--nodes", "1", "--cpu-m", "100",
                        "--memory-mib", "64", "--name", name, "--redis-url", f"redis://127.0.0.1:{port}/0",
                        "--state-dir", str(state_dir))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--redis-url: Redis at redis://127.0.0.1:{port}/0 does not answer" in result.stderr, result.stderr
    assert not (state_dir / "lab.json").exists() and lab_cgroups(f"kalena-{name}") == []


def test_a_refused_up_leaves_no_rendered_slice_behind(state_dir: Path) -> None:
    name = f"lt{uuid.uuid4().hex[:6]}"
    port = free_port()
    result = kalena_lab("up", "--orchestrator", "kubernetes", "--nodes", "2", "--cpu-m", "500", "--memory-mib", "512",
                        "--name", name, "--redis-url", f"redis://127.0.0.1:{port}/0", "--max-pods-per-node", "12",
                        "--max-batch-pods", "4", "--hours", "0.2", "--state-dir", str(state_dir))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--redis-url" in result.stderr
    assert not (state_dir / "lab.json").exists() and not (state_dir / "slice").exists()


def test_a_start_that_fails_half_way_stops_what_it_started(state_dir: Path) -> None:
    name = f"lt{uuid.uuid4().hex[:6]}"
    (state_dir / "nodes").mkdir()
    (state_dir / "nodes" / f"{name}-2").write_text("in the way")   # node 2's engine directory cannot be made
    result = kalena_lab("up", "--nodes", "2", "--cpu-m", "100", "--memory-mib", "64", "--name", name,
                        "--console-port", str(free_port()), "--state-dir", str(state_dir))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"node {name}-1 up" in result.stdout                    # node 1 had started…
    assert "stopping what was started" in result.stdout
    assert f"node {name}-2" in result.stderr                        # …the error names node 2
    assert not (state_dir / "lab.json").exists()
    assert lab_cgroups(f"kalena-{name}") == []
    assert shims_of(f"kalena-{name}-1") == []
    assert not (state_dir / "nodes" / f"{name}-1" / "docker.sock").exists()
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(state_dir) not in out


def test_docker_missing_is_refused_naming_what_to_install_and_starts_nothing(monkeypatch, state_dir: Path) -> None:
    from agents.lab import nodes
    from agents.lab.budget import lab_plan
    from agents.lab.errors import LabError
    from agents.lab.lab import lab_up

    monkeypatch.setattr(nodes, "DOCKERD", "/nonexistent/dockerd")
    name = f"lt{uuid.uuid4().hex[:6]}"
    plan = lab_plan(name=name, nodes=1, cpu_mcpu=100, memory_bytes=64 * 2**20, host_cores=2, host_memory_bytes=2**33)

    class Unused:  # the console is never reached
        def __getattr__(self, name):
            raise AssertionError(f"the console's {name} was called")

    with pytest.raises(LabError) as refused:
        lab_up(plan, state_dir=state_dir / "fresh", console=Unused(), console_port=free_port())
    assert refused.value.field == "docker"
    assert "/nonexistent/dockerd" in str(refused.value)
    assert "apt-get install docker.io busybox-static" in str(refused.value)
    assert not (state_dir / "fresh").exists() and lab_cgroups(f"kalena-{name}") == []   # not even its folder


def test_kubernetes_mode_does_not_claim_the_subnets_first_address_port_8000(state_dir: Path) -> None:
    # its console runs in the control plane's pods (.100+), so a console already serving on .1:8000
    # (./scripts/demo serves the replay there and starts a Kubernetes-mode lab on 127.0.0) is no
    # conflict; a node's agent port still is, and only it is named
    name = f"lt{uuid.uuid4().hex[:6]}"
    redis_url = os.environ.get("KALENA_TEST_REDIS_URL", "redis://127.0.0.1:6379/12")
    with socket.socket() as console, socket.socket() as agent:
        for sock, address in ((console, (f"{SUBNET}.1", 8000)), (agent, (f"{SUBNET}.2", 9640))):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen()
        result = kalena_lab("up", "--orchestrator", "kubernetes", "--no-slice", "--nodes", "1", "--cpu-m", "100",
                            "--memory-mib", "64", "--name", name, "--redis-url", redis_url,
                            "--state-dir", str(state_dir))
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--subnet: port(s) in use: {SUBNET}.2:9640 (agent of {name}-1)" in result.stderr, result.stderr
    assert f"{SUBNET}.1:8000" not in result.stderr
    assert not (state_dir / "lab.json").exists() and lab_cgroups(f"kalena-{name}") == []
