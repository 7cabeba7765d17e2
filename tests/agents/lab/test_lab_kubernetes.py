"""``kalena lab up --orchestrator kubernetes`` as a user runs it: 2 nodes (cgroup subtrees with
their own engines and kubelet doubles), the deploy files applied with Debian's kubectl, the
control plane and agents started from the applied objects, a production Deployment per node and
batch Jobs — then what an operator sees through Debian's kubectl (get, describe, events, create,
delete, cordon, drain), what a user of Kalena would notice (batch ran in reclaimed capacity, no
production pod evicted, every eviction explained, the bound batch on its node in ``kubectl get
pods -o wide``) and a ``down`` that leaves nothing.

Real cgroups, engines, containers, agents, control plane and kubectl; the CPU is shared, so facts
are asserted, not timings (waits are bounded, never measured).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from agents.lab.kubernetes import KUBECTL

PROJECT_ROOT = Path(__file__).resolve().parents[3]
CGROUP = Path("/sys/fs/cgroup")
SUBNET = os.environ.get("KALENA_TEST_LAB_SUBNET", "127.0.0")
NODE_CPU_M, NODE_MIB = 500, 512
PRODUCTION_CPU_M = 250           # each node's production Deployment requests this …
BATCH_CPU_M = 300                # … so a batch pod of this fits only in reclaimed capacity (500 − 100 agent − 250 < 300)
USAGE = '{"step_s": 10, "cpu_m": [30], "memory_mib": [24], "repeat": true}'
WORK = '{"cpu_m": 40, "memory_mib": 16, "duration_s": 40}'
# the user's policy for a short lab: production's startup grace and decay in seconds, not minutes
POLICY = "apiVersion: kalena.naughtian.io/v1\nkind: Policy\nspec:\n  estimator: {grace_s: 10, half_life_s: 20}\n"


def wait_for(predicate, timeout_s: float, every_s: float = 2.0):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(every_s)
    return predicate()


def production(name: str, nodes: list[str]) -> str:
    docs = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}]
    for node in nodes:
        docs.append({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": f"web-{node}", "namespace": "shop"},
                     "spec": {"replicas": 1, "selector": {"matchLabels": {"app": f"web-{node}"}}, "template": {
                         "metadata": {"labels": {"app": f"web-{node}", "kalena.naughtian.io/tier": "service"},
                                      "annotations": {"lab.kalena.naughtian.io/usage": USAGE}},
                         "spec": {"nodeName": node, "containers": [{
                             "name": "web", "image": "kalena/lab-burner:test", "resources": {
                                 "requests": {"cpu": f"{PRODUCTION_CPU_M}m", "memory": "128Mi"},
                                 "limits": {"cpu": f"{PRODUCTION_CPU_M}m", "memory": "128Mi"}}}]}}}})
    docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "batch"}})
    return yaml.safe_dump_all(docs)


def batch_job(name: str, cpu_m: int, *, work: str = WORK) -> str:
    return yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {
                               "name": name, "namespace": "batch", "labels": {"kalena.naughtian.io/tier": "batch"}},
                           "spec": {"backoffLimit": 2, "template": {
                               "metadata": {"labels": {"kalena.naughtian.io/tier": "batch"},
                                            "annotations": {"lab.kalena.naughtian.io/work": work}},
                               "spec": {"restartPolicy": "Never", "containers": [{
                                   "name": "work", "image": "kalena/lab-burner:test", "resources": {
                                       "requests": {"cpu": f"{cpu_m}m", "memory": "64Mi"},
                                       "limits": {"cpu": f"{cpu_m}m", "memory": "64Mi"}}}]}}}})


def assert_agent_in_its_pod(lab: "Lab", record: dict) -> None:
    """The node's agent process sits in its DaemonSet pod's memory and cpu groups, and the pod's
    memory usage holds the agent's anonymous memory (charged there from its first page)."""
    pod = next(p for p in lab.pods("kalena-system") if p["spec"]["nodeName"] == record["name"])
    groups = dict(line.split(":", 2)[1:] for line in Path(f"/proc/{record['agent']['pid']}/cgroup").read_text().splitlines())
    assert groups["memory"].endswith(f"/pod{pod['metadata']['uid']}") and groups["memory"] == groups["cpu"] == groups["cpuacct"]
    assert groups["memory"].lstrip("/").startswith(record["cgroup"] + "/kubepods/")
    anon = next(int(line.split()[1]) for line in Path(f"/proc/{record['agent']['pid']}/status").read_text().splitlines()
                if line.startswith("RssAnon:")) * 1024   # its own pages (shared libraries' are charged where first read)
    usage = int((CGROUP / "memory" / groups["memory"].lstrip("/") / "memory.usage_in_bytes").read_text())
    assert usage >= 0.9 * anon > 10 * 2**20, (usage, anon)


