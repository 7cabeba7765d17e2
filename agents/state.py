"""The workloads the agent tracks, their per-workload mitigation state, and the reservation
estimator rows aligned with them (:mod:`kalena_engine.estimator`, docs/design.md §5)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from agents.model import UsageSample, Workload
from kalena_engine import estimator
from kalena_engine.mitigation import MemoryCap
from kalena_engine.policy import EstimatorPolicy
from kalena_engine.resources import N_DIMS


@dataclass
class Tracked:
    """Mitigation state of one workload (mutable; owned by the loop thread)."""

    workload: Workload
    first_seen_s: float
    sample: UsageSample | None = None
    #: cpu contention mark: set by a pressure event, cleared once the service is seen unstalled.
    contended_since_mono: float | None = None
    contended_source: str | None = None
    psi_cpu_prev: tuple[float, int] | None = None
    #: last CFS quota this agent wrote (µs; ``None`` = removed), ``...`` = never written.
    quota_written: object = ...
    #: a service's own quota before an anti-starvation cap, restored when the cap lifts.
    original_quota: tuple[int | None, int] | None = None
    #: a batch group's cpu weight before it was lowered for a contended service.
    original_weight: int | None = None
    memory_cap_written: MemoryCap | None = None
    memory_cap_failed_s: float = -math.inf
    evicted_s: float | None = None
    evict_reason: str | None = None
    kill_deadline_s: float | None = None
    killed: bool = False
    #: the anti-starvation cap this service holds (mcpu), ``None`` when uncapped.
    starvation_cap_mcpu: float | None = None
    #: ``(ts_s, cumulative throttled_time_us)`` history for the anti-starvation window.
    throttle_history: deque = field(default_factory=lambda: deque(maxlen=4096))

    @property
    def terminating(self) -> bool:
        """Being terminated (by this agent or by the orchestrator): credited in the ledger."""
        return self.evicted_s is not None or self.workload.terminating


class WorkloadTable:
    """Tracked workloads in a stable order, with :class:`~kalena_engine.estimator.Reservations`
    rows aligned to :attr:`ids`."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.by_id: dict[str, Tracked] = {}
        self.res = estimator.initial_reservations(np.zeros((0, N_DIMS)), np.zeros(0))

    def __len__(self) -> int:
        return len(self.ids)

    def rows(self) -> list[Tracked]:
        return [self.by_id[i] for i in self.ids]

    def sync(self, workloads: list[Workload], now_s: float) -> tuple[list[str], list[str]]:
        """Make the table hold exactly ``workloads``: new ones start at ``r = q`` (charged their
        full request, docs/design.md §6), vanished ones leave at once. Returns ``(added, removed)``."""
        wanted = {w.id: w for w in workloads}
        removed = [i for i in self.ids if i not in wanted]
        if removed:
            keep = np.array([i in wanted for i in self.ids], dtype=bool)
            self.res = estimator.take(self.res, keep)
            self.ids = [i for i in self.ids if i in wanted]
            for i in removed:
                del self.by_id[i]
        added = [w for w in workloads if w.id not in self.by_id]
        for w in workloads:
            if w.id in self.by_id:
                self.by_id[w.id].workload = w
        if added:
            fresh = estimator.initial_reservations(np.array([w.request for w in added]),
                                                   np.full(len(added), now_s))
            self.res = estimator.concat(self.res, fresh)
            for w in added:
                self.ids.append(w.id)
                self.by_id[w.id] = Tracked(w, now_s)
        return [w.id for w in added], removed

    def remove(self, ids: set[str]) -> None:
        """Drop workloads that ended (their cgroup vanished)."""
        self.sync([t.workload for t in self.rows() if t.workload.id not in ids], 0.0)

    # --- vectors -----------------------------------------------------------------------------

    def request(self) -> np.ndarray:
        return np.array([self.by_id[i].workload.request for i in self.ids]).reshape(-1, N_DIMS)

    def declared_limit(self) -> np.ndarray:
        return np.array([self.by_id[i].workload.limit for i in self.ids]).reshape(-1, N_DIMS)

    def estimator_limit(self, policy: EstimatorPolicy) -> np.ndarray:
        """``(n, 8)`` L of every row (declared, else ``limit_ratio × q``; docs/design.md §5)."""
        return estimator.estimator_limit(self.declared_limit(), self.request(), policy.limit_ratio)

    def update_estimator(self, samples: dict[str, UsageSample], policy: EstimatorPolicy) -> None:
        """Feed new samples (those newer than the row's last sample) to the estimator. A
        dimension a sample did not measure is pinned at the request for that update; samples
        with different timestamps (remote sources) are applied per timestamp."""
        if not self.ids:
            return
        request = self.request()
        limit = self.estimator_limit(policy)
        start = np.array([self.by_id[i].workload.start_s for i in self.ids])
        grace = np.array([policy.grace_s if g is None else g
                          for g in (self.by_id[i].workload.startup_grace_s for i in self.ids)], dtype=np.float64)
        reclaim = np.array([self.by_id[i].workload.reclaim_disabled for i in self.ids])
        by_ts: dict[float, list[int]] = {}
        for row, wid in enumerate(self.ids):
            sample = samples.get(wid)
            if sample is not None and sample.ts_s > self.res.last_sample_s[row]:
                by_ts.setdefault(sample.ts_s, []).append(row)
        for ts in sorted(by_ts):
            rows = by_ts[ts]
            sampled = np.zeros(len(self.ids), dtype=bool)
            sampled[rows] = True
            usage = np.zeros((len(self.ids), N_DIMS))
            pinned = estimator.pinned_mask(reclaim)
            for row in rows:
                values = samples[self.ids[row]].usage
                usage[row] = np.nan_to_num(values, nan=0.0)
                pinned[row] |= np.isnan(values)
            self.res = estimator.update_reservations(
                self.res, request=request, limit=limit, usage=usage, sampled=sampled, now_s=ts,
                start_s=start, grace_s=grace, pinned=pinned, policy=policy)

    def effective(self, now_s: float, stale_ttl_s: float) -> np.ndarray:
        """``(n, 8)`` reservations as the ledgers read them (stale rows read ``max(r, q)``)."""
        return estimator.effective_reservations(self.res, self.request(), now_s, stale_ttl_s)

    def sample_age_s(self, now_s: float) -> np.ndarray:
        """``(n,)`` seconds since each row's last sample (inf if none yet)."""
        return now_s - self.res.last_sample_s
