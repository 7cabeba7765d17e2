"""``kalena lab status``: each node's engine, agent, cgroup usage and PSI beside the host's,
and the substitutions the lab made for a real cluster (reads only).

The node's PSI (``unified/<node>/cpu.pressure``) counts only the node's own tasks waiting for
cpu, the host's (``/proc/pressure/cpu``) every task on the machine: a high host figure with a
quiet node is the machine being busy (other tenants, the console), not contention inside the node.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from agents.lab import nodes as machinery
from agents.lab.kubelets import kubelet_health
from agents.lab.swarm import swarm_nodes
from agents.lab.lab import agent_health
from agents.lab.state import alive

CGROUP_ROOT = machinery.CGROUP_ROOT


def psi_some_avg10(path: Path) -> float | None:
    """The ``some avg10`` figure (percent) of a PSI file, ``None`` when it cannot be read."""
    try:
        for line in path.read_text().splitlines():
            if line.startswith("some "):
                return float(dict(f.split("=") for f in line.split()[1:])["avg10"])
    except (OSError, KeyError, ValueError):
        return None
    return None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _cpu_stat(group: str, root: Path) -> dict[str, int]:
    try:
        text = (root / "cpu" / group / "cpu.stat").read_text()
        return {k: int(v) for k, v in (line.split() for line in text.splitlines())}
    except (OSError, ValueError):
        return {}


def node_cgroup_figures(group: str, *, root: Path = CGROUP_ROOT, sample_s: float = 0.5) -> dict[str, Any]:
    """The node's subtree now: quota and limit as set, cpu usage over ``sample_s`` (mcpu, from
    ``cpuacct.usage``: Δns / Δs / 10⁶), memory usage, throttling counts and the group's PSI."""
    usage_path = root / "cpuacct" / group / "cpuacct.usage"
    t0, u0 = time.monotonic(), _read_int(usage_path)
    time.sleep(sample_s)
    t1, u1 = time.monotonic(), _read_int(usage_path)
    stat = _cpu_stat(group, root)
    return {
        "present": (root / "cpu" / group).is_dir() and (root / "memory" / group).is_dir(),
        "cpu_quota_us": _read_int(root / "cpu" / group / "cpu.cfs_quota_us"),
        "cpu_period_us": _read_int(root / "cpu" / group / "cpu.cfs_period_us"),
        "memory_limit_bytes": _read_int(root / "memory" / group / "memory.limit_in_bytes"),
        "cpu_usage_mcpu": None if u0 is None or u1 is None else round((u1 - u0) / (t1 - t0) / 1e6),
        "memory_usage_bytes": _read_int(root / "memory" / group / "memory.usage_in_bytes"),
        "nr_periods": stat.get("nr_periods"), "nr_throttled": stat.get("nr_throttled"),
        "psi_cpu_some_avg10": psi_some_avg10(root / "unified" / group / "cpu.pressure"),
        "psi_memory_some_avg10": psi_some_avg10(root / "unified" / group / "memory.pressure"),
    }


