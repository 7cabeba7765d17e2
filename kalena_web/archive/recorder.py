"""Stream a running replay into the archive (inside the caller's transaction).

:class:`RunRecorder` receives every :class:`~kalena_engine.replay.StepRecord` and writes, in
bulk, one chunk at a time: node series, production-pod series, cluster series and the batch
lifecycle events. At the end it writes batch placements (identical pods that ran on one node
over one interval), per-task outcomes and per-node ledgers. Memory stays bounded by one chunk.

Batch placements are rebuilt from the events: a ``placed`` event opens instances at
``(task, node, start)``; a ``completed`` event closes the group that started ``duration``
earlier; for ``evicted`` events the engine's running groups after the step say exactly which
groups lost instances (the planner evicts youngest first but skips the too-young, so the
groups are read, not guessed). Every count is cross-checked against the engine's state;
a disagreement raises :class:`RecordingInconsistent` and the whole persist rolls back.
"""

from __future__ import annotations

import math
import time
from collections import Counter, defaultdict

import numpy as np

from kalena_engine.ledger import NodeLedgers
from kalena_engine.replay import StepRecord
from kalena_engine.replay.state import ClusterState
from kalena_engine.resources import CPU, RAM
from kalena_web.archive import series
from kalena_web.archive.errors import RecordingInconsistent
from kalena_web.archive.models import (
    BatchEvent, BatchPlacement, ClusterSeries, NodeSeries, Run, TaskOutcome, WorkloadSeries,
)
from kalena_web.inventory.services import ClusterInventory
from kalena_web.ledger.accumulate import LedgerAccumulator
from kalena_web.ledger.services import node_ledgers_create

CPU_RAM = [CPU, RAM]
EVENT_BATCH = 5000


