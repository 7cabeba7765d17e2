"""Row-anomaly accounting and the one file-level error shared by the trace readers.

Real traces are messy. A reader never raises for a bad *row*: it skips or repairs the row and
counts it under a kind named ``<trace>.<snake_case_reason>`` (``bitbrains.zero_provisioned``,
``alibaba.empty_plan``). Only a file that cannot be read at all (missing, not gzip, corrupt
stream, wrong header) raises :class:`~kalena_engine.errors.TraceError`, naming the file and why.
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from kalena_engine.errors import TraceError

_KIND = re.compile(r"^[a-z][a-z0-9_]*\.[a-z][a-z0-9_]*$")


class Anomalies:
    """Counts of anomalies by kind for one trace (``Counter``-like, kinds validated).

    ``Anomalies("bitbrains").add("zero_provisioned", 3)`` counts 3 under
    ``"bitbrains.zero_provisioned"``. Kinds with a zero count are not reported.

    Raises:
        ValueError: a prefix or kind that is not snake_case, or a negative count.
    """

    def __init__(self, prefix: str) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", prefix):
            raise ValueError(f"anomaly prefix {prefix!r} is not snake_case ([a-z][a-z0-9_]*)")
        self._prefix = prefix
        self._counts: dict[str, int] = {}

    def add(self, kind: str, n: int = 1) -> None:
        """Count ``n`` more rows (or events) of ``kind`` (the part after the prefix)."""
        name = f"{self._prefix}.{kind}"
        if not _KIND.match(name):
            raise ValueError(f"anomaly kind {name!r} is not snake_case")
        n = int(n)
        if n < 0:
            raise ValueError(f"anomaly count for {name} must be ≥ 0, got {n}")
        if n:
            self._counts[name] = self._counts.get(name, 0) + n

    def update(self, counts: Mapping[str, int]) -> None:
        """Add already-prefixed counts (e.g. another reader's ``as_dict()``)."""
        for name, n in counts.items():
            if not _KIND.match(name):
                raise ValueError(f"anomaly kind {name!r} is not snake_case")
            if n:
                self._counts[name] = self._counts.get(name, 0) + int(n)

    def __getitem__(self, kind: str) -> int:
        """Count for ``kind``, given with or without the prefix; 0 when never counted."""
        name = kind if "." in kind else f"{self._prefix}.{kind}"
        return self._counts.get(name, 0)

    def as_dict(self) -> dict[str, int]:
        """A fresh ``{kind: count}`` dict, sorted by kind, without zero counts."""
        return dict(sorted(self._counts.items()))


def sum_counts(*counts: Mapping[str, int]) -> dict[str, int]:
    """Sum several ``{kind: count}`` dicts into one, sorted by kind (zero counts dropped)."""
    total: dict[str, int] = {}
    for one in counts:
        for name, n in one.items():
            total[name] = total.get(name, 0) + int(n)
    return {name: n for name, n in sorted(total.items()) if n}


@contextmanager
def open_trace_text(path: str | Path) -> Iterator[TextIO]:
    """Open a trace file as text, gunzipping it when the name ends in ``.gz``.

    Undecodable bytes become U+FFFD, so a garbled row is a row anomaly, not a file error.

    Raises:
        TraceError: the file is missing or unreadable, is not gzip although named ``.gz``, or its
            compressed stream is corrupt or truncated (reading it partially would silently lose
            rows, so the whole file is refused).
    """
    source = str(path)
    try:
        if source.endswith(".gz"):
            handle: TextIO = gzip.open(source, "rt", encoding="utf-8", errors="replace", newline="")
        else:
            handle = open(source, encoding="utf-8", errors="replace", newline="")  # noqa: SIM115
    except OSError as exc:
        raise TraceError(f"cannot open the file: {exc.strerror or exc}", source=source) from exc
    try:
        yield handle
    except gzip.BadGzipFile as exc:
        raise TraceError(f"not a gzip file: {exc}", source=source,
                         accepted="gzip-compressed CSV") from exc
    except (EOFError, zlib.error) as exc:
        raise TraceError(f"corrupt or truncated gzip stream: {exc}", source=source) from exc
    except (OSError, io.UnsupportedOperation) as exc:
        raise TraceError(f"cannot read the file: {exc}", source=source) from exc
    finally:
        handle.close()
