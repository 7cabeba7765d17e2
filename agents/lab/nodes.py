"""One lab node's machinery: its cgroup subtree, its private Docker engine and its agent's
command line (TESTBED "Lab building blocks").

* cgroups: ``<hierarchy>/kalena-<lab>/<node>`` in the v1 ``cpu`` (``cpu.cfs_quota_us`` over a
  100 ms period = the node's cpu), ``memory`` (``memory.limit_in_bytes`` = the node's memory),
  ``cpuacct`` and ``cpuset`` (all the machine's cpus: the quota, not a cpuset, is the capacity)
  hierarchies, and in the v2 ``unified`` tree, whose per-group ``cpu.pressure`` /
  ``memory.pressure`` are the node's PSI.
* engine: ``dockerd`` with the node's own socket, data root, exec root, pidfile and containerd
  namespaces, ``--cgroup-parent=/kalena-<lab>/<node>`` (every container it runs lands in the
  node's subtree in every hierarchy) and the labels that give the node its allocatable.

This code plays the machines and their runtimes, not Kalena.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from agents.bench.dockerd import BUSYBOX, DOCKERD, IMAGE, busybox_tar, remove_cgroups
from agents.lab.budget import CFS_PERIOD_US, NodePlan
from agents.lab.errors import LabError

CGROUP_ROOT = Path("/sys/fs/cgroup")
HIERARCHIES = ("cpu", "cpuacct", "memory", "cpuset", "unified")
AGENT_HEALTH_PORT = 9640


def preflight_docker() -> None:
    """Raises LabError when dockerd or busybox-static is missing (nothing is started)."""
    missing = [p for p in (DOCKERD, BUSYBOX) if not Path(p).exists()]
    if missing:
        raise LabError(f"{', '.join(missing)} missing: the lab's nodes need a Docker engine and busybox-static",
                       source="kalena lab up", field="docker",
                       accepted="apt-get install docker.io busybox-static (scripts/services up installs them)")


def cgroups_create(node: NodePlan, *, lab_root: str, root: Path = CGROUP_ROOT) -> list[str]:
    """Make the node's subtree and set its capacity; returns the groups made (absolute paths).

    Raises:
        LabError: the v1 cpu or memory hierarchy is missing or not writable (the path says which).
    """
    made: list[str] = []
    for hierarchy in HIERARCHIES:
        top = root / hierarchy
        if not top.is_dir():
            if hierarchy in ("cpu", "memory"):
                raise LabError("no cgroup v1 hierarchy there", source=str(top), field="cgroups",
                               accepted="a host with writable cgroup v1 cpu and memory hierarchies")
            continue
        for group in (top / lab_root, top / node.cgroup):
            try:
                group.mkdir(exist_ok=True)
            except OSError as exc:
                raise LabError(f"cannot create the node's group: {exc.strerror}", source=str(group),
                               field="cgroups") from None
            if hierarchy == "cpuset":  # a cpuset group takes no task until its cpus and mems are set
                for name in ("cpuset.cpus", "cpuset.mems"):
                    (group / name).write_text((top / name).read_text().strip())
        made.append(str(top / node.cgroup))
    cpu = root / "cpu" / node.cgroup
    _write(cpu / "cpu.cfs_period_us", CFS_PERIOD_US)
    _write(cpu / "cpu.cfs_quota_us", node.cpu_quota_us)
    _write(root / "memory" / node.cgroup / "memory.limit_in_bytes", node.memory_bytes)
    return made


def _write(path: Path, value: int) -> None:
    try:
        path.write_text(str(value))
    except OSError as exc:
        raise LabError(f"cannot write {value}: {exc.strerror}", source=str(path), field="cgroups") from None


def cgroups_remove(lab_root: str) -> None:
    """Remove the lab's groups in every hierarchy, deepest first."""
    remove_cgroups(lab_root)


def cgroups_left(lab_root: str, root: Path = CGROUP_ROOT) -> list[str]:
    """The lab's groups still present in any hierarchy."""
    return [str(top / lab_root) for top in root.iterdir() if (top / lab_root).is_dir()]


def engine_argv(node: NodePlan, directory: Path) -> list[str]:
    """``dockerd`` for ``node`` (see module doc)."""
    namespace = f"kalena-{node.name}"
    return [DOCKERD, "--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver=overlay2",
            f"--host=unix://{directory / 'docker.sock'}", f"--data-root={directory / 'data'}",
            f"--exec-root={directory / 'exec'}", f"--pidfile={directory / 'dockerd.pid'}",
            f"--cgroup-parent=/{node.cgroup}", "--exec-opt", "native.cgroupdriver=cgroupfs",
            f"--containerd-namespace={namespace}", f"--containerd-plugins-namespace={namespace}p",
            "--shutdown-timeout=2",
            f"--label=kalena.naughtian.io/allocatable-cpu={node.cpu_mcpu}m",
            f"--label=kalena.naughtian.io/allocatable-memory={node.memory_bytes}",
            f"--label=kalena.naughtian.io/lab-node={node.name}",
            f"--label=kalena.naughtian.io/node={node.name}"]  # its Swarm node name, a rejoin included


