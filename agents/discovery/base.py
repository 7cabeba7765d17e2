"""The discovery interface and the result every source returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from agents.model import Workload


@dataclass
class Discovery:
    """One discovery round: the workloads found, and one message per workload (or file) whose
    metadata was malformed. A malformed workload is left out (the agent does not touch what it
    cannot classify); a malformed file keeps the last good list."""

    workloads: list[Workload] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: False when the source could not be asked at all (daemon or kubelet unreachable): the
    #: caller keeps that source's previous list instead of treating its workloads as gone.
    complete: bool = True


class WorkloadSource(Protocol):
    """A discovery source."""

    name: str

    def discover(self, now_s: float) -> Discovery: ...
