"""Replay summary: time-averaged headline figures from the stream of :class:`StepRecord`.

Fractions are 0–1 and averaged over steps unless a name says otherwise:

* ``reclaimed_fraction_{cpu,ram}`` = Σ_n X_n / Σ_n Σ_w q_w (docs/design.md §6) — the share of all
  running requests that only fits because of reclamation (Borg reports ~20 % in a median cell);
* ``usage_fill_*`` = Σ u / Σ C and ``slack_fill_*`` = (Σ C − Σ r) / Σ C over the nodes batch
  may use (the blueprint's active nodes by default);
* ``clipped_fraction_*`` = production pod-steps whose mapped usage was clipped at the limit.

Co-location costs (docs/design.md §11), summed over the run:

* ``batch_pod_hours`` = Σ running batch instances × step (time-weighted), and
  ``batch_evictions_per_100_pod_hours`` = 100 · batch_evicted / batch_pod_hours;
* ``throttled_batch_core_hours`` = Σ (batch cpu demand − what compressible cpu granted) × step;
* useful work (the proposal's metric 10): ``batch_cpu_core_hours`` = Σ granted batch cpu × step,
  ``production_cpu_core_hours`` = Σ production cpu usage × step, ``useful_core_hours`` their sum;
* ``completion_inflation_p50`` / ``_p99`` = percentiles over completed instances of actual ÷
  undisturbed run time (1.0 = never throttled);
* ``production_contention_core_hours`` = Σ_n max(0, Σ u_prod + Σ q_batch − C) on cpu × step —
  production usage that would not fit beside the batch the ledgers admitted, held off only by
  the throttle — and ``production_contention_node_steps`` the node-steps where it is > 0. With
  batch usage at its request (the traces carry none) it is close to the throttled core-hours
  (they differ by groups that end within a step: the grant is shared for the whole step); with
  ``--batch-usage-ratio`` < 1 it counts the admitted request, throttling only the demand;
* ``oom_kills`` (``oom_kills_by_tier``: batch, service): memory above capacity after eviction;
* ``escalations`` (``escalations_by_reason``): nodes drained by docs/design.md §8.

The proposal's metrics 6–8 — ``reservation_accuracy``, ``batch_forward_progress``,
``pareto_reserve_yield`` and their flat headline keys — are
:mod:`kalena_engine.replay.proposal_metrics`'s (``pod_request`` gives metric 6 its requests).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.ledger import reclaimed_in_use
from kalena_engine.replay.proposal_metrics import ProposalMetrics
from kalena_engine.replay.simulator import StepRecord
from kalena_engine.resources import CPU, RAM

_DIMS = (("cpu", CPU), ("ram", RAM))


def _fraction(numerator: float, denominator: float) -> float:
    return float(numerator / denominator) if denominator > 0 else 0.0


@dataclass(eq=False)
class SummaryAccumulator:
    """Accumulates per-step figures; ``target`` ``(n,)`` bool is the batch node set."""

    target: np.ndarray
    production_pods: int
    step_s: float = 60.0
    pod_request: np.ndarray | None = None   # (p, 8) production requests per pod (metric 6)
    proposal: ProposalMetrics | None = None
    steps: int = 0
    sums: Counter = field(default_factory=Counter)
    counts: Counter = field(default_factory=Counter)
    evicted_by_reason: Counter = field(default_factory=Counter)
    evicted_by_condition: Counter = field(default_factory=Counter)  # pods, by "<dimension> pressure"
    peak_running: int = 0
    peak_pending: int = 0
    oom_by_tier: Counter = field(default_factory=Counter)
    escalations_by_reason: Counter = field(default_factory=Counter)
    inflation: list[float] = field(default_factory=list)
    inflation_count: list[int] = field(default_factory=list)
    timeline: dict[str, list[float]] = field(default_factory=lambda: {
        "time_s": [], "reclaimed_cores": [], "reclaimed_ram_gib": [], "running_batch_pods": [],
        "pending_batch_pods": [], "batch_evicted": [], "throttled_cores": []})

    def add(self, record: StepRecord) -> None:
        """Fold one step in."""
        if self.proposal is None:
            request = self.pod_request if self.pod_request is not None else np.zeros((0, record.capacity.shape[1]))
            self.proposal = ProposalMetrics(pod_request=request, target=self.target, step_s=self.step_s)
        done = [(float(e.detail["inflation"]), float(e.detail.get("throttled_s", 0.0)), e.count)
                for e in record.events if e.kind == "completed" and e.detail and "inflation" in e.detail]
        self.proposal.add(time_s=record.time_s, pod_reservation=record.pod_reservation, pod_usage=record.pod_usage,
                          capacity=record.capacity, prod_request=record.prod_request,
                          batch_request=record.batch_request, completed=done)
        self.steps += 1
        cap = record.capacity
        t = self.target
        request = record.prod_request + record.batch_request
        reclaimed = reclaimed_in_use(cap, request)
        usage = record.prod_usage + record.batch_usage
        reservation = record.prod_reservation + record.batch_reservation
        for name, d in _DIMS:
            self.sums[f"reclaimed_fraction_{name}"] += _fraction(reclaimed[:, d].sum(), request[:, d].sum())
            cap_t = cap[t, d].sum()
            self.sums[f"usage_fill_{name}"] += _fraction(usage[t, d].sum(), cap_t)
            self.sums[f"slack_fill_{name}"] += _fraction(cap_t - reservation[t, d].sum(), cap_t)
            self.sums[f"clipped_fraction_{name}"] += _fraction(record.clipped[0 if name == "cpu" else 1], self.production_pods)
            self.sums[f"reclaimed_{name}_ir"] += reclaimed[:, d].sum()
        hours = self.step_s / 3600.0
        self.sums["batch_pod_hours"] += record.batch_instances * hours
        throttled = max(0.0, record.batch_cpu_demand_mcpu - record.batch_cpu_granted_mcpu)
        self.sums["throttled_batch_core_hours"] += throttled / 1000.0 * hours
        self.sums["batch_cpu_core_hours"] += record.batch_cpu_granted_mcpu / 1000.0 * hours
        self.sums["production_cpu_core_hours"] += float(record.prod_usage[:, CPU].sum()) / 1000.0 * hours
        if record.contention_mcpu is not None:
            self.sums["production_contention_core_hours"] += float(record.contention_mcpu.sum()) / 1000.0 * hours
            self.counts["production_contention_node_steps"] += int(np.count_nonzero(record.contention_mcpu > 1e-6))
        prod_over = (record.prod_usage[:, [CPU, RAM]] > cap[:, [CPU, RAM]] * (1 + 1e-9)).any(axis=1)
        self.counts["production_over_capacity_steps"] += int(prod_over.sum())
        self.counts["stale_pod_steps"] += record.stale_pods
        self.sums["running_instances"] += record.running_instances
        self.sums["pending_instances"] += record.pending_instances
        self.peak_running = max(self.peak_running, record.running_instances)
        self.peak_pending = max(self.peak_pending, record.pending_instances)
        for event in record.events:
            if event.kind == "submitted":
                self.counts["batch_submitted"] += event.count
            elif event.kind == "placed":
                self.counts["batch_placed"] += event.count
            elif event.kind == "completed":
                self.counts["batch_completed"] += event.count
                if "inflation" in event.detail:
                    self.inflation.append(float(event.detail["inflation"]))
                    self.inflation_count.append(event.count)
            elif event.kind == "evicted":
                self.counts["batch_evicted"] += event.count
                self.evicted_by_reason[event.reason] += event.count
                dim = (event.detail or {}).get("dimension", "node")
                self.evicted_by_condition[f"{dim} pressure"] += event.count
            elif event.kind == "production_evicted":
                self.counts["production_evictions"] += event.count
            elif event.kind == "oom_killed":
                self.oom_by_tier["batch"] += event.count
            elif event.kind == "production_oom_killed":
                self.oom_by_tier["service"] += event.count
            elif event.kind == "escalated":
                self.escalations_by_reason[event.reason] += 1
        line = self.timeline
        line["time_s"].append(record.time_s)
        line["reclaimed_cores"].append(round(float(reclaimed[:, CPU].sum()) / 1000.0, 3))
        line["reclaimed_ram_gib"].append(round(float(reclaimed[:, RAM].sum()) / 2**30, 3))
        line["running_batch_pods"].append(record.running_instances)
        line["pending_batch_pods"].append(record.pending_instances)
        line["batch_evicted"].append(self.counts["batch_evicted"])
        line["throttled_cores"].append(round(throttled / 1000.0, 3))

    def summary(self) -> dict[str, object]:
        """The figures so far as a JSON-ready dict (see module doc)."""
        steps = max(self.steps, 1)
        out: dict[str, object] = {
            "batch_submitted": self.counts["batch_submitted"],
            "batch_placed": self.counts["batch_placed"],
            "batch_completed": self.counts["batch_completed"],
            "batch_evicted": self.counts["batch_evicted"],
            "batch_evicted_by_reason": dict(self.evicted_by_reason),
            "batch_evicted_pods_by_condition": dict(self.evicted_by_condition),
            "production_evictions": self.counts["production_evictions"],
            "production_over_capacity_steps": self.counts["production_over_capacity_steps"],
            "stale_pod_steps": self.counts["stale_pod_steps"],
        }
        for name, _ in _DIMS:
            for key in ("reclaimed_fraction", "usage_fill", "slack_fill", "clipped_fraction"):
                out[f"{key}_{name}"] = round(self.sums[f"{key}_{name}"] / steps, 6)
        out["mean_reclaimed_cores"] = round(self.sums["reclaimed_cpu_ir"] / steps / 1000.0, 3)
        out["mean_reclaimed_ram_gib"] = round(self.sums["reclaimed_ram_ir"] / steps / 2**30, 3)
        out["mean_running_batch_pods"] = round(self.sums["running_instances"] / steps, 1)
        out["mean_pending_batch_pods"] = round(self.sums["pending_instances"] / steps, 1)
        out["peak_running_batch_pods"] = self.peak_running
        out["peak_pending_batch_pods"] = self.peak_pending
        pod_hours = self.sums["batch_pod_hours"]
        out["batch_pod_hours"] = round(pod_hours, 3)
        out["batch_evictions_per_100_pod_hours"] = round(100.0 * self.counts["batch_evicted"] / pod_hours, 4) if pod_hours > 0 else 0.0
        out["throttled_batch_core_hours"] = round(self.sums["throttled_batch_core_hours"], 3)
        out["batch_cpu_core_hours"] = round(self.sums["batch_cpu_core_hours"], 3)
        out["production_cpu_core_hours"] = round(self.sums["production_cpu_core_hours"], 3)
        out["useful_core_hours"] = round(self.sums["batch_cpu_core_hours"] + self.sums["production_cpu_core_hours"], 3)
        out["production_contention_core_hours"] = round(self.sums["production_contention_core_hours"], 3)
        out["production_contention_node_steps"] = self.counts["production_contention_node_steps"]
        out["oom_kills"] = int(sum(self.oom_by_tier.values()))
        out["oom_kills_by_tier"] = {"batch": self.oom_by_tier["batch"], "service": self.oom_by_tier["service"]}
        out["production_oom_kills"] = self.oom_by_tier["service"]
        out["escalations"] = int(sum(self.escalations_by_reason.values()))
        out["escalations_by_reason"] = dict(self.escalations_by_reason)
        for q in (50, 99):
            out[f"completion_inflation_p{q}"] = round(weighted_percentile(self.inflation, self.inflation_count, q), 4)
        if self.proposal is not None:
            out.update(self.proposal.summary())
        return out


def weighted_percentile(values: list[float], counts: list[int], q: float) -> float:
    """The ``q``-th percentile (0–100) of ``values`` each repeated ``counts`` times: the first
    value, in sorted order, at which the cumulative count reaches ``q`` % of the total (1.0
    when empty — nothing was slowed). Example: values 1.0 × 3, 2.0 × 1 → p50 1.0, p99 2.0."""
    if not values:
        return 1.0
    v = np.asarray(values, dtype=np.float64)
    c = np.asarray(counts, dtype=np.float64)
    order = np.argsort(v, kind="stable")
    cumulative = np.cumsum(c[order])
    index = int(np.searchsorted(cumulative, q / 100.0 * cumulative[-1] * (1 - 1e-12)))
    return float(v[order][min(index, len(v) - 1)])
