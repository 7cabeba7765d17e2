"""Per-workload usage from cgroup files (the agent's default telemetry).

Cumulative counters (cpu ns, io bytes, network bytes) become rates between two readings of the
same workload; gauges (memory) are taken as read. A reading less than ``min_rate_interval_s``
after the previous anchor reuses the previous rate (a pressure event can ask for a fresh sample
at any moment without producing a rate over a few milliseconds).

cpu wait: for a group with an armed PSI trigger (whose pressure files must not be read), the
collector sums the run-queue wait of its tasks from ``/proc/<pid>/task/*/schedstat`` instead and
reports it as ``cpu_wait_ratio`` — the polling fallback's stall signal for that group.

Network: cgroups do not account network traffic. For a workload whose first process lives in
its own network namespace (a container or pod), ``/proc/<pid>/net/dev`` counts exactly its
traffic (cAdvisor does the same); processes sharing the host namespace get ``NaN``.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from agents.cgroups.backend import CgroupFs, RawStats
from agents.cgroups.parse import parse_meminfo, parse_net_dev, parse_schedstat
from agents.collectors.psi import PsiStats, read_psi
from agents.errors import TelemetryError
from agents.model import NodeReading, UsageSample, Workload
from agents.units import NS_PER_S, bytes_per_s, mcpu_from_ns, working_set_bytes
from kalena_engine.resources import CPU, DISK_READ, DISK_WRITE, N_DIMS, NET_IN, NET_OUT, RAM


@dataclass
class _Anchor:
    ts_s: float
    raw: RawStats
    net: tuple[int, int] | None
    rates: dict[int, float]
    wait_ns: int | None = None
    wait_ratio: float | None = None


class CgroupCollector:
    """Reads each workload's cgroup and returns :class:`~agents.model.UsageSample`.

    Args:
        fs: the cgroup backend.
        proc_root: procfs root (``/proc``; a temp dir in tests).
        min_rate_interval_s: shortest interval a rate is computed over (s).
    """

    def __init__(self, fs: CgroupFs, proc_root: str | Path = "/proc", min_rate_interval_s: float = 0.2) -> None:
        self.fs = fs
        self.proc_root = Path(proc_root)
        self.min_rate_interval_s = min_rate_interval_s
        #: workloads whose PSI files must not be read (an unprivileged trigger is armed on them:
        #: reading a group's pressure file folds its averages and starves the trigger — see
        #: :mod:`agents.pressure.monitor`).
        self.psi_excluded: set[str] = set()
        self._anchors: dict[str, _Anchor] = {}
        try:
            self._host_netns = os.readlink(self.proc_root / "1" / "ns" / "net")
        except OSError:
            self._host_netns = None

    def forget(self, workload_id: str) -> None:
        """Drop the rate anchor of a workload that left the node."""
        self._anchors.pop(workload_id, None)

    def _net(self, workload: Workload) -> tuple[int, int] | None:
        if self._host_netns is None:
            return None
        for pid in self.fs.procs(workload.cgroup)[:1]:
            try:
                if os.readlink(self.proc_root / str(pid) / "ns" / "net") == self._host_netns:
                    return None
                path = self.proc_root / str(pid) / "net" / "dev"
                return parse_net_dev(path.read_text(), source=str(path))
            except OSError:
                return None
        return None

    def _wait_ns(self, workload: Workload) -> int | None:
        """Σ run-queue wait (ns) of every task in the group, or None if unreadable."""
        total = 0
        for pid in self.fs.procs(workload.cgroup):
            try:
                for task in (self.proc_root / str(pid) / "task").iterdir():
                    path = task / "schedstat"
                    total += parse_schedstat(path.read_text(), source=str(path))[1]
            except OSError:
                continue
            except TelemetryError:
                return None
        return total

    def sample(self, workload: Workload, now_s: float, *, memory_only: bool = False) -> UsageSample | None:
        """Read one workload; None while no process runs in its group (:meth:`CgroupFs.populated`).

        A group whose containers all died — their runtime stopped, or a container between
        restarts — still exists and reads 0, which is not the workload's usage: it gets no sample,
        so it ages to T_stale and the ledgers hold it at ``max(r, q)`` (docs/design.md §5) instead of
        decaying production's reservation while it is down. Its rate anchor is dropped: the first
        rate after it runs again is taken over a fresh interval.

        Raises:
            OSError: the group vanished (the workload ended).
            TelemetryError: a file is malformed.
        """
        if not self.fs.populated(workload.cgroup):
            self._anchors.pop(workload.id, None)
            return None
        raw = self.fs.read_stats(workload.cgroup, memory_only=memory_only,
                                 with_psi=workload.id not in self.psi_excluded)
        usage = np.full(N_DIMS, math.nan)
        usage[RAM] = working_set_bytes(raw.memory_usage_bytes or 0.0, raw.inactive_file_bytes or 0.0)
        anchor = self._anchors.get(workload.id)
        rates: dict[int, float] = dict(anchor.rates) if anchor else {}
        wait_ratio = anchor.wait_ratio if anchor else None
        if not memory_only:
            net = self._net(workload)
            wait = self._wait_ns(workload) if workload.id in self.psi_excluded else None
            if anchor is None:
                self._anchors[workload.id] = _Anchor(now_s, raw, net, {}, wait)
            elif now_s - anchor.ts_s >= self.min_rate_interval_s:
                dt = now_s - anchor.ts_s
                rates = {}
                if raw.cpu_usage_ns is not None and anchor.raw.cpu_usage_ns is not None:
                    rates[CPU] = max(0.0, mcpu_from_ns(raw.cpu_usage_ns - anchor.raw.cpu_usage_ns, dt))
                if raw.io_read_bytes is not None and anchor.raw.io_read_bytes is not None:
                    rates[DISK_READ] = bytes_per_s(raw.io_read_bytes - anchor.raw.io_read_bytes, dt)
                    rates[DISK_WRITE] = bytes_per_s((raw.io_write_bytes or 0) - (anchor.raw.io_write_bytes or 0), dt)
                if net is not None and anchor.net is not None:
                    rates[NET_IN] = bytes_per_s(net[0] - anchor.net[0], dt)
                    rates[NET_OUT] = bytes_per_s(net[1] - anchor.net[1], dt)
                wait_ratio = None
                if wait is not None and anchor.wait_ns is not None:
                    wait_ratio = max(0.0, wait - anchor.wait_ns) / NS_PER_S / dt
                self._anchors[workload.id] = _Anchor(now_s, raw, net, rates, wait, wait_ratio)
        for dim, value in rates.items():
            usage[dim] = value
        psi = raw.psi if not memory_only else {}
        return UsageSample(workload.id, now_s, usage, float(raw.memory_usage_bytes or math.nan),
                           raw.throttling, psi, wait_ratio if workload.id in self.psi_excluded else None)

    def read_pressure(self, workload: Workload) -> dict[str, PsiStats]:
        """The workload group's PSI files (empty where the kernel has none)."""
        return self.fs.read_pressure(workload.cgroup)


