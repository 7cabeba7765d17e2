"""Private Docker engines as separate nodes on one host, for the end-to-end tests and
``kalena bench docker`` (TESTBED "Docker Engine and Swarm").

Engines on one host share cpus, PSI and meminfo, so each one gets its own ``--cgroup-parent``
(``/kalena-<tag>-<node>``: every container's cpu, memory and cpuset groups live below it, so an
agent's ``--node-cgroup`` is exactly its node) and its own cpuset (written into the parent's
``cpuset.cpus`` before the engine starts; runc copies it into each container's group), its own
socket, data root, exec root and pidfile under ``root``. :meth:`PrivateEngines.stop` stops each
engine by its pid and removes its cgroups; the ``kalena/busybox:test`` image is imported into
each engine from busybox-static (no registry is reachable here).

This code plays the part of the machines and their runtimes, not Kalena's.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from agents.errors import FacilityUnavailable

DOCKERD = "/usr/sbin/dockerd"
BUSYBOX = "/bin/busybox"
IMAGE = "kalena/busybox:test"
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass
class PrivateEngine:
    """One engine: ``node`` its node name, ``url`` its socket, ``cgroup_parent`` (``/kalena-…``)."""

    node: str
    directory: Path
    cgroup_parent: str
    cpus: str
    memory: str = ""
    process: subprocess.Popen | None = None

    @property
    def socket(self) -> Path:
        return self.directory / "docker.sock"

    @property
    def url(self) -> str:
        return f"unix://{self.socket}"

    @property
    def node_cgroup(self) -> str:
        """The agent's ``--node-cgroup`` (relative to each hierarchy's root)."""
        return self.cgroup_parent.lstrip("/")

    def client(self, timeout_s: int = 60):  # type: ignore[no-untyped-def]
        import docker

        return docker.DockerClient(base_url=self.url, timeout=timeout_s)


def busybox_tar() -> bytes:
    """A rootfs tar of busybox-static with one symlink per applet."""
    applets = subprocess.run([BUSYBOX, "--list"], capture_output=True, text=True, check=True).stdout.split()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name in ("bin", "tmp", "dev", "dev/shm"):
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if name == "tmp" else 0o755
            tar.addfile(info)
        tar.add(BUSYBOX, arcname="bin/busybox")
        for applet in applets:
            if applet == "busybox":
                continue
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
    return buf.getvalue()


@dataclass
class PrivateEngines:
    """Start ``nodes`` engines under ``root`` (see module doc); a context manager.

    Args:
        root: a directory of the worktree (``var/…``); one sub-directory per engine.
        nodes: node names; ``cpus``: one cpuset per node (``"0"``, ``"1"``), ``None`` = all.
        tag: distinguishes this run's cgroup parents (``/kalena-<tag>-<node>``).

    Raises (at :meth:`start`):
        FacilityUnavailable: dockerd or busybox missing, or an engine did not answer.
    """

    root: Path
    nodes: tuple[str, ...]
    cpus: tuple[str | None, ...] = ()
    memory: str = ""
    tag: str = "e2e"
    engines: list[PrivateEngine] = field(default_factory=list)
    #: node name → Swarm node id once :meth:`swarm_form` joined them
    swarm_ids: dict[str, str] = field(default_factory=dict)

    def __enter__(self) -> PrivateEngines:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> PrivateEngines:
        for path in (DOCKERD, BUSYBOX):
            if not os.path.exists(path):
                raise FacilityUnavailable("private Docker engine", path, "missing (apt-get install docker.io busybox-static)")
        self.root = Path(self.root).resolve()
        tar = busybox_tar()
        for i, node in enumerate(self.nodes):
            cpus = self.cpus[i] if i < len(self.cpus) else None
            directory = self.root / node
            shutil.rmtree(directory / "exec", ignore_errors=True)
            directory.mkdir(parents=True, exist_ok=True)
            engine = PrivateEngine(node=node, directory=directory, cgroup_parent=f"/kalena-{self.tag}-{node}",
                                   cpus=cpus or "", memory=self.memory)
            self._cpuset(engine)
            self.engines.append(engine)
            self.launch(engine)
            self._import(engine, tar)
        return self

    def _cpuset(self, engine: PrivateEngine) -> None:
        # the node's groups exist before any container (as kubepods does on a kubelet node): the
        # agent reads the node's working set and PSI there from the start
        for hierarchy in ("cpu", "cpuacct", "memory", "unified"):
            if (CGROUP_ROOT / hierarchy).is_dir():
                (CGROUP_ROOT / hierarchy / engine.node_cgroup).mkdir(exist_ok=True)
        base = CGROUP_ROOT / "cpuset"
        if not base.is_dir():
            return
        group = base / engine.node_cgroup
        group.mkdir(exist_ok=True)
        cpus = engine.cpus or (base / "cpuset.cpus").read_text().strip()
        (group / "cpuset.mems").write_text((base / "cpuset.mems").read_text().strip())
        (group / "cpuset.cpus").write_text(cpus)

    def launch(self, engine: PrivateEngine) -> None:
        """Start (or restart) ``engine``'s dockerd and wait until it answers (the engine's cpuset
        and memory become its labels ``kalena.naughtian.io/allocatable-cpu|memory``)."""
        d = engine.directory
        if engine.socket.exists():
            engine.socket.unlink()
        log = open(d / "dockerd.log", "ab")  # noqa: SIM115 - closed with the process
        engine.process = subprocess.Popen(
            [DOCKERD, "--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver=overlay2",
             f"--host={engine.url}", f"--data-root={d / 'data'}", f"--exec-root={d / 'exec'}",
             f"--pidfile={d / 'pid'}", f"--cgroup-parent={engine.cgroup_parent}",
             # own containerd namespaces: engines joined into one Swarm must not see each other's tasks
             f"--containerd-namespace=kalena-{engine.cgroup_parent.lstrip('/')}",
             f"--containerd-plugins-namespace=kalena-{engine.cgroup_parent.lstrip('/')}p", "--exec-opt",
             "native.cgroupdriver=cgroupfs", "--shutdown-timeout=2", *self._labels(engine)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if engine.process.poll() is not None:
                raise FacilityUnavailable("private Docker engine", engine.url, f"dockerd exited (see {d / 'dockerd.log'})")
            try:
                engine.client(timeout_s=5).ping()
                return
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.2)
        raise FacilityUnavailable("private Docker engine", engine.url, f"no answer within 60 s (see {d / 'dockerd.log'})")

    @staticmethod
    def _labels(engine: PrivateEngine) -> list[str]:
        """The engine's share of the host as labels the orchestrator reads (its node's allocatable)."""
        out = [f"--label=kalena.naughtian.io/node={engine.node}"]  # its name in a Swarm, rejoins included
        if engine.cpus:
            count = sum(len(range(int(a), int(b or a) + 1)) for a, _, b in
                        (part.partition("-") for part in engine.cpus.split(",")))
            out.append(f"--label=kalena.naughtian.io/allocatable-cpu={count}")
        if engine.memory:
            out.append(f"--label=kalena.naughtian.io/allocatable-memory={engine.memory}")
        return out

    def _import(self, engine: PrivateEngine, tar: bytes) -> None:
        client = engine.client()
        try:
            client.images.get(IMAGE)
        except Exception:  # noqa: BLE001 - not imported yet
            client.api.import_image_from_data(tar, repository=IMAGE.split(":")[0], tag=IMAGE.split(":")[1],
                                              changes=['CMD ["/bin/sh"]'])
        finally:
            client.close()

    def swarm_form(self, addresses: list[tuple[str, int]], *, managers: int = 1) -> dict[str, str]:
        """Join the engines into one Swarm: ``addresses[i]`` (loopback address, port) is engine
        *i*'s advertise and listen address; the first ``managers`` engines are managers (the
        first initialises). Each Swarm node gets the label ``kalena.naughtian.io/node`` = its
        engine's node name (Kalena names Swarm nodes by it, never by hostname). Returns node
        name → Swarm node id.

        Raises:
            docker.errors.APIError: an engine refused to init or join.
        """
        first = self.engines[0].client()
        host, port = addresses[0]
        first.swarm.init(advertise_addr=f"{host}:{port}", listen_addr=f"{host}:{port}")
        first.swarm.reload()
        tokens = first.swarm.attrs["JoinTokens"]
        ids = {self.engines[0].node: first.info()["Swarm"]["NodeID"]}
        for i, engine in enumerate(self.engines[1:], start=1):
            client = engine.client()
            address = f"{addresses[i][0]}:{addresses[i][1]}"
            client.swarm.join(remote_addrs=[f"{host}:{port}"], join_token=tokens["Manager" if i < managers else "Worker"],
                              advertise_addr=address, listen_addr=address)
            ids[engine.node] = client.info()["Swarm"]["NodeID"]
            client.close()
        for name, node_id in ids.items():
            node = first.nodes.get(node_id)
            spec = dict(node.attrs["Spec"])
            spec["Labels"] = {**(spec.get("Labels") or {}), "kalena.naughtian.io/node": name}
            node.update(spec)
        first.close()
        self.swarm_ids = ids
        return ids

    def swarm_leave(self) -> None:
        """Remove every service (through the first engine that answers as a manager), then make
        every engine that answers leave its swarm (workers first)."""
        for engine in self.engines:
            try:
                client = engine.client(timeout_s=10)
                for service in client.services.list():
                    service.remove()
                client.close()
                break
            except Exception:  # noqa: BLE001 - not a manager, or down: the next one
                continue
        for engine in reversed(self.engines):
            if engine.process is None or engine.process.poll() is not None:
                continue
            try:
                client = engine.client(timeout_s=20)
                client.swarm.leave(force=True)
                client.close()
            except Exception:  # noqa: BLE001 - not in a swarm
                pass

    def kill(self, engine: PrivateEngine) -> None:
        """Stop ``engine``'s dockerd (SIGTERM, then SIGKILL) — without live-restore its
        containers die with it."""
        process = engine.process
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def stop(self) -> None:
        """Remove every container, stop every engine, remove their cgroups."""
        for engine in self.engines:
            if engine.process is not None and engine.process.poll() is None:
                try:
                    client = engine.client(timeout_s=20)
                    for container in client.containers.list(all=True):
                        container.remove(force=True)
                    client.close()
                except Exception:  # noqa: BLE001 - stopping anyway
                    pass
            self.kill(engine)
        for engine in self.engines:
            remove_cgroups(engine.node_cgroup)
            unmount_under(engine.directory)

    def cgroup_leftovers(self) -> list[str]:
        """The engines' cgroups still present in any hierarchy (empty after :meth:`stop`)."""
        return [str(top / e.node_cgroup) for e in self.engines for top in CGROUP_ROOT.iterdir()
                if (top / e.node_cgroup).is_dir()]


