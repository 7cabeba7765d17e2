"""The telemetry interface the mitigation loop reads through, and its cgroup implementation.

Every source (cgroup files, Docker stats, cAdvisor, kubelet) implements
``collect(workloads, now_s, memory_only=False) -> Collection``. A workload may be missing from
``samples`` (its source had nothing this round: it simply ages toward T_stale); ``gone`` lists
workloads whose cgroup vanished (they ended and leave every ledger at once); ``errors`` carries
one message per malformed input — the affected workload gets no sample and nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agents.collectors.cgroup import CgroupCollector
from agents.errors import TelemetryError
from agents.model import UsageSample, Workload


@dataclass
class Collection:
    """Result of one collection round."""

    samples: dict[str, UsageSample] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)


class Telemetry(Protocol):
    """A telemetry source (see module docstring)."""

    name: str

    def collect(self, workloads: Sequence[Workload], now_s: float, *, memory_only: bool = False) -> Collection: ...

    def forget(self, workload_id: str) -> None: ...

    def exclude_psi(self, workload_ids: set[str]) -> None:
        """Stop reading the PSI files of these workloads (a trigger is armed on them)."""


class CgroupTelemetry:
    """Telemetry read straight from each workload's cgroup files (the default; fastest)."""

    name = "cgroup"

    def __init__(self, collector: CgroupCollector) -> None:
        self.collector = collector

    def collect(self, workloads: Sequence[Workload], now_s: float, *, memory_only: bool = False) -> Collection:
        out = Collection()
        for workload in workloads:
            try:
                out.samples[workload.id] = self.collector.sample(workload, now_s, memory_only=memory_only)
            except (FileNotFoundError, NotADirectoryError):
                out.gone.add(workload.id)
            except TelemetryError as exc:
                out.errors.append(str(exc))
            except OSError as exc:
                out.errors.append(f"{workload.id}: cannot read cgroup {workload.cgroup}: {exc}")
        return out

    def forget(self, workload_id: str) -> None:
        self.collector.forget(workload_id)

    def exclude_psi(self, workload_ids: set[str]) -> None:
        self.collector.psi_excluded = set(workload_ids)
