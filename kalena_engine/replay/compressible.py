"""What running batch actually gets in a replay step (docs/design.md §11): cpu is compressible,
memory is not.

**CPU.** On each node production cpu usage is served first; the rest ``B = max(0, C − Σ u_prod)``
is shared among the batch instances in proportion to their requests, each capped at its
demand ``d = min(usage, limit)`` — the agent's throttle (docs/design.md §7) with the replay's exact
usage in place of the reservations. Water-filling: find the level λ with
``Σ_i min(λ · q_i, d_i) = B``; instance i gets ``g_i = min(λ · q_i, d_i)`` (λ = ∞ when the
demand fits). A throttled instance progresses at ``g / d`` of its undisturbed rate.

Worked example: C = 16 cores, production uses 13 → B = 3 cores. Group A: 2 instances,
q = d = 2 cores; group B: 1 instance, q = 4, d = 1 (it uses a quarter of its request).
λ = 1 would give 2·2 + 1 = 5 > 3; B is capped first (its d/q = 0.25 < 1), leaving 2 cores for
A's 4 cores of request → λ = 0.5 → A gets 1 core each (rate 0.5), B its 1 core (rate 1).

**Memory.** A node whose working set ``Σ u`` still exceeds C after node-local eviction is an
OOM kill: the kernel's OOM killer takes batch first (on Kubernetes batch pods are BestEffort,
``oom_score_adj`` 1000, docs/design.md §14), the largest per-instance usage first, until the rest fits;
only then production (largest usage first). :func:`oom_victims` returns those kills.
"""

from __future__ import annotations

import numpy as np


def share_compressible_cpu(budget_mcpu: np.ndarray, node: np.ndarray, count: np.ndarray,
                           request_mcpu: np.ndarray, demand_mcpu: np.ndarray) -> np.ndarray:
    """Per-instance cpu grant of each batch group (module doc, water-filling per node).

    Args:
        budget_mcpu: ``(n,)`` B per node (mcpu), ``max(0, C − Σ u_prod)``.
        node, count: ``(G,)`` node row and instance count of each group.
        request_mcpu, demand_mcpu: ``(G,)`` per instance; a request of 0 weighs as 1 mcpu.

    Returns:
        ``(G,)`` grant per instance (mcpu), ``0 ≤ g ≤ demand``; per node ``Σ count · g ≤ B``.
    """
    groups = len(node)
    if groups == 0:
        return np.zeros(0)
    weight = np.where(request_mcpu > 0, request_mcpu, 1.0)
    demand = np.maximum(0.0, demand_mcpu)
    ratio = demand / weight
    order = np.lexsort((ratio, node))
    n_s, c_s, w_s, d_s, r_s = node[order], count[order].astype(np.float64), weight[order], demand[order], ratio[order]
    cw, cd = c_s * w_s, c_s * d_s
    first = np.r_[True, n_s[1:] != n_s[:-1]]
    seg = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    cum_d = np.cumsum(cd)
    cum_d -= (cum_d[starts] - cd[starts])[seg]          # Σ_{j ≤ k} c·d within the node
    cum_w = np.cumsum(cw)
    cum_w -= (cum_w[starts] - cw[starts])[seg]
    total_w = np.add.reduceat(cw, starts)
    tail_w = total_w[seg] - cum_w                       # Σ_{j > k} c·q within the node
    budget = np.asarray(budget_mcpu, dtype=np.float64)[n_s]
    at_level = cum_d + r_s * tail_w                     # Σ grants if λ = d_k / q_k
    short = at_level > budget * (1 + 1e-12) + 1e-9
    level = np.full(len(starts), np.inf)
    rows = np.flatnonzero(short)
    if len(rows):
        segs, first_row = np.unique(seg[rows], return_index=True)
        k = rows[first_row]
        before_d = cum_d[k] - cd[k]
        before_w = tail_w[k] + cw[k]
        level[segs] = np.maximum(0.0, budget[k] - before_d) / before_w
    grant_sorted = np.minimum(d_s, level[seg] * w_s)
    grant = np.empty(groups)
    grant[order] = grant_sorted
    return grant


def oom_victims(capacity_bytes: float, production_usage_bytes: np.ndarray, batch_count: np.ndarray,
                batch_usage_bytes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OOM kills on one node whose working set exceeds its memory capacity (module doc).

    Args:
        capacity_bytes: C on ram.
        production_usage_bytes: ``(k_p,)`` working set of each production pod.
        batch_count, batch_usage_bytes: ``(k_b,)`` instances and per-instance working set of
            each batch group.

    Returns:
        ``(batch kills (k_b,) instances per group, production killed (k_p,) bool)``; nothing
        when ``Σ u ≤ C``. Example: C = 64 GiB, production 40 GiB, batch groups of 3 × 4 GiB
        and 2 × 6 GiB (36 GiB) → 12 GiB over → the 6-GiB group goes first: 2 kills (12 GiB) → fits.
    """
    batch_kills = np.zeros(len(batch_count), dtype=np.int64)
    prod_killed = np.zeros(len(production_usage_bytes), dtype=bool)
    excess = float(np.sum(production_usage_bytes) + np.sum(batch_count * batch_usage_bytes) - capacity_bytes)
    if excess <= 0:
        return batch_kills, prod_killed
    for row in np.argsort(-batch_usage_bytes, kind="stable"):
        if excess <= 0:
            break
        each = float(batch_usage_bytes[row])
        if each <= 0:
            continue
        kills = min(int(batch_count[row]), int(np.ceil(excess / each - 1e-9)))
        batch_kills[row] = kills
        excess -= kills * each
    for row in np.argsort(-production_usage_bytes, kind="stable"):
        if excess <= 0:
            break
        prod_killed[row] = True
        excess -= float(production_usage_bytes[row])
    return batch_kills, prod_killed
