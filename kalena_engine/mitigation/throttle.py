"""CPU throttling of batch under compressible pressure — docs/design.md §7.

Budget for all batch on a node (service reservations from fresh samples)::

    B = max(min_batch_cpu · n_batch, C_cpu − Σ_service r_s)

shared among batch workloads in proportion to their requests, each capped at its own declared
limit, and written as a CFS quota ``share × cfs_period_us`` (period 100,000 µs). A workload that
declares no limit is capped at B when ``slack-cpu: allow`` (the default) lets it use idle
capacity, and at its request when ``slack-cpu: deny``.

This reconciles docs/design.md §7 ("capped at its own limit, or at B when slack-cpu is allowed") with
case C6, whose batch pod has slack-cpu allowed *and* a 1-core limit and whose quota must stop at
that limit (100,000 µs): a declared limit always binds; slack-cpu decides only where none is
declared.

Worked example (case C6): C = 4 cores, service r_S = 3.6 cores, one batch pod B (request 1,
limit 1, slack-cpu allowed): B = max(0.1, 4 − 3.6) = 0.4 core → quota 40,000 µs per 100,000 µs.
When r_S decays to 2.5 cores, B = 1.5 core but B's share is capped at its declared limit of
1 core → 100,000 µs (slack-cpu allowed or not). Throttling, never eviction, answers cpu contention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CpuShare:
    """One batch workload's cpu allowance: ``share_mcpu`` and the CFS quota it writes."""

    share_mcpu: float
    quota_us: int
    period_us: int


def batch_cpu_budget_mcpu(capacity_mcpu: float, service_reservation_mcpu: float, n_batch: int,
                          min_batch_cpu_mcpu: float) -> float:
    """``B = max(min_batch_cpu · n_batch, C_cpu − Σ_service r_s)`` in mcpu (docs/design.md §7)."""
    return max(min_batch_cpu_mcpu * max(n_batch, 1), capacity_mcpu - service_reservation_mcpu)


def batch_cpu_shares(budget_mcpu: float, request_mcpu: np.ndarray, limit_mcpu: np.ndarray,
                     slack_cpu_allowed: np.ndarray, *, min_batch_cpu_mcpu: float,
                     period_us: int = 100_000) -> list[CpuShare]:
    """Split the batch budget among ``k`` batch workloads.

    Shares are proportional to requests; a share above its cap (the declared limit; without one,
    the budget if slack-cpu is allowed, else the request) is cut to the cap and the excess is redistributed to the others
    (water-filling). Each share is at least ``min_batch_cpu`` so no batch workload is frozen.

    Args:
        budget_mcpu: B from :func:`batch_cpu_budget_mcpu`.
        request_mcpu, limit_mcpu: ``(k,)``.
        slack_cpu_allowed: ``(k,)`` bool, ``kalena.naughtian.io/slack-cpu: allow``.
    Returns:
        ``k`` :class:`CpuShare`, quota = ``round(share / 1000 × period_us)`` µs (≥ 1,000 µs,
        the kernel's minimum).
    """
    request = np.asarray(request_mcpu, dtype=np.float64)
    limit = np.asarray(limit_mcpu, dtype=np.float64)
    undeclared_cap = np.where(np.asarray(slack_cpu_allowed, dtype=bool), budget_mcpu, request)
    cap = np.where(np.isfinite(limit), np.minimum(limit, budget_mcpu), undeclared_cap)
    share = np.zeros_like(request)
    free = np.ones(len(request), dtype=bool)
    left = budget_mcpu
    weights = np.where(request > 0, request, 1.0)
    while free.any() and left > 1e-9:
        proposal = left * weights[free] / weights[free].sum()
        room = cap[free] - share[free]
        capped = proposal >= room
        idx = np.flatnonzero(free)
        if not capped.any():
            share[idx] += proposal
            break
        share[idx[capped]] = cap[idx[capped]]
        left -= room[capped].sum()
        free[idx[capped]] = False
    share = np.maximum(share, np.minimum(min_batch_cpu_mcpu, cap))
    return [
        CpuShare(float(s), max(1000, int(round(s / 1000.0 * period_us))), period_us)
        for s in share
    ]