class NodeCollector:
    """Node-level pressure inputs: the working set of the node's workload group and system PSI.

    Args:
        fs: cgroup backend.
        proc_root: procfs root; system PSI is ``<proc_root>/pressure/{cpu,memory,io}``.
        node_cgroup: group holding every workload (``kubepods``, ``docker``, a test parent), or
            ``""`` for the whole machine. On the v2 root (which has no ``memory.current``) the
            machine's working set is ``MemTotal − MemAvailable`` from ``/proc/meminfo``.
    """

    def __init__(self, fs: CgroupFs, proc_root: str | Path = "/proc", node_cgroup: str = "") -> None:
        self.fs = fs
        self.proc_root = Path(proc_root)
        self.node_cgroup = node_cgroup

    def system_pressure_file(self, resource: str) -> Path | None:
        path = self.proc_root / "pressure" / resource
        return path if path.exists() else None

    def read(self, now_s: float) -> NodeReading:
        if self.fs.version == 2 and not self.node_cgroup:
            path = self.proc_root / "meminfo"
            info = parse_meminfo(path.read_text(), source=str(path))
            working_set = float(info.get("MemTotal", 0) - info.get("MemAvailable", 0))
        else:
            raw = self.fs.read_stats(self.node_cgroup, memory_only=True)
            working_set = working_set_bytes(raw.memory_usage_bytes or 0.0, raw.inactive_file_bytes or 0.0)
        psi: dict[str, PsiStats] = {}
        for resource in ("cpu", "memory", "io"):
            path = self.system_pressure_file(resource)
            if path is not None:
                try:
                    psi[resource] = read_psi(path)
                except OSError:
                    pass
        return NodeReading(now_s, working_set, psi)
