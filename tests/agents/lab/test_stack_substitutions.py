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
                        "address": f"127.0.25.{i + 2}"} for i in range(3)], "swarm": {"managers": ["n0"]}}
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
    printed = {m for line in (swarm, agents) for m in re.findall(r"\b(KALENA_[A-Z_]+)=", line)}
    assert printed <= variables("swarm/stack.yml")
    assert not any("dnsrr" in x for x in stack_substitutions({**state, "swarm": None}))
