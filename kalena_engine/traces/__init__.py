"""Readers for the real cluster traces in ``data/traces`` (docs/design.md §11; docs/traces.md).

Bitbrains VM series give production usage shapes; Alibaba 2018 ``batch_task`` and Google 2011
``task_events`` give batch arrival streams (:class:`BatchTasks`); the Google usage/events join
gives production peak-to-request ratios. Row anomalies are counted by kind, never raised; only
a file that cannot be read at all raises :class:`~kalena_engine.errors.TraceError`.
"""

from kalena_engine.traces.alibaba import read_batch_task
from kalena_engine.traces.anomalies import Anomalies, sum_counts
from kalena_engine.traces.batch import (
    BatchTasks, scale_load, select_window, sorted_by_arrival, total_instances,
)
from kalena_engine.traces.bitbrains import (
    BitbrainsSet, VMSeries, load_bitbrains, read_vm_series, sample_at, usage_ratio_series,
)
from kalena_engine.traces.google import (
    PeakRatios, TaskEvents, TaskUsage, batch_tasks_from_events, priority_tier,
    production_peak_ratios, read_task_events, read_task_usage,
)

__all__ = [
    "Anomalies", "BatchTasks", "BitbrainsSet", "PeakRatios", "TaskEvents", "TaskUsage",
    "VMSeries", "batch_tasks_from_events", "load_bitbrains", "priority_tier",
    "production_peak_ratios", "read_batch_task", "read_task_events", "read_task_usage",
    "read_vm_series", "sample_at", "scale_load", "select_window", "sorted_by_arrival",
    "sum_counts", "total_instances", "usage_ratio_series",
]
