"""Which pressure sources the agent arms, and the fallback to polling.

With ``pressure_source`` ``auto`` (or ``psi-trigger``/``eventfd``) the agent keeps:

* one cpu PSI trigger per service workload whose cgroup has ``cpu.pressure`` (cgroup v2, or the
  v2 hierarchy beside v1 in hybrid mode), up to ``max_psi_triggers`` — an event names the
  stalled service; without per-group PSI, one trigger on ``/proc/pressure/cpu`` (scope node);
* one memory PSI trigger on ``/proc/pressure/memory`` (scope node);
* on cgroup v1, one eventfd threshold on the node group's ``memory.usage_in_bytes`` at
  ``evict_threshold_ratio × C_ram`` (``C`` the node's capacity less its DaemonSets' requests,
  :meth:`agents.loop.MitigationLoop.node_capacity`; the node reading still holds the DaemonSets'
  memory, so it fires at or before the crossing the eviction planner tests).

Anything the kernel refuses (``EINVAL`` window, no PSI, no ``cgroup.event_control``) falls back
to ``poll`` — the periodic check of PSI avg10 and usage — and the reason is kept in
:attr:`SignalArming.failures`. :attr:`SignalArming.in_use` says, per resource, which sources
are active (reported in ``hello`` and by the benchmark).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from agents.cgroups.backend import CgroupFs
from agents.model import Workload
from agents.pressure.events import SCOPE_NODE, SOURCE_EVENTFD, SOURCE_POLL, SOURCE_PSI
from agents.pressure.monitor import Arming, MemoryThreshold, PressureMonitor, PsiTrigger
from agents.settings import LoopSettings
from agents.units import us_from_ms, us_from_s
from kalena_engine.resources import RAM


class SignalArming:
    """Keeps the monitor's sources in line with the node's service workloads."""

    def __init__(self, settings: LoopSettings, monitor: PressureMonitor | None, arm: Arming, fs: CgroupFs,
                 *, system_pressure_dir: str = "/proc/pressure", node_cgroup: str = "") -> None:
        self.settings = settings
        self.monitor = monitor
        self.arm = arm
        self.fs = fs
        self.system_pressure_dir = system_pressure_dir
        self.node_cgroup = node_cgroup
        self.failures: list[str] = []
        self._threshold_bytes: int | None = None
        self._capacity: np.ndarray | None = None

    @property
    def triggers_allowed(self) -> bool:
        return self.monitor is not None and self.settings.pressure_source in ("auto", "psi-trigger")

    @property
    def eventfd_allowed(self) -> bool:
        return self.monitor is not None and self.settings.pressure_source in ("auto", "eventfd")

    def _window_us(self) -> int:
        return us_from_s(self.settings.psi_window_s)

    def _trigger(self, key: str, path, resource: str, scope: str, threshold_ms: float) -> bool:
        assert self.monitor is not None
        if self.monitor.get(key) is not None:
            return True
        try:
            trigger = PsiTrigger(path, resource=resource, scope=scope, stall="some",
                                 threshold_us=us_from_ms(threshold_ms), window_us=self._window_us(), arm=self.arm)
        except OSError as exc:
            self.failures.append(f"psi trigger on {path}: {exc.strerror or exc}; falling back to poll")
            return False
        self.monitor.add(key, trigger)
        return True

    def sync(self, services: Sequence[Workload], capacity: np.ndarray | None = None) -> None:
        """Arm what is missing, drop what belongs to workloads that left. ``capacity``: ``(8,)``
        the node's capacity as the ledger reads it (default ``settings.capacity``)."""
        if self.monitor is None:
            return
        self._capacity = self.settings.capacity if capacity is None else capacity
        wanted: set[str] = set()
        per_group = 0
        if self.triggers_allowed:
            for workload in services:
                path = self.fs.pressure_file(workload.cgroup, "cpu")
                if path is None or per_group >= self.settings.max_psi_triggers:
                    continue
                key = f"cpu:{workload.id}"
                if self._trigger(key, path, "cpu", workload.id, self.settings.psi_cpu_threshold_ms):
                    wanted.add(key)
                    per_group += 1
            system = Path(self.system_pressure_dir)
            if per_group == 0 and services and (system / "cpu").exists():
                if self._trigger("cpu:node", system / "cpu", "cpu", SCOPE_NODE, self.settings.psi_cpu_threshold_ms):
                    wanted.add("cpu:node")
            if (system / "memory").exists():
                if self._trigger("memory:node", system / "memory", "memory", SCOPE_NODE,
                                 self.settings.psi_memory_threshold_ms):
                    wanted.add("memory:node")
        if self.eventfd_allowed:
            wanted |= self._sync_threshold()
        for key in self.monitor.keys():
            if key not in wanted:
                self.monitor.remove(key)

    def _sync_threshold(self) -> set[str]:
        assert self.monitor is not None
        capacity = float((self.settings.capacity if self._capacity is None else self._capacity)[RAM])
        files = self.fs.memory_threshold_files(self.node_cgroup)
        if not math.isfinite(capacity) or files is None:
            return set()
        threshold = int(self.settings.policy.eviction.evict_threshold_ratio * capacity)
        key = "memory-threshold:node"
        if self.monitor.get(key) is not None and self._threshold_bytes == threshold:
            return {key}
        self.monitor.remove(key)
        try:
            source = MemoryThreshold(files[0], files[1], threshold, scope=SCOPE_NODE, arm=self.arm)
        except OSError as exc:
            self.failures.append(f"eventfd threshold on {files[0]}: {exc.strerror or exc}; falling back to poll")
            return set()
        self._threshold_bytes = threshold
        self.monitor.add(key, source)
        return {key}

    def has_trigger(self, workload_id: str) -> bool:
        return self.monitor is not None and self.monitor.get(f"cpu:{workload_id}") is not None

    @property
    def in_use(self) -> dict[str, list[str]]:
        """Per resource, the sources in use, e.g. ``{"cpu": ["psi-trigger", "poll"], "memory":
        ["eventfd-threshold", "psi-trigger", "poll"]}``. ``poll`` is always present: the periodic
        check runs as the safety net behind every trigger."""
        keys = self.monitor.keys() if self.monitor is not None else []
        cpu = [SOURCE_PSI] if any(k.startswith("cpu:") for k in keys) else []
        memory = []
        if "memory-threshold:node" in keys:
            memory.append(SOURCE_EVENTFD)
        if "memory:node" in keys:
            memory.append(SOURCE_PSI)
        return {"cpu": cpu + [SOURCE_POLL], "memory": memory + [SOURCE_POLL]}