def mounts_under(directory: Path, proc_root: str = "/proc") -> list[str]:
    """Mount points at or below ``directory`` (``/proc/self/mounts``)."""
    prefix = str(Path(directory).resolve())
    points = [line.split()[1] for line in Path(f"{proc_root}/self/mounts").read_text().splitlines()]
    return [p for p in points if p == prefix or p.startswith(prefix + "/")]


def unmount_under(directory: Path) -> list[str]:
    """Unmount what a stopped engine left under ``directory`` (a Swarm node's network namespaces
    stay mounted under its exec root after it left the swarm), deepest first; returns what is
    still mounted."""
    for point in sorted(mounts_under(directory), key=len, reverse=True):
        subprocess.run(["umount", point], capture_output=True, check=False)
    return mounts_under(directory)


def remove_cgroups(relative: str) -> None:
    """rmdir ``relative`` in every hierarchy, deepest first (a group still emptying is retried)."""
    for top in CGROUP_ROOT.iterdir():
        base = top / relative
        if not base.is_dir():
            continue
        for path in sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True) + [base]:
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def agent_command(*, node: str, url: str, node_cgroup: str, capacity: str, link_url: str, token_file: Path,
                  state_dir: Path, actions_log: Path | None = None) -> list[str]:
    """``kalena-agent run`` for one engine's node: Docker discovery on its socket, its own
    ``--capacity`` and node cgroup, 1 s sampling, T_min 0 (tests and benchmarks run for
    seconds, not the production 120 s)."""
    import sys

    argv = [sys.executable, "-m", "agents.cli", "run", "--node-name", node, "--discovery", "docker",
            "--docker-host", url, "--capacity", capacity, "--node-cgroup", node_cgroup,
            "--sampling-interval-s", "1", "--mitigation-interval-s", "0.5", "--discovery-interval-s", "1",
            "--min-run-time-s", "0", "--link-url", link_url, "--link-token-file", str(token_file),
            "--state-dir", str(state_dir)]
    if actions_log is not None:
        argv += ["--actions-log", str(actions_log)]
    return argv
