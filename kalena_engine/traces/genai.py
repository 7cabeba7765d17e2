"""Alibaba GenAI 2026 per-container memory utilisation (``pod_memory_util_anon.tar.gz`` →
``pod_memory_util_anon.csv``: ``value, timestamp_anon, container_ip``): 208 containers, most
sampled every ≈ 57 s for 22.8 h. ``value`` is the container's memory utilisation (a fraction
of its memory size). Used for production memory on the alibaba-gpu-2023 cluster (docs/traces.md).

Row anomalies (counted, skipped): ``genai.unparseable_row``; ``genai.value_out_of_range``
(not in [0, 1.5]); ``genai.duplicate_timestamp`` (a container's second sample at one time).
"""

from __future__ import annotations

import csv
import io
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kalena_engine.errors import TraceError

MEMBER = "pod_memory_util_anon.csv"
HEADER = ("value", "timestamp_anon", "container_ip")


@dataclass(frozen=True, eq=False)
class MemoryUtil:
    """``series``: per container ``(id, times (k,) s, utilisation (k,))`` sorted by time."""

    source: str
    series: tuple[tuple[str, np.ndarray, np.ndarray], ...]
    anomalies: dict[str, int] = field(default_factory=dict)

    def earliest_s(self) -> float:
        return min(float(t[0]) for _, t, _ in self.series)

    def covering(self, start_s: float, end_s: float, tolerance_s: float = 300.0):
        """The containers whose samples span ``[start_s, end_s]`` within ``tolerance_s``."""
        return tuple(s for s in self.series if s[1][0] <= start_s + tolerance_s and s[1][-1] >= end_s - tolerance_s)


def load_memory_util(path: str | Path) -> MemoryUtil:
    """Read the archive (see module doc).

    Raises:
        TraceError: the file is missing, not a tar.gz holding the member, or has another header.
    """
    path = Path(path)
    if not path.is_file():
        raise TraceError("file not found", source=str(path), accepted=f"the GenAI 2026 archive holding {MEMBER}")
    try:
        with tarfile.open(path, "r:gz") as archive:
            member = archive.extractfile(MEMBER)
            if member is None:
                raise KeyError(MEMBER)
            text = io.TextIOWrapper(member, encoding="utf-8", newline="")
            reader = csv.reader(text)
            header = tuple(next(reader, ()))
            if header != HEADER:
                raise TraceError(f"unexpected header {','.join(header)!r}", source=f"{path}:{MEMBER}", line=1,
                                 accepted=",".join(HEADER))
            rows = list(reader)
    except (tarfile.TarError, KeyError, OSError, EOFError) as exc:
        raise TraceError(f"not a readable tar.gz holding {MEMBER} ({exc})", source=str(path)) from None
    anomalies: dict[str, int] = {}
    by: dict[str, dict[float, float]] = {}
    for row in rows:
        if not row:
            continue
        try:
            value, t, key = float(row[0]), float(row[1]), row[2]
        except (ValueError, IndexError):
            anomalies["genai.unparseable_row"] = anomalies.get("genai.unparseable_row", 0) + 1
            continue
        if not 0.0 <= value <= 1.5:
            anomalies["genai.value_out_of_range"] = anomalies.get("genai.value_out_of_range", 0) + 1
            continue
        samples = by.setdefault(key, {})
        if t in samples:
            anomalies["genai.duplicate_timestamp"] = anomalies.get("genai.duplicate_timestamp", 0) + 1
            continue
        samples[t] = value
    series = []
    for key in sorted(by):
        times = np.array(sorted(by[key]), dtype=np.float64)
        series.append((key, times, np.array([by[key][t] for t in times.tolist()], dtype=np.float64)))
    return MemoryUtil(source=str(path), series=tuple(series), anomalies=anomalies)
