"""The lab's plan: how many nodes, each node's capacity, and whether the machine can hold them
(pure: numbers in, :class:`LabPlan` out).

A node's capacity *is* its cgroup subtree's cpu quota and memory limit. The lab takes at most
``budget_ratio`` (default one half) of the machine, so the rest of the host — the console, the
agents, the engines themselves and whatever else runs there — keeps room:

    cpu budget (mcpu)   = floor(host cores × 1000 × budget_ratio)
    memory budget (B)   = floor(host MemTotal × budget_ratio)
    accepted when nodes × cpu_mcpu ≤ cpu budget and nodes × memory_bytes ≤ memory budget

Worked example: 2 cores, ratio 0.5 → 1000 m; 4 nodes × 250 m = 1000 m fits, 5 × 250 m = 1250 m
is refused (``BudgetRefused(dim="cpu", asked=1250, budget=1000)``).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from agents.lab.errors import BudgetRefused, LabError

MAX_NODES = 253            # loopback addresses 127.0.0.2 … 127.0.0.254
MIN_CPU_MCPU = 10          # the CFS quota's floor: 1 ms per 100 ms period
MIN_MEMORY_BYTES = 32 * 2**20
CFS_PERIOD_US = 100_000
LOOPBACK_SUBNET = re.compile(r"127\.\d{1,3}\.\d{1,3}")
LAB_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,30}[a-z0-9])?")


@dataclass(frozen=True)
class NodePlan:
    """One node: ``name`` (``<lab>-<i>``), its loopback ``address`` (``<subnet>.<i+1>``, default ``127.0.0.<i+1>``), its
    capacity (``cpu_mcpu``, ``memory_bytes``) and its cgroup subtree (``cgroup``, relative to
    each hierarchy's root, e.g. ``kalena-lab/lab-1``)."""

    name: str
    address: str
    cpu_mcpu: int
    memory_bytes: int
    cgroup: str

    @property
    def cpu_quota_us(self) -> int:
        """``cpu.cfs_quota_us`` for a 100 ms period: 250 m → 25 000 µs."""
        return self.cpu_mcpu * CFS_PERIOD_US // 1000


@dataclass(frozen=True)
class LabPlan:
    """The lab: its ``name``, its cgroup ``root`` (``kalena-<name>``), the nodes, and the budget
    they were checked against (mcpu, bytes) with the host figures it came from."""

    name: str
    root: str
    nodes: tuple[NodePlan, ...]
    cpu_budget_mcpu: int
    memory_budget_bytes: int
    host_cores: int
    host_memory_bytes: int
    subnet: str = "127.0.0"

    @property
    def console_address(self) -> str:
        """Where the lab's console listens: ``<subnet>.1``."""
        return f"{self.subnet}.1"


def lab_plan(*, name: str, nodes: int, cpu_mcpu: int, memory_bytes: int, host_cores: int, host_memory_bytes: int,
             budget_ratio: float = 0.5, subnet: str = "127.0.0") -> LabPlan:
    """The plan for ``nodes`` nodes of ``cpu_mcpu`` / ``memory_bytes`` each (see module doc).

    Raises:
        LabError: a bad name, a node count outside 1…253, a node under 10 m or 32 MiB, a ratio
            outside (0, 1], or a ``subnet`` that is not a loopback /24 prefix (``127.A.B``).
        BudgetRefused: the nodes do not fit the budget (the message gives both sums and the budget).
    """
    if not LAB_NAME.fullmatch(name or ""):
        raise LabError(f"{name!r} is not a lab name", source="kalena lab up", field="--name",
                       accepted="1–32 lower-case letters, digits and '-'")
    if not 1 <= nodes <= MAX_NODES:
        raise LabError(f"{nodes} nodes", source="kalena lab up", field="--nodes", accepted=f"1…{MAX_NODES}")
    if cpu_mcpu < MIN_CPU_MCPU:
        raise LabError(f"{cpu_mcpu} m per node", source="kalena lab up", field="--cpu-m",
                       accepted=f"≥ {MIN_CPU_MCPU} m (the CFS quota's floor)")
    if memory_bytes < MIN_MEMORY_BYTES:
        raise LabError(f"{memory_bytes // 2**20} MiB per node", source="kalena lab up", field="--memory-mib",
                       accepted=f"≥ {MIN_MEMORY_BYTES // 2**20} MiB")
    if not LOOPBACK_SUBNET.fullmatch(subnet or "") or any(int(part) > 255 for part in subnet.split(".")):
        raise LabError(f"{subnet!r} is not a loopback /24 prefix", source="kalena lab up", field="--subnet",
                       accepted="127.A.B with A, B in 0…255: the console listens on 127.A.B.1, node i on 127.A.B.(i+1)")
    if not 0 < budget_ratio <= 1:
        raise LabError(f"budget ratio {budget_ratio:g}", source="kalena lab up", field="--budget-ratio",
                       accepted="0 < ratio ≤ 1")
    cpu_budget = math.floor(host_cores * 1000 * budget_ratio)
    memory_budget = math.floor(host_memory_bytes * budget_ratio)
    if nodes * cpu_mcpu > cpu_budget:
        raise BudgetRefused(
            f"{nodes} nodes × {cpu_mcpu} m = {nodes * cpu_mcpu} m of cpu exceeds the lab's budget of {cpu_budget} m "
            f"({budget_ratio:g} of {host_cores} cores)", dim="cpu", asked=nodes * cpu_mcpu, budget=cpu_budget,
            field="--nodes/--cpu-m", accepted=f"nodes × cpu-m ≤ {cpu_budget} (e.g. {max(1, cpu_budget // cpu_mcpu)} "
                                              f"nodes of {cpu_mcpu} m, or {nodes} of {cpu_budget // nodes} m)")
    if nodes * memory_bytes > memory_budget:
        mib = memory_bytes // 2**20
        raise BudgetRefused(
            f"{nodes} nodes × {mib} MiB = {nodes * mib} MiB of memory exceeds the lab's budget of "
            f"{memory_budget // 2**20} MiB ({budget_ratio:g} of {host_memory_bytes // 2**20} MiB)", dim="memory",
            asked=nodes * memory_bytes, budget=memory_budget, field="--nodes/--memory-mib",
            accepted=f"nodes × memory-mib ≤ {memory_budget // 2**20}")
    root = f"kalena-{name}"
    plans = tuple(NodePlan(name=f"{name}-{i}", address=f"{subnet}.{i + 1}", cpu_mcpu=cpu_mcpu, memory_bytes=memory_bytes,
                           cgroup=f"{root}/{name}-{i}") for i in range(1, nodes + 1))
    return LabPlan(name=name, root=root, nodes=plans, cpu_budget_mcpu=cpu_budget, memory_budget_bytes=memory_budget,
                   host_cores=host_cores, host_memory_bytes=host_memory_bytes, subnet=subnet)


def host_figures(proc_root: str = "/proc") -> tuple[int, int]:
    """``(cores, MemTotal bytes)`` of the machine (``os.cpu_count()`` and ``<proc>/meminfo``)."""
    import os

    with open(f"{proc_root}/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return os.cpu_count() or 1, int(line.split()[1]) * 1024
    raise LabError("no MemTotal line", source=f"{proc_root}/meminfo")
