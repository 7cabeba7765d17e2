"""The local mitigation loop: collectors → engine decisions → the enforcer (docs/design.md §7).

Two entry points, both on the loop's single thread:

* :meth:`MitigationLoop.tick` — every ``mitigation_interval_s`` (1 s): discovery (every
  ``discovery_interval_s``), a full collection, the reservation estimator, contention marks and
  the polling fallback, batch memory caps, eviction, the batch cpu budget, anti-starvation,
  SIGKILL after the grace, and a ``samples`` report every ``sampling_interval_s``;
* :meth:`MitigationLoop.handle_events` — as soon as a pressure source fires: a cpu event marks
  the stalled service contended and rewrites the batch quotas; a memory event re-reads every
  working set and runs the eviction decision.

Decisions are the engine's pure functions (:func:`~kalena_engine.mitigation.plan_batch_cpu`,
:func:`~kalena_engine.mitigation.plan_evictions`,
:func:`~kalena_engine.mitigation.plan_starvation_relief`,
:func:`~kalena_engine.mitigation.batch_memory_cap`); every change goes through
:class:`~agents.enforcer.Enforcer`; every action is emitted with its reason and numbers
(:func:`agents.link.protocol.action_message`). Emitting never blocks on the link: ``emit``
appends to the local buffer. Safety rules: a ledger input older than T_stale never starts an
eviction (case C1); cpu contention only ever throttles (case C6); a victim is credited from its
SIGTERM on (case C4); DaemonSets are never touched; nothing a collector or a discovery source
reads can stop the loop — a read that fails costs that workload (or, for a source read at once,
that source) this round and is counted and logged once by cause
(:mod:`agents.collectors.failures`).
"""

from __future__ import annotations

import logging
import math
import queue
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from agents.cgroups.backend import CgroupFs
from agents.collectors.failures import CollectorFailure, FailureLog, attempt
from agents.collectors.telemetry import Collection, Telemetry
from agents.discovery.base import WorkloadSource
from agents.enforcer import Applied, Enforcer
from agents.errors import TelemetryError
from agents.link import protocol
from agents.link.protocol import PolicyUpdate
from agents.loop_cpu import CpuActions
from agents.loop_memory import MemoryActions
from agents.model import KIND_PROCESS, NodeReading, UsageSample, Workload
from agents.pressure.arming import SignalArming
from agents.pressure.events import SCOPE_NODE, SOURCE_POLL, PressureEvent
from agents.settings import LoopSettings
from agents.state import WorkloadTable
from agents.units import stall_ratio
from kalena_engine.errors import PolicyError
from kalena_engine.resources import CPU, RAM

log = logging.getLogger("kalena.agent")

