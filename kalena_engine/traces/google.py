"""Readers for the Google cluster-usage trace 2011 (clusterdata-2011-2; docs/design.md §11).

Two tables are read: ``task_events`` (no header; 13 columns in ``schema.csv`` order) and
``task_usage`` (a header row added upstream). From them this module derives

- the production peak-to-request ratios the replay's ``peak`` usage mapping draws from
  (:func:`production_peak_ratios`, the SUBMIT-row join of docs/design.md §11), and
- a batch arrival stream (:func:`batch_tasks_from_events`).

Units in the files: times in µs (the trace starts at 600 s); CPU request and rates in cores
normalised so the largest machine = 1.0; memory and disk likewise normalised to the largest
machine. Priorities 0–11 fall into bands: 0–1 free, 2–8 middle, 9–11 production
(Reiss, Wilkes, Hellerstein, "Google cluster-usage traces: format + schema", 2011).
"""

from __future__ import annotations

import csv
import math
from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kalena_engine.errors import TraceError
from kalena_engine.resources import CPU, N_DIMS, RAM
from kalena_engine.traces.anomalies import Anomalies, columnar_table, open_trace_text, read_trace_bytes, sum_counts
from kalena_engine.traces.batch import BatchTasks, empty_batch

#: The int64 range the columns are stored in; a value outside it is an unparseable row.
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1

SUBMIT, SCHEDULE, EVICT, FAIL, FINISH, KILL, LOST, UPDATE_PENDING, UPDATE_RUNNING = range(9)
EVENT_TYPES: tuple[str, ...] = (
    "SUBMIT", "SCHEDULE", "EVICT", "FAIL", "FINISH", "KILL", "LOST",
    "UPDATE_PENDING", "UPDATE_RUNNING",
)
TERMINAL_EVENTS: tuple[int, ...] = (EVICT, FAIL, FINISH, KILL, LOST)
#: Priority bands of the 2011 trace: name → inclusive (low, high).
PRIORITY_BANDS: dict[str, tuple[int, int]] = {
    "free": (0, 1), "middle": (2, 8), "production": (9, 11),
}
PRODUCTION_MIN_PRIORITY = 9
#: Assumed size of the largest 2011 machine (= 1.0 in the trace's normalised units). The trace
#: does not publish it; 32 cores / 64 GiB is Kalena's documented choice, override per study.
DEFAULT_MACHINE_CORES = 32.0
DEFAULT_MACHINE_RAM_BYTES = 64.0 * 2**30

_N_EVENT_COLUMNS = 13
_USAGE_COLUMNS: tuple[str, ...] = (
    "start_time", "end_time", "job_id", "task_index",
    "cpu_rate", "max_cpu_rate", "canonical_memory", "max_memory",
)


@dataclass(frozen=True, eq=False)
class TaskEvents:
    """``task_events`` rows as struct-of-arrays, in file order, all ``(n,)``.

    ``time_s`` float64 s (µs / 1e6); ``job_id``, ``task_index`` int64; ``event_type`` int8
    (:data:`EVENT_TYPES`); ``priority`` int8 0–11; ``scheduling_class`` int8 0–3 or −1 when
    empty; ``cpu_request``, ``mem_request``, ``disk_request`` float64 normalised to the largest
    machine, NaN where the file leaves them empty.
    """

    source: str
    time_s: np.ndarray
    job_id: np.ndarray
    task_index: np.ndarray
    event_type: np.ndarray
    priority: np.ndarray
    scheduling_class: np.ndarray
    cpu_request: np.ndarray
    mem_request: np.ndarray
    disk_request: np.ndarray
    anomalies: dict[str, int]

    def __len__(self) -> int:
        return len(self.time_s)


@dataclass(frozen=True, eq=False)
class TaskUsage:
    """``task_usage`` rows as struct-of-arrays, in file order, all ``(n,)``.

    ``job_id``, ``task_index`` int64; ``start_s``, ``end_s`` float64 s (µs / 1e6) of the
    measurement window; ``cpu_rate`` (mean) and ``max_cpu_rate`` in normalised cores;
    ``canonical_memory`` (mean) and ``max_memory`` normalised to the largest machine; NaN
    where the file leaves a value empty.
    """

    source: str
    job_id: np.ndarray
    task_index: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    cpu_rate: np.ndarray
    max_cpu_rate: np.ndarray
    canonical_memory: np.ndarray
    max_memory: np.ndarray
    anomalies: dict[str, int]

    def __len__(self) -> int:
        return len(self.job_id)