class Lab:
    def __init__(self, name: str, state_dir: Path) -> None:
        self.name, self.state_dir = name, state_dir
        self.nodes = [f"{name}-1", f"{name}-2"]

    @property
    def state(self) -> dict:
        return json.loads((self.state_dir / "lab.json").read_text())

    def cli(self, *args: str, timeout_s: float = 600.0) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kalena_web.cli", "lab", *args, "--state-dir", str(self.state_dir)],
                              cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout_s)

    def kubectl(self, *args: str, stdin: str | None = None, ok: bool = True) -> subprocess.CompletedProcess:
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.state_dir), "KUBECONFIG": self.state["kubeconfig"]}
        done = subprocess.run([str(KUBECTL), *args], env=env, capture_output=True, text=True, input=stdin, timeout=120)
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    def kalena(self, *args: str) -> subprocess.CompletedProcess:
        """A ``kalena`` command in the console's environment (its database, its cluster config)."""
        env = next(p for p in self.state["processes"] if p["name"] == "kalena-console")["env"]
        done = subprocess.run([sys.executable, *args], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        return done

    def pods(self, namespace: str) -> list[dict]:
        return json.loads(self.kubectl("get", "pods", "-n", namespace, "-o", "json").stdout)["items"]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not os.access(KUBECTL, os.X_OK):
        pytest.fail(f"Debian's kubectl is not at {KUBECTL}: run scripts/services kubectl (scripts/test does)")
    redis = os.environ.get("KALENA_TEST_REDIS_URL", "redis://127.0.0.1:6379/13")
    database = os.environ.get("DATABASE_URL", "")
    name = "k" + uuid.uuid4().hex[:6]
    lab = Lab(name, tmp_path_factory.mktemp("klab") / "lab")
    manifests = tmp_path_factory.mktemp("manifests") / "production.yaml"
    manifests.write_text(production(name, lab.nodes))
    up = lab.cli("up", "--orchestrator", "kubernetes", "--nodes", "2", "--cpu-m", str(NODE_CPU_M), "--memory-mib",
                 str(NODE_MIB), "--name", name, "--subnet", SUBNET, "--redis-url", redis, "--database-url", database,
                 "--manifests", str(manifests), "--sampling-interval-s", "2", "--no-slice")
    try:
        assert up.returncode == 0, f"lab up failed:\n{up.stdout}\n{up.stderr}"
        policy = Path(lab.state["directory"]) / "policy.py"
        policy.write_text("import sys\nimport django\ndjango.setup()\n"
                          "from kalena_engine.policy_file import parse_policy_text\n"
                          "from kalena_web.inventory.models import Cluster\n"
                          "from kalena_web.policy.services import policy_version_create\n"
                          "policy_version_create(cluster=Cluster.objects.get(name=sys.argv[1]), "
                          "document=parse_policy_text(sys.argv[2], source='lab test'), user='lab test')\n")
        lab.kalena(str(policy), "production", POLICY)
        yield lab
    finally:
        if (lab.state_dir / "lab.json").exists() and not getattr(lab, "downed", False):
            lab.cli("down")


def test_kubectl_sees_the_labs_nodes_with_their_addresses_and_kalenas_batch_resources(lab) -> None:
    rows = [line.split() for line in lab.kubectl("get", "nodes", "-o", "wide").stdout.splitlines()]
    assert rows[0][:6] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "INTERNAL-IP"]
    assert {(r[0], r[1], r[5]) for r in rows[1:]} == {(lab.nodes[0], "Ready", f"{SUBNET}.2"),
                                                       (lab.nodes[1], "Ready", f"{SUBNET}.3")}

    def published():
        node = yaml.safe_load(lab.kubectl("get", "node", lab.nodes[0], "-o", "yaml").stdout)
        return node if "kalena.naughtian.io/batch-cpu" in node["status"]["allocatable"] else None
    node = wait_for(published, 120)
    assert node, "the scheduler never published batch capacity on the node"
    allocatable = node["status"]["allocatable"]
    assert allocatable["cpu"] == f"{NODE_CPU_M}m" and int(allocatable["memory"]) == NODE_MIB * 2**20
    assert int(allocatable["kalena.naughtian.io/batch-cpu"]) > 0
    assert int(allocatable["kalena.naughtian.io/batch-memory"]) > 0


