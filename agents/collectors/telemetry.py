"""The telemetry interface the mitigation loop reads through, and its cgroup implementation.

Every source (cgroup files, Docker stats, cAdvisor, kubelet) implements
``collect(workloads, now_s, memory_only=False) -> Collection``. A workload may be missing from
``samples`` (its source had nothing this round: it simply ages toward T_stale); ``gone`` lists
workloads whose cgroup vanished (they ended and leave every ledger at once); ``failures`` carries
one :class:`~agents.collectors.failures.CollectorFailure` per read that gave no sample — the
affected workload gets no sample and nothing else changes (the loop counts and logs them).
Every per-workload read goes through :func:`~agents.collectors.failures.attempt`
(:meth:`Collection.add`), so no reader's exception leaves ``collect``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from agents.collectors.cgroup import CgroupCollector
from agents.collectors.failures import ENDED, CollectorFailure, attempt
from agents.model import UsageSample, Workload


@dataclass
class Collection:
    """Result of one collection round."""

    samples: dict[str, UsageSample] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)
    failures: list[CollectorFailure] = field(default_factory=list)

    def add(self, workload_id: str, outcome: UsageSample | CollectorFailure | None) -> None:
        """Record one workload's outcome: a sample, nothing (no sample this round), or a failure
        (a failure whose cause says the workload ended also puts it in ``gone``)."""
        if isinstance(outcome, CollectorFailure):
            self.failures.append(outcome)
            if outcome.cause in ENDED:
                self.gone.add(workload_id)
        elif outcome is not None:
            self.samples[workload_id] = outcome


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
            out.add(workload.id, attempt(self.name, workload.id, workload.cgroup,
                                         lambda w=workload: self.collector.sample(w, now_s, memory_only=memory_only)))
        return out

    def forget(self, workload_id: str) -> None:
        self.collector.forget(workload_id)

    def exclude_psi(self, workload_ids: set[str]) -> None:
        self.collector.psi_excluded = set(workload_ids)
