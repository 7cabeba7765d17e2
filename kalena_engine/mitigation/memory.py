"""Batch memory caps (docs/design.md §7, §4 ``slack-memory``).

A batch workload may use idle memory beyond its request only when ``slack-memory: allow``;
otherwise its soft cap is its request. The hard cap is its declared limit::

    high = q            if slack-memory is denied and q > 0
         = L            otherwise (None if no limit is declared)
    max  = L            (None if no limit is declared)

cgroup v2 writes ``memory.high = high`` and ``memory.max = max``; cgroup v1 has no
``memory.high`` and soft limits do nothing without swap, so v1 writes
``memory.limit_in_bytes = min(high, max)`` and relieves pressure by eviction.

Worked example: q = 64 MiB, L = 128 MiB, slack denied → high 64 MiB, max 128 MiB (v1 limit
64 MiB); slack allowed → high = max = 128 MiB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class MemoryCap:
    """Soft (``high_bytes``) and hard (``max_bytes``) caps; ``None`` means no cap."""

    high_bytes: float | None
    max_bytes: float | None


def batch_memory_cap(request_bytes: float, limit_bytes: float, slack_memory_allowed: bool) -> MemoryCap:
    """The caps of one batch workload (module docstring)."""
    hard = float(limit_bytes) if math.isfinite(limit_bytes) else None
    if not slack_memory_allowed and request_bytes > 0:
        soft = float(request_bytes) if hard is None else min(float(request_bytes), hard)
        return MemoryCap(soft, hard)
    return MemoryCap(hard, hard)