@dataclass(frozen=True, eq=False)
class PeakRatios:
    """Production peak-to-request ratios from the SUBMIT-row join (docs/design.md §11).

    ``ratios`` is ``(m, 2)`` float64 ``[cpu, ram]`` in ``[0, 1]``; ``job_id``, ``task_index``,
    ``priority`` ``(m,)`` identify each row. Counts: ``usage_rows`` read, ``joined`` (key has a
    SUBMIT), ``with_requests`` (that SUBMIT has CPU and memory requests), ``production``
    (priority ≥ the threshold with both requests > 0), ``capped_cpu``/``capped_mem`` (ratios
    above 1 set to 1, since replayed usage is clipped at the limit ``L = q`` anyway).
    """

    ratios: np.ndarray
    job_id: np.ndarray
    task_index: np.ndarray
    priority: np.ndarray
    usage_rows: int
    joined: int
    with_requests: int
    production: int
    capped_cpu: int
    capped_mem: int
    anomalies: dict[str, int]


def read_task_events(path: str | Path) -> TaskEvents:
    """Read one ``task_events`` shard (no header, 13 columns per ``schema.csv``).

    Skipped rows: ``google.unparseable_row`` (not 13 columns, or a mandatory field — time, job
    ID, task index, event type, priority — empty or not an integer, or a request not a number)
    and ``google.out_of_range`` (event type outside 0–8, priority outside 0–11, a negative
    request); blank lines are ignored. Kept but counted: ``google.empty_request`` (a CPU,
    memory or disk request left empty, stored as NaN; the trace does this for SUBMITs flagged
    "missing info").

    Raises:
        TraceError: the file is missing, not gzip, corrupt or has no rows at all.
    """
    source = str(path)
    fast = _task_events_columnar(source, read_trace_bytes(source))
    if fast is not None:
        return fast
    anomalies = Anomalies("google")
    ints = {name: array("q") for name in ("time", "job", "task", "type", "prio", "cls")}
    floats = {name: array("d") for name in ("cpu", "mem", "disk")}
    with open_trace_text(source) as handle:
        rows_read = 0
        for row in csv.reader(handle):
            if not row:
                continue
            rows_read += 1
            if len(row) != _N_EVENT_COLUMNS:
                anomalies.add("unparseable_row")
                continue
            try:
                time_us, job, task, kind, prio = (int(row[i]) for i in (0, 2, 3, 5, 8))
                cls = int(row[7]) if row[7] else -1
                requests = [float(row[i]) if row[i] else math.nan for i in (9, 10, 11)]
            except ValueError:
                anomalies.add("unparseable_row")
                continue
            if not all(_I64_MIN <= v <= _I64_MAX for v in (time_us, job, task, kind, prio, cls)):
                anomalies.add("unparseable_row")   # beyond a 64-bit integer: no trace value is
                continue
            if not 0 <= kind <= 8 or not 0 <= prio <= 11 or any(r < 0 for r in requests):
                anomalies.add("out_of_range")
                continue
            if any(math.isnan(r) for r in requests):
                anomalies.add("empty_request")
            for name, value in zip(ints, (time_us, job, task, kind, prio, cls), strict=True):
                ints[name].append(value)
            for name, value in zip(floats, requests, strict=True):
                floats[name].append(value)
    if rows_read == 0:
        raise TraceError("empty file: no task_events rows", source=source)
    col = {name: np.frombuffer(values, dtype=np.int64) for name, values in ints.items()}
    req = {name: np.frombuffer(values, dtype=np.float64).copy() for name, values in floats.items()}
    return TaskEvents(
        source=source, time_s=col["time"] / 1e6, job_id=col["job"].copy(),
        task_index=col["task"].copy(), event_type=col["type"].astype(np.int8),
        priority=col["prio"].astype(np.int8), scheduling_class=col["cls"].astype(np.int8),
        cpu_request=req["cpu"], mem_request=req["mem"], disk_request=req["disk"],
        anomalies=anomalies.as_dict(),
    )


