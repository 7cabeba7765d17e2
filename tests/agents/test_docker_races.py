"""The real ``kalena-agent run`` process with Docker discovery and Docker stats telemetry on the
private engine, while containers are stopped and removed in the middle of its stats requests
(the engine then answers a stats request with an empty body, or 404 a moment later): the process
keeps running, keeps sending samples over the link, still evicts a batch container under memory
pressure afterwards, ``/metrics`` counts the failed reads by collector and cause, and each
container + cause is logged once however many rounds it failed."""

from __future__ import annotations

import collections
import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import docker
import pytest

from tests.agents.conftest import docker_socket
from tests.agents.realagent import wait_for
from tests.agents.test_docker import remove_cgroup_parent
from tests.agents.test_link import TOKEN, WsServer, free_port

pytestmark = pytest.mark.docker
AGENT = [sys.executable, "-m", "agents.cli"]
IMAGE = "kalena/busybox:test"
MIB = 2**20
ROUNDS, PER_ROUND = 6, 4          # 24 stop+remove races
#: every cause a collector failure can have (docs/agent.md)
CAUSES = {"empty_body", "truncated", "malformed", "gone", "cgroup_removed", "permission", "unreachable",
          "http_status", "read_error", "unexpected"}
SERIES = re.compile(r'^kalena_agent_collector_errors_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$', re.M)


def collector_errors(port: int) -> dict[tuple[str, str], float]:
    """``(collector, cause) → count`` from the agent's ``/metrics``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    out = {}
    for match in SERIES.finditer(text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        out[(labels["collector"], labels["cause"])] = float(match["value"])
    return out


def test_stop_and_remove_races_never_stop_the_agent(docker_client, tmp_path: Path) -> None:
    run_id = uuid.uuid4().hex[:8]
    parent, key = f"kalena-test-race-{run_id}", f"kalena.test.race-{run_id}"
    started: list = []

    def start(name: str, command: str, labels: dict[str, str], **kwargs):
        container = docker_client.containers.run(
            IMAGE, ["sh", "-c", command], name=f"kt-{run_id}-{name}", detach=True, init=True,
            network_mode="none", cgroup_parent=f"/{parent}", labels={key: "1", **labels}, **kwargs)
        started.append(container)
        return container

    batch = {"kalena.naughtian.io/tier": "batch"}
    svc = start("svc", "exec sleep 3600", {"kalena.naughtian.io/tier": "service",
                                           "kalena.naughtian.io/request-memory": "16Mi"}, mem_limit="32m")
    link_port, health_port = free_port(), free_port()
    server = WsServer(link_port)
    (tmp_path / "token").write_text(TOKEN + "\n")
    log_path = tmp_path / "agent.log"
    with log_path.open("w") as log_file:
        proc = subprocess.Popen(
            [*AGENT, "run", "--node-name", "race-node", "--discovery", "docker", "--telemetry", "docker",
             "--docker-host", docker_socket(), "--docker-label-filter", key, "--node-cgroup", parent,
             "--capacity", "cpu=4,memory=160Mi", "--min-run-time-s", "0", "--mitigation-interval-s", "0.5",
             "--discovery-interval-s", "0.5", "--sampling-interval-s", "1",
             "--health-address", f"127.0.0.1:{health_port}", "--link-url", f"ws://127.0.0.1:{link_port}/agent/v1/ws",
             "--link-token-file", str(tmp_path / "token"), "--state-dir", str(tmp_path / "state"),
             "--actions-log", str(tmp_path / "actions.jsonl")],
            stdout=log_file, stderr=subprocess.STDOUT, text=True)

    def output() -> str:
        return log_path.read_text()[-4000:]

    def sampled_since(cid: str, since_s: float) -> bool:
        return any(m["ts"] >= since_s and any(s["workload"] == cid for s in m["samples"])
                   for m in server.of_type("samples"))

    def alive_and(predicate) -> bool:
        return proc.poll() is not None or predicate()

    try:
        assert wait_for(lambda: alive_and(lambda: sampled_since(svc.id, 0)), 120), f"no sample of svc:\n{output()}"
        assert proc.poll() is None, f"the agent exited (code {proc.returncode}) before the races:\n{output()}"
        for round_no in range(ROUNDS):
            racers = [start(f"race{round_no}-{i}", "exec sleep 3600", batch) for i in range(PER_ROUND)]
            # each racer has been read once (so the next stats request for it is on its way) …
            wait_for(lambda: alive_and(lambda: all(sampled_since(c.id, 0) for c in racers)), 60)
            # … and is stopped and removed at once, as an evicted container often is
            for container in racers:
                try:
                    container.stop(timeout=0)
                    container.remove(force=True)
                except docker.errors.NotFound:
                    pass
            assert proc.poll() is None, (f"the agent exited (code {proc.returncode}) in race round {round_no}:"
                                         f"\n{output()}")
        raced_s = time.time()
        assert wait_for(lambda: alive_and(lambda: sampled_since(svc.id, raced_s)), 60), \
            f"no sample after the races:\n{output()}"
        assert proc.poll() is None, f"the agent exited (code {proc.returncode}) after the races:\n{output()}"
        errors = collector_errors(health_port)
        print("collector errors after the races:", errors)
        assert sum(n for (collector, _), n in errors.items() if collector == "docker_stats") >= 1, errors
        assert {cause for _, cause in errors} <= CAUSES and ("docker_stats", "unexpected") not in errors

        # still evicting: ≈ 80 MiB of shm in each batch container; Σ r ≈ 1.15 × 82 × 2 + 16 ≈ 205 MiB > C =
        # 160 MiB and the working set ≈ 165 MiB ≥ 0.95 × C: the priority-0 container is evicted, one victim
        fill = "dd if=/dev/zero of=/dev/shm/fill bs=1M count=80 2>/dev/null; echo filled; exec sleep 3600"
        common = {**batch, "kalena.naughtian.io/request-memory": "64Mi",
                  "kalena.naughtian.io/termination-grace-seconds": "20"}
        low = start("low", fill, {**common, "kalena.naughtian.io/priority": "0"}, mem_limit="128m", shm_size="100m")
        high = start("high", fill, {**common, "kalena.naughtian.io/priority": "5"}, mem_limit="128m", shm_size="100m")

        def exited(container) -> bool:
            container.reload()
            return container.status == "exited"

        assert wait_for(lambda: alive_and(lambda: exited(low)), 120), \
            f"the priority-0 container was not evicted:\n{output()}"
        assert proc.poll() is None, f"the agent exited (code {proc.returncode}):\n{output()}"
        evictions = [json.loads(line) for line in (tmp_path / "actions.jsonl").read_text().splitlines()
                     if '"evict"' in line]
        assert [a["workload"]["id"] for a in evictions if a["action"] == "evict"] == [low.id]
        high.reload()
        svc.reload()
        assert high.status == "running" and svc.status == "running"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
        server.close()
        for container in started:
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass
        remove_cgroup_parent(parent)
    assert proc.returncode == 0, output()
    # logged once per container and cause, however many rounds a read of it failed
    lines = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    logged = collections.Counter(tuple(re.findall(r"collector docker_stats: (\S+): no sample \((\w+)\)",
                                                  line["message"])[0])
                                 for line in lines if "collector docker_stats:" in line.get("message", ""))
    assert logged and max(logged.values()) == 1, logged