def engine_launch(node: NodePlan, directory: Path) -> subprocess.Popen:
    """Start the node's engine (its log: ``<directory>/dockerd.log``); :func:`engine_ready` waits for it.

    Raises:
        LabError: the node's directory cannot be made or its engine cannot be started.
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "docker.sock").unlink(missing_ok=True)
        with open(directory / "dockerd.log", "ab") as log:
            return subprocess.Popen(engine_argv(node, directory), stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        raise LabError(f"cannot start the node's engine: {exc.strerror or exc}", source=str(exc.filename or directory),
                       field=f"node {node.name}") from None


def engine_ready(proc: subprocess.Popen, node: NodePlan, directory: Path, *, timeout_s: float = 60.0) -> None:
    """Wait until the engine answers, then import ``kalena/busybox:test`` (no registry here:
    busybox-static with one symlink per applet).

    Raises:
        LabError: the engine exited or did not answer within ``timeout_s`` (naming its log).
    """
    url = f"unix://{directory / 'docker.sock'}"
    end = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise LabError(f"dockerd exited with {proc.returncode} (see {directory / 'dockerd.log'})",
                           source=f"node {node.name}", field="engine")
        try:
            client = engine_client(url, timeout_s=5)
            client.ping()
            break
        except Exception:  # noqa: BLE001 - not up yet
            if time.monotonic() > end:
                raise LabError(f"no answer within {timeout_s:.0f} s (see {directory / 'dockerd.log'})",
                               source=f"node {node.name}", field="engine") from None
            time.sleep(0.2)
    try:
        client.api.import_image_from_data(busybox_tar(), repository=IMAGE.split(":")[0], tag=IMAGE.split(":")[1],
                                          changes=['CMD ["/bin/sh"]'])
    finally:
        client.close()


def engine_client(url: str, *, timeout_s: float = 20.0):  # type: ignore[no-untyped-def]
    import docker

    return docker.DockerClient(base_url=url, timeout=timeout_s)


def engine_clear(url: str) -> int:
    """Remove every container of the engine at ``url`` (force); returns how many."""
    client = engine_client(url)
    try:
        from docker.errors import NotFound

        # a container removed between the list and its inspect is left out (Engine.containers)
        containers = client.containers.list(all=True, ignore_removed=True)
        for container in containers:
            try:
                container.remove(force=True)
            except NotFound:
                pass
        return len(containers)
    finally:
        client.close()


def shims_of(namespace: str, proc_root: str = "/proc") -> list[int]:
    """Pids of containerd shims serving ``namespace`` (left behind when an engine died hard)."""
    out = []
    for entry in Path(proc_root).iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and namespace.encode() in argv:
            out.append(int(entry.name))
    return out


def mounts_under(directory: Path, proc_root: str = "/proc") -> list[str]:
    """Mount points at or below ``directory`` (overlay layers of an engine that did not clean up)."""
    prefix = str(directory.resolve())
    points = [line.split()[1] for line in Path(f"{proc_root}/self/mounts").read_text().splitlines()]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]


def cgroup_entry(rel: str, root: Path = CGROUP_ROOT) -> Callable[[], None]:
    """A ``preexec_fn`` that puts the child process into group ``rel`` (relative to each
    hierarchy's root) of every hierarchy of :data:`HIERARCHIES` that has it, before it execs — as
    a container runtime starts a container's process in its pod's group. Entering before exec
    matters on cgroup v1: a process moved later keeps its pages charged to its old group
    (``memory.move_charge_at_immigrate`` is off by default), so its memory would never show in
    the pod's or the node's working set.

    Raises:
        LabError: ``rel`` exists in no memory hierarchy (the pod's group was never made).
    """
    files = [str(root / h / rel / "cgroup.procs") for h in HIERARCHIES if (root / h / rel).is_dir()]
    if str(root / "memory" / rel / "cgroup.procs") not in files:
        raise LabError("no such group in the memory hierarchy", source=str(root / "memory" / rel), field="cgroup",
                       accepted="a pod group made by the node's kubelet double")

    def enter() -> None:
        pid = str(os.getpid())
        for name in files:
            with open(name, "w") as f:
                f.write(pid)
    return enter


def agent_argv(node: NodePlan, *, directory: Path, link_url: str, token_file: Path,
               sampling_interval_s: float) -> list[str]:
    """``kalena-agent run`` for ``node``: Docker discovery and Docker stats on the node's engine,
    the node's capacity and cgroup, the console's link, health on the node's own address."""
    mib = node.memory_bytes // 2**20
    return [sys.executable, "-m", "agents.cli", "run", "--node-name", node.name, "--discovery", "docker",
            "--docker-host", f"unix://{directory / 'docker.sock'}", "--telemetry", "docker",
            "--capacity", f"cpu={node.cpu_mcpu}m,memory={mib}Mi", "--node-cgroup", node.cgroup,
            "--sampling-interval-s", f"{sampling_interval_s:g}", "--link-url", link_url,
            "--link-token-file", str(token_file), "--state-dir", str(directory / "agent"),
            "--health-address", f"{node.address}:{AGENT_HEALTH_PORT}"]
