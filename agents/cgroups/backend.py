"""cgroup v1 and v2 backends: where each file lives, how to read it, and the exact text a
limit is written as. Backends only read; :class:`~agents.enforcer.Enforcer` performs the writes
they format (:meth:`CgroupFs.cpu_quota_writes`, :meth:`CgroupFs.memory_limit_writes`).

Every root is configurable so tests run against a temp-dir cgroupfs:

* v1: ``<root>/<controller-dir>/<rel>/…`` where the controller dir is found by listing ``root``
  (``cpu``, ``cpuacct`` or a co-mounted ``cpu,cpuacct``); per-group PSI comes from an optional
  v2 hierarchy mounted beside it (``<root>/unified`` in systemd's hybrid mode), ``psi_root``.
* v2: ``<root>/<rel>/…`` with ``cpu.stat``, ``cpu.max``, ``memory.current``, ``memory.high`` …

Files read per group (internal units after :mod:`agents.units`):

======================  ==================================  ==================================
quantity                v1                                  v2
======================  ==================================  ==================================
cpu usage (ns)          cpuacct/``cpuacct.usage``            ``cpu.stat`` usage_usec × 1000
CFS counters            cpu/``cpu.stat`` (throttled_time ns) ``cpu.stat`` (throttled_usec)
memory usage            memory/``memory.usage_in_bytes``     ``memory.current``
inactive file cache     ``memory.stat`` total_inactive_file  ``memory.stat`` inactive_file
io bytes                blkio/``…io_service_bytes_recursive`` ``io.stat`` rbytes/wbytes
PSI                     ``<psi_root>/<rel>/*.pressure``       ``*.pressure``
======================  ==================================  ==================================
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from agents.cgroups import parse
from agents.collectors.psi import PsiStats, read_psi
from agents.errors import ConfigError, FacilityUnavailable, TelemetryError
from agents.model import CpuThrottling
from agents.units import ns_from_us, us_from_ns

PSI_RESOURCES = ("cpu", "memory", "io")


@dataclass(frozen=True)
class RawStats:
    """Cumulative counters and gauges of one group, as read (``None`` where unavailable)."""

    cpu_usage_ns: float | None
    throttling: CpuThrottling | None
    memory_usage_bytes: float | None
    inactive_file_bytes: float | None
    io_read_bytes: float | None = None
    io_write_bytes: float | None = None
    psi: dict[str, PsiStats] = field(default_factory=dict)


def _read(path: Path) -> str:
    with open(path) as handle:
        return handle.read()


def _read_optional(path: Path) -> str | None:
    try:
        return _read(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


class CgroupFs(ABC):
    """Common interface of :class:`CgroupV1` and :class:`CgroupV2` (each implements every
    abstract method). ``rel`` is a group path relative to every hierarchy root (``""`` is the
    root group)."""

    version: int = 0
    root: Path
    psi_root: Path | None

    @abstractmethod
    def group_dir(self, rel: str, controller: str = "cpu") -> Path:
        """Implemented by each hierarchy version."""

    def exists(self, rel: str) -> bool:
        """True if the group exists in the cpu and memory hierarchies."""
        return self.group_dir(rel, "cpu").is_dir() and self.group_dir(rel, "memory").is_dir()

    def procs(self, rel: str) -> list[int]:
        """Pids in the group (memory hierarchy), empty if it vanished."""
        text = _read_optional(self.group_dir(rel, "memory") / "cgroup.procs")
        return [int(x) for x in text.split()] if text else []

    def populated(self, rel: str) -> bool:
        """Whether any process runs in the group or a group below it.

        cgroup v1 has no flag for it: the ``cgroup.procs`` of the group and every descendant in
        the memory hierarchy are read, stopping at the first non-empty one (a pod's processes live
        in its containers' groups, not in the pod's own). False only when at least one such file
        was read and all were empty; a group with none (gone, or a test tree without them) is
        taken as populated — a vanished group is for :meth:`read_stats` to report."""
        found = False
        for dirpath, _dirs, files in os.walk(self.group_dir(rel, "memory")):
            if "cgroup.procs" not in files:
                continue
            text = _read_optional(Path(dirpath) / "cgroup.procs")
            if text is None:
                continue
            if text.strip():
                return True
            found = True
        return not found

    def pressure_file(self, rel: str, resource: str) -> Path | None:
        """The group's ``<resource>.pressure`` if this kernel exposes one, else ``None``."""
        base = self.psi_root if self.version == 1 else self.root
        if base is None:
            return None
        path = base / rel / f"{resource}.pressure"
        return path if path.exists() else None

    def read_pressure(self, rel: str) -> dict[str, PsiStats]:
        out: dict[str, PsiStats] = {}
        for resource in PSI_RESOURCES:
            path = self.pressure_file(rel, resource)
            if path is None:
                continue
            try:
                out[resource] = read_psi(path)
            except OSError:
                continue
        return out

    @abstractmethod
    def read_stats(self, rel: str, *, memory_only: bool = False, with_psi: bool = True) -> RawStats:
        """Implemented by each hierarchy version."""

    @abstractmethod
    def cpu_quota(self, rel: str) -> tuple[int | None, int]:
        """Implemented by each hierarchy version."""

    @abstractmethod
    def cpu_quota_writes(self, rel: str, quota_us: int | None, period_us: int) -> list[tuple[Path, str]]:
        """Implemented by each hierarchy version."""

    @abstractmethod
    def memory_limit_writes(self, rel: str, high_bytes: float | None, max_bytes: float | None) -> list[tuple[Path, str]]:
        """Implemented by each hierarchy version."""

    #: the lowest cpu weight the hierarchy accepts (v1 ``cpu.shares`` 2, v2 ``cpu.weight`` 1)
    min_cpu_weight: int = 1

    @abstractmethod
    def cpu_weight(self, rel: str) -> int:
        """Implemented by each hierarchy version."""

    @abstractmethod
    def cpu_weight_writes(self, rel: str, weight: int) -> list[tuple[Path, str]]:
        """Implemented by each hierarchy version."""

    @abstractmethod
    def memory_limits(self, rel: str) -> tuple[int | None, int | None]:
        """Implemented by each hierarchy version."""

    def memory_threshold_files(self, rel: str) -> tuple[Path, Path] | None:
        """``(memory.usage_in_bytes, cgroup.event_control)`` for eventfd thresholds (v1 only)."""
        return None

    def describe(self) -> str:
        return f"cgroup v{self.version} at {self.root}"


