"""The node's side of the kubelet double: the pods' cgroups and their containers on the node's
own Docker engine (the kubelet's container manager and runtime, for the cgroupfs driver on
cgroup v1).

* QoS groups: ``<node>/kubepods`` (``cpu.shares`` from the node's allocatable cpu), inside it
  ``burstable`` (Σ requests of its pods' cpu, re-written at each admission) and ``besteffort``
  (``cpu.shares`` 2); Guaranteed pods sit directly in ``kubepods``.
* pod group ``…/pod<uid>`` in the ``cpu``, ``cpuacct``, ``memory``, ``cpuset`` and v2 ``unified``
  hierarchies with the pod's ``cpu.shares``, ``cpu.cfs_quota_us`` and ``memory.limit_in_bytes``
  (:mod:`~agents.lab.kubelet.spec`); each container gets ``cgroup_parent=/…/pod<uid>``, so the
  engine (cgroupfs driver) puts it at ``…/pod<uid>/<container id>``, with its own shares, quota,
  memory limit and ``oom_score_adj``.
* containers are named and labelled as dockershim named them (``k8s_<container>_<pod>_<ns>_<uid>_<attempt>``;
  ``io.kubernetes.pod.uid`` …), run with ``init`` (SIGTERM reaches the program), no network.

A host without CAP_SYS_RESOURCE (this development machine) cannot lower ``oom_score_adj``
below 0: there a Guaranteed container gets 0 instead of -997 (still below every Burstable value,
≥ 2, so the OOM killer's order is the kubelet's); :attr:`NodeRuntime.oom_floor` says which.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.lab.kubelet.spec import MIN_SHARES, ContainerPlan, PodPlan, cpu_shares

CGROUP_ROOT = Path("/sys/fs/cgroup")
POD_HIERARCHIES = ("cpu", "cpuacct", "memory", "cpuset", "unified")
CAP_SYS_RESOURCE = 24
LABEL_UID = "io.kubernetes.pod.uid"
LABEL_POD = "io.kubernetes.pod.name"
LABEL_NAMESPACE = "io.kubernetes.pod.namespace"
LABEL_CONTAINER = "io.kubernetes.container.name"
LABEL_ATTEMPT = "io.kubernetes.container.restartCount"


def can_lower_oom_score(proc_status: str = "/proc/self/status") -> bool:
    """Whether this process holds CAP_SYS_RESOURCE (needed to write a negative ``oom_score_adj``)."""
    for line in Path(proc_status).read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    return False


class NodeRuntime:
    """The node's engine and cgroups (module doc).

    Args:
        docker_host: the node's engine, ``unix:///…/docker.sock``.
        node_cgroup: the node's subtree relative to each hierarchy's root (``kalena-lab/lab-1``).
        root: the cgroup mount (``/sys/fs/cgroup``).
    """

    def __init__(self, docker_host: str, node_cgroup: str, *, root: Path = CGROUP_ROOT) -> None:
        import docker

        self.docker = docker.DockerClient(base_url=docker_host, timeout=60)
        self.node_cgroup = node_cgroup.strip("/")
        self.root = root
        self.oom_floor = -1000 if can_lower_oom_score() else 0
        self._inspected: dict[str, tuple[str | None, dict[str, Any]]] = {}   # id → (listed state, inspect)
        self._lock = threading.Lock()   # the sync and the terminating threads share the cache

    # -- cgroups ---------------------------------------------------------------------------------

    def group(self, hierarchy: str, rel: str) -> Path:
        return self.root / hierarchy / rel

    def _make(self, rel: str) -> None:
        for hierarchy in POD_HIERARCHIES:
            top = self.root / hierarchy
            if not top.is_dir():
                continue
            path = top
            for part in rel.split("/"):
                parent, path = path, path / part
                if not path.is_dir():
                    path.mkdir()
                    if hierarchy == "cpuset":  # a cpuset group takes no task until cpus and mems are set
                        for name in ("cpuset.cpus", "cpuset.mems"):
                            (path / name).write_text((parent / name).read_text().strip() or "0")

    def _write(self, hierarchy: str, rel: str, name: str, value: int) -> None:
        (self.group(hierarchy, rel) / name).write_text(str(value))

    @property
    def kubepods(self) -> str:
        return f"{self.node_cgroup}/kubepods"

    def setup(self, allocatable_mcpu: float) -> None:
        """The QoS groups (module doc)."""
        for rel in (self.kubepods, f"{self.kubepods}/burstable", f"{self.kubepods}/besteffort"):
            self._make(rel)
        self._write("cpu", self.kubepods, "cpu.shares", cpu_shares(allocatable_mcpu))
        self._write("cpu", f"{self.kubepods}/besteffort", "cpu.shares", MIN_SHARES)

    def burstable_shares(self, requests_mcpu: float) -> None:
        """``kubepods/burstable``'s ``cpu.shares`` from Σ cpu requests of the Burstable pods."""
        self._write("cpu", f"{self.kubepods}/burstable", "cpu.shares", cpu_shares(requests_mcpu))

    def pod_group_create(self, rel: str, plan: PodPlan) -> None:
        """The pod's group with its shares, quota and memory limit (module doc)."""
        self._make(rel)
        self._write("cpu", rel, "cpu.shares", plan.cpu_shares)
        if plan.cpu_quota_us > 0:
            self._write("cpu", rel, "cpu.cfs_period_us", 100_000)
            self._write("cpu", rel, "cpu.cfs_quota_us", plan.cpu_quota_us)
        if plan.memory_limit_bytes > 0:
            self._write("memory", rel, "memory.limit_in_bytes", plan.memory_limit_bytes)

    def pod_group_remove(self, rel: str) -> None:
        """rmdir the pod's group in every hierarchy, deepest first (a group still emptying is retried)."""
        for hierarchy in POD_HIERARCHIES:
            base = self.group(hierarchy, rel)
            if not base.is_dir():
                continue
            for path in [*sorted((p for p in base.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)), base]:
                for _ in range(20):
                    try:
                        path.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)

    def read_group(self, rel: str) -> dict[str, int]:
        """``cpu_usage_ns`` (cpuacct.usage), ``memory_usage_bytes``, ``inactive_file_bytes`` of a group
        (missing files are left out)."""
        out: dict[str, int] = {}
        try:
            out["cpu_usage_ns"] = int(self.group("cpuacct", rel).joinpath("cpuacct.usage").read_text())
        except (OSError, ValueError):
            pass
        try:
            out["memory_usage_bytes"] = int(self.group("memory", rel).joinpath("memory.usage_in_bytes").read_text())
            for line in self.group("memory", rel).joinpath("memory.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "total_inactive_file":
                    out["inactive_file_bytes"] = int(value)
        except (OSError, ValueError):
            pass
        return out

    def pressure(self, rel: str) -> dict[str, str]:
        """The group's v2 ``cpu.pressure`` / ``memory.pressure`` / ``io.pressure`` texts (where present)."""
        out = {}
        for resource in ("cpu", "memory", "io"):
            try:
                out[resource] = self.group("unified", rel).joinpath(f"{resource}.pressure").read_text()
            except OSError:
                continue
        return out

    # -- containers ------------------------------------------------------------------------------

    def run(self, pod: Mapping[str, Any], rel: str, plan: ContainerPlan, attempt: int) -> str:
        """Create and start one container of ``pod`` in its group; returns the container id.

        Raises:
            docker.errors.DockerException: the engine refused (the caller reports it in the pod's status).
        """
        meta = pod.get("metadata") or {}
        name = f"k8s_{plan.name}_{meta['name']}_{meta.get('namespace', 'default')}_{meta['uid']}_{attempt}"
        kwargs: dict[str, Any] = {
            "name": name, "command": plan.command, "detach": True, "init": True, "network_mode": "none",
            "cgroup_parent": "/" + rel, "cpu_shares": plan.cpu_shares,
            "oom_score_adj": max(self.oom_floor, plan.oom_score_adj), "environment": dict(plan.env),
            "labels": {LABEL_UID: meta["uid"], LABEL_POD: meta["name"], LABEL_NAMESPACE: meta.get("namespace", "default"),
                       LABEL_CONTAINER: plan.name, LABEL_ATTEMPT: str(attempt), "io.kubernetes.docker.type": "container"}}
        if plan.cpu_quota_us > 0:
            kwargs.update(cpu_period=100_000, cpu_quota=plan.cpu_quota_us)
        if plan.memory_limit_bytes > 0:
            kwargs.update(mem_limit=plan.memory_limit_bytes, memswap_limit=plan.memory_limit_bytes)
        try:  # a container left by an earlier attempt of this kubelet under the same name
            self.docker.containers.get(name).remove(force=True)
        except Exception:  # noqa: BLE001 - none
            pass
        container = self.docker.containers.create(plan.image, **kwargs)
        try:
            container.start()
        except Exception:
            container.remove(force=True)
            raise
        return container.id

    def containers(self, uid: str | None = None) -> list[dict[str, Any]]:
        """The pods' containers on the engine (all, or of pod ``uid``), inspected (``docker inspect`` JSON).

        One list call; a container is inspected again only when the list shows its state changed
        (a running container's inspect stays valid while it runs, an exited one's for good)."""
        filters = {"label": f"{LABEL_UID}={uid}" if uid else LABEL_UID}
        out = []
        listed = self.docker.api.containers(all=True, filters=filters)
        for summary in listed:
            with self._lock:
                held = self._inspected.get(summary["Id"])
            if held is not None and held[0] == summary.get("State"):
                out.append(held[1])
                continue
            try:
                inspect = self.docker.api.inspect_container(summary["Id"])
            except Exception:  # noqa: BLE001 - removed between list and inspect
                continue
            with self._lock:
                self._inspected[summary["Id"]] = (summary.get("State"), inspect)
            out.append(inspect)
        if uid is None:   # a full list: forget containers that are gone
            present = {s["Id"] for s in listed}
            with self._lock:
                for gone in [k for k in self._inspected if k not in present]:
                    del self._inspected[gone]
        return out

    def stop(self, container_id: str, grace_s: float) -> None:
        """SIGTERM, then SIGKILL after ``grace_s`` (the engine's stop)."""
        try:
            self.docker.api.stop(container_id, timeout=max(0, int(round(grace_s))))
        except Exception:  # noqa: BLE001 - gone already
            pass

    def remove(self, container_id: str) -> None:
        with self._lock:
            self._inspected.pop(container_id, None)
        try:
            self.docker.api.remove_container(container_id, force=True)
        except Exception:  # noqa: BLE001 - gone already
            pass

    def images(self) -> list[dict[str, Any]]:
        """The engine's images as a Node's ``status.images`` lists them (names, sizeBytes)."""
        out = []
        for image in self.docker.api.images():
            names = [t for t in image.get("RepoTags") or [] if t != "<none>:<none>"]
            if names:
                out.append({"names": names, "sizeBytes": int(image.get("Size") or 0)})
        return out

    def close(self) -> None:
        self.docker.close()
