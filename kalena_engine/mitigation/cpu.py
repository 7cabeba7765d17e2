"""CPU mitigation decisions around the batch budget (docs/design.md §7): what each service claims, the
whole batch throttle plan, and anti-starvation.

**Service claims.** The budget subtracts each service's reservation computed from fresh
samples. A service that is stalled on cpu (its cpu pressure fired, or its PSI ``some`` shows it
waiting) cannot show its demand in its usage — usage under contention is what it *got* — so
until it is seen uncontended its claim is ``max(r, q)``: production never loses what it asked
for (docs/design.md §1). Otherwise the claim is ``r``.

**Plan.** ``B = max(min_batch_cpu · n_batch, C − Σ claims)`` split by
:func:`~kalena_engine.mitigation.throttle.batch_cpu_shares`. Worked example (case C6): C = 4,
r_S = q_S = 3.6 cores → B = max(0.1, 0.4) = 0.4 core → 40,000 µs per 100,000 µs.

**Batch weight.** While any service is contended, batch also runs at the minimum cpu weight
(``batch_weight_minimum``): CFS bandwidth hands a group its quota in parallel bursts across
cpus, so a quota alone still lets batch crowd a service for part of every period; at the
minimum weight batch uses its quota only where services leave cpu idle. The weight derived from
the request is restored when no service is contended.

**Anti-starvation.** A batch workload whose cumulative throttled *time* (cgroup
``throttled_time`` / ``throttled_usec``, not the count of throttled periods) over the rolling
window exceeds θ (default 0.5) of the window is starving (:func:`throttled_window_ratio`).
Services whose usage is above their *request* are capped just enough to release
``min_batch_cpu`` per starving batch workload, in proportion to their excess ``u − q``, and never
below ``q``: a service within its request is never capped, nor is a contended one. (Comparing
with the reservation cannot work: the reservation rises at once to ``μ·u``, so a service is never
"above its reservation" for more than one sample.) The caller holds the caps for the window and
then re-decides: a service still capped counts its usage at most its cap, and while batch still
starves it keeps a cap (deepened by the new release, floored at ``q``); once no batch starves
every cap is lifted. Worked example: one starving batch, S1 u = 1.5 cores with q = 1.0, S2
u = 0.8 with q = 1.0 → release 0.1 core, all from S1: S1 capped at 1.4 cores (140,000 µs), S2
untouched. A window later, batch still starving and S1 at its cap (u = 1.4): cap 1.3 cores.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena_engine.mitigation.throttle import CpuShare, batch_cpu_budget_mcpu, batch_cpu_shares
from kalena_engine.policy import EvictionPolicy


def service_cpu_claims_mcpu(reservation_mcpu: np.ndarray, request_mcpu: np.ndarray,
                            contended: np.ndarray) -> np.ndarray:
    """``(s,)`` claims: ``max(r, q)`` where ``contended`` else ``r`` (mcpu)."""
    r = np.asarray(reservation_mcpu, dtype=np.float64)
    q = np.asarray(request_mcpu, dtype=np.float64)
    return np.where(np.asarray(contended, dtype=bool), np.maximum(r, q), r)


@dataclass(frozen=True)
class CpuThrottlePlan:
    """Batch cpu allowance on one node.

    Attributes:
        capacity_mcpu: C.
        service_claim_mcpu: Σ service claims.
        budget_mcpu: B.
        shares: one :class:`CpuShare` per batch row, in input order.
        batch_weight_minimum: some service is contended: batch runs at the minimum cpu weight.
    """

    capacity_mcpu: float
    service_claim_mcpu: float
    budget_mcpu: float
    shares: tuple[CpuShare, ...]
    batch_weight_minimum: bool = False


def plan_batch_cpu(*, capacity_mcpu: float, service_reservation_mcpu: np.ndarray,
                   service_request_mcpu: np.ndarray, service_contended: np.ndarray,
                   batch_request_mcpu: np.ndarray, batch_limit_mcpu: np.ndarray,
                   batch_slack_cpu: np.ndarray, policy: EvictionPolicy) -> CpuThrottlePlan:
    """The batch throttle plan (module docstring). Shapes: services ``(s,)``, batch ``(k,)``;
    an undeclared batch limit is +inf."""
    claims = service_cpu_claims_mcpu(service_reservation_mcpu, service_request_mcpu, service_contended)
    total = float(np.sum(claims))
    n_batch = len(batch_request_mcpu)
    budget = batch_cpu_budget_mcpu(capacity_mcpu, total, n_batch, policy.min_batch_cpu_mcpu)
    shares: list[CpuShare] = []
    if n_batch:
        shares = batch_cpu_shares(budget, np.asarray(batch_request_mcpu, dtype=np.float64),
                                  np.asarray(batch_limit_mcpu, dtype=np.float64),
                                  np.asarray(batch_slack_cpu, dtype=bool),
                                  min_batch_cpu_mcpu=policy.min_batch_cpu_mcpu, period_us=policy.cfs_period_us)
    return CpuThrottlePlan(float(capacity_mcpu), total, float(budget), tuple(shares),
                           bool(np.any(np.asarray(service_contended, dtype=bool))))


@dataclass(frozen=True)
class ServiceCap:
    """A cpu cap on one service row (anti-starvation), with the numbers behind it (mcpu, µs)."""

    row: int
    cap_mcpu: float
    quota_us: int
    period_us: int
    usage_mcpu: float
    request_mcpu: float
    release_mcpu: float


@dataclass(frozen=True)
class StarvationPlan:
    """Result of :func:`plan_starvation_relief`."""

    starving: np.ndarray
    needed_mcpu: float
    released_mcpu: float
    caps: tuple[ServiceCap, ...] = ()


def throttled_window_ratio(throttled_us: float, span_s: float, window_s: float) -> float:
    """Throttled share of the anti-starvation window: ``Δthrottled_time / max(span, window)``.

    ``throttled_us`` is the growth of the group's cumulative throttled time (µs) over the last
    ``span_s`` seconds of samples; dividing by at least the full window means a workload seen for
    less than a window must already have been throttled for θ × window to count as starving.
    Example: 40 s throttled over a 60 s window → 0.667 > θ = 0.5; 40 s seen over 20 s of a 60 s
    window → 40 / 60 as well. CFS adds throttled time per cpu, so the ratio can exceed 1.
    """
    return max(0.0, float(throttled_us)) / 1e6 / max(float(span_s), float(window_s), 1e-9)


def plan_starvation_relief(batch_throttled_ratio: np.ndarray, service_usage_mcpu: np.ndarray,
                           service_request_mcpu: np.ndarray, service_contended: np.ndarray | None = None,
                           service_cap_mcpu: np.ndarray | None = None, *, policy: EvictionPolicy) -> StarvationPlan:
    """Anti-starvation caps (module docstring, docs/design.md §7).

    Args:
        batch_throttled_ratio: ``(k,)`` throttled time over the rolling window per batch row
            (:func:`throttled_window_ratio`).
        service_usage_mcpu, service_request_mcpu: ``(s,)``; the request is the floor of any cap.
        service_contended: ``(s,)`` bool, services that are never capped (none if omitted).
        service_cap_mcpu: ``(s,)`` the cap each service holds now (NaN where none); a capped
            service's usage counts at most its cap, and while batch starves it stays capped.
        policy: ``starvation_threshold_ratio`` θ, ``min_batch_cpu_mcpu``, ``cfs_period_us``.
    Returns:
        A :class:`StarvationPlan`; ``caps`` lists every service that should hold a cap now (none
        when no batch starves).
    """
    ratio = np.asarray(batch_throttled_ratio, dtype=np.float64)
    starving = ratio > policy.starvation_threshold_ratio
    needed = float(np.count_nonzero(starving)) * policy.min_batch_cpu_mcpu
    usage = np.asarray(service_usage_mcpu, dtype=np.float64)
    request = np.asarray(service_request_mcpu, dtype=np.float64)
    held = np.full(usage.shape, np.nan) if service_cap_mcpu is None else np.asarray(service_cap_mcpu, dtype=np.float64)
    capped = np.isfinite(held)
    base = np.where(capped, np.minimum(usage, np.where(capped, held, 0.0)), usage)
    excess = np.maximum(0.0, base - request)
    allowed = np.ones(usage.shape, dtype=bool)
    if service_contended is not None:
        allowed = ~np.asarray(service_contended, dtype=bool)
    excess = np.where(allowed, excess, 0.0)
    total_excess = float(np.sum(excess))
    if needed <= 0:
        return StarvationPlan(starving, needed, 0.0)
    released = min(needed, total_excess)
    caps = []
    for row in np.flatnonzero((excess > 0) | (capped & allowed)):
        release = float(excess[row]) * released / total_excess if total_excess > 0 else 0.0
        cap = max(float(request[row]), float(base[row]) - release)
        quota = max(1000, int(round(cap / 1000.0 * policy.cfs_period_us)))
        caps.append(ServiceCap(int(row), cap, quota, policy.cfs_period_us, float(usage[row]),
                               float(request[row]), release))
    return StarvationPlan(starving, needed, released, tuple(caps))
