"""``kalena lab up --orchestrator kubernetes`` loading its slice, then ``kalena lab play``, as a
user runs them on a 2-node lab: a short day (few production pods, a low load factor, a high
speed). What a user would notice: production runs on the nodes the blueprint chose and the
console maps every pod onto its blueprint entry (no extras); the day's batch is converted by
Kalena's webhook, bound by Kalena onto nodes whose requests alone would not hold it (reclaimed
capacity), runs to completion and shows in ``kubectl get pods -A -o wide``; ``down`` leaves
nothing.

Real cgroups, engines, containers, kubelet doubles, control plane, agents and kubectl; the CPU
is shared, so facts are asserted, not timings (waits are bounded, never measured).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from agents.lab.kubernetes import KUBECTL

PROJECT_ROOT = Path(__file__).resolve().parents[3]
CGROUP = Path("/sys/fs/cgroup")
SUBNET = os.environ.get("KALENA_TEST_LAB_SUBNET", "127.0.0")
NODE_CPU_M, NODE_MIB = 500, 512
AGENT_CPU_M = 100      # the agent DaemonSet's request (deploy/agent/daemonset.yaml), on every node
SLICE_LABEL = "lab.kalena.naughtian.io/slice"
# the user's policy on the trace's clock; `up` divides it by the speed (floored at 2 s of wall time)
POLICY = "apiVersion: kalena.naughtian.io/v1\nkind: Policy\nspec:\n  estimator: {grace_s: 10, half_life_s: 20}\n"
LEDGER = """import json, sys
import django
django.setup()
from kalena_web.control.models import ProductionPlacement
rows = ProductionPlacement.objects.filter(workload__cluster__name=sys.argv[1]).select_related(
    'seen_node', 'blueprint_node', 'workload')
print(json.dumps([{"pod": r.pod, "identity": r.identity, "entry": r.workload.name, "declaration": r.declaration,
                   "seen": r.seen_node.name if r.seen_node else None,
                   "blueprint": r.blueprint_node.name if r.blueprint_node else None, "finding": r.finding}
                  for r in rows]))