def plain(value):
    """JSON-safe copy: numpy scalars/arrays → Python, non-finite floats → ``None``."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, np.bool_ | bool):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating | float):
        value = float(value)
        return value if math.isfinite(value) else None
    return value


class RunRecorder:
    """Writes one run's step stream (see module doc).

    Args:
        run: the saved :class:`Run` (its ``steps`` and ``chunk_steps`` are used).
        inventory: the run's saved rows in engine order.
        state: the engine's cluster state (read after each step to attribute evictions).
        eligible: ``(n,)`` nodes taking batch (the cluster series sum fill over these).
    """

    def __init__(self, *, run: Run, inventory: ClusterInventory, state: ClusterState, eligible: np.ndarray) -> None:
        self.run = run
        self.inv = inventory
        self.state = state
        self.eligible = np.asarray(eligible, dtype=bool)
        n, p, k = len(inventory.nodes), len(inventory.production), len(inventory.tasks)
        c = run.chunk_steps
        self._node = np.zeros((c, n, *series.NODE_SHAPE))
        self._pod = np.zeros((c, p, *series.WORKLOAD_SHAPE))
        self._cluster = np.zeros((c, *series.CLUSTER_SHAPE))
        self._fill = 0
        self._chunk = 0
        self._first_step = 0
        self._next_step = 0
        self._events: list[BatchEvent] = []
        self._open: dict[tuple[int, int], dict[float, int]] = defaultdict(dict)
        self._closed: list[tuple[int, int, int, float, float, str]] = []
        self._placed = np.zeros(k, dtype=np.int64)
        self._evicted = np.zeros(k, dtype=np.int64)
        self._eviction_events = np.zeros(k, dtype=np.int64)
        self._completed = np.zeros(k, dtype=np.int64)
        self._first_placed = np.full(k, np.nan)
        self._finished = np.full(k, np.nan)
        self._pairs: set[tuple[int, int]] = set()
        self._node_placed = np.zeros(n, dtype=np.int64)
        self._node_evicted = np.zeros(n, dtype=np.int64)
        self._pod_row = {w.name: i for i, w in enumerate(inventory.production)}
        self.ledger = LedgerAccumulator(n)
        self.written: Counter = Counter()
        self.seconds = 0.0  # wall time spent recording (buffering, encoding, writing)

    # -- per step ----------------------------------------------------------------------------

    def on_step(self, record: StepRecord) -> None:
        """Buffer one step; write a chunk when the buffer is full."""
        started = time.perf_counter()
        try:
            self._on_step(record)
        finally:
            self.seconds += time.perf_counter() - started

    def _on_step(self, record: StepRecord) -> None:
        if record.step != self._next_step:
            raise RecordingInconsistent(f"step {record.step} arrived, expected step {self._next_step}")
        i = self._fill
        node = self._node[i]
        for j, name in enumerate(series.NODE_SERIES):
            node[:, j] = getattr(record, name)
        self._pod[i, :, 0] = record.pod_usage[:, CPU_RAM]
        self._pod[i, :, 1] = record.pod_reservation[:, CPU_RAM]
        self._cluster[i] = self._cluster_row(record)
        self._take_events(record)
        self._fill += 1
        self._next_step += 1
        if self._fill == self.run.chunk_steps:
            self._flush()

    def _cluster_row(self, r: StepRecord) -> np.ndarray:
        led = NodeLedgers(capacity=r.capacity, prod_request=r.prod_request, prod_reservation=r.prod_reservation,
                          batch_request=r.batch_request, batch_reservation=r.batch_reservation)
        t = self.eligible
        usage = r.prod_usage + r.batch_usage
        parts = (
            led.reclaimed[:, CPU_RAM].sum(axis=0), led.request[:, CPU_RAM].sum(axis=0),
            r.capacity[t][:, CPU_RAM].sum(axis=0), led.reservation[t][:, CPU_RAM].sum(axis=0),
            usage[t][:, CPU_RAM].sum(axis=0), r.batch_request[:, CPU_RAM].sum(axis=0),
            np.array([r.running_instances, r.pending_instances], dtype=np.float64),
        )
        return np.concatenate(parts)

    def _take_events(self, record: StepRecord) -> None:
        evicted_pairs: Counter = Counter()
        tasks, nodes = self.inv.tasks, self.inv.nodes
        for e in record.events:
            node_row = e.node if e.node >= 0 else None
            if e.kind in (BatchEvent.PRODUCTION_EVICTED, "production_oom_killed"):
                workload = self.inv.production[self._pod_row[str(e.detail.get("pod"))]]
            elif e.kind == "escalated":
                continue  # a node event: its drained pods follow as evictions
            else:
                workload = tasks[e.task]
            self._events.append(BatchEvent(
                run=self.run, workload=workload, node=nodes[node_row] if node_row is not None else None,
                kind=e.kind, step=record.step, time_s=float(e.time_s), count=int(e.count), reason=e.reason,
                detail=plain(e.detail),
            ))
            if e.kind == BatchEvent.PLACED:
                segments = self._open[(e.task, e.node)]
                segments[e.time_s] = segments.get(e.time_s, 0) + e.count
                self._placed[e.task] += e.count
                self._node_placed[e.node] += e.count
                self._pairs.add((e.task, e.node))
                if np.isnan(self._first_placed[e.task]):
                    self._first_placed[e.task] = e.time_s
            elif e.kind == BatchEvent.COMPLETED:
                self._close_completed(e.task, e.node, e.count, e.time_s, e.detail.get("start_s"))
                self._completed[e.task] += e.count
                self._finished[e.task] = e.time_s if np.isnan(self._finished[e.task]) else max(self._finished[e.task], e.time_s)
            elif e.kind in (BatchEvent.EVICTED, "oom_killed"):
                evicted_pairs[(e.task, e.node)] += e.count
                self._evicted[e.task] += e.count
                self._eviction_events[e.task] += 1
                self._node_evicted[e.node] += e.count
        for (task, node), count in evicted_pairs.items():
            self._close_evicted(task, node, count, record.time_s)

    def _close_completed(self, task: int, node: int, count: int, end_s: float, start_s: float | None = None) -> None:
        segments = self._open.get((task, node), {})
        # a throttled group ends later than start + duration; the engine says when it started
        start = float(start_s) if start_s is not None else end_s - float(self.state.tasks.duration_s[task])
        match = min(segments, key=lambda s: abs(s - start), default=None)
        if match is None or abs(match - start) > 1e-6 * max(1.0, abs(start)) or segments[match] != count:
            raise RecordingInconsistent(
                f"task {self.inv.tasks[task].name} completed {count} on node {self.inv.nodes[node].name} "
                f"at {end_s:g} s, but no open group started at {start:g} s with that count (open: {segments})")
        del segments[match]
        self._closed.append((task, node, count, match, end_s, BatchPlacement.COMPLETED))

    def _close_evicted(self, task: int, node: int, count: int, now_s: float) -> None:
        g = self.state.groups
        mask = (g.task == task) & (g.node == node)
        running = Counter()
        for start, n in zip(g.start_s[mask].tolist(), g.count[mask].tolist(), strict=True):
            running[start] += n
        segments = self._open.get((task, node), {})
        lost_total = 0
        for start in list(segments):
            lost = segments[start] - running.get(start, 0)
            if lost < 0:
                raise RecordingInconsistent(
                    f"task {self.inv.tasks[task].name} on node {self.inv.nodes[node].name} at {now_s:g} s: the engine "
                    f"runs {running[start]} instances started at {start:g} s, only {segments[start]} were recorded")
            if lost:
                self._closed.append((task, node, lost, start, now_s, BatchPlacement.EVICTED))
                lost_total += lost
                segments[start] -= lost
                if not segments[start]:
                    del segments[start]
        if lost_total != count or set(segments) != {s for s, n in running.items() if n}:
            raise RecordingInconsistent(
                f"task {self.inv.tasks[task].name} on node {self.inv.nodes[node].name} at {now_s:g} s: "
                f"{count} evicted but the running groups account for {lost_total}")

    # -- writing -----------------------------------------------------------------------------

    def _flush(self) -> None:
        steps = self._fill
        if steps == 0:
            return
        run, chunk, first = self.run, self._chunk, self._first_step
        node_chunk = self._node[:steps]
        NodeSeries.objects.bulk_create([
            NodeSeries(run=run, node=node, chunk=chunk, first_step=first, steps=steps,
                       data=series.encode(node_chunk[:, j]))
            for j, node in enumerate(self.inv.nodes)
        ], batch_size=200)
        pod_chunk = self._pod[:steps]
        WorkloadSeries.objects.bulk_create([
            WorkloadSeries(run=run, node_id=pod.node_id, workload=pod, chunk=chunk, first_step=first, steps=steps,
                           data=series.encode(pod_chunk[:, j]))
            for j, pod in enumerate(self.inv.production)
        ], batch_size=1000)
        ClusterSeries.objects.create(run=run, chunk=chunk, first_step=first, steps=steps,
                                     data=series.encode(self._cluster[:steps]))
        self.ledger.add(node_chunk)
        self._write_events()
        self.written["node_series"] += len(self.inv.nodes)
        self.written["workload_series"] += len(self.inv.production)
        self.written["cluster_series"] += 1
        self._chunk += 1
        self._first_step += steps
        self._fill = 0

    def _write_events(self) -> None:
        if self._events:
            BatchEvent.objects.bulk_create(self._events, batch_size=EVENT_BATCH)
            self.written["events"] += len(self._events)
            self._events = []

    def finish(self, *, summary: dict, persist_seconds: float | None = None,
               why_pending: list[dict] | tuple[dict, ...] = ()) -> Run:
        """Write what remains and the end-of-run tables; store the summary on the run.
        ``why_pending`` are the last scheduling pass's records (``workload`` = task id).

        Raises:
            RecordingInconsistent: fewer steps than the run declares, or per-task counts that
                disagree with the engine's (submitted = pending + running + completed).
        """
        started = time.perf_counter()
        self._flush()
        if self._next_step != self.run.steps:
            raise RecordingInconsistent(f"recorded {self._next_step} steps of {self.run.steps}")
        self._write_placements()
        self._write_outcomes({r["workload"]: r for r in why_pending})
        production = self.state.production
        node_ledgers_create(
            run=self.run, nodes=self.inv.nodes, figures=self.ledger.figures(),
            pods=np.bincount(production.node, minlength=len(self.inv.nodes)),
            batch_placed=self._node_placed, batch_evicted=self._node_evicted,
        )
        self.written["node_ledgers"] += len(self.inv.nodes)
        self.seconds += time.perf_counter() - started
        self.run.summary = plain({**summary, "archive_write_seconds": round(self.seconds, 3)})
        self.run.persist_seconds = persist_seconds
        self.run.save(update_fields=["summary", "persist_seconds"])
        return self.run

    def _write_placements(self) -> None:
        rows = [
            BatchPlacement(run=self.run, workload=self.inv.tasks[t], node=self.inv.nodes[n], count=c,
                           start_s=start, end_s=end, end_kind=kind)
            for t, n, c, start, end, kind in self._closed
        ]
        g = self.state.groups
        projected = {(int(t), int(n), float(s)): float(e) for t, n, s, e in zip(
            g.task.tolist(), g.node.tolist(), g.start_s.tolist(), g.end_s.tolist(), strict=True) if np.isfinite(e)}
        for (t, n), segments in self._open.items():
            # still running: end_s is the engine's projected end (a throttled group's moves out, docs/design.md §11)
            rows += [BatchPlacement(run=self.run, workload=self.inv.tasks[t], node=self.inv.nodes[n], count=c,
                                    start_s=start, end_s=projected.get((int(t), int(n), float(start))),
                                    end_kind=BatchPlacement.RUNNING)
                     for start, c in segments.items()]
        BatchPlacement.objects.bulk_create(rows, batch_size=EVENT_BATCH)
        self.written["placements"] += len(rows)

    def _write_outcomes(self, why_pending: dict[str, dict]) -> None:
        st = self.state
        running = np.zeros(len(self.inv.tasks), dtype=np.int64)
        for (t, _), segments in self._open.items():
            running[t] += sum(segments.values())
        engine_running = np.bincount(st.groups.task, weights=st.groups.count, minlength=len(running)).astype(np.int64)
        if not np.array_equal(running, engine_running) or not np.array_equal(self._completed, st.completed):
            bad = int(np.flatnonzero((running != engine_running) | (self._completed != st.completed))[0])
            raise RecordingInconsistent(
                f"task {self.inv.tasks[bad].name}: recorded running {running[bad]} / completed "
                f"{self._completed[bad]}, engine says {engine_running[bad]} / {st.completed[bad]}")
        nodes = Counter(t for t, _ in self._pairs)

        def opt(x: float) -> float | None:
            return None if np.isnan(x) else float(x)

        rows = [
            TaskOutcome(run=self.run, workload=w, submitted=int(st.submitted[i]), placed=int(self._placed[i]),
                        evicted=int(self._evicted[i]), completed=int(st.completed[i]), running_at_end=int(running[i]),
                        pending_at_end=int(st.pending[i]), eviction_events=int(self._eviction_events[i]),
                        nodes=nodes.get(i, 0), first_placed_s=opt(self._first_placed[i]), finished_s=opt(self._finished[i]),
                        why_pending=why_pending.get(w.name) if st.pending[i] else None)
            for i, w in enumerate(self.inv.tasks)
        ]
        TaskOutcome.objects.bulk_create(rows, batch_size=EVENT_BATCH)
        self.written["outcomes"] += len(rows)