def _task_events_columnar(source: str, body: bytes) -> TaskEvents | None:
    """:func:`read_task_events` in one pyarrow pass when every row parses (no field count,
    integer or number problem, no empty mandatory field): the same arrays and the same
    ``out_of_range`` / ``empty_request`` counts, by the same rules in numpy. ``None`` when a row
    needs the row-by-row reader's judgement (or pyarrow is missing, or the file has no row)."""
    if not body.strip():
        return None
    try:
        import pyarrow as pa
    except ImportError:
        return None
    i64, f64 = pa.int64(), pa.float64()
    types = [i64, None, i64, i64, None, i64, None, i64, i64, f64, f64, f64, None]
    table = columnar_table(body, types, nullable=(7, 9, 10, 11))
    if table is None or table.num_rows == 0:
        return None

    def column(i: int, fill: float | int | None = None) -> np.ndarray:
        data = table.column(f"c{i}")
        if fill is not None:
            data = data.fill_null(fill)
        return data.to_numpy()

    time_us, job, task, kind, prio = (column(i).astype(np.int64) for i in (0, 2, 3, 5, 8))
    cls = column(7, -1).astype(np.int64)
    requests = np.column_stack([column(i, math.nan).astype(np.float64) for i in (9, 10, 11)])
    anomalies = Anomalies("google")
    in_range = (kind >= 0) & (kind <= 8) & (prio >= 0) & (prio <= 11) & ~(requests < 0).any(axis=1)
    anomalies.add("out_of_range", int((~in_range).sum()))
    requests = requests[in_range]
    anomalies.add("empty_request", int(np.isnan(requests).any(axis=1).sum()))
    return TaskEvents(
        source=source, time_s=time_us[in_range] / 1e6, job_id=job[in_range].copy(),
        task_index=task[in_range].copy(), event_type=kind[in_range].astype(np.int8),
        priority=prio[in_range].astype(np.int8), scheduling_class=cls[in_range].astype(np.int8),
        cpu_request=np.ascontiguousarray(requests[:, 0]), mem_request=np.ascontiguousarray(requests[:, 1]),
        disk_request=np.ascontiguousarray(requests[:, 2]), anomalies=anomalies.as_dict(),
    )


def read_task_usage(path: str | Path) -> TaskUsage:
    """Read ``task_usage`` rows (with a header naming at least :data:`_USAGE_COLUMNS`).

    Skipped: ``google.unparseable_row`` (column count differs from the header, or times, job ID
    or task index not integers, or a usage value not a number); blank lines are ignored. Kept
    but counted: ``google.empty_usage`` (a mean/max CPU or memory value left empty, as NaN).

    Raises:
        TraceError: the file is missing, not gzip, corrupt, empty, or its header lacks a column.
    """
    source = str(path)
    anomalies = Anomalies("google")
    keys = {name: array("q") for name in _USAGE_COLUMNS[:4]}
    values = {name: array("d") for name in _USAGE_COLUMNS[4:]}
    with open_trace_text(source) as handle:
        rows = csv.reader(handle)
        header = [cell.strip() for cell in next(rows, [])]
        missing = [name for name in _USAGE_COLUMNS if name not in header]
        if missing:
            raise TraceError(f"header lacks column(s) {', '.join(missing)}", source=source, line=1,
                             accepted="a header naming " + ",".join(_USAGE_COLUMNS))
        where = [header.index(name) for name in _USAGE_COLUMNS]
        for row in rows:
            if not row:
                continue
            if len(row) != len(header):
                anomalies.add("unparseable_row")
                continue
            try:
                key_row = [int(row[i]) for i in where[:4]]
                value_row = [float(row[i]) if row[i] else math.nan for i in where[4:]]
            except ValueError:
                anomalies.add("unparseable_row")
                continue
            if not all(_I64_MIN <= v <= _I64_MAX for v in key_row):
                anomalies.add("unparseable_row")
                continue
            if any(math.isnan(v) for v in value_row):
                anomalies.add("empty_usage")
            for name, key in zip(keys, key_row, strict=True):
                keys[name].append(key)
            for name, value in zip(values, value_row, strict=True):
                values[name].append(value)
    k = {name: np.frombuffer(column, dtype=np.int64).copy() for name, column in keys.items()}
    v = {name: np.frombuffer(column, dtype=np.float64).copy() for name, column in values.items()}
    return TaskUsage(
        source=source, job_id=k["job_id"], task_index=k["task_index"],
        start_s=k["start_time"] / 1e6, end_s=k["end_time"] / 1e6,
        cpu_rate=v["cpu_rate"], max_cpu_rate=v["max_cpu_rate"],
        canonical_memory=v["canonical_memory"], max_memory=v["max_memory"],
        anomalies=anomalies.as_dict(),
    )


def priority_tier(priority: int, *, min_priority: int = PRODUCTION_MIN_PRIORITY) -> str:
    """Kalena tier of a 2011 Google priority: ``"service"`` if ≥ ``min_priority``, else ``"batch"``.

    Bands (:data:`PRIORITY_BANDS`): 9–11 production → service; 2–8 middle and 0–1 free → batch.

    Raises:
        ValueError: a priority outside 0–11.
    """
    if not 0 <= int(priority) <= 11:
        raise ValueError(f"Google 2011 priority must be 0–11, got {priority}")
    return "service" if int(priority) >= min_priority else "batch"


