"""``kalena lab up`` and ``down``: start a planned lab piece by piece, recording each piece in
the state file before the next, and stop it leaving nothing behind (see the package README).

The console side (its database, the live cluster, the agents' tokens) is Kalena's web stack,
which this package does not import: :func:`lab_up` takes a :class:`ConsoleSide` that does it.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from agents.lab import kubelets
from agents.lab import nodes as machinery
from agents.lab import swarm
from agents.lab.budget import LabPlan, NodePlan
from agents.lab.errors import LabError, LabRunning
from agents.lab.kubelets import KUBELET_PORT
from agents.lab.state import alive, process_ref, state_read, state_write, stop


class ConsoleSide(Protocol):
    """What the lab needs from the control plane it starts."""

    def prepare(self, *, cluster: str) -> None:
        """Migrate the console's database and create the (empty) live cluster ``cluster``."""

    def serve_env(self) -> dict[str, str]:
        """The environment ``kalena serve`` runs with (database, orchestrator, engine list)."""

    def tokens(self, *, cluster: str, nodes: list[str], timeout_s: float) -> dict[str, str]:
        """One agent token per node, once the console's watch has registered each node."""


def port_free(address: str, port: int) -> bool:
    """Whether ``address:port`` can be bound now (as a server would, with SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((address, port))
        except OSError:
            return False
    return True


def preflight(plan: LabPlan, *, state_dir: Path, console_port: int | None, orchestrator: str = "docker",
              with_kubelets: bool = False) -> None:
    """Refuse before anything starts: a lab already recorded in ``state_dir``, the lab's cgroups
    present (another lab of that name, or leftovers), Docker missing, a port in use.
    ``console_port`` None: the console does not run on the subnet's first address (Kubernetes mode
    runs it in the control plane's pods, whose ports the caller checks).

    Raises:
        LabRunning, LabError.
    """
    recorded = state_read(state_dir)
    if recorded is not None:
        raise LabRunning(f"lab {recorded.get('name')!r} is recorded as up ({len(recorded.get('nodes', []))} nodes)",
                         source=str(state_dir / "lab.json"), field="kalena lab up",
                         accepted="`kalena lab down` first (or `kalena lab status` to look at it)")
    left = machinery.cgroups_left(plan.root)
    if left:
        raise LabError(f"the lab's cgroups exist already ({', '.join(left[:3])})", source="kalena lab up",
                       field="--name", accepted="another lab name, or `kalena lab down` of the lab that made them")
    machinery.preflight_docker()
    host = plan.console_address
    busy = [f"{host}:{console_port} (console)"] if console_port is not None and not port_free(host, console_port) else []
    busy += [f"{n.address}:{machinery.AGENT_HEALTH_PORT} (agent of {n.name})" for n in plan.nodes
             if not port_free(n.address, machinery.AGENT_HEALTH_PORT)]
    busy += [f"{n.address}:{KUBELET_PORT} (kubelet of {n.name})" for n in plan.nodes
             if with_kubelets and not port_free(n.address, KUBELET_PORT)]
    if orchestrator == "swarm":
        busy += [f"{n.address}:{swarm.SWARM_PORT} (swarm of {n.name})" for n in plan.nodes
                 if not port_free(n.address, swarm.SWARM_PORT)]
    if busy == [f"{host}:{console_port} (console)"]:
        raise LabError(f"port(s) in use: {busy[0]}", source="kalena lab up", field="--console-port",
                       accepted="free ports (stop what listens there, or choose another --console-port)")
    if busy:  # a node's port: the subnet's addresses are taken (another lab on it?)
        raise LabError(f"port(s) in use: {', '.join(busy)}", source="kalena lab up", field="--subnet",
                       accepted="free ports (stop what listens there, or choose another --subnet)")


def _node_record(node: NodePlan, state_dir: Path) -> dict[str, Any]:
    directory = state_dir / "nodes" / node.name
    return {"name": node.name, "address": node.address, "cpu_mcpu": node.cpu_mcpu,
            "memory_bytes": node.memory_bytes, "cgroup": node.cgroup, "directory": str(directory),
            "socket": str(directory / "docker.sock"), "engine": None, "agent": None,
            "health_url": f"http://{node.address}:{machinery.AGENT_HEALTH_PORT}/healthz",
            "containerd_namespace": f"kalena-{node.name}", "kubelet": None, "kubelet_url": None}


ORCHESTRATORS = ("docker", "swarm")


def lab_up(plan: LabPlan, *, state_dir: Path, console: ConsoleSide, console_port: int,
           sampling_interval_s: float = 2.0, say: Callable[[str], None] = print, orchestrator: str = "docker",
           managers: int = 1, kube_api_url: str | None = None, kube_token_file: str | None = None,
           machines_only: bool = False) -> dict[str, Any]:
    """Start the lab ``plan`` describes (see the package README); returns the state record.
    With ``kube_api_url`` (a Kubernetes API server the lab runs) each node also gets its kubelet
    double (:mod:`agents.lab.kubelets`), started once its engine answers.

    ``orchestrator``: ``docker`` (each node's engine standalone) or ``swarm`` (the engines joined
    into one Swarm, the first ``managers`` nodes managers: :mod:`agents.lab.swarm`).
    ``machines_only``: stop there — no console and no agents of the lab's own, so a stack
    (deploy/compose, deploy/swarm) brings Kalena onto the nodes itself.

    Raises:
        LabRunning, LabError: refused before anything started (:func:`preflight`; nothing is
            created, not even ``state_dir``), or a piece failed — then everything started so far
            was stopped again (:func:`lab_down`).
    """
    if orchestrator not in ORCHESTRATORS:
        raise LabError(f"unknown orchestrator {orchestrator!r}", source="kalena lab up", field="--orchestrator",
                       accepted=", ".join(ORCHESTRATORS))
    if orchestrator == "swarm" and not 1 <= managers <= len(plan.nodes):
        raise LabError(f"{managers} manager(s) for {len(plan.nodes)} node(s)", source="kalena lab up",
                       field="--managers", accepted=f"1 … {len(plan.nodes)}")
    state_dir = Path(state_dir).resolve()
    preflight(plan, state_dir=state_dir, console_port=console_port, orchestrator=orchestrator,
              with_kubelets=bool(kube_api_url))
    state_dir.mkdir(parents=True, exist_ok=True)   # only once nothing refuses: a refused up leaves nothing
    logs = state_dir / "logs"
    logs.mkdir(exist_ok=True)
    host = plan.console_address
    state: dict[str, Any] = {
        "name": plan.name, "cgroup_root": plan.root, "status": "starting", "started_s": time.time(),
        "budget": {"cpu_mcpu": plan.cpu_budget_mcpu, "memory_bytes": plan.memory_budget_bytes,
                   "host_cores": plan.host_cores, "host_memory_bytes": plan.host_memory_bytes},
        "console": {"url": f"http://{host}:{console_port}/", "address": host, "port": console_port, "process": None,
                    "log": str(logs / "console.log"), "link_url": f"ws://{host}:{console_port}/agent/v1/ws"},
        "nodes": [_node_record(n, state_dir) for n in plan.nodes], "logs": str(logs), "orchestrator": orchestrator,
        "sampling_interval_s": sampling_interval_s, "processes": [], "machines_only": machines_only}
    state["console"]["env"] = {k: v for k, v in console.serve_env().items()
                               if k in ("KALENA_DB_PATH", "KALENA_ORCHESTRATOR", "KALENA_DOCKER_ENGINES")}
    state_write(state_dir, state)
    try:
        for node, record in zip(plan.nodes, state["nodes"], strict=True):
            machinery.cgroups_create(node, lab_root=plan.root)
            proc = machinery.engine_launch(node, Path(record["directory"]))
            record["engine"] = process_ref(proc.pid)
            state_write(state_dir, state)
            machinery.engine_ready(proc, node, Path(record["directory"]))
            if kube_api_url:
                kubelets.kubelet_launch(record, api_server=kube_api_url, token_file=kube_token_file, logs=logs)
                state_write(state_dir, state)
                kubelets.kubelet_ready(record)
            say(f"kalena lab: node {node.name} up: {node.cpu_mcpu} m, {node.memory_bytes // 2**20} MiB, "
                f"engine {record['socket']}")
        if orchestrator == "swarm":
            state["swarm"] = {"forming": True}
            state_write(state_dir, state)
            state["swarm"] = swarm.swarm_form(state["nodes"], managers=managers, links=state_dir / "swarm-nodes",
                                              say=say)
            state_write(state_dir, state)
        if machines_only:
            state["status"] = "up"
            state_write(state_dir, state)
            return state
        console.prepare(cluster=plan.name)
        env = console.serve_env()
        with open(state["console"]["log"], "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "kalena_web.cli", "serve", "--host", host,
                                     "--port", str(console_port), "--cluster", plan.name], env=env, stdout=log,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        state["console"]["process"] = process_ref(proc.pid)
        state_write(state_dir, state)
        _wait_listening(host, console_port, proc, state["console"]["log"])
        say(f"kalena lab: console on {state['console']['url']}")
        tokens = console.tokens(cluster=plan.name, nodes=[n.name for n in plan.nodes], timeout_s=90.0)
        for node, record in zip(plan.nodes, state["nodes"], strict=True):
            directory = Path(record["directory"])
            token_file = directory / "agent.token"
            token_file.touch(mode=0o600)
            token_file.write_text(tokens[node.name] + "\n")
            argv = machinery.agent_argv(node, directory=directory, link_url=state["console"]["link_url"],
                                        token_file=token_file, sampling_interval_s=sampling_interval_s)
            with open(logs / f"agent-{node.name}.log", "ab") as log:
                agent = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)
            record["agent"] = process_ref(agent.pid)
            record["agent_argv"] = argv   # `kalena lab fault agent-restart` starts it again so
            state_write(state_dir, state)
        for record in state["nodes"]:
            _wait_healthy(record, logs / f"agent-{record['name']}.log")
        state["status"] = "up"
        state_write(state_dir, state)
    except BaseException:
        say("kalena lab: start failed; stopping what was started")
        lab_down(state_dir, say=say)
        raise
    return state


def _wait_listening(host: str, port: int, proc: subprocess.Popen, log: str, timeout_s: float = 90.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise LabError(f"exited with {proc.returncode} before listening (see {log})", source="kalena serve",
                           field="console")
        with socket.socket() as s:
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    raise LabError(f"not listening on {host}:{port} after {timeout_s:.0f} s (see {log})", source="kalena serve",
                   field="console")


def agent_health(record: dict[str, Any], timeout_s: float = 3.0) -> dict[str, Any] | None:
    """The agent's ``/healthz`` body (``status``, ``link``…), or ``None`` when it does not answer."""
    try:
        with urllib.request.urlopen(record["health_url"], timeout=timeout_s) as response:  # noqa: S310 - loopback
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read() or b"{}") | {"http_status": exc.code}
    except (OSError, ValueError):
        return None


