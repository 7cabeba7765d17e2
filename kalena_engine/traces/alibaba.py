"""Reader for Alibaba cluster-trace-v2018 ``batch_task`` (docs/design.md §11, traces/README.md).

Mapping onto Kalena: one task row is ``instance_num`` identical **batch**-tier pods that arrive
at ``start_time`` and each run ``end_time − start_time`` seconds. The trace has no priorities
(every task gets priority 0) and no batch usage (the replay assumes usage = request unless told
otherwise).
"""

from __future__ import annotations

import csv
import math
from array import array
from pathlib import Path

import numpy as np

from kalena_engine.errors import TraceError
from kalena_engine.resources import CPU, N_DIMS, RAM
from kalena_engine.traces.anomalies import Anomalies, open_trace_text
from kalena_engine.traces.batch import BatchTasks

HEADER: tuple[str, ...] = (
    "task_name", "instance_num", "job_name", "task_type", "status",
    "start_time", "end_time", "plan_cpu", "plan_mem",
)
#: plan_cpu unit: 100 = one core, so one plan_cpu unit is 10 mcpu.
MCPU_PER_PLAN_CPU = 10.0
#: Default machine that plan_mem is a percentage of: the 2018 cluster's 96-core machines with
#: 512 GiB — an assumption (the trace publishes memory normalised only).
DEFAULT_MACHINE_RAM_BYTES = 512.0 * 2**30


def read_batch_task(path: str | Path, *, machine_ram_bytes: float = DEFAULT_MACHINE_RAM_BYTES,
                    ) -> BatchTasks:
    """Read ``batch_task`` (with its header row) into a :class:`BatchTasks` table.

    Per row (units in brackets):

    - ``instances = instance_num``; ``job_id = job_name``; ``task_id = "job_name/task_name"``;
    - ``arrival_s = start_time`` [s], ``duration_s = end_time − start_time`` [s];
    - ``request[cpu] = plan_cpu × 10`` [mcpu] (100 = one core);
    - ``request[ram] = plan_mem / 100 × machine_ram_bytes`` [bytes] (plan_mem is a percentage
      of one machine's memory); every other dimension 0; ``priority = 0``.

    Example: ``R6_3,371,j_3,1,Terminated,157297,157325,100,0.49`` → 371 instances of 1000 mcpu
    and 0.0049 × 512 GiB ≈ 2.51 GiB, arriving at 157,297 s for 28 s.

    Each skipped row is counted once, under the first check it fails, in this order:
    ``alibaba.unparseable_row`` (not 9 columns, or a non-numeric time or plan),
    ``alibaba.empty_plan`` (plan_cpu or plan_mem empty), ``alibaba.negative_plan``,
    ``alibaba.bad_instance_num`` (≤ 0 or not an integer), ``alibaba.end_before_start``
    (the trace writes ``end_time = 0`` for tasks still running), ``alibaba.zero_duration``
    (no work to run), ``alibaba.zero_request`` (plan_cpu and plan_mem both 0). A repeated
    ``job/task`` key is kept with a ``#2``, ``#3`` … suffix and counted as
    ``alibaba.duplicate_task``. Blank lines are ignored.

    Raises:
        TraceError: the file is missing, not gzip, corrupt, empty or has another header.
        ValueError: ``machine_ram_bytes`` not finite and > 0.
    """
    if not (math.isfinite(machine_ram_bytes) and machine_ram_bytes > 0):
        raise ValueError(f"machine_ram_bytes must be a finite number > 0, got {machine_ram_bytes}")
    source = str(path)
    anomalies = Anomalies("alibaba")
    task_ids: list[str] = []
    job_ids: list[str] = []
    instances = array("q")
    start = array("d")
    duration = array("d")
    plan_cpu = array("d")
    plan_mem = array("d")
    seen: dict[str, int] = {}
    with open_trace_text(source) as handle:
        rows = csv.reader(handle)
        header = next(rows, None)
        if header is None:
            raise TraceError("empty file: no header row", source=source, line=1,
                             accepted=",".join(HEADER))
        if tuple(cell.strip() for cell in header) != HEADER:
            raise TraceError(f"unexpected header {','.join(header)!r}", source=source, line=1,
                             accepted=",".join(HEADER))
        for row in rows:
            if not row:
                continue
            kind = _check_row(row)
            if kind:
                anomalies.add(kind)
                continue
            key = f"{row[2]}/{row[0]}"
            repeat = seen.get(key, 0)
            seen[key] = repeat + 1
            if repeat:
                anomalies.add("duplicate_task")
                key = f"{key}#{repeat + 1}"
            task_ids.append(key)
            job_ids.append(row[2])
            instances.append(int(row[1]))
            begin = float(row[5])
            start.append(begin)
            duration.append(float(row[6]) - begin)
            plan_cpu.append(float(row[7]))
            plan_mem.append(float(row[8]))
    request = np.zeros((len(task_ids), N_DIMS))
    request[:, CPU] = np.frombuffer(plan_cpu, dtype=np.float64) * MCPU_PER_PLAN_CPU
    request[:, RAM] = np.frombuffer(plan_mem, dtype=np.float64) / 100.0 * machine_ram_bytes
    return BatchTasks(
        source=source,
        task_id=np.array(task_ids, dtype=str),
        job_id=np.array(job_ids, dtype=str),
        instances=np.frombuffer(instances, dtype=np.int64).copy(),
        arrival_s=np.frombuffer(start, dtype=np.float64).copy(),
        duration_s=np.frombuffer(duration, dtype=np.float64).copy(),
        request=request,
        priority=np.zeros(len(task_ids), dtype=np.int64),
        anomalies=anomalies.as_dict(),
    )


def _check_row(row: list[str]) -> str:
    """The anomaly kind that disqualifies ``row``, or ``""`` if it is usable."""
    if len(row) != len(HEADER):
        return "unparseable_row"
    if not row[7].strip() or not row[8].strip():
        return "empty_plan"
    try:
        begin, end, cpu, mem = (float(row[i]) for i in (5, 6, 7, 8))
    except ValueError:
        return "unparseable_row"
    if not all(math.isfinite(v) for v in (begin, end, cpu, mem)):
        return "unparseable_row"
    if cpu < 0 or mem < 0:
        return "negative_plan"
    try:
        count = int(row[1])
    except ValueError:
        return "bad_instance_num"
    if count <= 0 or count >= 2**63:
        return "bad_instance_num"
    if end < begin:
        return "end_before_start"
    if end == begin:
        return "zero_duration"
    if cpu == 0 and mem == 0:
        return "zero_request"
    return ""