def lab_status(state: dict[str, Any], *, proc_root: str = "/proc", sample_s: float = 0.5) -> dict[str, Any]:
    """Everything ``status`` reports for the recorded lab ``state`` (a JSON-ready dict)."""
    nodes = []
    in_swarm = swarm_nodes(state["nodes"]) if state.get("swarm") else {}
    for record in state["nodes"]:
        engine = {"alive": alive(record.get("engine")), "pid": (record.get("engine") or {}).get("pid"),
                  "socket": record["socket"], "answers": False, "containers": None}
        if engine["alive"]:
            try:
                client = machinery.engine_client(f"unix://{record['socket']}", timeout_s=5)
                client.ping()
                engine["answers"] = True
                engine["containers"] = len(client.containers.list(ignore_removed=True))
                if state.get("swarm"):  # the address the node advertises (the managers see its connections' source)
                    engine["swarm_address"] = (client.info().get("Swarm") or {}).get("NodeAddr")
                client.close()
            except Exception:  # noqa: BLE001 - reported as not answering
                pass
        health = agent_health(record) if alive(record.get("agent")) else None
        agent = {"alive": alive(record.get("agent")), "pid": (record.get("agent") or {}).get("pid"),
                 "health": None if health is None else health.get("status"),
                 "link": None if health is None else health.get("link")}
        kubelet = None
        if record.get("kubelet"):
            kubelet = {"alive": alive(record["kubelet"]), "pid": record["kubelet"].get("pid"),
                       "url": record.get("kubelet_url"), "health": kubelet_health(record)}
        nodes.append({"name": record["name"], "address": record["address"], "cpu_mcpu": record["cpu_mcpu"],
                      "memory_bytes": record["memory_bytes"], "engine": engine, "agent": agent, "kubelet": kubelet,
                      "cgroup": record["cgroup"], **node_cgroup_figures(record["cgroup"], sample_s=sample_s)})
        if state.get("swarm"):  # the node as the managers see it (role, state, availability)
            nodes[-1]["swarm"] = {**in_swarm.get(record["name"], {"state": "not listed by any manager"}),
                                  "advertise": engine.get("swarm_address")}
    console = state["console"]
    return {
        "name": state["name"], "status": state["status"], "budget": state["budget"],
        "cluster": state.get("cluster") or state["name"],   # Kubernetes mode: the files' cluster, not the lab's name
        "orchestrator": state.get("orchestrator", "docker"),
        "console": {"url": console["url"], "alive": alive(console.get("process")), "env": console.get("env", {}),
                    "pid": (console.get("process") or {}).get("pid")},
        "host_psi_cpu_some_avg10": psi_some_avg10(Path(proc_root) / "pressure" / "cpu"),
        "host_psi_memory_some_avg10": psi_some_avg10(Path(proc_root) / "pressure" / "memory"),
        "nodes": nodes, "substitutions": substitutions(state),
        "machines_only": bool(state.get("machines_only")),
        "deploy": deploy_commands(state) if state.get("machines_only") else None,
    }


def agent_capacity(record: dict[str, Any]) -> str:
    """The ``KALENA_AGENT_CAPACITY`` value of the lab node ``record``: its cgroup's cpu quota and
    memory limit as the agent's capacity, ``cpu=<m>m,memory=<Mi>Mi`` (a stack's agent otherwise
    takes the whole machine)."""
    return f"cpu={record['cpu_mcpu']}m,memory={record['memory_bytes'] // 2**20}Mi"


def deploy_commands(state: dict[str, Any]) -> str:
    """How a stack comes onto a ``--machines-only`` lab: Compose on one node's engine, or the
    Swarm stack through the first manager."""
    first = state["nodes"][0]
    if state.get("swarm"):
        managers = [r for r in state["nodes"] if r["name"] in state["swarm"].get("managers", [])] or [first]
        return (f"DOCKER_HOST=unix://{managers[0]['socket']} docker stack deploy -c deploy/swarm/stack.yml kalena "
                "(docs/deploy-swarm.md)")
    return (f"DOCKER_HOST=unix://{first['socket']} docker-compose -f deploy/compose/docker-compose.yml up -d "
            "(or another node's socket; docs/deploy-docker.md)")


def substitutions(state: dict[str, Any]) -> list[str]:
    """What stands in for a real cluster's parts, one line each."""
    machines_only = bool(state.get("machines_only"))
    control = (f"control plane: none of the lab's (--machines-only): a stack's, deployed onto the nodes — "
               f"{deploy_commands(state)}" if machines_only else
               f"control plane: `kalena serve` on {state['console']['url']} (embedded loops, SQLite) instead of a "
               "deployment")
    out = [control,
           f"machines: cgroup subtrees /sys/fs/cgroup/{{cpu,cpuacct,memory,cpuset,unified}}/"
           f"{state['cgroup_root']}/<node>"]
    if state.get("swarm"):
        out.append(f"orchestrator: one Swarm of the nodes' engines (managers {', '.join(state['swarm'].get('managers', []))}, "
                   f"each node on <address>:{state['swarm'].get('port', 2377)}); nodes named by the node label "
                   "kalena.naughtian.io/node (every node reports this machine's hostname)")
    for r in state["nodes"]:
        out.append(f"{r['name']}: host address → {r['address']}; capacity → cpu quota {r['cpu_mcpu']} m, memory "
                   f"limit {r['memory_bytes'] // 2**20} MiB; container runtime → dockerd on {r['socket']} "
                   f"(data root {r['directory']}/data, exec root {r['directory']}/exec, containerd namespace "
                   f"{r['containerd_namespace']}, cgroup parent /{r['cgroup']})"
                   + ("" if machines_only else f"; agent health on {r['address']}:{machinery.AGENT_HEALTH_PORT}"))
        if r.get("kubelet_url"):
            out.append(f"{r['name']}: kubelet → the lab's kubelet double (python -m agents.lab.kubelet) on "
                       f"{r['kubelet_url']}, pods in /{r['cgroup']}/kubepods on that engine")
    if state.get("orchestrator", "docker") != "kubernetes":   # the Compose and Swarm stacks run on engines
        out += stack_substitutions(state)
    return out