def _wait_healthy(record: dict[str, Any], log: Path, timeout_s: float = 90.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if not alive(record["agent"]):
            raise LabError(f"the agent exited (see {log})", source=f"node {record['name']}", field="agent")
        body = agent_health(record)
        if body is not None and body.get("status") == "ok":
            return
        time.sleep(0.3)
    raise LabError(f"the agent's /healthz is not ok after {timeout_s:.0f} s (see {log})",
                   source=f"node {record['name']}", field="agent")


def recorded(state_dir: Path, action: str = "down") -> tuple[Path, dict[str, Any]]:
    """``(resolved state_dir, its record)``.

    Raises:
        LabError: no lab is recorded there.
    """
    state_dir = Path(state_dir).resolve()
    state = state_read(state_dir)
    if state is None:
        raise LabError("no lab is recorded here", source=str(state_dir / "lab.json"), field=f"kalena lab {action}",
                       accepted="the --state-dir a lab was started with, or `kalena lab up`")
    return state_dir, state


def lab_down(state_dir: Path, *, say: Callable[[str], None] = print) -> list[str]:
    """Stop the lab recorded in ``state_dir``: agents, console, every engine's containers, the
    engines, stray shims, mounts, the nodes' cgroups and directories. Returns what is left
    (empty: nothing; then the record is removed — otherwise it stays, so ``down`` can be run again).

    Raises:
        LabError: no lab is recorded there.
    """
    state_dir, state = recorded(state_dir)
    if state.get("orchestrator") != "kubernetes":   # the lab's own processes (the sampler); Kubernetes mode's
        for record in reversed(state.get("processes", [])):   # are stopped by lab_down_kubernetes first
            stop(record.get("process"))
    for record in state["nodes"]:
        stop(record.get("agent"))
        stop(record.get("kubelet"))
    stop(state["console"].get("process"))
    if state.get("swarm"):
        swarm.swarm_leave([r for r in state["nodes"] if alive(r.get("engine"))], say=say)
    for record in state["nodes"]:
        if alive(record.get("engine")):
            try:
                removed = machinery.engine_clear(f"unix://{record['socket']}")
                if removed:
                    say(f"kalena lab: node {record['name']}: {removed} container(s) removed")
            except Exception as exc:  # noqa: BLE001 - the engine is stopped anyway; leftovers are checked below
                say(f"kalena lab: node {record['name']}: could not list its containers ({exc})")
        stop(record.get("engine"), timeout_s=30.0)
        for pid in machinery.shims_of(record["containerd_namespace"]):
            stop(process_ref(pid), timeout_s=5.0)
        for point in sorted(machinery.mounts_under(Path(record["directory"])), key=len, reverse=True):
            subprocess.run(["umount", point], capture_output=True, check=False)
    machinery.cgroups_remove(state["cgroup_root"])
    for record in state["nodes"]:
        if not machinery.mounts_under(Path(record["directory"])):
            shutil.rmtree(record["directory"], ignore_errors=True)
    left = leftovers(state)
    for line in left:
        say(f"kalena lab: left behind: {line}")
    if not left:
        (state_dir / "lab.json").unlink(missing_ok=True)
        shutil.rmtree(state_dir / "nodes", ignore_errors=True)
        shutil.rmtree(state_dir / "swarm-nodes", ignore_errors=True)   # the Swarm's node-ID links
        shutil.rmtree(state_dir / "console", ignore_errors=True)  # the lab's own database: a fresh one each up
    return left


def leftovers(state: dict[str, Any]) -> list[str]:
    """Everything of ``state``'s lab still present: processes, shims, cgroups, mounts, sockets, ports."""
    out = []
    named = [("console", state["console"].get("process"))]
    named += [(r["name"], r.get("process")) for r in state.get("processes", [])]
    named += [(f"{kind} of {r['name']}", r.get(kind)) for r in state["nodes"] for kind in ("engine", "agent", "kubelet")]
    out += [f"{what} (pid {ref['pid']})" for what, ref in named if alive(ref)]
    for r in state["nodes"]:
        out += [f"containerd shim of {r['name']} (pid {pid})" for pid in machinery.shims_of(r["containerd_namespace"])]
        out += [f"mount {p}" for p in machinery.mounts_under(Path(r["directory"]))]
        if Path(r["socket"]).exists():
            out.append(f"socket {r['socket']}")
        if not port_free(r["address"], machinery.AGENT_HEALTH_PORT):
            out.append(f"port {r['address']}:{machinery.AGENT_HEALTH_PORT}")
        if r.get("kubelet_url") and not port_free(r["address"], int(r["kubelet_url"].rsplit(":", 1)[1])):
            out.append(f"port {r['kubelet_url'].split('//', 1)[1]} (kubelet)")
        if state.get("swarm") and not port_free(r["address"], swarm.SWARM_PORT):
            out.append(f"port {r['address']}:{swarm.SWARM_PORT} (swarm)")
    out += [f"cgroup {g}" for g in machinery.cgroups_left(state["cgroup_root"])]
    host = state["console"].get("address", "127.0.0.1")
    if not port_free(host, state["console"]["port"]):
        out.append(f"port {host}:{state['console']['port']}")
    return out