"""

def wait_for(predicate, timeout_s: float, every_s: float = 3.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    return predicate()


class Lab:
    def __init__(self, name: str, state_dir: Path) -> None:
        self.name, self.state_dir = name, state_dir
        self.nodes = [f"{name}-1", f"{name}-2"]

    @property
    def state(self) -> dict:
        return json.loads((self.state_dir / "lab.json").read_text())

    def cli(self, *args: str, timeout_s: float = 900.0) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kalena_web.cli", "lab", *args, "--state-dir", str(self.state_dir)],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout_s)

    def kubectl(self, *args: str) -> str:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.state_dir), "KUBECONFIG": self.state["kubeconfig"]}
        done = subprocess.run([str(KUBECTL), *args], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done.stdout

    def console_script(self, script: str, *args: str) -> str:
        env = next(p for p in self.state["processes"] if p["name"] == "kalena-console")["env"]
        path = Path(self.state["directory"]) / f"script-{uuid.uuid4().hex[:6]}.py"
        path.write_text(script)
        done = subprocess.run([sys.executable, str(path), *args], env=env, cwd=PROJECT_ROOT, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout

    def pods(self) -> list[dict]:
        return json.loads(self.kubectl("get", "pods", "-A", "-o", "json"))["items"]

    @property
    def placement(self) -> dict:
        return json.loads((self.state_dir / "slice" / "placement.json").read_text())

    @property
    def schedule(self) -> dict:
        return json.loads((self.state_dir / "slice" / "batch-schedule.json").read_text())


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"Debian's kubectl is not at {KUBECTL}: run scripts/services kubectl (scripts/test does)")
    redis = os.environ.get("KALENA_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
    name = "d" + uuid.uuid4().hex[:6]
    lab = Lab(name, tmp_path_factory.mktemp("dlab") / "lab")
    policy = lab.state_dir.parent / "short-day-policy.yaml"
    policy.write_text(POLICY)
    up = lab.cli("up", "--orchestrator", "kubernetes", "--nodes", "2", "--cpu-m", str(NODE_CPU_M), "--memory-mib",
                 str(NODE_MIB), "--name", name, "--subnet", SUBNET, "--redis-url", redis, "--database-url",
                 os.environ.get("DATABASE_URL", ""), "--sampling-interval-s", "2",
                 # a short day: 20 minutes of trace at 60× (20 s of wall time), few pods, little batch
                 "--speed", "60", "--hours", "0.34", "--load-factor", "0.3", "--max-pods-per-node", "12",
                 "--max-batch-pods", "6", "--policy", str(policy))
    lab.up = up
    try:
        assert up.returncode == 0, f"lab up failed:\n{up.stdout}\n{up.stderr}"
        assert "saved as the cluster's policy" in up.stdout
        yield lab
    finally:
        if (lab.state_dir / "lab.json").exists() and not getattr(lab, "downed", False):
            lab.cli("down")


def running_production(lab: Lab) -> dict[tuple[str, str], Counter]:
    out: dict[tuple[str, str], Counter] = {}
    for pod in lab.pods():
        labels = pod["metadata"].get("labels") or {}
        if labels.get(SLICE_LABEL) == lab.name and labels.get("kalena.naughtian.io/tier") == "service" \
                and pod["status"].get("phase") == "Running":
            out.setdefault((pod["metadata"]["namespace"], labels["app"]), Counter())[pod["spec"]["nodeName"]] += 1
    return out


def test_up_loads_the_slice_and_production_runs_on_the_nodes_the_blueprint_chose(lab) -> None:
    assert "slice written to" in lab.up.stdout and "production binder" in lab.up.stdout
    placement = lab.placement
    want = {(w["namespace"], w["name"]): Counter(w["nodes"]) for w in placement["workloads"]}
    assert sum(sum(c.values()) for c in want.values()) == len(placement["pods"]) > 0
    got = wait_for(lambda: (lambda g: g if g == want else None)(running_production(lab)), 300)
    assert got == want, f"running {running_production(lab)} != blueprint {want}"
    # the Nodes carry the blueprint nodes' labels (zone, …) as placement.json gives them
    for node, spec in placement["nodes"].items():
        labels = json.loads(lab.kubectl("get", "node", node, "-o", "json"))["metadata"]["labels"]
        assert {k: labels.get(k) for k in spec["labels"]} == spec["labels"]
    # bound by the lab's stand-in for kube-scheduler, recorded and shown by status
    status = lab.cli("status")
    assert "kube-scheduler → the lab's production binder" in status.stdout, status.stdout


def test_the_console_maps_every_production_pod_onto_its_blueprint_entry_with_no_extras(lab) -> None:
    placement = lab.placement
    namespaces = {w["namespace"] for w in placement["workloads"]}

    def ledger():
        rows = [r for r in json.loads(lab.console_script(LEDGER, "production"))
                if r["pod"].split("/", 1)[0] in namespaces]
        return rows if len(rows) >= len(placement["pods"]) else None
    rows = wait_for(ledger, 180) or json.loads(lab.console_script(LEDGER, "production"))
    slice_rows = [r for r in rows if r["pod"].split("/", 1)[0] in namespaces]
    assert len(slice_rows) == len(placement["pods"]), slice_rows
    assert [r for r in slice_rows if r["identity"] != "mapped" or r["finding"]] == []
    assert all(r["seen"] == r["blueprint"] for r in slice_rows)
    # each entry is the slice pod the blueprint put on that node
    entries = {pod_id: p["node"] for pod_id, p in placement["pods"].items()}
    assert sorted((r["entry"], r["blueprint"]) for r in slice_rows) == sorted(entries.items())


def test_play_submits_the_schedule_and_kalena_binds_batch_in_reclaimed_capacity_to_completion(lab) -> None:
    schedule = lab.schedule["arrivals"]
    assert schedule, "the slice sampled no batch"
    played = lab.cli("play")
    assert played.returncode == 0, played.stdout + played.stderr
    assert f"play: done — {len(schedule)} arrival(s)" in played.stdout
    assert sum(line.startswith("play: [") for line in played.stdout.splitlines()) == len(schedule)
    want = sum(a["pods"] for a in schedule)
    assert lab.state["play"]["arrivals"] == len(schedule) and lab.state["play"]["finished_s"]
    status = lab.cli("status")   # the finished play is reported completed, the lab healthy
    assert status.returncode == 0 and "lab/lab-play" in status.stdout, status.stdout

    def finished():
        pods = [p for p in lab.pods() if p["metadata"]["namespace"] == "batch"
                and (p["metadata"].get("labels") or {}).get(SLICE_LABEL) == lab.name]
        done = [p for p in pods if p["status"].get("phase") == "Succeeded"]
        return pods if len(done) >= want else None
    pods = wait_for(finished, 900, every_s=5)
    assert pods, f"batch did not finish:\n{lab.kubectl('get', 'pods', '-A', '-o', 'wide')}"
    succeeded = [p for p in pods if p["status"]["phase"] == "Succeeded"]
    assert all(p["spec"]["schedulerName"] == "kalena" for p in succeeded)  # the webhook converted them
    assert all(p["spec"].get("nodeName") in lab.nodes for p in succeeded)
    # reclaimed: on its node, production's and the agent's requests plus the pod's own exceed the node
    requested = Counter()
    for p in lab.pods():
        if (p["metadata"].get("labels") or {}).get("kalena.naughtian.io/tier") == "service" and p["spec"].get("nodeName"):
            requested[p["spec"]["nodeName"]] += sum(int(c["resources"]["requests"]["cpu"].rstrip("m"))
                                                    for c in p["spec"]["containers"])
    originals = [(p["spec"]["nodeName"], json.loads(p["metadata"]["annotations"]["kalena.naughtian.io/resources"])
                  ["pod"]["request_mcpu"]) for p in succeeded]
    assert any(requested[node] + AGENT_CPU_M + cpu > NODE_CPU_M for node, cpu in originals), (requested, originals)
    # every Job of the schedule completed
    for arrival in (a for a in schedule if a["kind"] != "Pod"):
        job = json.loads(lab.kubectl("get", "job", arrival["name"], "-n", "batch", "-o", "json"))
        assert job["status"].get("succeeded", 0) >= arrival["pods"], job["status"]
    rows = [line.split() for line in lab.kubectl("get", "pods", "-A", "-o", "wide").splitlines()]
    shown = {r[1]: r[7] for r in rows[1:] if r[0] == "batch"}
    assert {p["metadata"]["name"]: p["spec"]["nodeName"] for p in succeeded}.items() <= shown.items()


def test_production_and_daemonset_pods_never_restart_over_the_day(lab) -> None:
    """Usage that reaches a pod's limit in the trace runs at the limit: no OOM kill, no crash loop."""
    restarted = []
    for pod in lab.pods():
        labels = pod["metadata"].get("labels") or {}
        if labels.get(SLICE_LABEL) != lab.name or labels.get("kalena.naughtian.io/tier") == "batch":
            continue
        for c in pod["status"].get("containerStatuses") or []:
            waiting = (c.get("state") or {}).get("waiting") or {}
            if c.get("restartCount", 0) or waiting.get("reason") in ("CrashLoopBackOff", "StartError"):
                restarted.append((pod["metadata"]["name"], c.get("restartCount"), waiting.get("reason"),
                                  ((c.get("lastState") or {}).get("terminated") or {}).get("reason")))
    assert restarted == []


