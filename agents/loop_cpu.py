"""CPU actions of the mitigation loop (docs/design.md §7): the batch budget as CFS quotas, the batch
cpu weight while a service is contended, and anti-starvation caps on services above their own
request (held for the window). Decisions come from :mod:`kalena_engine.mitigation`; writes go through the
enforcer; this mixin only wires them (see :class:`agents.loop.MitigationLoop`)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from agents.loop_support import PERIODIC, trigger_of
from agents.pressure.events import PressureEvent
from kalena_engine.mitigation import plan_batch_cpu, plan_starvation_relief, throttled_window_ratio
from kalena_engine.resources import CPU

if TYPE_CHECKING:
    from agents.loop import MitigationLoop


class CpuActions:
    """Mixin of :class:`~agents.loop.MitigationLoop`: cpu decisions → enforcer."""

    def _cpu(self: MitigationLoop, now_s: float, event: PressureEvent | None) -> list[dict[str, Any]]:
        rows = self.table.rows()
        batch = [i for i, t in enumerate(rows) if t.workload.tier == "batch" and not t.terminating]
        capacity = self.node_capacity()
        if not batch or not math.isfinite(float(capacity[CPU])):
            return []
        services = [i for i, t in enumerate(rows) if t.workload.tier == "service" and not t.terminating]
        eff = self.table.effective(now_s, self.settings.stale_ttl_s)
        request, limit = self.table.request(), self.table.declared_limit()
        policy = self.settings.policy.eviction
        plan = plan_batch_cpu(
            capacity_mcpu=float(capacity[CPU]),
            service_reservation_mcpu=eff[services, CPU], service_request_mcpu=request[services, CPU],
            service_contended=np.array([rows[i].contended_since_mono is not None for i in services], dtype=bool),
            batch_request_mcpu=request[batch, CPU], batch_limit_mcpu=limit[batch, CPU],
            batch_slack_cpu=np.array([rows[i].workload.slack_cpu for i in batch], dtype=bool), policy=policy)
        contended = [rows[i].workload.id for i in services if rows[i].contended_since_mono is not None]
        out = []
        for i, share in zip(batch, plan.shares, strict=True):
            tracked = rows[i]
            old = tracked.quota_written
            # the cap: the declared limit, else the request when slack-cpu is denied (reaching it is written exactly)
            cap = float(limit[i, CPU]) if math.isfinite(float(limit[i, CPU])) or tracked.workload.slack_cpu \
                else float(request[i, CPU])
            at_cap = share.share_mcpu >= cap - 1e-6
            if old is not ... and old is not None and (share.quota_us == old or (
                    old < share.quota_us <= old * (1 + self.settings.quota_hysteresis_ratio) and not at_cap)):
                continue
            applied = self.enforcer.set_cpu_quota(tracked.workload, share.quota_us, share.period_us)
            if not applied.ok and not self.fs.exists(tracked.workload.cgroup):
                # the pod ended and its group went before discovery dropped its row: there is
                # nothing left to throttle, so neither a failed action nor a retry every tick
                tracked.quota_written = share.quota_us
                continue
            if applied.ok:
                tracked.quota_written = share.quota_us
            out.append(self._act("throttle", "cpu_budget", tracked.workload, trigger_of(event), {
                "quota_us": share.quota_us, "period_us": share.period_us, "share_mcpu": share.share_mcpu,
                "budget_mcpu": plan.budget_mcpu, "capacity_mcpu": plan.capacity_mcpu,
                "service_claim_mcpu": plan.service_claim_mcpu,
                "previous_quota_us": None if old is ... else old, "contended_services": contended,
            }, applied, now_s, event))
        out += self._batch_weights(now_s, event, [rows[i] for i in batch], plan.batch_weight_minimum, contended)
        return out

    def _batch_weights(self: MitigationLoop, now_s: float, event: PressureEvent | None, batch: list,
                       minimum: bool, contended: list[str]) -> list[dict[str, Any]]:
        """Minimum cpu weight for batch while a service is contended; restore it afterwards."""
        out = []
        for tracked in batch:
            if minimum and tracked.original_weight is None:
                try:
                    tracked.original_weight = self.fs.cpu_weight(tracked.workload.cgroup)
                except (OSError, ValueError) as exc:
                    self._error(f"{tracked.workload.id}: cannot read cpu weight: {exc}")
                    continue
                weight, reason = self.fs.min_cpu_weight, "cpu_contention"
            elif not minimum and tracked.original_weight is not None:
                weight, reason = tracked.original_weight, "contention_cleared"
            else:
                continue
            previous = tracked.original_weight if minimum else self.fs.min_cpu_weight
            applied = self.enforcer.set_cpu_weight(tracked.workload, weight)
            if applied.ok and not minimum:
                tracked.original_weight = None
            out.append(self._act("cpu_weight", reason, tracked.workload, trigger_of(event), {
                "weight": weight, "previous_weight": previous, "contended_services": contended,
                "cgroup_version": self.fs.version}, applied, now_s, event))
        return out

    def _starvation(self: MitigationLoop, now_s: float) -> list[dict[str, Any]]:
        """Anti-starvation (docs/design.md §7): throttled *time* per batch over the rolling window; caps on
        services above their request, held for the window before the next decision."""
        policy = self.settings.policy.eviction
        window = policy.starvation_window_s
        rows = self.table.rows()
        batch = [t for t in rows if t.workload.tier == "batch" and not t.terminating]
        services = [t for t in rows if t.workload.tier == "service" and not t.terminating and t.sample is not None]
        ratios = []
        for tracked in batch:
            throttling = tracked.sample.cpu_throttling if tracked.sample is not None else None
            history = tracked.throttle_history
            if throttling is not None and (not history or history[-1][0] < tracked.sample.ts_s):
                history.append((tracked.sample.ts_s, throttling.throttled_time_us))
            while len(history) > 2 and history[1][0] <= now_s - window:
                history.popleft()
            ratio = 0.0
            if len(history) >= 2:
                ratio = throttled_window_ratio(history[-1][1] - history[0][1], history[-1][0] - history[0][0], window)
            ratios.append(ratio)
        held = [t for t in services if t.starvation_cap_mcpu is not None]
        if held and batch and now_s < self._starvation_hold_until_s:
            return []           # a cap holds for the window before the next decision
        usage = np.array([np.nan_to_num(t.sample.usage[CPU]) for t in services])
        request = np.array([t.workload.request[CPU] for t in services])
        contended = np.array([t.contended_since_mono is not None for t in services], dtype=bool)
        current = np.array([np.nan if t.starvation_cap_mcpu is None else t.starvation_cap_mcpu for t in services])
        plan = plan_starvation_relief(np.array(ratios), usage, request, contended, current, policy=policy)
        caps = {services[c.row].workload.id: c for c in plan.caps}
        starving = [b.workload.id for b, s in zip(batch, plan.starving, strict=True) if s]
        out = []
        for tracked in [t for t in rows if t.workload.tier == "service"]:
            cap = caps.get(tracked.workload.id)
            if cap is not None:
                if tracked.original_quota is None:
                    try:
                        tracked.original_quota = self.fs.cpu_quota(tracked.workload.cgroup)
                    except (OSError, ValueError) as exc:
                        self._error(f"{tracked.workload.id}: cannot read cpu quota: {exc}")
                        continue
                self._starvation_hold_until_s = now_s + window
                if tracked.quota_written == cap.quota_us:
                    tracked.starvation_cap_mcpu = cap.cap_mcpu
                    continue
                applied = self.enforcer.set_cpu_quota(tracked.workload, cap.quota_us, cap.period_us)
                if applied.ok:
                    tracked.quota_written = cap.quota_us
                    tracked.starvation_cap_mcpu = cap.cap_mcpu
                out.append(self._act("starvation_cap", "anti_starvation", tracked.workload, dict(PERIODIC), {
                    "cap_mcpu": cap.cap_mcpu, "quota_us": cap.quota_us, "period_us": cap.period_us,
                    "usage_mcpu": cap.usage_mcpu, "request_mcpu": cap.request_mcpu,
                    "release_mcpu": cap.release_mcpu, "needed_mcpu": plan.needed_mcpu,
                    "hold_until_s": self._starvation_hold_until_s, "window_s": window,
                    "starving_batch": starving,
                    "throttled_ratio": {b.workload.id: round(r, 4) for b, r in zip(batch, ratios, strict=True)}},
                    applied, now_s, None))
            elif tracked.original_quota is not None:
                quota, period = tracked.original_quota
                applied = self.enforcer.set_cpu_quota(tracked.workload, quota, period)
                if applied.ok:
                    tracked.original_quota = None
                    tracked.starvation_cap_mcpu = None
                    tracked.quota_written = ...
                out.append(self._act("starvation_release", "anti_starvation", tracked.workload, dict(PERIODIC), {
                    "quota_us": quota, "period_us": period, "starving_batch": starving}, applied, now_s, None))
        return out
