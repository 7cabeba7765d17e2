"""`kalena lab status` prints, per node, the values a stack needs on the lab — and each is a
variable that deploy/compose and deploy/swarm really read (nothing else is changed)."""

from __future__ import annotations

import re
from pathlib import Path

from agents.lab.status import STACK_IMAGES, stack_substitutions

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"


def variables(name: str) -> set[str]:
    return set(re.findall(r"\$\{([A-Z_]+)", (DEPLOY / name).read_text()))


def test_every_printed_substitution_is_a_variable_of_both_stacks() -> None:
    state = {"nodes": [{"name": f"n{i}", "socket": f"/lab/n{i}/docker.sock", "cgroup": f"kalena-lab/n{i}",
                        "address": f"127.0.25.{i + 2}", "cpu_mcpu": 600, "memory_bytes": 2**30} for i in range(3)],
             "swarm": {"managers": ["n0"]}}
    lines = stack_substitutions(state)
    printed = {m for line in lines for m in re.findall(r"\b(KALENA_[A-Z_]+)=", line)}
    assert printed <= variables("compose/docker-compose.yml")
    assert printed - {"KALENA_CONSOLE_ADDRESS"} <= variables("swarm/stack.yml")   # Swarm: host-mode ports
    assert {"KALENA_CONSOLE_PORT", "KALENA_AGENT_CAPACITY"} <= variables("swarm/stack.yml")
    assert set(STACK_IMAGES) <= printed
    for i in range(3):
        (line,) = [x for x in lines if x.startswith(f"stacks on n{i}:")]
        assert f"KALENA_DOCKER_SOCK=/lab/n{i}/docker.sock" in line and f"KALENA_NODE_CGROUP=kalena-lab/n{i}" in line
        assert f"KALENA_CONSOLE_ADDRESS=127.0.25.{i + 2}" in line
        # the console's pages answer only the hosts allowed: its address, the one it is opened by
        assert f"KALENA_ALLOWED_HOSTS=127.0.25.{i + 2} " in line
    assert any("dnsrr" in x for x in lines)
    # the Swarm's per-node socket: one value for every node, a Swarm template over node-ID links
    state["swarm"]["node_links"] = "/lab/swarm-nodes"
    state["console"] = {"port": 8470}
    lines = stack_substitutions(state)
    (swarm,) = [x for x in lines if x.startswith("stacks on the Swarm, every node:")]
    assert "KALENA_DOCKER_SOCK=/lab/swarm-nodes/{{.Node.ID}}/docker.sock" in swarm
    assert "KALENA_NODE_CGROUP=@parent" in swarm
    (agents,) = [x for x in lines if x.startswith("stacks on the Swarm, the agents")]
    assert "KALENA_AGENT_LINK_URL=ws://127.0.25.2:8470/agent/v1/ws" in agents and "KALENA_CONSOLE_PORT=8470" in agents
    assert "KALENA_ALLOWED_HOSTS=127.0.25.2 " in agents       # the manager's address, where the console answers
    printed = {m for line in (swarm, agents) for m in re.findall(r"\b(KALENA_[A-Z_]+)=", line)}
    assert printed <= variables("swarm/stack.yml")
    assert not any("dnsrr" in x for x in stack_substitutions({**state, "swarm": None}))


def lab_state(*, machines_only: bool, swarm: bool = False) -> dict:
    """A recorded lab of two 500 m / 768 MiB nodes whose engines run (this process stands for
    them) and answer nothing; no console and no agent process."""
    import os

    from agents.lab.state import process_ref

    nodes = [{"name": f"n{i}", "address": f"127.0.51.{i + 2}", "cpu_mcpu": 500, "memory_bytes": 768 * 2**20,
              "cgroup": f"kalena-t/n{i}", "directory": f"/nowhere/n{i}", "socket": f"/nowhere/n{i}/docker.sock",
              "engine": process_ref(os.getpid()), "agent": None, "health_url": f"http://127.0.51.{i + 2}:9640/healthz",
              "containerd_namespace": f"kalena-n{i}", "kubelet": None, "kubelet_url": None} for i in range(2)]
    state = {"name": "t", "status": "up", "cgroup_root": "kalena-t", "orchestrator": "swarm" if swarm else "docker",
             "budget": {"cpu_mcpu": 1000, "memory_bytes": 2**31, "host_cores": 2, "host_memory_bytes": 2**32},
             "console": {"url": "http://127.0.51.1:8470/", "port": 8470, "process": None,
                         "env": {"KALENA_DB_PATH": "/nowhere/console/kalena.sqlite3"}},
             "nodes": nodes, "machines_only": machines_only}
    if swarm:
        state["swarm"] = {"managers": ["n0"], "node_links": "/nowhere/swarm-nodes"}
    return state