class MitigationLoop(CpuActions, MemoryActions):
    """Wires discovery, telemetry, the engine and the enforcer (module docstring).

    Args:
        settings: node capacity, policy, intervals, pressure settings.
        sources: discovery sources.
        telemetry: where usage comes from.
        fs: cgroup backend (liveness of process workloads, quota reads).
        enforcer: the only writer.
        node_reader: ``now_s → NodeReading | None`` (node working set and system PSI).
        arming: keeps pressure sources armed (``None``: polling only).
        emit: receives every protocol message (``samples``, ``action``); must not block.
        on_collector_error: called with ``(collector, cause)`` for every failed read (the
            agent's ``kalena_agent_collector_errors_total``).
    """

    def __init__(self, settings: LoopSettings, *, sources: Sequence[WorkloadSource], telemetry: Telemetry,
                 fs: CgroupFs, enforcer: Enforcer, node_reader: Callable[[float], NodeReading | None],
                 arming: SignalArming | None = None, emit: Callable[[dict[str, Any]], None] | None = None,
                 clock_s: Callable[[], float] = time.time, clock_mono: Callable[[], float] = time.monotonic,
                 on_collector_error: Callable[[str, str], None] | None = None) -> None:
        self.settings = settings
        self.sources = list(sources)
        self.telemetry = telemetry
        self.fs = fs
        self.enforcer = enforcer
        self.node_reader = node_reader
        self.arming = arming
        self.emit = emit or (lambda message: None)
        self.clock_s = clock_s
        self.clock_mono = clock_mono
        self.table = WorkloadTable()
        self.policy_updates: queue.SimpleQueue[PolicyUpdate] = queue.SimpleQueue()
        self.policy_version: int | None = None   # the cluster policy version applied (None: local)
        self.actions: deque[dict[str, Any]] = deque(maxlen=10_000)
        self.event_outcomes: deque[dict[str, Any]] = deque(maxlen=10_000)
        self.errors: deque[str] = deque(maxlen=1000)
        self.collector_failures = FailureLog(on_count=on_collector_error)
        self._by_source: dict[str, list[Workload]] = {}
        self._next_discovery = -math.inf
        self._next_report = -math.inf
        self._last_hold: dict[str, str] = {}
        self._last_node: NodeReading | None = None
        self._node_unreadable = False
        self._starvation_hold_until_s = -math.inf

    # --- helpers ---------------------------------------------------------------------------

    def _now(self, now_s: float | None, now_mono: float | None) -> tuple[float, float]:
        return (self.clock_s() if now_s is None else now_s, self.clock_mono() if now_mono is None else now_mono)

    def _error(self, message: str) -> None:
        if message not in self.errors:
            log.warning("%s", message)
        self.errors.append(message)

    def _act(self, action: str, reason: str, workload: Workload | None, trigger: dict[str, Any],
             numbers: dict[str, Any], applied: Applied | None, now_s: float, event: PressureEvent | None) -> dict[str, Any]:
        result: dict[str, Any] = {"ok": True, "error": None, "writes": [], "latency_ms": None, "dry_run": False}
        if applied is not None:
            start = event.detected_mono if event is not None else applied.started_mono
            result = {"ok": applied.ok, "error": applied.error, "writes": [list(w) for w in applied.writes],
                      "latency_ms": round((applied.finished_mono - start) * 1000.0, 3), "dry_run": applied.dry_run}
            if event is not None:   # the signal's own time: a timeline places signal and action (metric 5)
                result["detected_s"] = round(event.detected_s, 3)
        message = protocol.action_message(node=self.settings.node_name, ts=now_s, action=action, reason=reason,
                                          workload=workload, trigger=trigger, numbers=numbers, result=result)
        self.actions.append(message)
        self.emit(message)
        if applied is not None and not applied.ok:
            self._error(f"{action} {workload.id if workload else ''}: {applied.error}")
        return message

    def apply_policy_update(self, update: PolicyUpdate) -> None:
        """Thread-safe: queue a ``policy`` message; applied at the next tick."""
        self.policy_updates.put(update)

    # --- discovery -------------------------------------------------------------------------

    def discover(self, now_s: float, only: tuple[str, ...] | None = None) -> None:
        """Ask every source (or only those named); keep a failed or skipped source's previous list;
        track exactly what runs."""
        found: list[Workload] = []
        seen: set[str] = set()
        for source in self.sources:
            if only is None or source.name in only:
                result = attempt(f"discovery_{source.name}", "", "", lambda s=source: s.discover(now_s))
                if isinstance(result, CollectorFailure):   # kept: the previous list, as for a daemon that is down
                    self.collector_failures.record(result)
                else:
                    for failure in result.failures:
                        self.collector_failures.record(failure)
                    for message in result.errors:
                        self._error(message)
                    if result.complete:
                        self._by_source[source.name] = result.workloads
            for workload in self._by_source.get(source.name, []):
                if workload.id in seen:
                    self._error(f"{source.name}: workload id {workload.id!r} reported twice; keeping the first")
                    continue
                if workload.kind == KIND_PROCESS and not self.fs.procs(workload.cgroup):
                    continue  # not running (never started, or ended): terminated workloads never count
                seen.add(workload.id)
                found.append(workload)
        _, removed = self.table.sync(found, now_s)
        for wid in removed:
            self._forget(wid)
        self._sync_arming()

    def _forget(self, workload_id: str) -> None:
        self.telemetry.forget(workload_id)
        self.collector_failures.forget(workload_id)

    def node_capacity(self) -> np.ndarray:
        """``(8,)`` the node's capacity as every ledger reads it: Phase 0 on this node
        (docs/design.md §3), ``C = capacity − Σ_d request_d`` over the DaemonSet rows tracked here
        and not terminating, ``capacity`` being ``--capacity`` (or the machine) less ``--reserved``.
        DaemonSets are ballast: the console's ledger subtracts their requests from the Node's
        allocatable, so the agent's must too, or it lets the node fill to the kernel's limit before
        its ledger says too much is reserved. A request left unset counts 0; never below 0.

        Example: a 512 MiB node, ``--reserved`` 0, the agent's own pod (a DaemonSet) requesting
        128 MiB and ``calico-node`` 2 MiB → C_ram = 382 MiB."""
        daemonsets = [t.workload.request for t in self.table.rows()
                      if t.workload.tier == "daemonset" and not t.terminating]
        if not daemonsets:
            return self.settings.capacity
        ballast = np.nansum(np.array(daemonsets, dtype=np.float64), axis=0)
        return np.maximum(self.settings.capacity - ballast, 0.0)

    def _sync_arming(self) -> None:
        if self.arming is None:
            return
        self.arming.sync([t.workload for t in self.table.rows() if t.workload.tier == "service"],
                         capacity=self.node_capacity())
        self.telemetry.exclude_psi({wid for wid in self.table.ids if self.arming.has_trigger(wid)})

    # --- samples ---------------------------------------------------------------------------

    def _collect(self, now_s: float, *, memory_only: bool) -> None:
        rows = [t for t in self.table.rows() if t.workload.tier != "daemonset" or not memory_only]
        workloads = [t.workload for t in rows]
        # the one guard around a collector: a failure of one workload comes back in ``failures``
        # (collectors read each workload through ``attempt``); one that escapes ``collect`` costs
        # this round's samples of every workload, never the loop
        collection = attempt(self.telemetry.name, "", "",
                             lambda: self.telemetry.collect(workloads, now_s, memory_only=memory_only))
        if isinstance(collection, CollectorFailure):
            self.collector_failures.record(collection)
            collection = Collection()
        for failure in collection.failures:
            self.collector_failures.record(failure)
        ended = {wid for wid in collection.gone
                 if wid in self.table.by_id and self.table.by_id[wid].workload.kind == KIND_PROCESS}
        if ended:
            self.table.remove(ended)
            for wid in ended:
                self._forget(wid)
        merged: dict[str, UsageSample] = {}
        for wid, sample in collection.samples.items():
            tracked = self.table.by_id.get(wid)
            if tracked is None:
                continue
            if memory_only and tracked.sample is not None:
                usage = tracked.sample.usage.copy()
                usage[RAM] = sample.usage[RAM]
                sample = replace(tracked.sample, ts_s=sample.ts_s, usage=usage,
                                 memory_usage_bytes=sample.memory_usage_bytes)
            tracked.sample = sample
            merged[wid] = sample
        self.table.update_estimator(merged, self.settings.policy.estimator)

    def _update_contention(self, now_s: float, now_mono: float) -> list[PressureEvent]:
        """Release contention marks and run the cpu polling fallback.

        Stall signal per service: its cpu PSI ``total`` growth over the tick, or — for a group with
        an armed trigger, whose PSI files must not be read — the run-queue wait of its tasks
        (``cpu_wait_ratio``). A mark is released once, for at least two trigger windows and a tick
        after the last trigger event (a tick after a polled mark), the service is neither stalled
        (< ``contention_clear_ratio``) nor busy (using ≥ ``contention_busy_ratio`` of its claim
        ``max(r, q)``): while a relieved service keeps using its claim, batch stays held back.
        Polling marks a service whose stall (or PSI ``some`` avg10) reaches ``cpu_poll_avg10_pct``
        and that no trigger event has marked."""
        polled: list[PressureEvent] = []
        tick = self.settings.mitigation_interval_s
        hold = 2 * self.settings.psi_window_s + tick
        threshold = self.settings.cpu_poll_avg10_pct / 100.0
        eff = self.table.effective(now_s, self.settings.stale_ttl_s)
        for row, tracked in enumerate(self.table.rows()):
            if tracked.workload.tier != "service" or tracked.sample is None:
                continue
            sample = tracked.sample
            psi = sample.psi.get("cpu")
            stall = sample.cpu_wait_ratio
            if psi is not None:
                prev = tracked.psi_cpu_prev
                if prev is not None and now_s > prev[0]:
                    stall = stall_ratio(psi.some.total_us - prev[1], now_s - prev[0])
                tracked.psi_cpu_prev = (now_s, psi.some.total_us)
            claim = max(float(eff[row, CPU]), float(tracked.workload.request[CPU]))
            usage = float(np.nan_to_num(sample.usage[CPU]))
            if tracked.contended_since_mono is not None:
                age = now_mono - tracked.contended_since_mono
                busy = claim > 0 and usage >= self.settings.contention_busy_ratio * claim
                calm = (age >= (tick if tracked.contended_source == SOURCE_POLL else hold) and not busy
                        and (stall is None or stall < self.settings.contention_clear_ratio))
                if calm:
                    tracked.contended_since_mono = None
                    tracked.contended_source = None
            elif self.settings.cpu_poll and ((stall is not None and stall >= threshold) or (
                    psi is not None and psi.some.avg10_pct >= self.settings.cpu_poll_avg10_pct)):
                event = PressureEvent(SOURCE_POLL, "cpu", tracked.workload.id, now_mono, now_s, {
                    "stall_ratio": stall, "avg10_pct": psi.some.avg10_pct if psi is not None else None})
                self._mark(event)
                polled.append(event)
        return polled

    def _mark(self, event: PressureEvent) -> None:
        for tracked in self.table.rows():
            if tracked.workload.tier != "service":
                continue
            if event.scope in (SCOPE_NODE, tracked.workload.id):
                tracked.contended_since_mono = event.detected_mono
                tracked.contended_source = event.source

    # --- entry points ------------------------------------------------------------------------

    def _read_node(self, now_s: float) -> NodeReading | None:
        """The node reading, or None while it cannot be read (e.g. ``--node-cgroup`` removed after
        start): no node reading starts no node-pressure eviction, as stale telemetry (case C1)."""
        try:
            reading = self.node_reader(now_s)
        except (OSError, TelemetryError) as exc:
            if not self._node_unreadable:
                log.warning("node reading failed, no node-pressure eviction until it reads again: %s", exc)
            self._node_unreadable = True
            return None
        if self._node_unreadable:
            log.info("node reading restored")
        self._node_unreadable = False
        return reading

    def _drain_policy(self) -> None:
        changed = False
        while True:
            try:
                update = self.policy_updates.get_nowait()
            except queue.Empty:
                break
            try:
                policy = update.apply(self.settings.policy)
            except PolicyError as exc:  # refused as a whole: the policy in force stays
                log.warning("policy version %s refused, keeping the policy in force: %s", update.version, exc)
                continue
            self.settings = replace(self.settings, policy=policy)
            if update.version is not None:
                self.policy_version = update.version
            changed = True
        if changed and self.arming is not None:
            self.arming.settings = self.settings
            self._sync_arming()

    def tick(self, now_s: float | None = None, now_mono: float | None = None) -> list[dict[str, Any]]:
        """One periodic step (module docstring). Returns the actions taken."""
        now_s, now_mono = self._now(now_s, now_mono)
        self._drain_policy()
        if now_s >= self._next_discovery:
            self.discover(now_s)
            self._next_discovery = now_s + self.settings.discovery_interval_s
        elif any(s.name == "file" for s in self.sources):
            self.discover(now_s, only=("file",))   # a stat() per tick: file edits apply at once
        self._collect(now_s, memory_only=False)
        self._last_node = self._read_node(now_s)
        polled = self._update_contention(now_s, now_mono)
        actions = self._memory_caps(now_s)
        actions += self._evict(now_s, None)
        cpu_actions = self._cpu(now_s, polled[0] if polled else None)
        self._record_outcomes(polled, cpu_actions)
        actions += cpu_actions
        actions += self._starvation(now_s)
        actions += self._terminations(now_s)
        if now_s >= self._next_report:
            self.report_samples(now_s)
            self._next_report = now_s + self.settings.sampling_interval_s
        return actions

    def handle_events(self, events: Sequence[PressureEvent], now_s: float | None = None) -> list[dict[str, Any]]:
        """React to pressure events at once (module docstring). Returns the actions taken."""
        now_s = self.clock_s() if now_s is None else now_s
        cpu = [e for e in events if e.resource == "cpu"]
        memory = [e for e in events if e.resource == "memory"]
        actions: list[dict[str, Any]] = []
        for event in cpu:
            self._mark(event)
        if memory:
            self._collect(now_s, memory_only=True)
            self._last_node = self._read_node(now_s)
            actions += self._evict(now_s, memory[0])
        if cpu:
            actions += self._cpu(now_s, cpu[0])
        self._record_outcomes(events, actions)
        return actions

    def _record_outcomes(self, events: Sequence[PressureEvent], actions: list[dict[str, Any]]) -> None:
        """Remember, per event, whether it led to a write and how long after detection."""
        done = self.clock_mono()
        for event in events:
            mine = [a for a in actions if a["trigger"].get("source") == event.source
                    and a["trigger"].get("scope") == event.scope and a["trigger"].get("resource") == event.resource]
            self.event_outcomes.append({
                "source": event.source, "resource": event.resource, "scope": event.scope,
                "detected_mono": event.detected_mono, "done_mono": done, "wrote": bool(mine),
                "latency_ms": max((a["result"]["latency_ms"] or 0.0) for a in mine) if mine else None})

    def report_samples(self, now_s: float) -> dict[str, Any] | None:
        """Emit one ``samples`` message: a record for every workload with a sample, and the node
        reading. A node without workloads still reports its reading, so the control plane
        knows its telemetry is current (an idle node must be able to take batch)."""
        rows = self.table.rows()
        if not rows and self._last_node is None:
            return None
        eff = self.table.effective(now_s, self.settings.stale_ttl_s)
        ages = self.table.sample_age_s(now_s)
        records = [protocol.sample_record(t.workload, t.sample, reservation=eff[i],
                                          stale=bool(ages[i] > self.settings.stale_ttl_s))
                   for i, t in enumerate(rows) if t.sample is not None]
        message = protocol.samples_message(node=self.settings.node_name, ts=now_s,
                                           interval_s=self.settings.sampling_interval_s, records=records,
                                           node_reading=self._last_node, policy_version=self.policy_version)
        self.emit(message)
        return message
