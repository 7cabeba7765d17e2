"""Reader for the GWA-T-12 Bitbrains "Rnd" VM series, July 2013 (docs/design.md §11, traces/README.md).

One file per VM, nominally one row per 300 s, fields separated by ``;`` and a tab. Provisioned
CPU and memory are the VM's size (treated as its request/limit); usage over provisioned is the
gap Kalena harvests. The replay drives a pod with request ``q`` from a VM ``v`` as
``u(t) = q · usage_v(t) / provisioned_v`` (cpu, ram), holding each sample until the next.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kalena_engine.errors import TraceError
from kalena_engine.traces.anomalies import Anomalies, columnar_table, read_trace_bytes, sum_counts

COLUMNS: tuple[str, ...] = (
    "Timestamp [ms]", "CPU cores", "CPU capacity provisioned [MHZ]", "CPU usage [MHZ]",
    "CPU usage [%]", "Memory capacity provisioned [KB]", "Memory usage [KB]",
    "Disk read throughput [KB/s]", "Disk write throughput [KB/s]",
    "Network received throughput [KB/s]", "Network transmitted throughput [KB/s]",
)
#: File columns kept, in :class:`VMSeries` order (CPU cores and CPU usage [%] are redundant).
_KEPT = (2, 3, 5, 6, 7, 8, 9, 10)
_CPU_PROV, _CPU_USE, _MEM_PROV, _MEM_USE = range(4)
#: A gap between kept samples longer than this is counted (nominal spacing is 300 s).
GAP_S = 900
KIB = 1024.0
_FILE_NAME = re.compile(r"^(\d+)\.csv(\.gz)?$")


@dataclass(frozen=True, eq=False)
class VMSeries:
    """One VM's cleaned samples; every array is ``(m,)`` float64 except ``timestamp_s``.

    Attributes:
        vm_id: the file stem, e.g. ``"54"``.
        timestamp_s: int64 Unix seconds, strictly increasing (the header says ms; it is s).
        cpu_provisioned_mhz: > 0, the VM's CPU size. cpu_usage_mhz: ≥ 0, may exceed it.
        mem_provisioned_kib: > 0 (KiB), the VM's memory size. mem_usage_kib: ≥ 0 (KiB).
        disk_read_kibps, disk_write_kibps, net_in_kibps, net_out_kibps: ≥ 0, KiB/s.
        rows_read: data rows in the file before cleaning (header excluded).
        anomalies: ``{kind: count}`` for this file (see :func:`read_vm_series`).
    """

    vm_id: str
    timestamp_s: np.ndarray
    cpu_provisioned_mhz: np.ndarray
    cpu_usage_mhz: np.ndarray
    mem_provisioned_kib: np.ndarray
    mem_usage_kib: np.ndarray
    disk_read_kibps: np.ndarray
    disk_write_kibps: np.ndarray
    net_in_kibps: np.ndarray
    net_out_kibps: np.ndarray
    rows_read: int
    anomalies: dict[str, int]

    def __len__(self) -> int:
        return len(self.timestamp_s)


@dataclass(frozen=True, eq=False)
class BitbrainsSet:
    """All VM series of one Bitbrains directory, sorted by numeric VM id."""

    directory: str
    series: tuple[VMSeries, ...]
    anomalies: dict[str, int]

    def earliest_start_s(self) -> int:
        """The first kept timestamp over all non-empty series (Unix s).

        Raises:
            ValueError: every series is empty.
        """
        firsts = [int(vm.timestamp_s[0]) for vm in self.series if len(vm)]
        if not firsts:
            raise ValueError(f"{self.directory}: no VM has a usable row")
        return min(firsts)

    def covering(self, start_s: float, end_s: float, *, tolerance_s: float = 300,
                 ) -> tuple[VMSeries, ...]:
        """VMs whose kept samples span the window: first ≤ start + tol and last ≥ end − tol.

        Only the end points are checked; gaps inside the window are the replay's business
        (samples are held until the next one).
        """
        return tuple(
            vm for vm in self.series
            if len(vm) and vm.timestamp_s[0] <= start_s + tolerance_s
            and vm.timestamp_s[-1] >= end_s - tolerance_s
        )


def read_vm_series(path: str | Path) -> VMSeries:
    """Read and clean one Bitbrains VM file (``<id>.csv.gz``).

    Cleaning, in order, each counted under ``bitbrains.<kind>``:

    1. rows without 11 numeric fields, or with a non-finite timestamp, are skipped
       (``unparseable_row``); blank lines are ignored;
    2. NaN values become 0 (``nan_value``) and negative values become 0 (``negative_value``),
       one count per value, in the eight kept columns;
    3. rows are sorted by timestamp if needed (``out_of_order``: one per backward step);
    4. rows sharing a timestamp merge into one, taking the maximum of each column
       (``duplicate_timestamp``: one per extra row) — before step 5, so a half-row whose
       provisioned field is zeroed does not cost the timestamp;
    5. rows with provisioned CPU or memory ≤ 0 are dropped (``zero_provisioned``).

    Counted without changing data: ``usage_above_provisioned`` (cpu usage > provisioned:
    real bursting) and ``gap_over_900s`` (consecutive kept samples more than 900 s apart).
    A file with no usable row gives an empty series (``empty_after_cleaning``).

    Raises:
        TraceError: the file is missing, not gzip, corrupt, empty or has another header.
    """
    source = str(path)
    content = read_trace_bytes(source)
    header, body = _split_header(content)
    if tuple(cell.strip() for cell in header.split(";")) != COLUMNS:
        raise TraceError(f"unexpected header {header.strip()!r}" if header else "empty file",
                         source=source, line=1, accepted="; ".join(COLUMNS))
    anomalies = Anomalies("bitbrains")
    values, rows_read, bad = _parse_columnar(body)
    finite_ts = np.isfinite(values[:, 0])
    anomalies.add("unparseable_row", bad + int((~finite_ts).sum()))
    values = values[finite_ts]
    timestamp = np.rint(values[:, 0]).astype(np.int64)
    kept = values[:, _KEPT]
    nan = np.isnan(kept)
    anomalies.add("nan_value", int(nan.sum()))
    kept[nan] = 0.0
    negative = kept < 0
    anomalies.add("negative_value", int(negative.sum()))
    kept[negative] = 0.0

    backward = int((np.diff(timestamp) < 0).sum())
    anomalies.add("out_of_order", backward)
    if backward:
        order = np.argsort(timestamp, kind="stable")
        timestamp, kept = timestamp[order], kept[order]
    if len(timestamp):
        starts = np.flatnonzero(np.diff(timestamp, prepend=timestamp[0] - 1))
        anomalies.add("duplicate_timestamp", len(timestamp) - len(starts))
        if len(starts) < len(timestamp):
            timestamp, kept = timestamp[starts], np.maximum.reduceat(kept, starts, axis=0)

    provisioned = (kept[:, _CPU_PROV] > 0) & (kept[:, _MEM_PROV] > 0)
    anomalies.add("zero_provisioned", int((~provisioned).sum()))
    timestamp, kept = timestamp[provisioned], kept[provisioned]
    anomalies.add("usage_above_provisioned", int((kept[:, _CPU_USE] > kept[:, _CPU_PROV]).sum()))
    anomalies.add("gap_over_900s", int((np.diff(timestamp) > GAP_S).sum()))
    if not len(timestamp):
        anomalies.add("empty_after_cleaning")
    columns = [np.ascontiguousarray(kept[:, i]) for i in range(len(_KEPT))]
    return VMSeries(
        Path(source).name.split(".")[0], timestamp, *columns, rows_read=rows_read,
        anomalies=anomalies.as_dict(),
    )


def _split_header(content: bytes) -> tuple[str, bytes]:
    """``(header line as text, the rest as bytes)``; the header ends at the first ``\\n`` or
    ``\\r`` (as a text reader's line would)."""
    ends = [i for i in (content.find(b"\n"), content.find(b"\r")) if i >= 0]
    cut = min(ends) if ends else len(content)
    return content[:cut + 1].decode("utf-8", errors="replace"), content[cut + 1:]


def _parse_columnar(body: bytes) -> tuple[np.ndarray, int, int]:
    """:func:`_parse_rows` of ``body``: pyarrow's CSV reader when every row is clean (the common
    case, one C++ pass), else the row-by-row reader — the same values, counts and skips."""
    if body.strip():
        import_ok = True
        try:
            import pyarrow as pa
        except ImportError:
            import_ok = False
        if import_ok:
            table = columnar_table(body, [pa.float64()] * len(COLUMNS), delimiter=";", whitespace_ok=True)
            if table is not None:
                values = np.column_stack([column.to_numpy() for column in table.columns]).astype(np.float64, copy=False)
                return values.reshape(-1, len(COLUMNS)), len(values), 0
    return _parse_rows(body.decode("utf-8", errors="replace"))


def _parse_rows(body: str) -> tuple[np.ndarray, int, int]:
    """Parse data lines into ``(n, 11)`` float64; return it, rows read and rows skipped.

    Fast path: one vectorised float conversion of the whole body. A file with a malformed line
    falls back to converting line by line so only that line is lost.
    """
    width = len(COLUMNS)
    lines = [line for line in body.splitlines() if line.strip()]
    good = [line for line in lines if line.count(";") == width - 1]
    bad = len(lines) - len(good)
    text = body if not bad else "\n".join(good)
    tokens = text.replace(";", " ").split()
    try:
        if len(tokens) != width * len(good):
            raise ValueError("a line has an empty field")
        values = np.array(tokens, dtype=np.float64).reshape(-1, width)
    except ValueError:
        rows = []
        for line in good:
            try:
                rows.append([float(cell) for cell in line.split(";")])
            except ValueError:
                bad += 1
        values = np.array(rows, dtype=np.float64).reshape(-1, width)
    return values, len(lines), bad


def load_bitbrains(directory: str | Path, *,
                   on_file: Callable[[int, int], None] | None = None) -> BitbrainsSet:
    """Read every ``<id>.csv.gz`` in ``directory`` (see :func:`read_vm_series`).

    ``on_file(done, total)`` is called after each file, e.g. to drive a progress bar.
    Anomaly counts are summed over files.

    Raises:
        TraceError: the directory is missing or holds no ``<id>.csv.gz`` file, or one of its
            files cannot be read at all (the error names that file).
    """
    root = Path(directory)
    if not root.is_dir():
        raise TraceError("not a directory", source=str(root))
    paths = sorted(
        (path for path in root.iterdir() if _FILE_NAME.match(path.name)),
        key=lambda path: int(_FILE_NAME.match(path.name).group(1)),  # type: ignore[union-attr]
    )
    if not paths:
        raise TraceError("no VM files in the directory", source=str(root),
                         accepted="files named <id>.csv.gz")
    series = []
    for done, path in enumerate(paths, start=1):
        series.append(read_vm_series(path))
        if on_file is not None:
            on_file(done, len(paths))
    return BitbrainsSet(str(root), tuple(series), sum_counts(*(vm.anomalies for vm in series)))


def usage_ratio_series(vm: VMSeries) -> np.ndarray:
    """``(m, 6)`` float64 per sample: cpu and ram usage / provisioned (ratios, may exceed 1),
    then disk_read, disk_write, net_in, net_out in bytes/s (KiB/s × 1024).

    The replay maps this onto a pod's request (docs/design.md §11); disk and net have no provisioned
    value, so they are scaled there by the VM's own peak. Example: cpu 87.78 MHz of
    5,852 MHz → 0.015; disk read 160.87 KiB/s → 164,727 B/s.
    """
    return np.column_stack([
        vm.cpu_usage_mhz / vm.cpu_provisioned_mhz,
        vm.mem_usage_kib / vm.mem_provisioned_kib,
        vm.disk_read_kibps * KIB, vm.disk_write_kibps * KIB,
        vm.net_in_kibps * KIB, vm.net_out_kibps * KIB,
    ]).reshape(len(vm), 6)


def sample_at(vm: VMSeries, times_s: np.ndarray) -> np.ndarray:
    """``(k,)`` int64 index of the last sample at or before each time, −1 before the first.

    Samples are held between source samples: at t = 1000 s with samples at 700 s and 1000 s
    the index is that of 1000 s; at 999 s, that of 700 s.
    """
    return np.searchsorted(vm.timestamp_s, np.asarray(times_s), side="right").astype(np.int64) - 1
