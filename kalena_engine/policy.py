"""Policy: every tunable parameter of the engine, with DESIGN's defaults.

One frozen value passed into each control step; the console edits it at run time and the
engine never reads it from anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kalena_engine.escalation import EscalationPolicy
from kalena_engine.placement.policy import PlacementPolicy


@dataclass(frozen=True)
class EstimatorPolicy:
    """Reservation estimator parameters (DESIGN §5).

    Attributes:
        margin_ratio: μ, the safety margin on usage (1.15).
        half_life_s: h, half-life of the slow decay (600 s).
        grace_s: g, startup grace during which r ≥ request (300 s; per-workload override).
        stale_min_s: floor of the staleness TTL (60 s); the TTL is
            ``max(stale_min_s, 3 × sampling interval)``.
        limit_ratio: L = limit_ratio × q for workloads that declare no limit (1.0).
    """

    margin_ratio: float = 1.15
    half_life_s: float = 600.0
    grace_s: float = 300.0
    stale_min_s: float = 60.0
    limit_ratio: float = 1.0

    def stale_ttl_s(self, sampling_interval_s: float) -> float:
        """``T_stale = max(60 s, 3 × sampling interval)`` (DESIGN §5)."""
        return max(self.stale_min_s, 3.0 * sampling_interval_s)


@dataclass(frozen=True)
class EvictionPolicy:
    """Node-local mitigation parameters (DESIGN §7).

    Attributes:
        evict_threshold_ratio: working set ≥ this × C starts eviction (0.95) when Σr > C.
        acute_ratio: working set ≥ this × C is acute pressure (0.99): T_min is waived.
        psi_some_avg10_pct: PSI memory ``some`` avg10 threshold (10 %).
        psi_full_avg10_pct: PSI memory ``full`` avg10 above this is acute (10 %).
        min_run_time_s: T_min, batch younger than this is skipped unless acute (120 s).
        min_batch_cpu_mcpu: floor of the batch cpu budget per batch workload (100 mcpu).
        cfs_period_us: CFS period used to turn a share into a quota (100,000 µs).
        starvation_window_s: rolling window for anti-starvation accounting (60 s).
        starvation_threshold_ratio: θ, throttled share of the window that triggers it (0.5).
        cooldown_s: eviction cooldown per (workload group, node) for placement (600 s).
    """

    evict_threshold_ratio: float = 0.95
    acute_ratio: float = 0.99
    psi_some_avg10_pct: float = 10.0
    psi_full_avg10_pct: float = 10.0
    min_run_time_s: float = 120.0
    min_batch_cpu_mcpu: float = 100.0
    cfs_period_us: int = 100_000
    starvation_window_s: float = 60.0
    starvation_threshold_ratio: float = 0.5
    cooldown_s: float = 600.0


@dataclass(frozen=True)
class Policy:
    """All engine policy in one value (its file form: :mod:`kalena_engine.policy_file`)."""

    estimator: EstimatorPolicy = EstimatorPolicy()
    eviction: EvictionPolicy = EvictionPolicy()
    placement: PlacementPolicy = PlacementPolicy()
    escalation: EscalationPolicy = EscalationPolicy()

    def with_estimator(self, **changes: float) -> Policy:
        """A copy with estimator fields replaced, e.g. ``policy.with_estimator(margin_ratio=1.3)``."""
        return replace(self, estimator=replace(self.estimator, **changes))

    def with_eviction(self, **changes: float) -> Policy:
        """A copy with eviction fields replaced."""
        return replace(self, eviction=replace(self.eviction, **changes))

    def with_placement(self, **changes: object) -> Policy:
        """A copy with batch placement fields replaced (see :class:`PlacementPolicy`)."""
        return replace(self, placement=replace(self.placement, **changes))

    def with_escalation(self, **changes: float) -> Policy:
        """A copy with escalation fields replaced (DESIGN §8)."""
        return replace(self, escalation=replace(self.escalation, **changes))