#: the images the stacks take through variables where no registry serves postgres and redis
STACK_IMAGES = {"KALENA_POSTGRES_IMAGE": "kalena/postgres:15-debian", "KALENA_REDIS_IMAGE": "kalena/redis:7-debian"}


def stack_substitutions(state: dict[str, Any]) -> list[str]:
    """The only values a lab changes to run ``deploy/compose`` (on one node's engine) and
    ``deploy/swarm`` (on the lab's Swarm) as written — each is a variable of the stack file."""
    images = " ".join(f"{k}={v}" for k, v in STACK_IMAGES.items())
    out = [f"stacks: images {images} (built from Debian's packages by scripts/build-service-images: no registry "
           "serves postgres:16 and redis:7 here); kalena/control-plane and kalena/agent from scripts/build-images; "
           "`up` imports only kalena/busybox:test into the nodes' engines: load the stack's images into a node's "
           "engine from the one they were built on (scripts/services', var/dockerd in the checkout) with "
           "`DOCKER_HOST=unix://$PWD/var/dockerd/docker.sock docker save IMAGE… | DOCKER_HOST=unix://<node socket> "
           "docker load`; "
           "secrets as Docker secrets (Compose: files in KALENA_SECRETS_DIR; Swarm: docker secret create)"]
    for r in state["nodes"]:
        out.append(f"stacks on {r['name']}: KALENA_DOCKER_SOCK={r['socket']} KALENA_NODE_CGROUP={r['cgroup']} "
                   f"KALENA_CGROUP_ROOT=/sys/fs/cgroup KALENA_CONSOLE_ADDRESS={r['address']} "
                   f"KALENA_ALLOWED_HOSTS={r['address']} (the console's pages answer no other Host) "
                   f"KALENA_AGENT_CAPACITY={agent_capacity(r)} (the node's cpu quota and memory limit: without it "
                   f"the agent takes the whole machine) (DOCKER_HOST=unix://{r['socket']} for docker-compose)")
    swarm = state.get("swarm")
    if swarm:
        out.append("stacks on the Swarm: host-mode ports and dnsrr endpoints, as deploy/swarm/stack.yml has them "
                   "(this kernel has no IPVS: no virtual IPs, no routing mesh)")
        if swarm.get("node_links"):
            managers = [r for r in state["nodes"] if r["name"] in swarm.get("managers", [])] or state["nodes"][:1]
            port = (state.get("console") or {}).get("port", 8000)
            capacities = sorted({agent_capacity(r) for r in state["nodes"]})
            capacity = (f" KALENA_AGENT_CAPACITY={capacities[0]} (every node's cpu quota and memory limit)"
                        if len(capacities) == 1 else
                        " KALENA_AGENT_CAPACITY: the nodes differ (" + ", ".join(
                            f"{r['name']} {agent_capacity(r)}" for r in state["nodes"]) + "): one stack value "
                        "cannot fit them all")
            out.append(f"stacks on the Swarm, every node: KALENA_DOCKER_SOCK={swarm['node_links']}/{{{{.Node.ID}}}}/docker.sock "
                       "(a Swarm template: each node's task mounts its own engine's socket; "
                       f"{swarm['node_links']}/<node ID> → the node's directory) KALENA_NODE_CGROUP=@parent "
                       "(the agent's own container's parent group: its engine's --cgroup-parent) "
                       f"KALENA_CGROUP_ROOT=/sys/fs/cgroup{capacity}")
            out.append(f"stacks on the Swarm, the agents (the nodes share one network: no overlay traffic between them): "
                       f"KALENA_AGENT_NETWORK=host KALENA_CONSOLE_PORT={port} "
                       f"KALENA_AGENT_LINK_URL=ws://{managers[0]['address']}:{port}/agent/v1/ws "
                       "KALENA_AGENT_HEALTH_ADDRESS=@node:9640 (each agent on its node's Swarm address) "
                       f"KALENA_ALLOWED_HOSTS={managers[0]['address']} (the console's pages on "
                       f"http://{managers[0]['address']}:{port}/ answer no other Host)")
    return out