def test_down_leaves_nothing_behind(lab) -> None:
    state = lab.state
    down = lab.cli("down")
    lab.downed = True
    assert down.returncode == 0, down.stdout + down.stderr
    assert not (lab.state_dir / "lab.json").exists()
    assert not any((CGROUP / h / state["cgroup_root"]).exists() for h in ("cpu", "memory", "cpuacct", "unified"))
    from agents.lab.state import alive

    gone = [state["apiserver"]["process"], *(p["process"] for p in state["processes"] if p["process"]),
            *(n[k] for n in state["nodes"] for k in ("agent", "kubelet", "engine"))]
    assert any(p["name"] == "lab-production-binder" for p in state["processes"])
    assert not any(alive(ref) for ref in gone)


def test_up_with_a_bad_policy_file_is_refused_naming_the_key_and_starts_nothing(tmp_path) -> None:
    lab = Lab("dpolicy", tmp_path / "lab")
    bad = tmp_path / "policy.yaml"
    bad.write_text("apiVersion: kalena.naughtian.io/v1\nkind: Policy\nspec:\n  estimator: {grace_s: -5}\n")
    up = lab.cli("up", "--orchestrator", "kubernetes", "--nodes", "2", "--cpu-m", str(NODE_CPU_M), "--memory-mib",
                 str(NODE_MIB), "--name", "dpolicy", "--subnet", SUBNET, "--redis-url", "redis://127.0.0.1:1/0",
                 "--policy", str(bad), timeout_s=120)
    assert up.returncode == 2, up.stdout + up.stderr
    assert str(bad) in up.stderr and "grace_s" in up.stderr
    assert not (lab.state_dir / "lab.json").exists() and not (lab.state_dir / "slice").exists()
    assert not (CGROUP / "cpu" / "kalena-dpolicy").exists()


def test_up_with_a_missing_data_file_is_refused_naming_it_and_starts_nothing(tmp_path) -> None:
    lab = Lab("dmissing", tmp_path / "lab")
    missing = tmp_path / "no-such-trace.csv.gz"
    up = lab.cli("up", "--orchestrator", "kubernetes", "--nodes", "2", "--cpu-m", str(NODE_CPU_M), "--memory-mib",
                 str(NODE_MIB), "--name", "dmissing", "--subnet", SUBNET, "--redis-url", "redis://127.0.0.1:1/0",
                 "--batch-trace", str(missing), timeout_s=120)
    assert up.returncode == 2, up.stdout + up.stderr
    assert str(missing) in up.stderr and "--batch-trace" in up.stderr
    assert not lab.state_dir.exists()   # not even the state folder (docs/lab.md: a refused `up` creates nothing)
    assert not (CGROUP / "cpu" / "kalena-dmissing").exists()


def test_up_in_kubernetes_mode_with_the_default_node_size_renders_its_slice(tmp_path) -> None:
    # the agent's DaemonSet pod requests 128 MiB of each node: a 256 MiB node left the slice's
    # production 128 MiB, which its 1 MiB floors overfill, so the default `up` was always refused.
    # A Redis that does not answer stops this one after the slice, before anything starts.
    lab = Lab("ddefault", tmp_path / "lab")
    up = lab.cli("up", "--orchestrator", "kubernetes", "--nodes", "2", "--name", "ddefault", "--subnet", SUBNET,
                 "--redis-url", "redis://127.0.0.1:1/0", timeout_s=300)
    assert up.returncode == 2, up.stdout + up.stderr
    assert "rendering the slice for 2 node(s) of 150 m / 384 MiB" in up.stdout, up.stdout + up.stderr
    assert "slice written to" in up.stdout and "Redis at redis://127.0.0.1:1/0 does not answer" in up.stderr
    assert not lab.state_dir.exists()
    assert not (CGROUP / "cpu" / "kalena-ddefault").exists()
