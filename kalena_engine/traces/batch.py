"""The common batch-arrival table every batch trace is read into (docs/design.md §11).

One row per *task*; a task's ``instances`` are identical batch pods that arrive together. Kept
as struct-of-arrays so a busy Alibaba day (~900,000 instances) costs a few numpy arrays, not
a Python object per pod.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena_engine.resources import N_DIMS


@dataclass(frozen=True, eq=False)
class BatchTasks:
    """One row per task; every instance of a task is an identical batch pod.

    Attributes:
        source: where the rows came from (a file path or a description).
        task_id: ``(k,)`` str, unique within the table, e.g. ``"j_3/R6_3"`` or
            ``"google:3418309:0"``.
        job_id: ``(k,)`` str, the workload group (owner) used for equivalence classes and the
            eviction cooldown.
        instances: ``(k,)`` int64 ≥ 1, identical pods per task.
        arrival_s: ``(k,)`` float64, seconds on the trace's own clock (not re-based).
        duration_s: ``(k,)`` float64 > 0, running time each instance needs.
        request: ``(k, 8)`` float64 per-instance request in internal units (mcpu, bytes, …;
            see :mod:`kalena_engine.resources`).
        priority: ``(k,)`` int64 ≥ 0, Kalena priority annotation (eviction order within batch).
        anomalies: ``{kind: count}`` of rows the reader skipped or repaired.

    Raises:
        ValueError: arrays of mismatched length or a request that is not ``(k, 8)``.
    """

    source: str
    task_id: np.ndarray
    job_id: np.ndarray
    instances: np.ndarray
    arrival_s: np.ndarray
    duration_s: np.ndarray
    request: np.ndarray
    priority: np.ndarray
    anomalies: dict[str, int]

    def __post_init__(self) -> None:
        k = len(self.task_id)
        for name in ("job_id", "instances", "arrival_s", "duration_s", "priority"):
            if np.shape(getattr(self, name)) != (k,):
                raise ValueError(f"BatchTasks.{name} has shape {np.shape(getattr(self, name))}, "
                                 f"expected ({k},) like task_id")
        if np.shape(self.request) != (k, N_DIMS):
            raise ValueError(f"BatchTasks.request has shape {np.shape(self.request)}, "
                             f"expected ({k}, {N_DIMS})")

    def __len__(self) -> int:
        return len(self.task_id)


def empty_batch(source: str, anomalies: dict[str, int] | None = None) -> BatchTasks:
    """A table with no rows (a trace whose every row was skipped)."""
    return BatchTasks(
        source=source, task_id=np.array([], dtype=str), job_id=np.array([], dtype=str),
        instances=np.zeros(0, np.int64), arrival_s=np.zeros(0), duration_s=np.zeros(0),
        request=np.zeros((0, N_DIMS)), priority=np.zeros(0, np.int64),
        anomalies=dict(anomalies or {}),
    )


def take(tasks: BatchTasks, rows: np.ndarray, *, instances: np.ndarray | None = None) -> BatchTasks:
    """Rows ``rows`` (indices or a boolean mask) of ``tasks``, optionally with new instance counts.

    ``instances``, when given, is indexed like the *result* (one count per selected row).
    """
    rows = np.asarray(rows)
    return BatchTasks(
        source=tasks.source, task_id=tasks.task_id[rows], job_id=tasks.job_id[rows],
        instances=tasks.instances[rows] if instances is None else np.asarray(instances, np.int64),
        arrival_s=tasks.arrival_s[rows], duration_s=tasks.duration_s[rows],
        request=tasks.request[rows], priority=tasks.priority[rows],
        anomalies=dict(tasks.anomalies),
    )


def total_instances(tasks: BatchTasks) -> int:
    """Number of batch pods the table describes: ``Σ instances``."""
    return int(tasks.instances.sum())


def sorted_by_arrival(tasks: BatchTasks) -> BatchTasks:
    """The same rows ordered by arrival (stable: ties keep the trace's order)."""
    return take(tasks, np.argsort(tasks.arrival_s, kind="stable"))


def select_window(tasks: BatchTasks, start_s: float, end_s: float) -> BatchTasks:
    """Tasks arriving in ``[start_s, end_s)``, trace time kept (arrivals are not re-based).

    Raises:
        ValueError: ``end_s < start_s``.
    """
    if end_s < start_s:
        raise ValueError(f"window end {end_s} s is before its start {start_s} s")
    return take(tasks, (tasks.arrival_s >= start_s) & (tasks.arrival_s < end_s))


def scale_load(tasks: BatchTasks, factor: float, rng: np.random.Generator) -> BatchTasks:
    """Multiply every task's instance count by ``factor`` with stochastic rounding.

    Each count becomes ``⌊f·n⌋ + 1`` with probability ``f·n − ⌊f·n⌋``, else ``⌊f·n⌋``, so the
    expected total is exactly ``f × Σn``; rows that round to 0 are dropped. Example: ``n = 3``,
    ``f = 0.5`` → 1 or 2 instances, each with probability ½ (expected 1.5).

    Raises:
        ValueError: ``factor`` not finite and > 0.
    """
    factor = float(factor)
    if not np.isfinite(factor) or factor <= 0:
        raise ValueError(f"load factor must be a finite number > 0, got {factor}")
    scaled = tasks.instances * factor
    whole = np.floor(scaled)
    counts = (whole + (rng.random(len(tasks)) < scaled - whole)).astype(np.int64)
    keep = counts > 0
    return take(tasks, keep, instances=counts[keep])
