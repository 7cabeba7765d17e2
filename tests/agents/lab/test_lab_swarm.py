"""``kalena lab up --orchestrator swarm`` as a user runs it: three nodes whose private engines
are one Swarm (a manager and two workers, each on its own loopback address), named by their
node label; ``status`` shows each node's role and state; batch submitted to the lab's console
and pinned to a worker runs on that worker's engine and completes in Kalena's view; ``down``
leaves the swarm and nothing behind (no process, shim, cgroup, socket, swarm port).

Real cgroups, engines, agents and console; facts are asserted, not timings.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import docker
import pytest

from agents.lab.lab import port_free
from agents.lab.nodes import shims_of
from agents.lab.state import alive
from tests.agents.lab.test_lab_live import PROJECT_ROOT, free_port, kalena_lab, lab_cgroups, short_state_dir, wait_for


@pytest.fixture(scope="module")
def swarm_lab():
    with short_state_dir() as state_dir:
        name = f"ls{uuid.uuid4().hex[:6]}"
        up = kalena_lab("up", "--orchestrator", "swarm", "--nodes", "3", "--cpu-m", "150", "--memory-mib", "96",
                        "--name", name, "--console-port", str(free_port()), "--state-dir", str(state_dir))
        if up.returncode != 0:
            pytest.fail(f"kalena lab up --orchestrator swarm failed ({up.returncode}):\n{up.stdout}\n{up.stderr}")
        state = json.loads((state_dir / "lab.json").read_text())
        yield {"dir": state_dir, "name": name, "state": state}
        if (state_dir / "lab.json").exists():
            kalena_lab("down", "--state-dir", str(state_dir))


def test_status_shows_one_manager_and_two_workers_named_by_their_label(swarm_lab) -> None:
    result = kalena_lab("status", "--json", "--state-dir", str(swarm_lab["dir"]))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["orchestrator"] == "swarm"
    roles = {n["name"]: (n["swarm"]["role"], n["swarm"]["state"], n["swarm"]["availability"]) for n in report["nodes"]}
    names = [n["name"] for n in swarm_lab["state"]["nodes"]]
    assert roles == {names[0]: ("manager", "ready", "active"), names[1]: ("worker", "ready", "active"),
                     names[2]: ("worker", "ready", "active")}
    # each node on its own address; the same hostname everywhere, so names come from the label
    addresses = {n["name"]: n["swarm"]["advertise"] for n in report["nodes"]}
    assert addresses == {r["name"]: r["address"] for r in swarm_lab["state"]["nodes"]}
    text = kalena_lab("status", "--state-dir", str(swarm_lab["dir"])).stdout
    assert "manager*" in text and "worker" in text


def test_batch_pinned_to_a_worker_runs_there_and_completes_in_the_consoles_view(swarm_lab) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(swarm_lab["state"]["console"]["env"])
    assert env["KALENA_ORCHESTRATOR"] == "swarm"
    worker = swarm_lab["state"]["nodes"][2]
    submit = subprocess.run(
        [sys.executable, "-m", "kalena_web.cli", "batch", "submit", swarm_lab["name"], "batch/on-worker",
         "--request", "cpu=50m,ram=16Mi", "--limit", "cpu=100m,ram=32Mi", "--image", "kalena/busybox:test",
         "--constraints", json.dumps({"node_selector": {"kalena.naughtian.io/node": worker["name"]}}),
         "--command", "sh -c 'sleep 4'"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert submit.returncode == 0, submit.stdout + submit.stderr
    client = docker.DockerClient(base_url=f"unix://{worker['socket']}", timeout=60)
    seen = []

    def on_worker() -> bool:
        seen.extend(client.containers.list(all=True, filters={"label": "kalena.naughtian.io/workload=batch/on-worker"}))
        return bool(seen)

    assert wait_for(on_worker, 90), "the batch task never came to the worker's engine"
    client.close()
    database = swarm_lab["dir"] / "console" / "kalena.sqlite3"

    def state() -> tuple:
        with sqlite3.connect(database, timeout=10) as db:
            return db.execute("select b.state, b.outcome, b.ran_on from scheduling_batchpod b join inventory_workload w"
                              " on w.id = b.workload_id where w.name = 'batch/on-worker'").fetchone() or ()

    assert wait_for(lambda: state()[:2] == ("completed", "succeeded"), 120), state()


def test_down_leaves_the_swarm_and_nothing_behind(swarm_lab) -> None:
    state = swarm_lab["state"]
    result = kalena_lab("down", "--state-dir", str(swarm_lab["dir"]))
    assert result.returncode == 0, result.stdout + result.stderr
    refs = [state["console"]["process"]] + [n[k] for n in state["nodes"] for k in ("engine", "agent")]
    assert [r["pid"] for r in refs if alive(r)] == []
    assert lab_cgroups(state["cgroup_root"]) == []
    for node in state["nodes"]:
        assert port_free(node["address"], 2377)  # no swarm listener left
        assert not Path(node["socket"]).exists()
        assert shims_of(node["containerd_namespace"]) == []
        assert not Path(node["directory"]).exists()
