"""``kalena lab fault``, ``check`` and ``metrics`` on a real Docker-mode lab of 2 nodes, as a
user runs them: each fault is injected and waited out (the process or engine comes back, the
record says so), no batch pod is lost or bound twice after it, bad input is refused naming it and
changing nothing, ``check`` catches a pod running twice, and the sampler's figures for a burner
batch pod are there.

Real cgroups, engines, agents and console; the CPU is shared, so facts are asserted, not timings.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from agents.lab.livemetrics import collect
from agents.lab.state import alive
from tests.agents.lab.test_lab_live import PROJECT_ROOT, _lab, kalena_lab, short_state_dir, wait_for


@pytest.fixture(scope="module")
def lab():
    with short_state_dir() as state_dir:
        yield from _lab(state_dir)


def state_of(lab) -> dict:
    return json.loads((lab["dir"] / "lab.json").read_text())


def faults(lab) -> list[dict]:
    path = lab["dir"] / "faults.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def submit(lab, name: str, command: str, *, cpu: str = "30m", limit: str | None = None, labels: tuple = ()) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(lab["state"]["console"]["env"])
    args = [sys.executable, "-m", "kalena_web.cli", "batch", "submit", lab["name"], name, "--request",
            f"cpu={cpu},ram=16Mi", "--image", "kalena/busybox:test", "--command", command, "-o", "json"]
    if limit:
        args += ["--limit", limit]
    for label in labels:
        args += ["--label", label]
    done = subprocess.run(args, cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def check(lab) -> tuple[int, dict]:
    done = kalena_lab("check", "--json", "--state-dir", str(lab["dir"]))
    return done.returncode, json.loads(done.stdout)


def running(lab, workload: str) -> list[tuple[str, str]]:
    """(node, container id) of every running container of ``workload`` on the lab's engines."""
    out = []
    for node in state_of(lab)["nodes"]:
        client = docker.DockerClient(base_url=f"unix://{node['socket']}", timeout=30)
        try:
            out += [(node["name"], c.id) for c in
                    client.containers.list(filters={"label": f"kalena.naughtian.io/workload={workload}"})]
        finally:
            client.close()
    return out


def test_bad_input_is_refused_naming_it_and_changes_nothing(lab) -> None:
    before = (lab["dir"] / "lab.json").read_text()
    for args, named in ((("bogus",), "bogus"), (("agent-restart", "--node", "nowhere"), "nowhere"),
                        (("db-restart",), "SQLite")):
        result = kalena_lab("fault", *args, "--state-dir", str(lab["dir"]))
        assert result.returncode == 2, result.stdout + result.stderr
        assert named in result.stderr
    assert (lab["dir"] / "lab.json").read_text() == before
    assert faults(lab) == []


