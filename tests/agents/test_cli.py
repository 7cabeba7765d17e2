"""``kalena-agent`` as a user runs it: bad configuration exits 2 naming the flag; ``run`` on real
cgroups talks to a real WebSocket server (hello, samples, actions, acks) and stops cleanly on
SIGTERM; ``bench mitigation`` writes its summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.bench.harness import BURNER, SPINNER
from agents.config import parse_run_args
from agents.errors import ConfigError
from kalena_engine.policy import Policy
from tests.agents.conftest import make_v2_tree, v2_files
from tests.agents.test_link import WsServer, free_port, wait_for

AGENT = [sys.executable, "-m", "agents.cli"]
CPUS = os.cpu_count() or 1


@pytest.mark.parametrize(("argv", "env", "named"), [
    pytest.param(["--discovery", "file"], {}, "--workloads-file", id="file discovery without a file"),
    pytest.param(["--workloads-file", "w", "--mitigation-interval-s", "0"], {}, "--mitigation-interval-s", id="zero interval"),
    pytest.param(["--workloads-file", "w"], {"KALENA_AGENT_DISCOVERY": "nomad"}, "KALENA_AGENT_DISCOVERY", id="bad env"),
    pytest.param(["--workloads-file", "w", "--capacity", "cpu=lots"], {}, "--capacity", id="bad capacity"),
    pytest.param(["--workloads-file", "w", "--link-url", "http://console"], {}, "--link-url", id="not a websocket url"),
    pytest.param(["--workloads-file", "w", "--link-url", "ws://console/agent"], {}, "token", id="link without token"),
    pytest.param(["--workloads-file", "w", "--psi-window-s", "2", "--psi-cpu-threshold-ms", "2000"], {}, "window",
                 id="threshold not shorter than window"),
])
def test_bad_configuration_is_refused_with_the_flag_named(argv, env, named) -> None:
    with pytest.raises(ConfigError) as info:
        parse_run_args(argv, env)
    assert named in str(info.value)
    result = subprocess.run([*AGENT, "run", *argv], env={**os.environ, **env}, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and named in result.stderr


POLICY = {"apiVersion": "kalena.naughtian.io/v1", "kind": "Policy"}


@pytest.mark.parametrize("document, says", [
    ({**POLICY, "spec": {"eviction": {"min_run_time": 5}}},
     "spec.eviction.min_run_time: unknown key 'min_run_time' (accepted: evict_threshold_ratio, acute_ratio"),
    ({**POLICY, "spec": {"estimator": {"margin_ratio": 0.9}}},
     "spec.estimator.margin_ratio: 0.9 is out of range (accepted: a number in [1, 10])"),
    ({**POLICY, "spec": {"estimator": {"half_life_s": "10min"}}}, "spec.estimator.half_life_s: expected"),
    # the old agent-only shape {"estimator": …} is not a policy file
    ({"estimator": {"margin_ratio": 1.2}}, "estimator: unknown key 'estimator' (accepted: apiVersion, kind, metadata, spec)"),
    ({"kind": "Policy", "spec": {}}, "apiVersion: missing apiVersion (accepted: kalena.naughtian.io/v1)"),
    ({**POLICY, "apiVersion": "kalena.naughtian.io/v2"}, "is not an apiVersion Kalena reads"),
])
def test_bad_policy_file_is_refused_naming_the_field(tmp_path, document, says) -> None:
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps(document))
    with pytest.raises(ConfigError) as info:
        parse_run_args(["--workloads-file", "w", "--policy-file", str(policy)], {})
    assert str(info.value).startswith(str(policy)) and says in str(info.value)


def test_a_policy_file_as_the_console_exports_it_is_read_and_flags_go_on_top(tmp_path) -> None:
    from kalena_engine.policy_file import PolicyDocument, dump_policy_text

    policy = tmp_path / "home-policy-v3.yaml"
    exported = PolicyDocument(policy=Policy().with_estimator(margin_ratio=1.3).with_eviction(min_run_time_s=45.0))
    policy.write_text(dump_policy_text(exported))
    config = parse_run_args(["--workloads-file", "w", "--policy-file", str(policy)], {})
    assert config.policy == exported.policy
    config = parse_run_args(["--workloads-file", "w", "--policy-file", str(policy), "--min-run-time-s", "90"], {})
    assert (config.policy.estimator.margin_ratio, config.policy.eviction.min_run_time_s) == (1.3, 90.0)
    with pytest.raises(ConfigError) as info:
        parse_run_args(["--workloads-file", "w", "--evict-threshold-ratio", "1.5"], {})
    assert "flags: eviction.evict_threshold_ratio: 1.5 is out of range" in str(info.value)


def test_environment_configures_the_agent() -> None:
    config = parse_run_args([], {"KALENA_AGENT_WORKLOADS_FILE": "/w.json", "KALENA_AGENT_CAPACITY": "cpu=3,memory=2Gi",
                                 "KALENA_AGENT_DRY_RUN": "true", "NODE_NAME": "node-x",
                                 "KALENA_AGENT_MIN_RUN_TIME_S": "30"})
    assert (config.node_name, config.capacity[0], config.capacity[1], config.dry_run) == ("node-x", 3000.0, 2**31, True)
    assert config.policy.eviction.min_run_time_s == 30.0


@pytest.mark.cgroup
def test_agent_run_end_to_end_with_a_console(harness, tmp_path) -> None:
    harness.create("", cpu_shares=8192)
    harness.create("batch", cpu_shares=CPUS * 1024)
    harness.create("service", cpu_shares=1024)
    harness.spawn("batch", BURNER)
    service = harness.spawn("service", SPINNER)
    time.sleep(0.5)                                                # let it install its SIGUSR1 handler
    service.send_signal(signal.SIGUSR1)
    workloads = tmp_path / "w.json"
    workloads.write_text(json.dumps({"workloads": [
        {"id": "svc", "cgroup": harness.rel("service"), "labels": {"kalena.naughtian.io/tier": "service"},
         "requests": {"cpu": "1"}, "limits": {"cpu": "1"}},
        {"id": "job", "cgroup": harness.rel("batch"), "labels": {"kalena.naughtian.io/tier": "batch"},
         "requests": {"cpu": "500m"}}]}))
    token = tmp_path / "token"
    token.write_text("node-a-token\n")
    port = free_port()
    server = WsServer(port)
    proc = subprocess.Popen([*AGENT, "run", "--node-name", "node-e2e", "--workloads-file", str(workloads),
                             "--capacity", f"cpu={CPUS}", "--node-cgroup", harness.rel(""),
                             "--sampling-interval-s", "1", "--link-url", f"ws://127.0.0.1:{port}/agent/v1/ws",
                             "--link-token-file", str(token), "--state-dir", str(tmp_path / "state"),
                             "--actions-log", str(tmp_path / "actions.jsonl")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for(lambda: len(server.of_type("samples")) >= 2 and server.of_type("action"), 60), \
            f"received {[m['type'] for m in server.received]}"
        hello = server.received[0]
        assert hello["type"] == "hello" and hello["node"] == "node-e2e" and hello["cgroup_version"] == 1
        assert "psi-trigger" in hello["signal_sources"]["cpu"]
        throttle = next(m for m in server.of_type("action") if m["action"] == "throttle")
        assert throttle["workload"]["id"] == "job" and throttle["numbers"]["quota_us"] == (CPUS - 1) * 100_000
        ids = {s["workload"] for batch in server.of_type("samples") for s in batch["samples"]}
        assert ids == {"svc", "job"}
    finally:
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=30)[0]
        server.close()
    assert proc.returncode == 0, output
    assert (tmp_path / "actions.jsonl").read_text().count('"throttle"') >= 1


@pytest.mark.cgroup
def test_bench_mitigation_writes_its_summary(tmp_path) -> None:
    summary_path = tmp_path / "bench.json"
    result = subprocess.run([*AGENT, "bench", "mitigation", "--episodes", "1", "--summary-json", str(summary_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads(summary_path.read_text())
    for key in ("event_to_action_p50_ms", "event_to_action_p99_ms", "contention_to_relief_p50_s", "episodes",
                "signal_source", "trigger_window_s"):
        assert key in summary
    assert summary["episodes"] == 1 and summary["signal_source"] == "psi-trigger" and summary["trigger_window_s"] == 2.0
    assert summary["reference_service_mcpu"] > 300 and len(summary["per_episode"]) == 2   # warm-up + 1
    printed = json.loads(result.stdout[result.stdout.index("{"):])
    assert printed["episodes"] == 1
    assert not [p for p in Path("/sys/fs/cgroup/cpu").glob("kalena-bench-*")]            # cleaned up



def _machine(tmp_path: Path) -> tuple[Path, list[str]]:
    """A temp-dir cgroup v2 tree and procfs, and the agent flags that use them."""
    root = make_v2_tree(tmp_path / "cgroup", {"system.slice": v2_files()})
    proc = tmp_path / "proc"
    (proc / "pressure").mkdir(parents=True)
    for res in ("cpu", "memory", "io"):
        (proc / "pressure" / res).write_text("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
                                             "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    (proc / "meminfo").write_text("MemTotal: 16000000 kB\nMemAvailable: 8000000 kB\n")
    workloads = tmp_path / "workloads.json"
    workloads.write_text(json.dumps({"workloads": []}))
    return root, ["--cgroup-root", str(root), "--proc-root", str(proc), "--workloads-file", str(workloads),
                  "--capacity", "cpu=2,memory=4Gi", "--health-address", "off", "--node-cgroup", "kubepods"]


def test_a_missing_node_cgroup_is_a_clear_error(tmp_path) -> None:
    root, flags = _machine(tmp_path)
    result = subprocess.run([*AGENT, "run", *flags, "--duration-s", "2"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert (f"configuration error: --node-cgroup: kubepods: {root}/kubepods does not exist in the memory hierarchy "
            f"(cgroup v2 at {root})") in result.stderr
    assert "--node-cgroup-wait-s to wait for it" in result.stderr


def test_the_agent_waits_for_its_node_cgroup_when_asked(tmp_path) -> None:
    root, flags = _machine(tmp_path)
    proc = subprocess.Popen([*AGENT, "run", *flags, "--node-cgroup-wait-s", "60", "--duration-s", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "KALENA_LOG_FORMAT": "text"})
    try:
        lines = []
        assert proc.stdout is not None
        for line in proc.stdout:          # the agent says it waits before the group exists
            lines.append(line)
            if "does not exist yet; waiting up to 60 s" in line:
                break
        assert proc.poll() is None, "".join(lines)
        make_v2_tree(root, {"kubepods": v2_files(memory_bytes=2**30)})
        rest, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, "".join(lines) + rest
    assert "kubepods appeared" in rest


def test_a_node_cgroup_removed_while_running_stops_node_pressure_not_the_agent(tmp_path) -> None:
    from tests.agents.rig import GIB, Rig

    rig = Rig(tmp_path, capacity={"cpu": 4000.0, "ram": 64 * GIB})
    try:
        loop = rig.build()
        loop.tick(1000.0, 0.0)
        assert loop._last_node is not None
        (rig.root / "kubepods" / "memory.current").unlink()     # the runtime removed its group
        loop.tick(1010.0, 10.0)
        assert loop._last_node is None                          # no reading: no node-pressure eviction
        rig.set_files("", memory_bytes=GIB)
        loop.tick(1020.0, 20.0)
        assert loop._last_node is not None and loop._last_node.working_set_bytes == GIB
    finally:
        rig.close()


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_the_link_token_never_reaches_the_log_even_at_debug_level(tmp_path, fmt: str) -> None:
    _, flags = _machine(tmp_path)
    make_v2_tree(tmp_path / "cgroup", {"kubepods": v2_files(memory_bytes=2**30)})
    secret = "node-a-s3cret-token-4f1c"
    token = tmp_path / "token"
    token.write_text(secret + "\n")
    port = free_port()
    server = WsServer(port, token=secret)
    try:
        result = subprocess.run([*AGENT, "run", *flags, "--log-level", "DEBUG", "--link-url",
                                 f"ws://127.0.0.1:{port}/agent/v1/ws", "--link-token-file", str(token),
                                 "--state-dir", str(tmp_path / "state"), "--sampling-interval-s", "1",
                                 "--duration-s", "3"], capture_output=True, text=True, timeout=60,
                                env={**os.environ, "KALENA_LOG_FORMAT": fmt})
    finally:
        server.close()
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert server.of_type("hello"), "the agent never connected: the test would prove nothing"
    assert secret not in log
    # the WebSocket client still prints its handshake headers at debug level, the credential redacted
    assert "Authorization: Bearer [redacted]" in log


def test_node_cgroup_parent_is_the_group_above_the_agents_own_container() -> None:
    from agents.config import own_parent_cgroup

    v1 = "12:memory:/kalena-lab/lab-2/4f1c2d\n11:cpu,cpuacct:/kalena-lab/lab-2/4f1c2d\n1:name=systemd:/\n"
    assert own_parent_cgroup(v1) == "kalena-lab/lab-2"
    assert own_parent_cgroup("0::/docker/abc123\n") == "docker"
    with pytest.raises(ConfigError, match="no parent group") as host:
        own_parent_cgroup("12:memory:/\n0::/\n")          # a host process: nothing above it to name
    assert "@parent" in str(host.value)
    with pytest.raises(ConfigError, match="no memory"):
        own_parent_cgroup("5:cpu:/docker/x\n")
