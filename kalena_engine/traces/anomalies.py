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
from collections.abc import Iterator, Mapping, Sequence
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


def read_trace_bytes(path: str | Path) -> bytes:
    """The whole (gunzipped when the name ends in ``.gz``) content of a trace file as bytes, for
    the columnar readers; the same errors as :func:`open_trace_text`.

    Raises:
        TraceError: as :func:`open_trace_text`.
    """
    source = str(path)
    try:
        handle = gzip.open(source, "rb") if source.endswith(".gz") else open(source, "rb")  # noqa: SIM115
    except OSError as exc:
        raise TraceError(f"cannot open the file: {exc.strerror or exc}", source=source) from exc
    try:
        with handle:
            return handle.read()
    except gzip.BadGzipFile as exc:
        raise TraceError(f"not a gzip file: {exc}", source=source,
                         accepted="gzip-compressed CSV") from exc
    except (EOFError, zlib.error) as exc:
        raise TraceError(f"corrupt or truncated gzip stream: {exc}", source=source) from exc
    except (OSError, io.UnsupportedOperation) as exc:
        raise TraceError(f"cannot read the file: {exc}", source=source) from exc


_NAN_PAYLOAD = re.compile(rb"[nN][aA][nN]\(")


def columnar_table(body: bytes, types: Sequence[object], *, delimiter: str = ",",
                   nullable: Sequence[int] = (), whitespace_ok: bool = False):
    """Parse CSV ``body`` (no header, no quoting) with pyarrow's C++ reader into a table of the
    columns whose ``types`` entry is a pyarrow type (``None``: the column must exist but is not
    converted), or ``None`` when the fast path does not apply: pyarrow is not installed, the
    body holds a space or tab and ``whitespace_ok`` is false (the row-by-row readers judge such
    values themselves; with no nullable column, pyarrow's numbers strip it as Python's do), the
    body holds a ``nan(…)`` (C's NaN with a payload: pyarrow reads it, Python's ``float``
    refuses it), a row does not parse (wrong field count, a value the type refuses) or a value
    is empty in a column not listed in ``nullable`` (there an empty field is a null). The caller
    then reads the body row by row with its own checks, so a file with a bad row gives exactly
    the counts and errors of the row-by-row reader; a clean file gives the same values (both
    parse decimal text to the nearest float64).
    """
    try:
        import pyarrow as pa
        import pyarrow.csv as pcsv
    except ImportError:  # the agent-only install: the row-by-row reader serves
        return None
    if not whitespace_ok and (b" " in body or b"\t" in body):
        return None
    if _NAN_PAYLOAD.search(body):   # pyarrow reads C's ``nan(…)`` as NaN, Python's float() refuses it
        return None
    names = [f"c{i}" for i in range(len(types))]
    kept = {name: kind for name, kind in zip(names, types, strict=True) if kind is not None}
    try:
        table = pcsv.read_csv(
            pa.py_buffer(body),
            read_options=pcsv.ReadOptions(column_names=names, use_threads=False, block_size=1 << 26),
            parse_options=pcsv.ParseOptions(delimiter=delimiter, quote_char=False, newlines_in_values=False),
            convert_options=pcsv.ConvertOptions(column_types=kept, include_columns=list(kept),
                                                null_values=[""] if nullable else [],
                                                strings_can_be_null=False, quoted_strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None
    allowed = {f"c{i}" for i in nullable}
    if any(table.column(name).null_count for name in kept if name not in allowed):
        return None
    return table
