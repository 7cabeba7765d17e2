"""Replay summary: time-averaged headline figures from the stream of :class:`StepRecord`.

Fractions are 0–1 and averaged over steps unless a name says otherwise:

* ``reclaimed_fraction_{cpu,ram}`` = Σ_n X_n / Σ_n Σ_w q_w (DESIGN §6) — the share of all
  running requests that only fits because of reclamation (Borg reports ~20 % in a median cell);
* ``usage_fill_*`` = Σ u / Σ C and ``slack_fill_*`` = (Σ C − Σ r) / Σ C over the nodes batch
  may use (the blueprint's active nodes by default);
* ``clipped_fraction_*`` = production pod-steps whose mapped usage was clipped at the limit.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.ledger import reclaimed_in_use
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
    steps: int = 0
    sums: Counter = field(default_factory=Counter)
    counts: Counter = field(default_factory=Counter)
    evicted_by_reason: Counter = field(default_factory=Counter)
    evicted_by_condition: Counter = field(default_factory=Counter)  # pods, by "<dimension> pressure"
    peak_running: int = 0
    peak_pending: int = 0

    def add(self, record: StepRecord) -> None:
        """Fold one step in."""
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
            elif event.kind == "evicted":
                self.counts["batch_evicted"] += event.count
                self.evicted_by_reason[event.reason] += event.count
                dim = (event.detail or {}).get("dimension", "node")
                self.evicted_by_condition[f"{dim} pressure"] += event.count
            elif event.kind == "production_evicted":
                self.counts["production_evictions"] += event.count

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
        return out
