"""The pressure event every signal source produces."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

SOURCE_PSI = "psi-trigger"
SOURCE_EVENTFD = "eventfd-threshold"
SOURCE_POLL = "poll"
SOURCES = (SOURCE_PSI, SOURCE_EVENTFD, SOURCE_POLL)

SCOPE_NODE = "node"


@dataclass(frozen=True)
class PressureEvent:
    """One pressure signal.

    Attributes:
        source: ``psi-trigger`` | ``eventfd-threshold`` | ``poll``.
        resource: ``cpu`` | ``memory`` | ``io``.
        scope: ``node`` or the workload id whose cgroup signalled.
        detected_mono: ``time.monotonic()`` when the agent learned of it (poll() returned or the
            polling check ran) — the start of the event → action latency.
        detected_s: Unix time of the same moment.
        detail: numbers behind it (trigger spec, threshold bytes, avg10 …).
    """

    source: str
    resource: str
    scope: str
    detected_mono: float
    detected_s: float
    detail: Mapping[str, float | str] = field(default_factory=dict)
