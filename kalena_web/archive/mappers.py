"""The only place archive rows become engine types and arrays.

Series chunks → numpy arrays (via :mod:`kalena_web.archive.series`) and engine
:class:`~kalena_engine.ledger.NodeLedgers`; running batch placements → the estimator's
:class:`~kalena_engine.estimator.Reservations` state; a run's stored config → the engine's
:class:`~kalena_engine.policy.EstimatorPolicy`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from kalena_engine.estimator import Reservations, initial_reservations
from kalena_engine.ledger import NodeLedgers
from kalena_engine.policy import EstimatorPolicy
from kalena_web.archive import series
from kalena_web.archive.models import BatchPlacement, ClusterSeries, NodeSeries, Run, WorkloadSeries
from kalena_web.inventory.mappers import vectors


@dataclass(frozen=True, eq=False)
class NodeTimeSeries:
    """One node's run: ``values`` ``(T, NODE_SERIES, 8)`` at ``times_s`` ``(T,)``."""

    times_s: np.ndarray
    values: np.ndarray

    def get(self, name: str) -> np.ndarray:
        """``(T, 8)`` series ``name`` (one of :data:`series.NODE_SERIES`)."""
        return self.values[:, series.NODE_INDEX[name]]

    def total(self, quantity: str) -> np.ndarray:
        """``(T, 8)`` production + batch aggregate of ``request|reservation|usage|limit``."""
        return self.get(f"prod_{quantity}") + self.get(f"batch_{quantity}")

    def ledgers(self) -> NodeLedgers:
        """The engine's ledgers over time (rows = steps): slack, headroom, reclaimed."""
        return NodeLedgers(capacity=self.get("capacity"), prod_request=self.get("prod_request"),
                           prod_reservation=self.get("prod_reservation"),
                           batch_request=self.get("batch_request"), batch_reservation=self.get("batch_reservation"))


def times_of(run: Run, steps: int | None = None) -> np.ndarray:
    """``(T,)`` replay times (s) of the run's steps."""
    return run.start_s + run.step_s * np.arange(run.steps if steps is None else steps)


def node_series_from_rows(run: Run, rows: Sequence[NodeSeries]) -> NodeTimeSeries:
    """Join a node's chunks (in chunk order) into :class:`NodeTimeSeries`."""
    values = series.join([(r.first_step, r.steps, r.data) for r in rows], series.NODE_SHAPE)
    return NodeTimeSeries(times_s=times_of(run, len(values)), values=values)


def workload_series_from_rows(rows: Iterable[WorkloadSeries]) -> dict[int, np.ndarray]:
    """``{workload id: (T, WORKLOAD_SERIES, WORKLOAD_DIMS)}`` from chunks ordered by workload, chunk."""
    chunks: dict[int, list[tuple[int, int, bytes]]] = {}
    for r in rows:
        chunks.setdefault(r.workload_id, []).append((r.first_step, r.steps, r.data))
    return {wid: series.join(parts, series.WORKLOAD_SHAPE) for wid, parts in chunks.items()}


def cluster_series_from_rows(rows: Sequence[ClusterSeries]) -> dict[str, np.ndarray]:
    """``{name: (T,)}`` for every name in :data:`series.CLUSTER_SERIES`."""
    values = series.join([(r.first_step, r.steps, r.data) for r in rows], series.CLUSTER_SHAPE)
    return {name: values[:, i] for i, name in enumerate(series.CLUSTER_SERIES)}


def estimator_policy(run: Run) -> EstimatorPolicy:
    """The estimator policy the run was replayed with (defaults for fields it did not store)."""
    stored = (run.config.get("policy") or {}).get("estimator") or {}
    known = {f.name for f in dataclasses.fields(EstimatorPolicy)}
    return EstimatorPolicy(**{k: tuple(v) if k == "members" else v for k, v in stored.items() if k in known})


@dataclass(frozen=True, eq=False)
class RunningBatch:
    """Running batch placements as engine arrays: ``(b, 8)`` per-instance vectors, ``(b,)``
    counts, planned end times (start + duration) and the estimator's state at placement."""

    request: np.ndarray
    limit: np.ndarray
    usage: np.ndarray
    count: np.ndarray
    start_s: np.ndarray
    planned_end_s: np.ndarray
    reservations: Reservations


def running_batch_from_rows(rows: Sequence[BatchPlacement]) -> RunningBatch:
    """Placements (with ``workload`` loaded) → :class:`RunningBatch`; each starts at ``r = q``
    (docs/design.md §6), exactly as the engine admitted it."""
    request = vectors(p.workload.request for p in rows)
    start = np.array([p.start_s for p in rows], dtype=np.float64)
    duration = np.array([p.workload.duration_s or 0.0 for p in rows], dtype=np.float64)
    return RunningBatch(
        request=request, limit=vectors(p.workload.limit for p in rows),
        usage=vectors(p.workload.usage for p in rows), count=np.array([p.count for p in rows], dtype=np.float64),
        start_s=start, planned_end_s=start + duration, reservations=initial_reservations(request, start),
    )