class CgroupV1(CgroupFs):
    """cgroup v1: one hierarchy per controller under ``root``."""

    version = 1
    REQUIRED = ("cpu", "cpuacct", "memory")

    def __init__(self, root: str | Path, psi_root: str | Path | None = None) -> None:
        self.root = Path(root)
        self.psi_root = Path(psi_root) if psi_root else None
        self.controllers: dict[str, Path] = {}
        try:
            entries = sorted(os.listdir(self.root))
        except OSError as exc:
            raise FacilityUnavailable("cgroup v1", str(self.root), exc.strerror or str(exc)) from None
        for entry in entries:
            if (self.root / entry).is_dir():
                for controller in entry.split(","):
                    self.controllers.setdefault(controller, self.root / entry)
        missing = [c for c in self.REQUIRED if c not in self.controllers]
        if missing:
            raise FacilityUnavailable("cgroup v1", str(self.root),
                                      f"no hierarchy for {', '.join(missing)} (found: {', '.join(sorted(self.controllers)) or 'none'})")

    def group_dir(self, rel: str, controller: str = "cpu") -> Path:
        return self.controllers[controller] / rel

    def read_stats(self, rel: str, *, memory_only: bool = False, with_psi: bool = True) -> RawStats:
        mem = self.group_dir(rel, "memory")
        usage_file = mem / "memory.usage_in_bytes"
        usage = parse.parse_int(_read(usage_file), source=str(usage_file))
        stat_file = mem / "memory.stat"
        stat = parse.parse_flat_keyed(_read(stat_file), source=str(stat_file))
        inactive = stat.get("total_inactive_file", stat.get("inactive_file", 0))
        if memory_only:
            return RawStats(None, None, float(usage), float(inactive))
        acct = self.group_dir(rel, "cpuacct") / "cpuacct.usage"
        cpu_ns = parse.parse_int(_read(acct), source=str(acct))
        cpu_stat_file = self.group_dir(rel, "cpu") / "cpu.stat"
        cpu_stat = parse.parse_flat_keyed(_read(cpu_stat_file), source=str(cpu_stat_file))
        throttling = CpuThrottling(cpu_stat.get("nr_periods", 0), cpu_stat.get("nr_throttled", 0),
                                   us_from_ns(cpu_stat.get("throttled_time", 0)))
        read = write = None
        if "blkio" in self.controllers:
            blk = self.group_dir(rel, "blkio") / "blkio.throttle.io_service_bytes_recursive"
            text = _read_optional(blk)
            if text is not None:
                r, w = parse.parse_blkio_bytes(text, source=str(blk))
                read, write = float(r), float(w)
        return RawStats(float(cpu_ns), throttling, float(usage), float(inactive), read, write,
                        self.read_pressure(rel) if with_psi else {})

    def cpu_quota(self, rel: str) -> tuple[int | None, int]:
        base = self.group_dir(rel, "cpu")
        quota = parse.parse_int_or_max(_read(base / "cpu.cfs_quota_us"), source=str(base / "cpu.cfs_quota_us"))
        period = parse.parse_int(_read(base / "cpu.cfs_period_us"), source=str(base / "cpu.cfs_period_us"))
        return quota, period

    def cpu_quota_writes(self, rel: str, quota_us: int | None, period_us: int) -> list[tuple[Path, str]]:
        base = self.group_dir(rel, "cpu")
        writes: list[tuple[Path, str]] = []
        current_period = _read_optional(base / "cpu.cfs_period_us")
        if current_period is None or int(current_period.strip() or 0) != period_us:
            writes.append((base / "cpu.cfs_period_us", str(int(period_us))))
        writes.append((base / "cpu.cfs_quota_us", "-1" if quota_us is None else str(int(quota_us))))
        return writes

    min_cpu_weight = 2

    def cpu_weight(self, rel: str) -> int:
        path = self.group_dir(rel, "cpu") / "cpu.shares"
        return parse.parse_int(_read(path), source=str(path))

    def cpu_weight_writes(self, rel: str, weight: int) -> list[tuple[Path, str]]:
        return [(self.group_dir(rel, "cpu") / "cpu.shares", str(int(weight)))]

    def memory_limit_writes(self, rel: str, high_bytes: float | None, max_bytes: float | None) -> list[tuple[Path, str]]:
        """v1 has no ``memory.high``: the cap is ``memory.limit_in_bytes`` = the smaller of the two
        (docs/design.md §7; TESTBED: soft limits do nothing without swap)."""
        values = [v for v in (high_bytes, max_bytes) if v is not None]
        cap = min(values) if values else None
        return [(self.group_dir(rel, "memory") / "memory.limit_in_bytes", "-1" if cap is None else str(int(cap)))]

    def memory_limits(self, rel: str) -> tuple[int | None, int | None]:
        path = self.group_dir(rel, "memory") / "memory.limit_in_bytes"
        value = parse.parse_int(_read(path), source=str(path))
        limit = None if value >= (1 << 62) else value
        return limit, limit

    def memory_threshold_files(self, rel: str) -> tuple[Path, Path] | None:
        base = self.group_dir(rel, "memory")
        return base / "memory.usage_in_bytes", base / "cgroup.event_control"