def test_the_agents_daemonset_and_production_run_on_their_nodes_in_kubectl_get_pods(lab) -> None:
    rows = [line.split() for line in lab.kubectl("get", "pods", "-A", "-o", "wide").stdout.splitlines()]
    assert rows[0][:8] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    agents = {r[7] for r in rows[1:] if r[0] == "kalena-system" and r[3] == "Running"}
    assert agents == set(lab.nodes)  # one agent pod per node (DaemonSet), its place held on the node
    web = {r[1].split("-", 1)[1].rsplit("-", 2)[0]: r[7] for r in rows[1:] if r[0] == "shop" and r[3] == "Running"}
    assert web == {n: n for n in lab.nodes}
    for record in lab.state["nodes"]:   # the agent process lives in its pod's group, so its memory is the node's
        assert_agent_in_its_pod(lab, record)
    status = lab.cli("status")
    assert status.returncode == 0, status.stdout + status.stderr
    for expected in ("HOST_IP (HOST_IP, status.hostIP) →", "--reserved cpu=500m,memory=1Gi →",
                     "Service kalena/kalena port 80 →", "image kalena/control-plane:0.1.0 → local command",
                     "--node-cgroup kubepods.slice →"):
        assert expected in status.stdout, expected


def test_batch_runs_in_reclaimed_capacity_visible_to_kubectl_with_kalenas_events(lab) -> None:
    lab.kubectl("create", "-f", "-", stdin=batch_job("reclaim", BATCH_CPU_M))

    def running():
        pods = [p for p in lab.pods("batch") if p["metadata"]["name"].startswith("reclaim-")
                and p["status"].get("phase") in ("Running", "Succeeded")]
        return pods[0] if pods else None
    pod = wait_for(running, 240)
    assert pod, f"the batch pod never ran: {lab.kubectl('get', 'pods', '-A', '-o', 'wide').stdout}"
    node = pod["spec"]["nodeName"]
    assert pod["spec"]["schedulerName"] == "kalena"  # converted by the webhook the API server called
    job = json.loads(lab.kubectl("get", "job", "reclaim", "-n", "batch", "-o", "json").stdout)
    rules = job["spec"]["podFailurePolicy"]["rules"]  # the Job webhook of webhook.yaml added it
    assert {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]} in [
        {"action": r["action"], "onPodConditions": [{"type": c["type"]} for c in r["onPodConditions"]]} for r in rules]
    # reclaimed: production's requests on the node + the batch pod's original request exceed the node
    requested = sum(int(c["resources"]["requests"]["cpu"].rstrip("m")) for p in lab.pods("shop")
                    if p["spec"].get("nodeName") == node for c in p["spec"]["containers"])
    original = json.loads(pod["metadata"]["annotations"]["kalena.naughtian.io/resources"])["pod"]["request_mcpu"]
    agent = 100  # the agent DaemonSet's request (deploy/agent/daemonset.yaml), its pod on every node
    assert requested + original + agent > NODE_CPU_M, (requested, original)
    rows = [line.split() for line in lab.kubectl("get", "pods", "-n", "batch", "-o", "wide").stdout.splitlines()]
    assert [r[6] for r in rows[1:] if r[0] == pod["metadata"]["name"]] == [node]  # NODE column of -o wide
    described = lab.kubectl("describe", "pod", "-n", "batch", pod["metadata"]["name"]).stdout
    assert f"Successfully assigned batch/{pod['metadata']['name']} to {node}" in described
    assert "Scheduled" in described and "kalena" in described


