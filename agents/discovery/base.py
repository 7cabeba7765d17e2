"""The discovery interface and the result every source returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from agents.collectors.failures import CollectorFailure
from agents.model import Workload


@dataclass
class Discovery:
    """One discovery round: the workloads found, and one message per workload (or file) whose
    metadata was malformed. A malformed workload is left out (the agent does not touch what it
    cannot classify); a malformed file keeps the last good list."""

    workloads: list[Workload] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: reads that failed for one workload (e.g. a container removed between list and inspect):
    #: that workload is left out this round; the loop counts and logs them like telemetry failures.
    failures: list[CollectorFailure] = field(default_factory=list)
    #: False when the source could not be asked at all (daemon or kubelet unreachable): the
    #: caller keeps that source's previous list instead of treating its workloads as gone.
    complete: bool = True


class WorkloadSource(Protocol):
    """A discovery source."""

    name: str

    def discover(self, now_s: float) -> Discovery: ...
