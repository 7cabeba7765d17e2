"""The agent's deployment files parse, carry what the agent needs on a node, and only use
flags ``kalena-agent run`` accepts."""

from __future__ import annotations

from pathlib import Path

import yaml

from agents.config import build_parser, parse_run_args

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "agent"
FLAGS = {flag for action in build_parser()._actions for flag in action.option_strings}


def used_flags(args: list[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in args if a.startswith("--")}


def test_daemonset_with_rbac_for_pods_on_its_node() -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all((DEPLOY / "daemonset.yaml").read_text())}
    assert set(docs) == {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "DaemonSet",
                         "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    namespace = docs["Namespace"]["metadata"]["name"]  # every namespaced object lives in the one the file creates
    assert docs["ServiceAccount"]["metadata"]["namespace"] == docs["DaemonSet"]["metadata"]["namespace"] == namespace
    rules = {(tuple(r["resources"]), tuple(r["verbs"])) for r in docs["ClusterRole"]["rules"]}
    # exactly what it calls (tests/web/kubernetes/test_rbac.py); the writes on its node's pods only
    # (tests/deploy/test_agent_admission_policy.py); no Eviction, whose node the API server cannot check
    assert rules == {(("nodes/pods", "nodes/stats"), ("get",)), (("pods",), ("get", "delete")),
                     (("pods/status",), ("patch",))}
    binding = docs["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == docs["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"][0]["name"] == docs["ServiceAccount"]["metadata"]["name"]
    spec = docs["DaemonSet"]["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == "kalena-agent" and spec["hostPID"] is True
    (container,) = spec["containers"]
    args = container["args"]
    assert args[0] == "run" and used_flags(args) <= FLAGS, used_flags(args) - FLAGS
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "HOST_IP": "status.hostIP"}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes["cgroup"]["hostPath"]["path"] == "/sys/fs/cgroup" and "--cgroup-root=" + mounts["cgroup"] in args
    assert "--proc-root=" + mounts["proc"] in args and "--discovery=kubelet" in args
    resolved = [a.replace("$(NODE_NAME)", "node-a").replace("$(HOST_IP)", "10.0.0.1") for a in args[1:]
                if not a.startswith("--link-token-file")]
    config = parse_run_args(resolved, {"KALENA_AGENT_LINK_TOKEN": "t"})
    assert config.node_name == "node-a" and config.kubelet_url == "https://10.0.0.1:10250"


def test_compose_snippet_for_standalone_docker() -> None:
    doc = yaml.safe_load((DEPLOY / "docker-compose.agent.yml").read_text())
    agent = doc["services"]["kalena-agent"]
    command = agent["command"]
    assert command[0] == "run" and used_flags(command) <= FLAGS
    assert "/var/run/docker.sock:/var/run/docker.sock" in agent["volumes"] and agent["pid"] == "host"
    assert agent["labels"]["kalena.naughtian.io/daemonset"] == "true"
    config = parse_run_args(command[1:], {"KALENA_AGENT_NODE_NAME": "host-1"})
    assert config.discovery == ("docker",) and config.node_name == "host-1"
    assert set(doc["volumes"]) == {"kalena-agent-state"}
