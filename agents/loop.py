"""The local mitigation loop: collectors → engine decisions → the enforcer (DESIGN §7).

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
SIGTERM on (case C4); DaemonSets are never touched.
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
from agents.collectors.telemetry import Telemetry
from agents.discovery.base import WorkloadSource
from agents.enforcer import Applied, Enforcer
from agents.link import protocol
from agents.link.protocol import PolicyUpdate
from agents.model import KIND_PROCESS, NodeReading, UsageSample, Workload
from agents.pressure.arming import SignalArming
from agents.pressure.events import SCOPE_NODE, SOURCE_POLL, PressureEvent
from agents.settings import LoopSettings
from agents.state import Tracked, WorkloadTable
from kalena_engine.mitigation import (
    NodeWorkloads, PressureSignal, batch_memory_cap, plan_batch_cpu, plan_evictions, plan_starvation_relief,
)
from kalena_engine.mitigation.eviction import pressure_fires
from kalena_engine.resources import CPU, DIMS, RAM, STORAGE

log = logging.getLogger("kalena.agent")
PERIODIC = {"source": "periodic", "resource": None, "scope": None}


def _trigger(event: PressureEvent | None) -> dict[str, Any]:
    if event is None:
        return dict(PERIODIC)
    return {"source": event.source, "resource": event.resource, "scope": event.scope}


class MitigationLoop:
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
    """

    def __init__(self, settings: LoopSettings, *, sources: Sequence[WorkloadSource], telemetry: Telemetry,
                 fs: CgroupFs, enforcer: Enforcer, node_reader: Callable[[float], NodeReading | None],
                 arming: SignalArming | None = None, emit: Callable[[dict[str, Any]], None] | None = None,
                 clock_s: Callable[[], float] = time.time, clock_mono: Callable[[], float] = time.monotonic) -> None:
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
        self.actions: deque[dict[str, Any]] = deque(maxlen=10_000)
        self.event_outcomes: deque[dict[str, Any]] = deque(maxlen=10_000)
        self.errors: deque[str] = deque(maxlen=1000)
        self._by_source: dict[str, list[Workload]] = {}
        self._next_discovery = -math.inf
        self._next_report = -math.inf
        self._last_hold: dict[str, str] = {}
        self._last_node: NodeReading | None = None

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

    def discover(self, now_s: float) -> None:
        """Ask every source; keep a failed source's previous list; track exactly what runs."""
        found: list[Workload] = []
        seen: set[str] = set()
        for source in self.sources:
            result = source.discover(now_s)
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
            self.telemetry.forget(wid)
        if self.arming is not None:
            self.arming.sync([t.workload for t in self.table.rows() if t.workload.tier == "service"])

    # --- samples ---------------------------------------------------------------------------

    def _collect(self, now_s: float, *, memory_only: bool) -> None:
        rows = [t for t in self.table.rows() if t.workload.tier != "daemonset" or not memory_only]
        collection = self.telemetry.collect([t.workload for t in rows], now_s, memory_only=memory_only)
        for message in collection.errors:
            self._error(message)
        ended = {wid for wid in collection.gone if self.table.by_id[wid].workload.kind == KIND_PROCESS}
        if ended:
            self.table.remove(ended)
            for wid in ended:
                self.telemetry.forget(wid)
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
        """Clear contention marks of services seen unstalled over a whole tick; the polling
        fallback marks services without a trigger whose cpu PSI avg10 is high."""
        polled: list[PressureEvent] = []
        hold = self.settings.mitigation_interval_s
        node_psi = self._last_node.psi.get("cpu") if self._last_node is not None else None
        for tracked in self.table.rows():
            if tracked.workload.tier != "service":
                continue
            psi = tracked.sample.psi.get("cpu") if tracked.sample is not None else None
            stall = None
            if psi is not None:
                prev = tracked.psi_cpu_prev
                if prev is not None and now_s > prev[0]:
                    stall = (psi.some.total_us - prev[1]) / ((now_s - prev[0]) * 1e6)
                tracked.psi_cpu_prev = (now_s, psi.some.total_us)
            if tracked.contended_since_mono is not None:
                if now_mono - tracked.contended_since_mono < hold:
                    continue
                if stall is not None:
                    calm = stall < self.settings.contention_clear_ratio
                else:
                    calm = node_psi is None or node_psi.some.avg10_pct < self.settings.cpu_poll_avg10_pct
                if calm:
                    tracked.contended_since_mono = None
                    tracked.contended_source = None
            elif psi is not None and psi.some.avg10_pct >= self.settings.cpu_poll_avg10_pct and not (
                    self.arming is not None and self.arming.has_trigger(tracked.workload.id)):
                event = PressureEvent(SOURCE_POLL, "cpu", tracked.workload.id, now_mono, now_s,
                                      {"avg10_pct": psi.some.avg10_pct})
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

    # --- decisions ---------------------------------------------------------------------------

    def _cpu(self, now_s: float, event: PressureEvent | None) -> list[dict[str, Any]]:
        rows = self.table.rows()
        batch = [i for i, t in enumerate(rows) if t.workload.tier == "batch" and not t.terminating]
        if not batch:
            return []
        services = [i for i, t in enumerate(rows) if t.workload.tier == "service" and not t.terminating]
        eff = self.table.effective(now_s, self.settings.stale_ttl_s)
        request, limit = self.table.request(), self.table.declared_limit()
        policy = self.settings.policy.eviction
        plan = plan_batch_cpu(
            capacity_mcpu=float(self.settings.capacity[CPU]),
            service_reservation_mcpu=eff[services, CPU], service_request_mcpu=request[services, CPU],
            service_contended=np.array([rows[i].contended_since_mono is not None for i in services], dtype=bool),
            batch_request_mcpu=request[batch, CPU], batch_limit_mcpu=limit[batch, CPU],
            batch_slack_cpu=np.array([rows[i].workload.slack_cpu for i in batch], dtype=bool), policy=policy)
        contended = [rows[i].workload.id for i in services if rows[i].contended_since_mono is not None]
        out = []
        for i, share in zip(batch, plan.shares, strict=True):
            tracked = rows[i]
            old = tracked.quota_written
            if old is not ... and old is not None and (
                    share.quota_us == old or (old < share.quota_us <= old * (1 + self.settings.quota_hysteresis_ratio))):
                continue
            applied = self.enforcer.set_cpu_quota(tracked.workload, share.quota_us, share.period_us)
            if applied.ok:
                tracked.quota_written = share.quota_us
            out.append(self._act("throttle", "cpu_budget", tracked.workload, _trigger(event), {
                "quota_us": share.quota_us, "period_us": share.period_us, "share_mcpu": share.share_mcpu,
                "budget_mcpu": plan.budget_mcpu, "capacity_mcpu": plan.capacity_mcpu,
                "service_claim_mcpu": plan.service_claim_mcpu,
                "previous_quota_us": None if old is ... else old, "contended_services": contended,
            }, applied, now_s, event))
        return out

    def _memory_caps(self, now_s: float) -> list[dict[str, Any]]:
        if not self.settings.enforce_memory_caps:
            return []
        out = []
        for tracked in self.table.rows():
            w = tracked.workload
            if w.tier != "batch" or tracked.terminating:
                continue
            cap = batch_memory_cap(float(w.request[RAM]), float(w.limit[RAM]), w.slack_memory)
            if cap == tracked.memory_cap_written or now_s - tracked.memory_cap_failed_s < self.settings.sampling_interval_s:
                continue
            applied = self.enforcer.set_memory_cap(w, cap.high_bytes, cap.max_bytes)
            if applied.ok:
                tracked.memory_cap_written = cap
            else:
                tracked.memory_cap_failed_s = now_s
            out.append(self._act("memory_cap", "slack_memory", w, dict(PERIODIC), {
                "high_bytes": cap.high_bytes, "max_bytes": cap.max_bytes, "request_bytes": float(w.request[RAM]),
                "limit_bytes": float(w.limit[RAM]), "slack_memory": w.slack_memory,
                "cgroup_version": self.fs.version}, applied, now_s, None))
        return out

    def _evict(self, now_s: float, event: PressureEvent | None) -> list[dict[str, Any]]:
        node = self._last_node
        rows = [t for t in self.table.rows() if t.workload.tier != "daemonset"]
        if node is None or not rows:
            return []
        index = {t.workload.id: i for i, t in enumerate(self.table.rows())}
        idx = [index[t.workload.id] for t in rows]
        eff = self.table.effective(now_s, self.settings.stale_ttl_s)[idx]
        usage = np.array([np.nan_to_num(t.sample.usage, nan=0.0) if t.sample is not None else np.zeros(len(DIMS))
                          for t in rows])
        workloads = NodeWorkloads(
            reservation=eff, usage=usage, limit=self.table.declared_limit()[idx],
            tier=np.array([t.workload.tier for t in rows]), priority=np.array([t.workload.priority for t in rows]),
            start_s=np.array([t.workload.start_s for t in rows]),
            terminating=np.array([t.terminating for t in rows], dtype=bool), count=np.ones(len(rows), dtype=np.int64))
        ages = self.table.sample_age_s(now_s)[idx]
        live_ages = [a for a, t in zip(ages, rows, strict=True) if not t.terminating]
        age = max([now_s - node.ts_s, *live_ages]) if live_ages else now_s - node.ts_s
        psi = node.psi.get("memory")
        out = []
        for dim in (RAM, STORAGE):
            capacity = float(self.settings.capacity[dim])
            if not math.isfinite(capacity):
                continue
            if dim == RAM:
                working = node.working_set_bytes
            else:
                measured = [t.sample.usage[STORAGE] for t in rows if t.sample is not None]
                if not measured or all(math.isnan(x) for x in measured):
                    continue
                working = float(np.nansum(measured))
            signal = PressureSignal(dim, working, age,
                                    psi.some.avg10_pct if psi is not None and dim == RAM else None,
                                    psi.full.avg10_pct if psi is not None and psi.full is not None and dim == RAM else None)
            plan = plan_evictions(workloads, self.settings.capacity, signal, now_s=now_s,
                                  stale_ttl_s=self.settings.stale_ttl_s, policy=self.settings.policy.eviction)
            common = {"dimension": DIMS[dim], "capacity": capacity, "working_set": working,
                      "ledger_before": plan.ledger_before, "ledger_after": plan.ledger_after,
                      "acute": plan.acute, "sample_age_s": round(age, 3), "stale_ttl_s": self.settings.stale_ttl_s}
            pressure, _ = pressure_fires(signal, capacity, self.settings.policy.eviction)
            if plan.decision in ("stale_sample", "no_candidate") and pressure:
                if self._last_hold.get(DIMS[dim]) != plan.decision:
                    out.append(self._act("hold", plan.decision, None, _trigger(event), common, None, now_s, event))
                self._last_hold[DIMS[dim]] = plan.decision
            else:
                self._last_hold.pop(DIMS[dim], None)
            for victim in plan.victims:
                tracked = rows[victim.row]
                grace = tracked.workload.grace_s
                if plan.acute:
                    grace = min(grace, self.settings.acute_grace_s)
                applied = self.enforcer.terminate(tracked.workload, grace)
                if applied.ok:
                    tracked.evicted_s = now_s
                    tracked.evict_reason = victim.reason
                    tracked.kill_deadline_s = now_s + grace
                out.append(self._act("evict", victim.reason, tracked.workload, _trigger(event), {
                    **common, "ledger_before": victim.ledger_before, "ledger_after": victim.ledger_after,
                    "usage": victim.usage, "reservation": victim.reservation,
                    "limit": victim.limit if math.isfinite(victim.limit) else None,
                    "priority": victim.priority, "grace_s": grace, "skipped_young": plan.skipped_young,
                }, applied, now_s, event))
        return out

    def _terminations(self, now_s: float) -> list[dict[str, Any]]:
        out = []
        ended = set()
        for tracked in self.table.rows():
            if tracked.evicted_s is None:
                continue
            w = tracked.workload
            if w.kind == KIND_PROCESS and not self.fs.procs(w.cgroup):
                ended.add(w.id)
                continue
            if not tracked.killed and tracked.kill_deadline_s is not None and now_s >= tracked.kill_deadline_s:
                applied = self.enforcer.kill(w)
                tracked.killed = applied.ok
                out.append(self._act("kill", "grace_expired", w, dict(PERIODIC), {
                    "grace_s": tracked.kill_deadline_s - tracked.evicted_s, "evicted_s": tracked.evicted_s,
                    "evict_reason": tracked.evict_reason}, applied, now_s, None))
        if ended:
            self.table.remove(ended)
            for wid in ended:
                self.telemetry.forget(wid)
        return out

    def _starvation(self, now_s: float, r_before: dict[str, float]) -> list[dict[str, Any]]:
        policy = self.settings.policy.eviction
        window = policy.starvation_window_s
        rows = self.table.rows()
        batch = [t for t in rows if t.workload.tier == "batch" and not t.terminating]
        services = [t for t in rows if t.workload.tier == "service" and not t.terminating and t.sample is not None]
        ratios = []
        for tracked in batch:
            throttling = tracked.sample.cpu_throttling if tracked.sample is not None else None
            history = tracked.throttle_history
            if throttling is not None:
                history.append((now_s, throttling.nr_periods, throttling.nr_throttled))
            while len(history) > 2 and history[1][0] <= now_s - window:
                history.popleft()
            ratio = 0.0
            if len(history) >= 2 and history[-1][0] - history[0][0] >= min(window, 2 * self.settings.mitigation_interval_s):
                periods = history[-1][1] - history[0][1]
                ratio = (history[-1][2] - history[0][2]) / periods if periods > 0 else 0.0
            ratios.append(ratio)
        usage = np.array([np.nan_to_num(t.sample.usage[CPU]) for t in services])
        reservation = np.array([r_before.get(t.workload.id, math.inf) for t in services])
        plan = plan_starvation_relief(np.array(ratios), usage, reservation, policy=policy)
        caps = {services[c.row].workload.id: c for c in plan.caps}
        out = []
        for tracked in services:
            cap = caps.get(tracked.workload.id)
            if cap is not None:
                if tracked.original_quota is None:
                    try:
                        tracked.original_quota = self.fs.cpu_quota(tracked.workload.cgroup)
                    except (OSError, ValueError) as exc:
                        self._error(f"{tracked.workload.id}: cannot read cpu quota: {exc}")
                        continue
                if tracked.quota_written == cap.quota_us:
                    continue
                applied = self.enforcer.set_cpu_quota(tracked.workload, cap.quota_us, cap.period_us)
                if applied.ok:
                    tracked.quota_written = cap.quota_us
                out.append(self._act("starvation_cap", "anti_starvation", tracked.workload, dict(PERIODIC), {
                    "cap_mcpu": cap.cap_mcpu, "quota_us": cap.quota_us, "period_us": cap.period_us,
                    "usage_mcpu": cap.usage_mcpu, "reservation_mcpu": cap.reservation_mcpu,
                    "release_mcpu": cap.release_mcpu, "needed_mcpu": plan.needed_mcpu,
                    "starving_batch": [b.workload.id for b, s in zip(batch, plan.starving, strict=True) if s]},
                    applied, now_s, None))
            elif tracked.original_quota is not None:
                quota, period = tracked.original_quota
                applied = self.enforcer.set_cpu_quota(tracked.workload, quota, period)
                if applied.ok:
                    tracked.original_quota = None
                    tracked.quota_written = ...
                out.append(self._act("starvation_release", "anti_starvation", tracked.workload, dict(PERIODIC), {
                    "quota_us": quota, "period_us": period}, applied, now_s, None))
        return out

    # --- entry points ------------------------------------------------------------------------

    def _drain_policy(self) -> None:
        changed = False
        while True:
            try:
                update = self.policy_updates.get_nowait()
            except queue.Empty:
                break
            self.settings = replace(self.settings, policy=update.apply(self.settings.policy))
            changed = True
        if changed and self.arming is not None:
            self.arming.settings = self.settings
            self.arming.sync([t.workload for t in self.table.rows() if t.workload.tier == "service"])

    def tick(self, now_s: float | None = None, now_mono: float | None = None) -> list[dict[str, Any]]:
        """One periodic step (module docstring). Returns the actions taken."""
        now_s, now_mono = self._now(now_s, now_mono)
        self._drain_policy()
        if now_s >= self._next_discovery or any(s.name == "file" for s in self.sources):
            self.discover(now_s)
            self._next_discovery = now_s + self.settings.discovery_interval_s
        eff = self.table.effective(now_s, self.settings.stale_ttl_s)
        r_before = {wid: float(eff[i, CPU]) for i, wid in enumerate(self.table.ids)}
        self._collect(now_s, memory_only=False)
        self._last_node = self.node_reader(now_s)
        polled = self._update_contention(now_s, now_mono)
        actions = self._memory_caps(now_s)
        actions += self._evict(now_s, None)
        actions += self._cpu(now_s, polled[0] if polled else None)
        actions += self._starvation(now_s, r_before)
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
            self._last_node = self.node_reader(now_s)
            actions += self._evict(now_s, memory[0])
        if cpu:
            actions += self._cpu(now_s, cpu[0])
        done = self.clock_mono()
        for event in events:
            mine = [a for a in actions if a["trigger"].get("source") == event.source
                    and a["trigger"].get("scope") == event.scope and a["trigger"].get("resource") == event.resource]
            self.event_outcomes.append({
                "source": event.source, "resource": event.resource, "scope": event.scope,
                "detected_mono": event.detected_mono, "done_mono": done, "wrote": bool(mine),
                "latency_ms": max((a["result"]["latency_ms"] or 0.0) for a in mine) if mine else None})
        return actions

    def report_samples(self, now_s: float) -> dict[str, Any] | None:
        """Emit one ``samples`` message for every workload with a sample."""
        rows = self.table.rows()
        if not rows:
            return None
        eff = self.table.effective(now_s, self.settings.stale_ttl_s)
        ages = self.table.sample_age_s(now_s)
        records = [protocol.sample_record(t.workload, t.sample, reservation=eff[i],
                                          stale=bool(ages[i] > self.settings.stale_ttl_s))
                   for i, t in enumerate(rows) if t.sample is not None]
        message = protocol.samples_message(node=self.settings.node_name, ts=now_s,
                                           interval_s=self.settings.sampling_interval_s, records=records,
                                           node_reading=self._last_node)
        self.emit(message)
        return message
