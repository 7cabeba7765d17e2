"""Policy: every tunable parameter of the engine, with docs/design.md's defaults.

One frozen value passed into each control step; the console edits it at run time and the
engine never reads it from anywhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kalena_engine.escalation import EscalationPolicy
from kalena_engine.placement.policy import PlacementPolicy
from kalena_engine.predictors import MEMBERS, PREDICTORS
from kalena_engine.resources import COMPRESSIBLE, N_DIMS


@dataclass(frozen=True)
class EstimatorPolicy:
    """Reservation estimator parameters (docs/design.md §5).

    The defaults are the setting the operator's tolerance rule ships (``kalena evaluate
    calibrate``, docs/evaluation.md "The shipped default"): ``auto`` choosing per workload between
    the asymmetric rule (μ 1.15, h 1200 s) and the periodic member (margin 1.1), memory at 1.6.

    Attributes:
        margin_ratio: μ, the safety margin on usage (1.15).
        half_life_s: h, half-life of the slow decay (1200 s).
        grace_s: g, startup grace during which r ≥ request (300 s; per-workload override).
        stale_min_s: floor of the staleness TTL (60 s); the TTL is
            ``max(stale_min_s, 3 × sampling interval)``.
        limit_ratio: L = limit_ratio × q for workloads that declare no limit (1.0).
        predictor: the peak predictor serving the reservation (:data:`~kalena_engine.predictors.
            PREDICTORS`): ``asymmetric`` (the rule above), ``percentile``, ``nsigma``,
            ``periodic``, ``max`` (of ``members``) or ``auto`` (per workload, among ``members``, by
            recent cost; the default).
        bucket_s: width of a usage-peak bucket (300 s).
        window_s: history the percentile and N-sigma members read (7200 s).
        percentile: the percentile member's p (99).
        n_sigma: the N-sigma member's N (3).
        periodic_days: whole days the periodic member reads (3).
        periodic_harmonics: daily harmonics it keeps, 1–12 (3).
        min_history_s: less non-empty history than this → the asymmetric rule serves (3600 s).
        peak_margin_ratio: the margin on the percentile, N-sigma and periodic forecasts, which are
            already peak statistics (1.1; None: ``margin_ratio``); the reservation never falls below
            ``min(L, margin_ratio · usage)`` whatever it is.
        memory_margin_ratio: the margin on the incompressible dimensions — memory, storage, GPU —
            in every member, the asymmetric rule's included (1.6; None: the margins above). A cpu
            shortfall is throttled; a memory shortfall is an eviction, so memory may keep a wider
            margin than cpu (Autopilot, EuroSys 2020, recommends cpu and memory with different rules).
        members: the members ``max`` combines and ``auto`` chooses among (asymmetric, periodic).
        under_cost_weight, over_cost_weight: ``auto``'s weights of under- and over-prediction
            (10, 3).
        cost_half_life_s: half-life of ``auto``'s cost memory (3600 s).
        cost_horizon_s: ``auto`` scores a member's reservation at a bucket's start against the
            highest bucket peak of the next ``cost_horizon_s`` (1200 s: slack lent to batch stays
            lent longer than a bucket; at μ 1.3, h 1200 s it kept ``auto`` inside the operator's
            tolerance at ×1 and ×4 on two Bitbrains windows, 300 s on neither, and 3600 s gave up
            more harvest — docs/evaluation.md), in whole buckets (rounded, at least one);
            ``bucket_s`` scores against the next bucket's peak alone (the earlier rule).
        switch_margin_ratio: hysteresis: switch only to a candidate this much cheaper (0.2).
    """

    margin_ratio: float = 1.15
    half_life_s: float = 1200.0
    grace_s: float = 300.0
    stale_min_s: float = 60.0
    limit_ratio: float = 1.0
    predictor: str = "auto"
    bucket_s: float = 300.0
    window_s: float = 7200.0
    percentile: float = 99.0
    n_sigma: float = 3.0
    periodic_days: int = 3
    periodic_harmonics: int = 3
    min_history_s: float = 3600.0
    peak_margin_ratio: float | None = 1.1
    memory_margin_ratio: float | None = 1.6
    members: tuple[str, ...] = ("asymmetric", "periodic")
    under_cost_weight: float = 10.0
    over_cost_weight: float = 3.0
    cost_half_life_s: float = 3600.0
    cost_horizon_s: float = 1200.0
    switch_margin_ratio: float = 0.2

    def __post_init__(self) -> None:
        if self.predictor not in PREDICTORS:
            raise ValueError(f"predictor {self.predictor!r} is unknown (accepted: {', '.join(PREDICTORS)})")
        unknown = [m for m in self.members if m not in MEMBERS]
        if unknown or not self.members:
            raise ValueError(f"members {list(self.members)!r}: each must be one of {', '.join(MEMBERS)}")
        if self.window_s < 2 * self.bucket_s:
            raise ValueError(f"window_s {self.window_s:g} is shorter than two buckets (2 × bucket_s = "
                             f"{2 * self.bucket_s:g})")
        if self.bucket_s > 3600.0 or 3600.0 % self.bucket_s:
            raise ValueError(f"bucket_s {self.bucket_s:g} must divide an hour")

    @property
    def window_buckets(self) -> int:
        """Buckets the percentile and N-sigma members read."""
        return int(round(self.window_s / self.bucket_s))

    @property
    def leaf_margin(self) -> float:
        """The margin on the peak predictors' forecasts: ``peak_margin_ratio``, else ``margin_ratio``."""
        return self.margin_ratio if self.peak_margin_ratio is None else self.peak_margin_ratio

    @property
    def margins(self) -> np.ndarray:
        """``(8,)`` the asymmetric rule's margin per dimension: ``margin_ratio``, and
        ``memory_margin_ratio`` on the incompressible dimensions when set."""
        return self._per_dim(self.margin_ratio)

    @property
    def leaf_margins(self) -> np.ndarray:
        """``(8,)`` the peak predictors' margin per dimension: :attr:`leaf_margin`, and
        ``memory_margin_ratio`` on the incompressible dimensions when set."""
        return self._per_dim(self.leaf_margin)

    def _per_dim(self, margin: float) -> np.ndarray:
        out = np.full(N_DIMS, float(margin))
        if self.memory_margin_ratio is not None:
            out[~COMPRESSIBLE] = float(self.memory_margin_ratio)
        return out

    @property
    def horizon_buckets(self) -> int:
        """Buckets ``auto`` scores each forecast over: ``cost_horizon_s / bucket_s`` rounded, ≥ 1."""
        return max(1, int(round(self.cost_horizon_s / self.bucket_s)))

    @property
    def min_history_buckets(self) -> int:
        """Non-empty buckets a workload needs before a predictor (not the asymmetric rule) serves."""
        return max(1, int(np.ceil(self.min_history_s / self.bucket_s)))

    def stale_ttl_s(self, sampling_interval_s: float) -> float:
        """``T_stale = max(60 s, 3 × sampling interval)`` (docs/design.md §5)."""
        return max(self.stale_min_s, 3.0 * sampling_interval_s)


@dataclass(frozen=True)
class EvictionPolicy:
    """Node-local mitigation parameters (docs/design.md §7).

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
        """A copy with escalation fields replaced (docs/design.md §8)."""
        return replace(self, escalation=replace(self.escalation, **changes))