def production_peak_ratios(events: TaskEvents, usage: TaskUsage, *,
                           min_priority: int = PRODUCTION_MIN_PRIORITY) -> PeakRatios:
    """Join usage rows to their task's SUBMIT and return production peak/request ratios.

    Each usage row joins on (job ID, task index) to a SUBMIT (event type 0): the latest at or
    before the usage window's start, else the task's first. Rows whose SUBMIT has CPU and
    memory requests count as ``with_requests``; of those, priority ≥ ``min_priority`` with both
    requests > 0 are production. Ratios (docs/design.md §11):
    ``cpu = min(max_cpu_rate / cpu_request, 1)``, ``ram = min(max_memory / mem_request, 1)``.
    Example: max_cpu_rate 0.0397, cpu_request 0.125 → 0.318; max_memory 0.0679, mem_request
    0.0596 → 1.14, capped to 1. Production rows with an empty max value are dropped and counted
    as ``google.empty_peak``.
    """
    submits = np.flatnonzero(events.event_type == SUBMIT)
    choice = _asof_submit(events, submits, usage.job_id, usage.task_index, usage.start_s)
    joined = choice >= 0
    rows = np.flatnonzero(joined)
    sub = submits[choice[joined]]
    cpu_req, mem_req = events.cpu_request[sub], events.mem_request[sub]
    priority = events.priority[sub].astype(np.int64)
    has_req = np.isfinite(cpu_req) & np.isfinite(mem_req)
    prod = has_req & (priority >= min_priority) & (cpu_req > 0) & (mem_req > 0)
    peak_cpu, peak_mem = usage.max_cpu_rate[rows], usage.max_memory[rows]
    usable = prod & np.isfinite(peak_cpu) & np.isfinite(peak_mem)
    anomalies = Anomalies("google")
    anomalies.update(sum_counts(events.anomalies, usage.anomalies))
    anomalies.add("empty_peak", int(prod.sum() - usable.sum()))
    raw = np.column_stack([peak_cpu[usable] / cpu_req[usable], peak_mem[usable] / mem_req[usable]])
    return PeakRatios(
        ratios=np.minimum(raw, 1.0), job_id=usage.job_id[rows[usable]],
        task_index=usage.task_index[rows[usable]], priority=priority[usable],
        usage_rows=len(usage), joined=int(joined.sum()), with_requests=int(has_req.sum()),
        production=int(prod.sum()), capped_cpu=int((raw[:, 0] > 1).sum()),
        capped_mem=int((raw[:, 1] > 1).sum()), anomalies=anomalies.as_dict(),
    )


def _asof_submit(events: TaskEvents, submits: np.ndarray, job: np.ndarray, task: np.ndarray,
                 time_s: np.ndarray) -> np.ndarray:
    """Per query, the index into ``submits`` of its SUBMIT (latest ≤ time, else first), or −1.

    Vectorised as-of join: SUBMITs and queries are sorted together by (job, task, time), a
    SUBMIT sorting before a query at the same time; each query then takes the nearest SUBMIT
    before it in its (job, task) group, or failing that the nearest after it.
    """
    n_sub = len(submits)
    all_job = np.concatenate([events.job_id[submits], job])
    all_task = np.concatenate([events.task_index[submits], task])
    all_time = np.concatenate([events.time_s[submits], time_s])
    is_query = np.arange(len(all_job)) >= n_sub
    order = np.lexsort((is_query, all_time, all_task, all_job))
    o_job, o_task, o_query = all_job[order], all_task[order], is_query[order]
    new_group = np.ones(len(order), dtype=bool)
    new_group[1:] = (o_job[1:] != o_job[:-1]) | (o_task[1:] != o_task[:-1])
    group = np.cumsum(new_group)
    pos = np.arange(len(order))
    prev_sub = np.maximum.accumulate(np.where(o_query, -1, pos))
    next_sub = np.minimum.accumulate(np.where(o_query, len(order), pos)[::-1])[::-1]
    prev_ok = (prev_sub >= 0) & (group[np.maximum(prev_sub, 0)] == group)
    next_ok = (next_sub < len(order)) & (group[np.minimum(next_sub, len(order) - 1)] == group)
    chosen = np.where(prev_ok, prev_sub, np.where(next_ok, next_sub, -1))
    result = np.full(len(job), -1, dtype=np.int64)
    queries = np.flatnonzero(o_query)
    found = chosen[queries] >= 0
    result[order[queries[found]] - n_sub] = order[chosen[queries[found]]]
    return result