def _pct(value: float | None) -> str:
    return "  n/a" if value is None else f"{value:5.1f}"


def format_status(report: dict[str, Any]) -> str:
    """The human-readable status."""
    b = report["budget"]
    machines_only = report.get("machines_only", False)
    console = (f"console {report['console']['url']} "
               f"({'alive, pid ' + str(report['console']['pid']) if report['console']['alive'] else 'NOT RUNNING'})")
    if machines_only:
        console = "machines only (--machines-only): no console and no agents of the lab's own"
    lines = [f"lab {report['name']!r}: {report['status']}; {console}; "
             f"budget {b['cpu_mcpu']} m / {b['memory_bytes'] // 2**20} MiB of {b['host_cores']} cores / "
             f"{b['host_memory_bytes'] // 2**20} MiB",
             f"host PSI (/proc/pressure): cpu some avg10 {_pct(report['host_psi_cpu_some_avg10'])} %, memory "
             f"{_pct(report['host_psi_memory_some_avg10'])} % — the whole machine; a node's own PSI below",
             f"{'node':<14} {'address':<11} {'engine':<16} {'agent':<20} {'cpu used/cap':>14} {'mem used/limit':>16} "
             f"{'throttled':>10} {'PSI cpu':>8} {'PSI mem':>8}"]
    for n in report["nodes"]:
        e, a = n["engine"], n["agent"]
        engine = f"up {e['pid']} ({e['containers']})" if e["answers"] else ("no answer" if e["alive"] else "DOWN")
        link = (a.get("link") or {}).get("connected") if isinstance(a.get("link"), dict) else None
        agent = (f"{a['health']} {a['pid']}{' linked' if link else ''}" if a["alive"] else
                 "a stack's" if machines_only else "DOWN")
        used = "n/a" if n["cpu_usage_mcpu"] is None else f"{n['cpu_usage_mcpu']}"
        mem = "n/a" if n["memory_usage_bytes"] is None else f"{n['memory_usage_bytes'] // 2**20}"
        cpu = f"{used}/{n['cpu_mcpu']} m"
        lines.append(f"{n['name']:<14} {n['address']:<11} {engine:<16} {agent:<20} {cpu:>14} "
                     f"{mem + '/' + str(n['memory_bytes'] // 2**20) + ' MiB':>16} {str(n['nr_throttled']):>10} "
                     f"{_pct(n['psi_cpu_some_avg10']):>8} {_pct(n['psi_memory_some_avg10']):>8}")
    for n in report["nodes"]:
        k = n.get("kubelet")
        if k:
            shown = f"{k['health']} {k['pid']}" if k["alive"] else "DOWN"
            lines.append(f"{n['name']:<14} kubelet double {shown} on {k['url']}")
    swarm = [n for n in report["nodes"] if "swarm" in n]
    if swarm:
        lines.append(f"swarm (as the managers see it): {'node':<14} {'role':<8} {'state':<8} {'availability':<12} "
                     f"{'advertises':<16} id")
        for n in swarm:
            s = n["swarm"]
            role = (s.get("role") or "?") + ("*" if s.get("leader") else "")
            lines.append(f"{'':<31}{n['name']:<14} {role:<8} {s.get('state', '?'):<8} "
                         f"{s.get('availability', '?'):<12} {str(s.get('advertise') or '?'):<16} {s.get('id', '')[:12]}")
    if machines_only:
        lines.append(f"deploy a stack onto these machines: {report.get('deploy')}, with the values under "
                     "substitutions, \"stacks …\" (docs/lab.md, \"The stacks on the lab\")")
    env = report["console"].get("env") or {}
    if env and not machines_only:   # --machines-only: the lab has no console (nor its database)
        cluster = report.get("cluster", report["name"])
        # Kubernetes mode: Kalena takes batch from the watch (`kalena batch submit` is refused there)
        example = (f"`kalena batch list {cluster}`; batch is created with kubectl" if report.get("orchestrator") ==
                   "kubernetes" else f"`kalena batch submit {cluster} …`")
        lines.append(f"the lab's console from the command line ({example}; a REST token: `kalena api-token "
                     f"create USER --name NAME`): "
                     "env -u DATABASE_URL -u REDIS_URL " + " ".join(f"{k}={v}" for k, v in sorted(env.items())))
    lines.append("substitutions:")
    lines += [f"  {s}" for s in report["substitutions"]]
    return "\n".join(lines)