class CgroupV2(CgroupFs):
    """cgroup v2: one unified hierarchy at ``root``."""

    version = 2

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.psi_root = self.root
        if not (self.root / "cgroup.controllers").exists():
            raise FacilityUnavailable("cgroup v2", str(self.root), "no cgroup.controllers file")

    def group_dir(self, rel: str, controller: str = "cpu") -> Path:
        return self.root / rel

    def exists(self, rel: str) -> bool:
        return (self.root / rel).is_dir()

    def populated(self, rel: str) -> bool:
        """``cgroup.events`` ``populated`` (the kernel's own flag for the subtree); a group without
        the file is taken as populated (see :meth:`CgroupFs.populated`)."""
        text = _read_optional(self.root / rel / "cgroup.events")
        if text is None:
            return True
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "populated":
                return value.strip() != "0"
        return True

    def read_stats(self, rel: str, *, memory_only: bool = False, with_psi: bool = True) -> RawStats:
        base = self.root / rel
        current = base / "memory.current"
        usage = parse.parse_int(_read(current), source=str(current))
        stat_file = base / "memory.stat"
        stat = parse.parse_flat_keyed(_read(stat_file), source=str(stat_file))
        inactive = float(stat.get("inactive_file", 0))
        if memory_only:
            return RawStats(None, None, float(usage), inactive)
        cpu_file = base / "cpu.stat"
        cpu = parse.parse_flat_keyed(_read(cpu_file), source=str(cpu_file))
        if "usage_usec" not in cpu:
            raise TelemetryError("no usage_usec", source=str(cpu_file), accepted="cgroup v2 cpu.stat")
        throttling = None
        if "nr_periods" in cpu:
            throttling = CpuThrottling(cpu["nr_periods"], cpu.get("nr_throttled", 0), float(cpu.get("throttled_usec", 0)))
        read = write = None
        io_text = _read_optional(base / "io.stat")
        if io_text is not None:
            r, w = parse.parse_io_stat(io_text, source=str(base / "io.stat"))
            read, write = float(r), float(w)
        return RawStats(ns_from_us(cpu["usage_usec"]), throttling, float(usage), inactive, read, write,
                        self.read_pressure(rel) if with_psi else {})

    def cpu_quota(self, rel: str) -> tuple[int | None, int]:
        path = self.root / rel / "cpu.max"
        return parse.parse_cpu_max(_read(path), source=str(path))

    def cpu_quota_writes(self, rel: str, quota_us: int | None, period_us: int) -> list[tuple[Path, str]]:
        return [(self.root / rel / "cpu.max", parse.format_cpu_max(quota_us, period_us))]

    min_cpu_weight = 1

    def cpu_weight(self, rel: str) -> int:
        path = self.root / rel / "cpu.weight"
        return parse.parse_int(_read(path), source=str(path))

    def cpu_weight_writes(self, rel: str, weight: int) -> list[tuple[Path, str]]:
        return [(self.root / rel / "cpu.weight", str(int(weight)))]

    def memory_limit_writes(self, rel: str, high_bytes: float | None, max_bytes: float | None) -> list[tuple[Path, str]]:
        def text(v: float | None) -> str:
            return parse.MAX if v is None else str(int(v))
        return [(self.root / rel / "memory.max", text(max_bytes)), (self.root / rel / "memory.high", text(high_bytes))]

    def memory_limits(self, rel: str) -> tuple[int | None, int | None]:
        base = self.root / rel
        high = parse.parse_int_or_max(_read(base / "memory.high"), source=str(base / "memory.high"))
        cap = parse.parse_int_or_max(_read(base / "memory.max"), source=str(base / "memory.max"))
        return high, cap


def detect(root: str | Path = "/sys/fs/cgroup", version: str = "auto", psi_root: str | Path | None = None) -> CgroupFs:
    """The backend for ``root``.

    ``version`` ``auto`` picks v2 when ``root/cgroup.controllers`` exists, else v1; on v1 the
    per-group PSI root defaults to ``root/unified`` when that is a v2 hierarchy (systemd hybrid
    mode). ``psi_root`` overrides it (``""`` disables per-group PSI on v1).

    Raises:
        FacilityUnavailable: naming the root and what is missing.
        ConfigError: for a ``version`` other than ``auto``, ``1``, ``2``.
    """
    root = Path(root)
    if version not in ("auto", "1", "2"):
        raise ConfigError(f"unknown cgroup version {version!r}", source="--cgroup-version", accepted="auto, 1, 2")
    if version == "2" or (version == "auto" and (root / "cgroup.controllers").exists()):
        return CgroupV2(root)
    if psi_root is None:
        hybrid = root / "unified"
        psi_root = hybrid if (hybrid / "cgroup.procs").exists() else None
    return CgroupV1(root, psi_root or None)