def batch_tasks_from_events(events: TaskEvents, *, machine_cores: float = DEFAULT_MACHINE_CORES,
                            machine_ram_bytes: float = DEFAULT_MACHINE_RAM_BYTES,
                            min_priority: int = PRODUCTION_MIN_PRIORITY) -> BatchTasks:
    """One :class:`BatchTasks` row per batch-tier task (priority < ``min_priority``).

    Per (job ID, task index) with a SUBMIT: ``instances = 1``; ``arrival_s`` = first SUBMIT;
    ``duration_s`` = first terminal event (EVICT/FAIL/FINISH/KILL/LOST) after the first
    SCHEDULE − that SCHEDULE, or, when none follows, the shard's last event time − the SCHEDULE
    (counted ``google.censored_duration``); ``request[cpu] = cpu_request × machine_cores × 1000``
    mcpu, ``request[ram] = mem_request × machine_ram_bytes`` bytes, other dimensions 0 (disk
    requests are not mapped: no disk size is published); ``priority`` = the Google priority;
    ``job_id`` = the job ID; ``task_id = "google:<job>:<index>"``. Requests and priority come
    from the first SUBMIT. Example: cpu_request 0.0625 on a 32-core machine → 2000 mcpu.

    Skipped and counted: ``google.no_submit`` (a task of any tier whose SUBMIT predates the
    shard), ``google.never_scheduled``, ``google.task_without_request`` (empty CPU or memory
    request), ``google.zero_request`` (both 0), ``google.zero_duration``.

    Raises:
        ValueError: ``machine_cores`` or ``machine_ram_bytes`` not finite and > 0.
    """
    for name, value in (("machine_cores", machine_cores), ("machine_ram_bytes", machine_ram_bytes)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
    anomalies = Anomalies("google")
    anomalies.update(events.anomalies)
    n = len(events)
    if n == 0:
        return empty_batch(events.source, anomalies.as_dict())
    order = np.lexsort((events.time_s, events.task_index, events.job_id))
    job, task = events.job_id[order], events.task_index[order]
    time_s, kind = events.time_s[order], events.event_type[order]
    new_group = np.ones(n, dtype=bool)
    new_group[1:] = (job[1:] != job[:-1]) | (task[1:] != task[:-1])
    starts = np.flatnonzero(new_group)
    group = np.cumsum(new_group) - 1
    pos = np.arange(n)

    def first(mask: np.ndarray) -> np.ndarray:
        """Per task, the sorted position of the first event in ``mask``, or ``n`` if none."""
        return np.minimum.reduceat(np.where(mask, pos, n), starts)

    submit = first(kind == SUBMIT)
    schedule = first((kind == SCHEDULE) & (pos > submit[group]))
    terminal = first(np.isin(kind, TERMINAL_EVENTS) & (pos > schedule[group]))
    has_submit = submit < n
    anomalies.add("no_submit", int((~has_submit).sum()))

    sub_row = order[np.minimum(submit, n - 1)]
    batch = has_submit & (events.priority[sub_row] < min_priority)
    scheduled = batch & (schedule < n)
    anomalies.add("never_scheduled", int((batch & ~scheduled).sum()))
    cpu_req, mem_req = events.cpu_request[sub_row], events.mem_request[sub_row]
    with_req = scheduled & np.isfinite(cpu_req) & np.isfinite(mem_req)
    anomalies.add("task_without_request", int((scheduled & ~with_req).sum()))
    nonzero = with_req & ((cpu_req > 0) | (mem_req > 0))
    anomalies.add("zero_request", int((with_req & ~nonzero).sum()))
    shard_end_s = float(events.time_s.max())
    censored = terminal >= n
    end_s = np.where(censored, shard_end_s, time_s[np.minimum(terminal, n - 1)])
    duration = end_s - time_s[np.minimum(schedule, n - 1)]
    keep = nonzero & (duration > 0)
    anomalies.add("zero_duration", int((nonzero & ~keep).sum()))
    anomalies.add("censored_duration", int((keep & censored).sum()))

    rows = np.flatnonzero(keep)
    job_text = job[starts[rows]].astype(str)
    request = np.zeros((len(rows), N_DIMS))
    request[:, CPU] = cpu_req[rows] * machine_cores * 1000.0
    request[:, RAM] = mem_req[rows] * machine_ram_bytes
    return BatchTasks(
        source=events.source,
        task_id=np.char.add(np.char.add(np.char.add("google:", job_text), ":"),
                            task[starts[rows]].astype(str)),
        job_id=job_text, instances=np.ones(len(rows), dtype=np.int64),
        arrival_s=time_s[submit[rows]], duration_s=duration[rows], request=request,
        priority=events.priority[sub_row[rows]].astype(np.int64), anomalies=anomalies.as_dict(),
    )