def test_a_batch_pod_that_fits_nowhere_gets_failedscheduling_in_describe_and_events(lab) -> None:
    lab.kubectl("create", "-f", "-", stdin=batch_job("toobig", 5000))

    def refused():
        pods = [p for p in lab.pods("batch") if p["metadata"]["name"].startswith("toobig-")]
        if not pods:
            return None
        text = lab.kubectl("describe", "pod", "-n", "batch", pods[0]["metadata"]["name"]).stdout
        return text if "FailedScheduling" in text else None
    described = wait_for(refused, 120)
    assert described, "no FailedScheduling event"
    assert "Warning  FailedScheduling" in described
    events = lab.kubectl("get", "events", "-n", "batch").stdout
    assert "FailedScheduling" in events and "Scheduled" in events
    lab.kubectl("delete", "job", "toobig", "-n", "batch")


def stubborn_job(name: str) -> str:
    """A batch Job whose container ignores SIGTERM: evicted, it stays Terminating for the grace."""
    job = yaml.safe_load(batch_job(name, 50))
    template = job["spec"]["template"]
    del template["metadata"]["annotations"]
    template["spec"]["containers"][0].update(image="kalena/busybox:test",
                                             command=["sh", "-c", "trap '' TERM; sleep 600"])
    return yaml.safe_dump(job)


def test_an_eviction_by_kalena_is_an_explained_event_and_delete_pod_removes_a_pod(lab) -> None:
    lab.kubectl("create", "-f", "-", stdin=stubborn_job("victim"))

    def bound():
        pods = [p for p in lab.pods("batch") if p["metadata"]["name"].startswith("victim-")
                and p["status"].get("phase") == "Running"]
        return pods[0]["metadata"]["name"] if pods else None
    name = wait_for(bound, 240)
    assert name, "the victim never ran"
    lab.kalena("-m", "kalena_web.cli", "batch", "delete", "production", f"batch/{name}")
    # the pod terminates for the eviction's grace (its container ignores SIGTERM): describe shows why
    described = wait_for(lambda: (t := lab.kubectl("describe", "pod", "-n", "batch", name, ok=False).stdout)
                         and "Evicted by Kalena:" in t and t, 25)
    assert described, "describe pod never showed Kalena's eviction event"
    assert "Warning  Evicted" in described and "Evicted by Kalena: deleted" in described
    events = lab.kubectl("get", "events", "-n", "batch", "--field-selector", f"involvedObject.name={name}").stdout
    assert "Evicted" in events and "Evicted by Kalena:" in events
    lab.kubectl("delete", "job", "victim", "-n", "batch", "--wait=false")
    done = [p["metadata"]["name"] for p in lab.pods("batch") if p["metadata"]["name"].startswith("crunch-")]
    lab.kubectl("create", "-f", "-", stdin=batch_job("crunch", 50, work='{"cpu_m": 20, "memory_mib": 8, "duration_s": 600}'))
    crunch = wait_for(lambda: [p["metadata"]["name"] for p in lab.pods("batch")
                               if p["metadata"]["name"].startswith("crunch-") and p["metadata"]["name"] not in done], 60)
    assert crunch
    lab.kubectl("delete", "pod", "-n", "batch", crunch[0])
    assert wait_for(lambda: crunch[0] not in [p["metadata"]["name"] for p in lab.pods("batch")], 120)