def lab_status_kubernetes(state: dict[str, Any], *, sample_s: float = 0.5) -> dict[str, Any]:
    """:func:`lab_status` for the Kubernetes mode: the API server, each control-plane process
    (alive, its readiness and liveness probes run once, as the kubelet would), each node's kubelet
    double, and the substitutions made for a real cluster."""
    from agents.lab.kubernetes import kubernetes_substitutions, probe_once
    from agents.lab.manifests import Probe

    report = lab_status(state, sample_s=sample_s)
    report["orchestrator"] = "kubernetes"
    report["kubeconfig"] = state["kubeconfig"]
    report["apiserver"] = {"url": state["apiserver"]["url"], "alive": alive(state["apiserver"].get("process")),
                           "pid": (state["apiserver"].get("process") or {}).get("pid")}
    processes = []
    for record in state.get("processes", []):
        probes = {}
        if alive(record.get("process")):
            for which in ("readiness", "liveness"):
                spec = (record.get("probes") or {}).get(which)
                if spec:
                    ok, detail = probe_once(Probe(**{**spec, "argv": tuple(spec.get("argv") or ())}), record["env"])
                    probes[which] = {"ok": ok, "detail": detail}
        processes.append({"name": record["name"], "workload": record["workload"], "container": record["container"],
                          "address": record["address"], "pid": (record.get("process") or {}).get("pid"),
                          "alive": alive(record.get("process")) or record.get("process") is None,
                          "completed": record.get("process") is None, "probes": probes})
    report["processes"] = processes
    for node in report["nodes"]:
        node["kubelet"] = node.get("kubelet") or {"alive": False, "pid": None, "url": None, "health": None}
    report["substitutions"] = kubernetes_substitutions(state)
    return report


def format_status_kubernetes(report: dict[str, Any]) -> str:
    """The human-readable status of a Kubernetes-mode lab."""
    head = [f"API server {report['apiserver']['url']} "
            f"({'alive, pid ' + str(report['apiserver']['pid']) if report['apiserver']['alive'] else 'NOT RUNNING'}); "
            f"kubectl: KUBECONFIG={report['kubeconfig']}",
            "control plane (processes from the applied objects):"]
    for p in report["processes"]:
        if p["completed"]:
            head.append(f"  {p['workload']:<36} completed (Job)")
            continue
        probes = ", ".join(f"{k} {'ok' if v['ok'] else 'FAILING: ' + v['detail']}" for k, v in p["probes"].items())
        head.append(f"  {p['workload']:<36} {p['address']:<15} "
                    f"{'pid ' + str(p['pid']) if p['alive'] else 'NOT RUNNING'}{'; ' + probes if probes else ''}")
    head += [f"  kubelet double of {n['name']}: {n['kubelet']['url']} "
             f"{'pid ' + str(n['kubelet']['pid']) if n['kubelet']['alive'] else 'NOT RUNNING'}" for n in report["nodes"]]
    body = format_status(report).splitlines()
    # the Docker mode's console line does not apply: the console is one of the processes above
    return "\n".join([f"lab {report['name']!r}: {report['status']} (Kubernetes)", *head, *body[1:]])
