"""Docker workload discovery (read-only Engine API calls: list and inspect).

For each running container (``GET /containers/json`` + inspect data):

* its name: the ``kalena.naughtian.io/workload`` label (``namespace/pod``, set on every container
  Kalena starts) where present, else the container's name — the name the control plane joins
  samples and eviction reports on;
* tier/priority/slack/reclaim from its labels (:mod:`agents.discovery.labels`);
* limits from ``HostConfig``: cpu ``NanoCpus`` (or ``CpuQuota``/``CpuPeriod``), memory
  ``Memory`` (0 = none);
* requests from the labels ``kalena.naughtian.io/request-cpu`` / ``request-memory``
  (Kubernetes quantities), else memory ``HostConfig.MemoryReservation``, else the limit where
  one is declared, else 0;
* grace from ``kalena.naughtian.io/termination-grace-seconds``, else ``Config.StopTimeout``,
  else Docker's default 10 s;
* start from ``State.StartedAt``; cgroup from ``/proc/<State.Pid>/cgroup`` (works for the
  cgroupfs and systemd drivers, v1 and v2).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import docker
import numpy as np

from agents.cgroups.parse import parse_proc_cgroup
from agents.collectors.failures import GONE, CollectorFailure, attempt
from agents.discovery.base import Discovery
from agents.discovery.labels import GRACE, PREFIX, classify
from agents.errors import DiscoveryError, TelemetryError
from agents.model import KIND_DOCKER, Workload
from agents.orchestrators.base import ID_LABEL
from agents.units import mcpu_from_cores, mcpu_from_nanocores, mcpu_from_quota, parse_k8s_quantity, unix_s_from_rfc3339
from kalena_engine.resources import CPU, RAM, zeros

REQUEST_CPU = PREFIX + "request-cpu"
REQUEST_MEMORY = PREFIX + "request-memory"
DEFAULT_STOP_TIMEOUT_S = 10.0


def workload_from_inspect(attrs: dict[str, Any], *, cgroup: str, errors: list[str]) -> Workload:
    """Build a :class:`~agents.model.Workload` from ``docker inspect`` data.

    Raises:
        DiscoveryError: a request label is not a quantity or the start time is malformed.
    """
    cid = attrs["Id"]
    config = attrs.get("Config") or {}
    host = attrs.get("HostConfig") or {}
    labels = {str(k): str(v) for k, v in (config.get("Labels") or {}).items()}
    # a container Kalena started reports under the control plane's name for the pod (its
    # workload label, ``namespace/pod``), whatever the container is called (one identity
    # from submission to samples and evictions, docs/design.md §14)
    name = labels.get(ID_LABEL) or str(attrs.get("Name", "")).lstrip("/") or cid[:12]
    source = f"docker:{name}"
    kind = classify(labels, labels, source=source, errors=errors)
    limit = zeros() + math.inf
    if host.get("NanoCpus"):
        limit[CPU] = mcpu_from_nanocores(host["NanoCpus"])
    elif host.get("CpuQuota") and host["CpuQuota"] > 0:
        limit[CPU] = mcpu_from_quota(host["CpuQuota"], host.get("CpuPeriod") or 100_000)
    if host.get("Memory"):
        limit[RAM] = float(host["Memory"])
    request = zeros()
    request[CPU] = limit[CPU] if np.isfinite(limit[CPU]) else 0.0
    if REQUEST_CPU in labels:
        request[CPU] = mcpu_from_cores(parse_k8s_quantity(labels[REQUEST_CPU], source=source, field=REQUEST_CPU))
    if REQUEST_MEMORY in labels:
        request[RAM] = parse_k8s_quantity(labels[REQUEST_MEMORY], source=source, field=REQUEST_MEMORY)
    elif host.get("MemoryReservation"):
        request[RAM] = float(host["MemoryReservation"])
    elif np.isfinite(limit[RAM]):
        request[RAM] = limit[RAM]
    grace = float(config.get("StopTimeout") or DEFAULT_STOP_TIMEOUT_S)
    if GRACE in labels:
        try:
            grace = float(labels[GRACE])
        except ValueError:
            raise DiscoveryError(f"{labels[GRACE]!r} is not a number of seconds", source=source, field=GRACE) from None
    state = attrs.get("State") or {}
    try:
        start = unix_s_from_rfc3339(state.get("StartedAt", ""), source=source, field="State.StartedAt")
    except TelemetryError as exc:
        raise DiscoveryError(str(exc), source=source, field="State.StartedAt") from None
    return Workload(
        id=cid, name=name, kind=KIND_DOCKER, tier=kind.tier, priority=kind.priority,
        request=request, limit=limit, start_s=start, grace_s=grace, cgroup=cgroup,
        slack_cpu=kind.slack_cpu, slack_memory=kind.slack_memory, reclaim_disabled=kind.reclaim_disabled,
        startup_grace_s=kind.startup_grace_s,
        terminating=bool(state.get("Restarting")) or state.get("Status") == "removing",
        runtime_ref=cid, source="docker", labels=labels,
    )


class DockerSource:
    """Discovery of running containers on one Docker engine.

    Args:
        client: a ``docker.DockerClient``.
        proc_root: procfs root, for ``/proc/<pid>/cgroup``.
        cgroup_version: 1 or 2 (which line of ``/proc/<pid>/cgroup`` gives the path).
        label_filter: only containers carrying this label key (default: all containers).
    """

    name = "docker"
    metric_name = "discovery_docker"

    def __init__(self, client: Any, *, proc_root: str | Path = "/proc", cgroup_version: int = 1,
                 label_filter: str | None = None) -> None:
        self.client = client
        self.proc_root = Path(proc_root)
        self.cgroup_version = cgroup_version
        self.label_filter = label_filter

    def cgroup_of(self, pid: int) -> str:
        path = self.proc_root / str(pid) / "cgroup"
        groups = parse_proc_cgroup(path.read_text(), source=str(path))
        key = "" if self.cgroup_version == 2 else "memory"
        if key not in groups:
            raise TelemetryError(f"no {'v2' if key == '' else key} line", source=str(path))
        return groups[key]

    def discover(self, now_s: float) -> Discovery:
        out = Discovery()
        filters = {"status": "running"}
        if self.label_filter:
            filters["label"] = self.label_filter
        try:
            listed = self.client.api.containers(filters=filters)
        except docker.errors.DockerException as exc:
            out.errors.append(f"docker: cannot list containers: {exc}")
            out.complete = False
            return out
        for entry in listed:
            cid = str(entry.get("Id", ""))
            # a container can stop or be removed between the list and its inspect or /proc read:
            # that container is skipped (cause ``gone``), the others are still discovered
            attrs = attempt(self.metric_name, cid, f"docker:{cid[:12]}",
                            lambda c=cid: self.client.api.inspect_container(c), on_missing=GONE)
            if isinstance(attrs, CollectorFailure):
                out.failures.append(attrs)
                continue
            pid = (attrs.get("State") or {}).get("Pid") or 0
            if not pid:
                continue
            cgroup = attempt(self.metric_name, cid, f"/proc/{pid}/cgroup", lambda p=pid: self.cgroup_of(p),
                             on_missing=GONE)
            if isinstance(cgroup, CollectorFailure):
                out.failures.append(cgroup)
                continue
            try:
                out.workloads.append(workload_from_inspect(attrs, cgroup=cgroup, errors=out.errors))
            except DiscoveryError as exc:
                out.errors.append(str(exc))
        return out