def test_no_production_pod_was_evicted_and_every_eviction_is_explained(lab) -> None:
    events = json.loads(lab.kubectl("get", "events", "-A", "-o", "json").stdout)["items"]
    evicted = [e for e in events if e.get("reason") == "Evicted"]
    assert all(e["involvedObject"]["namespace"] == "batch" for e in evicted), evicted
    assert all(e.get("message", "").startswith("Evicted by Kalena: ") and len(e["message"]) > 20 for e in evicted)
    web = [p for p in lab.pods("shop")]
    assert len(web) == 2 and all(p["status"]["phase"] == "Running" for p in web)
    assert not any(c.get("type") == "DisruptionTarget" for p in web for c in p["status"].get("conditions") or [])


def test_cordon_and_drain_with_kubectl(lab) -> None:
    node = lab.nodes[1]
    assert lab.kubectl("cordon", node).stdout.strip() == f"node/{node} cordoned"
    rows = [line.split() for line in lab.kubectl("get", "nodes").stdout.splitlines()]
    assert [r[1] for r in rows if r[0] == node] == ["Ready,SchedulingDisabled"]
    before = [(ns, p["metadata"]["name"]) for ns in ("shop", "batch") for p in lab.pods(ns)
              if p["spec"].get("nodeName") == node and p["status"].get("phase") not in ("Succeeded", "Failed")]
    assert before, "nothing to drain"
    drained = lab.kubectl("drain", node, "--ignore-daemonsets", "--force", "--timeout=120s",
                          "--delete-emptydir-data", ok=False)
    if "unknown flag: --delete-emptydir-data" in drained.stderr:  # kubectl 1.20 calls it --delete-local-data
        drained = lab.kubectl("drain", node, "--ignore-daemonsets", "--force", "--timeout=120s")
    assert drained.returncode == 0, drained.stderr
    assert "ignoring DaemonSet-managed Pods: kalena-system/kalena-agent-" in drained.stderr
    # kubectl 1.20 ends with "node/N evicted" (later versions: "drained")
    assert f"node/{node} evicted" in drained.stdout or f"node/{node} drained" in drained.stdout
    # every pod that ran there was evicted (kubectl 1.20's drain: policy/v1beta1 Eviction) and is gone;
    # a Deployment pinned to the node by nodeName gets a replacement there, as a real kubelet admits it
    now = {(ns, p["metadata"]["name"]) for ns in ("shop", "batch") for p in lab.pods(ns)}
    assert [pod for pod in before if pod in now] == []


def test_down_leaves_nothing_behind(lab) -> None:
    state = lab.state
    down = lab.cli("down")
    lab.downed = True
    assert down.returncode == 0, down.stdout + down.stderr
    assert "no process, container, engine, cgroup, mount, socket or port of the lab is left" in down.stdout
    assert not (lab.state_dir / "lab.json").exists()
    assert not any((CGROUP / h / state["cgroup_root"]).exists() for h in ("cpu", "memory", "cpuacct", "unified"))
    gone = [state["apiserver"]["process"], *(p["process"] for p in state["processes"] if p["process"]),
            *(n[k] for n in state["nodes"] for k in ("agent", "kubelet", "engine"))]
    from agents.lab.state import alive

    assert not any(alive(ref) for ref in gone)
    if state["database"]["created"]:
        import psycopg

        with psycopg.connect(state["database"]["server"].rsplit("/", 1)[0] + "/postgres") as conn:
            assert conn.execute("SELECT 1 FROM pg_database WHERE datname = %s",
                                (state["database"]["created"],)).fetchone() is None