def test_agent_restart_comes_back_linked_and_is_recorded(lab) -> None:
    node = lab["state"]["nodes"][1]
    old = state_of(lab)["nodes"][1]["agent"]
    result = kalena_lab("fault", "agent-restart", "--node", node["name"], "--state-dir", str(lab["dir"]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "recovered" in result.stdout
    new = state_of(lab)["nodes"][1]["agent"]
    assert not alive(old) and alive(new) and new["pid"] != old["pid"]
    record = faults(lab)[-1]
    assert record["kind"] == "agent-restart" and record["node"] == node["name"] and record["recovered"] is True
    assert record["started_at"] <= record["ended_at"]
    status = json.loads(kalena_lab("status", "--json", "--state-dir", str(lab["dir"])).stdout)
    agent = next(n for n in status["nodes"] if n["name"] == node["name"])["agent"]
    assert agent["health"] == "ok" and agent["link"]["connected"]


def test_engine_stop_restarts_the_engine_and_its_batch_pod_runs_again_without_loss(lab) -> None:
    node = lab["state"]["nodes"][0]
    for i in range(2):
        submit(lab, f"batch/sleeper-{i}", "sleep 900")
    assert wait_for(lambda: all(running(lab, f"batch/sleeper-{i}") for i in range(2)), 90)
    old = state_of(lab)["nodes"][0]["engine"]
    result = kalena_lab("fault", "engine-stop", "--node", node["name"], "--for", "3", "--state-dir", str(lab["dir"]))
    assert result.returncode == 0, result.stdout + result.stderr
    new = state_of(lab)["nodes"][0]["engine"]
    assert new["pid"] != old["pid"] and alive(new)
    assert faults(lab)[-1]["kind"] == "engine-stop" and faults(lab)[-1]["recovered"] is True
    # Kalena requeues a pod the engine's stop killed and places it again: each runs once, somewhere
    assert wait_for(lambda: all(len(running(lab, f"batch/sleeper-{i}")) == 1 for i in range(2)), 120), \
        [running(lab, f"batch/sleeper-{i}") for i in range(2)]
    code, report = check(lab)
    assert code == 0, report
    assert report["counts"] == {"lost": 0, "double_bound": 0, "production_evictions": 0}
    assert report["batch_pods"] >= 2


def test_leader_kill_in_docker_mode_restarts_the_console_that_runs_the_loops(lab) -> None:
    old = state_of(lab)["console"]["process"]
    result = kalena_lab("fault", "leader-kill", "--state-dir", str(lab["dir"]))
    assert result.returncode == 0, result.stdout + result.stderr
    record = faults(lab)[-1]
    assert record["recovered"] is True and "no Lease" in record["detail"]
    new = state_of(lab)["console"]["process"]
    assert new["pid"] != old["pid"] and alive(new) and not alive(old)
    code, report = check(lab)
    assert code == 0 and report["counts"]["lost"] == 0 and report["counts"]["double_bound"] == 0, report


def test_metrics_report_a_throttled_burner_batch_pod(lab) -> None:
    since = time.time()
    work = '{"cpu_m": 100, "memory_mib": 8, "duration_s": 4}'
    submit(lab, "batch/burner", "sh -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done'", cpu="50m",
           limit="cpu=50m,ram=32Mi", labels=(f"lab.kalena.naughtian.io/work={work}",))

    end = time.monotonic() + 240
    while True:
        report = collect(state_of(lab), since, time.time())
        if report["metric7"]["completion_inflation"]["count"] >= 1 or time.monotonic() > end:
            break
        time.sleep(2)
    assert report["metric7"]["completion_inflation"]["count"] >= 1, report["metric7"]
    m7 = report["metric7"]
    row = next(r for r in m7["pods"] if r["pod"] == "batch/burner")
    assert row["throttled_s"] > 0 and row["wall_s"] > 0 and row["inflation"] == pytest.approx(row["wall_s"] / 4, rel=1e-3)
    assert m7["throttled_s_per_pod"]["p100"] > 0 and len(m7["throttled_s_per_pod"]["values"]) >= 1
    batch = [b["tiers"]["batch"] for b in report["metric4"]["buckets"].values() if "batch" in b["tiers"]]
    assert batch and sum(t["runnable_s"] for t in batch) > 0
    # a quota of 50 m holds the burner waiting (throttled) most of each second: long waits are seen
    assert sum(t["wait_over_5ms_s"] for t in batch) > 0
    text = kalena_lab("metrics", "--state-dir", str(lab["dir"]))
    assert text.returncode == 0 and "metric 4" in text.stdout and "metric 7" in text.stdout


def test_check_finds_a_pod_running_on_two_nodes(lab) -> None:
    placed = running(lab, "batch/sleeper-0")
    assert placed
    where = placed[0][0]
    other = next(n for n in state_of(lab)["nodes"] if n["name"] != where)
    client = docker.DockerClient(base_url=f"unix://{other['socket']}", timeout=30)
    twin = client.containers.run("kalena/busybox:test", ["sleep", "300"], detach=True, network_mode="none",
                                 labels={"kalena.naughtian.io/workload": "batch/sleeper-0"})
    try:
        code, report = check(lab)
        assert code == 1
        assert [d["pod"] for d in report["double_bound"]] == ["batch/sleeper-0"]
        assert sorted(report["double_bound"][0]["nodes"]) == sorted([where, other["name"]])
        assert "double-bound: batch/sleeper-0" in kalena_lab("check", "--state-dir", str(lab["dir"])).stdout
    finally:
        twin.remove(force=True)
        client.close()


def test_down_stops_the_sampler_too(lab) -> None:
    sampler = next(p for p in state_of(lab)["processes"] if p["name"] == "lab-sampler")
    assert alive(sampler["process"])
    assert Path(lab["dir"] / "metrics.jsonl").stat().st_size > 0
    result = kalena_lab("down", "--state-dir", str(lab["dir"]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not alive(sampler["process"])
