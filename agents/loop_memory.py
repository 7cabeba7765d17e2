"""Memory actions of the mitigation loop (docs/design.md §7): batch memory caps, eviction on the
reservation ledger, SIGKILL after the grace, and the end of evicted workloads. Decisions come
from :mod:`kalena_engine.mitigation`; writes go through the enforcer; this mixin only wires them
(see :class:`agents.loop.MitigationLoop`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.loop_support import PERIODIC, trigger_of
from agents.model import KIND_PROCESS
from agents.pressure.events import PressureEvent
from kalena_engine.mitigation import NodeWorkloads, PressureSignal, batch_memory_cap, plan_evictions, unaccounted_usage
from kalena_engine.mitigation.eviction import ledger_freshness, pressure_fires
from kalena_engine.resources import DIMS, RAM, STORAGE

if TYPE_CHECKING:
    from agents.loop import MitigationLoop


class MemoryActions:
    """Mixin of :class:`~agents.loop.MitigationLoop`: memory decisions → enforcer."""

    def _memory_caps(self: MitigationLoop, now_s: float) -> list[dict[str, Any]]:
        if not self.settings.enforce_memory_caps:
            return []
        out = []
        for tracked in self.table.rows():
            w = tracked.workload
            if w.tier != "batch" or tracked.terminating:
                continue
            cap = batch_memory_cap(float(w.request[RAM]), float(w.limit[RAM]), w.slack_memory)
            if (cap.high_bytes is None and cap.max_bytes is None and tracked.memory_cap_written is None) \
                    or cap == tracked.memory_cap_written or now_s - tracked.memory_cap_failed_s < self.settings.sampling_interval_s:
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

    def _evict(self: MitigationLoop, now_s: float, event: PressureEvent | None) -> list[dict[str, Any]]:
        node = self._last_node
        rows = [t for t in self.table.rows() if t.workload.tier != "daemonset"]
        if node is None or not rows:
            return []
        index = {t.workload.id: i for i, t in enumerate(self.table.rows())}
        idx = [index[t.workload.id] for t in rows]
        effective = self.table.effective(now_s, self.settings.stale_ttl_s)
        eff = effective[idx]
        usage = np.array([np.nan_to_num(t.sample.usage, nan=0.0) if t.sample is not None else np.zeros(len(DIMS))
                          for t in rows])
        every = self.table.rows()       # every tracked row (DaemonSets too) holds memory the node reading includes
        # a row whose sample did not measure memory counts at its r, like one never sampled
        sampled = np.array([t.sample is not None and not math.isnan(t.sample.usage[RAM]) for t in every], dtype=bool)
        every_terminating = np.array([t.terminating for t in every], dtype=bool)
        never_chosen = np.array([t.workload.tier == "daemonset" for t in every], dtype=bool)
        terminating = np.array([t.terminating for t in rows], dtype=bool)
        # decide on the fresh inputs: a workload whose samples stopped is held at max(r, q) and never
        # chosen; a node whose sampled workloads are all stale (or whose reading is) evicts nothing (C1)
        freshness = ledger_freshness(now_s - node.ts_s, self.table.sample_age_s(now_s)[idx], ~terminating,
                                     self.settings.stale_ttl_s)
        workloads = NodeWorkloads(
            reservation=eff, usage=usage, limit=self.table.estimator_limit(self.settings.policy.estimator)[idx],
            tier=np.array([t.workload.tier for t in rows]), priority=np.array([t.workload.priority for t in rows]),
            start_s=np.array([t.workload.start_s for t in rows]), terminating=terminating,
            count=np.ones(len(rows), dtype=np.int64), held=freshness.held)
        age = freshness.sample_age_s
        held_ids = [t.workload.id for t, h in zip(rows, freshness.held, strict=True) if h]
        psi = node.psi.get("memory")
        node_capacity = self.node_capacity()
        # a DaemonSet counts at its request: Phase 0 took that from the capacity (node_capacity)
        every_r = np.where(never_chosen, np.nan_to_num(self.table.request()[:, RAM]), effective[:, RAM])
        out = []
        for dim in (RAM, STORAGE):
            capacity = float(node_capacity[dim])
            if not math.isfinite(capacity):
                continue
            unaccounted = 0.0
            if dim == RAM:
                every_usage = np.array([float(t.sample.usage[RAM]) if ok else 0.0 for t, ok in zip(every, sampled)])
                # the reading less the DaemonSets' memory within their requests (outside C, as above)
                ballast = float(np.sum(np.minimum(every_usage, every_r)[never_chosen & sampled & ~every_terminating]))
                working = max(0.0, node.working_set_bytes - ballast)
                unaccounted = unaccounted_usage(node.working_set_bytes, every_usage, every_r, sampled,
                                                every_terminating, never_chosen, self.settings.reserved_memory_bytes)
            else:
                measured = [t.sample.usage[STORAGE] for t in rows if t.sample is not None]
                if not measured or all(math.isnan(x) for x in measured):
                    continue
                working = float(np.nansum(measured))
            signal = PressureSignal(dim, working, age,
                                    psi.some.avg10_pct if psi is not None and dim == RAM else None,
                                    psi.full.avg10_pct if psi is not None and psi.full is not None and dim == RAM else None,
                                    unaccounted)
            plan = plan_evictions(workloads, node_capacity, signal, now_s=now_s,
                                  stale_ttl_s=self.settings.stale_ttl_s, policy=self.settings.policy.eviction)
            common = {"dimension": DIMS[dim], "capacity": capacity, "working_set": working, "unaccounted": unaccounted,
                      "node_working_set": node.working_set_bytes if dim == RAM else working,
                      "ledger_before": plan.ledger_before, "ledger_after": plan.ledger_after,
                      "acute": plan.acute, "sample_age_s": round(age, 3), "stale_ttl_s": self.settings.stale_ttl_s,
                      "held_stale": held_ids}
            pressure, _ = pressure_fires(signal, capacity, self.settings.policy.eviction)
            if plan.decision in ("stale_sample", "no_candidate") and pressure:
                if self._last_hold.get(DIMS[dim]) != plan.decision:
                    out.append(self._act("hold", plan.decision, None, trigger_of(event), common, None, now_s, event))
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
                out.append(self._act("evict", victim.reason, tracked.workload, trigger_of(event), {
                    **common, "ledger_before": victim.ledger_before, "ledger_after": victim.ledger_after,
                    "usage": victim.usage, "reservation": victim.reservation,
                    "limit": victim.limit if math.isfinite(victim.limit) else None,
                    "priority": victim.priority, "grace_s": grace, "skipped_young": plan.skipped_young,
                }, applied, now_s, event))
        return out

    def _terminations(self: MitigationLoop, now_s: float) -> list[dict[str, Any]]:
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