def test_every_node_s_agent_capacity_is_printed_as_its_cgroup_quota_and_limit() -> None:
    lines = stack_substitutions(lab_state(machines_only=True))
    for i in range(2):
        (line,) = [x for x in lines if x.startswith(f"stacks on n{i}:")]
        assert "KALENA_AGENT_CAPACITY=cpu=500m,memory=768Mi " in line
    (swarm,) = [x for x in stack_substitutions(lab_state(machines_only=True, swarm=True))
                if x.startswith("stacks on the Swarm, every node:")]
    assert "KALENA_AGENT_CAPACITY=cpu=500m,memory=768Mi " in swarm
    # the value is what the agent reads: its --capacity syntax, and the stacks' variable
    from agents.config import parse_capacity

    capacity = parse_capacity("cpu=500m,memory=768Mi", None, "/proc")
    assert capacity[0] == 500 and {"KALENA_AGENT_CAPACITY"} <= variables("compose/docker-compose.yml")


def test_nodes_of_different_sizes_are_not_given_one_swarm_capacity() -> None:
    state = lab_state(machines_only=True, swarm=True)
    state["nodes"][1]["cpu_mcpu"] = 250
    (swarm,) = [x for x in stack_substitutions(state) if x.startswith("stacks on the Swarm, every node:")]
    assert "KALENA_AGENT_CAPACITY=" not in swarm and "n1 cpu=250m,memory=768Mi" in swarm


def test_a_machines_only_lab_s_status_says_so_instead_of_failures() -> None:
    from agents.lab.status import format_status, lab_status

    text = format_status(lab_status(lab_state(machines_only=True), sample_s=0))
    first = text.splitlines()[0]
    assert "machines only" in first and "no console and no agents" in first and "NOT RUNNING" not in first
    for i in range(2):
        (row,) = [x for x in text.splitlines() if x.startswith(f"n{i} ")]
        assert "DOWN" not in row and "a stack's" in row
    assert ("deploy a stack onto these machines: DOCKER_HOST=unix:///nowhere/n0/docker.sock docker-compose -f "
            "deploy/compose/docker-compose.yml up -d") in text
    assert "kalena.sqlite3" not in text and "agent health on" not in text     # the lab's console: none
    # the stacks' images are not in the nodes' engines: said, with how to load them
    assert "imports only kalena/busybox:test" in text and "| DOCKER_HOST=unix://<node socket> docker load" in text
    swarm = format_status(lab_status(lab_state(machines_only=True, swarm=False) | {
        "swarm": {"managers": ["n0"], "node_links": "/nowhere/swarm-nodes"}}, sample_s=0))
    assert "docker stack deploy -c deploy/swarm/stack.yml kalena" in swarm
    # a full lab whose console and agents are gone still says so
    full = format_status(lab_status(lab_state(machines_only=False), sample_s=0))
    assert "NOT RUNNING" in full.splitlines()[0]
    assert all("DOWN" in x for x in full.splitlines() if x.startswith(("n0 ", "n1 ")))
    assert "kalena.sqlite3" in full


def test_status_names_the_live_cluster_the_console_holds_for_batch_submit() -> None:
    # Kubernetes mode: the live cluster is the deploy files' KALENA_AGENT_TOKENREVIEW_CLUSTER
    # ("production"), so `kalena batch submit <lab name> …` as status printed it named no cluster
    from agents.lab.status import format_status, lab_status

    # and there Kalena takes batch from the watch: `kalena batch submit` is refused, `list` answers
    report = lab_status(lab_state(machines_only=False) | {"cluster": "production"}, sample_s=0)
    text = format_status(report | {"orchestrator": "kubernetes"})
    assert "(`kalena batch list production`; batch is created with kubectl; " in text and "batch submit" not in text
    # a script's REST token is made against the lab console's own database, which this line's env names
    assert "a REST token: `kalena api-token create USER --name NAME`" in text
    # Docker and Swarm mode: the live cluster is named after the lab
    assert "(`kalena batch submit t …`; a REST token: " in format_status(lab_status(lab_state(machines_only=False), sample_s=0))
