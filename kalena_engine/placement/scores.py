"""Batch placement scores (docs/design.md §9): each 0–100, combined as a weighted mean with weights
from :class:`~kalena_engine.placement.policy.PlacementPolicy`::

    score_n = (w_b·balance + w_c·colocation + w_i·image + w_v·volatility) / (w_b + w_c + w_i + w_v)

Every formula below has a worked example repeated in ``tests/engine/placement/test_scores.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from kalena_engine.placement.policy import PlacementPolicy
from kalena_engine.placement.selectors import Image


def quantise(slack: np.ndarray, buckets: Sequence[float]) -> np.ndarray:
    """Slack rounded down to a bucket edge per dimension: ``S̃ = ⌊S / w⌋ · w``; ``(…, 8)``.

    Scores read slack at this resolution so that the score cache keyed on ``S̃`` is exact.
    Example: S_cpu = 1,930 mcpu, w = 50 mcpu → 1,900 mcpu. +inf stays +inf.
    """
    widths = np.asarray(buckets, dtype=np.float64)
    return np.floor(slack / widths) * widths


def balance_score(slack_q: np.ndarray, request: np.ndarray, capacity: np.ndarray,
                  dims: Sequence[int]) -> np.ndarray:
    """Stranded-slack balance: prefer nodes whose remaining slack stays balanced across
    dimensions (kube-scheduler BalancedAllocation, on slack instead of requests).

    For node n and the dimensions D_n of ``dims`` with finite, positive capacity::

        f_d = clip((S̃_d − q_d) / C_d, 0, 1)        remaining slack fraction after placing
        balance = 100 · (1 − std_{d∈D_n}(f_d))      (population std; 100 when |D_n| ≤ 1)

    Example: C = (16 cores, 64 GiB), S̃ = (6 cores, 40 GiB), q = (2 cores, 8 GiB) →
    f = (4/16, 32/64) = (0.25, 0.5), std = 0.125 → 87.5.

    Args:
        slack_q: ``(m, 8)`` quantised slack; request ``(8,)``; capacity ``(m, 8)``.
    Returns:
        ``(m,)`` float in [0, 100].
    """
    dims = list(dims)
    cap = capacity[:, dims]
    valid = np.isfinite(cap) & (cap > 0)
    if dims and valid.all():  # the usual case, without the masks (the same values)
        frac = np.clip((slack_q[:, dims] - request[dims]) / cap, 0.0, 1.0)
        mean = frac.sum(axis=1) / len(dims)
        var = ((frac - mean[:, None]) ** 2).sum(axis=1) / len(dims)
        return 100.0 * (1.0 - np.sqrt(var)) if len(dims) > 1 else np.full(len(frac), 100.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = np.clip((slack_q[:, dims] - request[dims]) / np.where(valid, cap, 1.0), 0.0, 1.0)
    frac = np.where(valid, frac, 0.0)
    count = valid.sum(axis=1)
    safe = np.maximum(count, 1)
    mean = frac.sum(axis=1) / safe
    var = np.where(valid, (frac - mean[:, None]) ** 2, 0.0).sum(axis=1) / safe
    return np.where(count > 1, 100.0 * (1.0 - np.sqrt(var)), 100.0)


def colocation_score(has_production: np.ndarray, has_batch: np.ndarray) -> np.ndarray:
    """Co-location preference: batch is the ballast that yields, so prefer nodes already
    mixing service and batch::

        100  production and batch both present
         50  production only
          0  no production (capacity the blueprint freed, not slack)

    Example: (prod, batch) = (yes, yes), (yes, no), (no, yes) → 100, 50, 0.
    """
    return np.where(has_production, np.where(has_batch, 100.0, 50.0), 0.0)


def image_score(images: Sequence[Image], cached: Mapping[str, np.ndarray], n_nodes: int,
                policy: PlacementPolicy) -> np.ndarray:
    """Image locality (kube-scheduler ImageLocality, same thresholds; weighted 3× by default)::

        sum_n = Σ_{images i cached on n} size_i · (nodes caching i / all nodes)
        image = 100 · (clamp(sum_n, min, max · k) − min) / (max · k − min)

    with ``min = 23 MB``, ``max = 1000 MB`` per image and ``k`` images. Example: one 500 MB
    image cached on 50 of 100 nodes → sum = 250 MB on those nodes →
    100 · (250 − 23) / (1000 − 23) = 23.23; 0 elsewhere.

    Returns ``(n,)``; a template without images scores 0 everywhere.
    """
    if not images:
        return np.zeros(n_nodes)
    total = np.zeros(n_nodes)
    for image in images:
        where = cached.get(image.name)
        if where is None or not where.any():
            continue
        total += np.where(where, image.size_bytes * (where.sum() / n_nodes), 0.0)
    low, high = policy.image_min_bytes, policy.image_max_bytes * len(images)
    return 100.0 * (np.clip(total, low, high) - low) / (high - low)


def volatility_score(volatility: np.ndarray, max_ratio: float) -> np.ndarray:
    """Volatility penalty: ``100 · (1 − min(1, v / v_max))`` where ``v`` is the node's σ of
    production reservation over capacity (see :mod:`kalena_engine.placement.volatility`).

    Example: σ_cpu = 0.8 core on 16 cores → v = 0.05; v_max = 0.10 → 50.
    """
    return 100.0 * (1.0 - np.minimum(1.0, np.asarray(volatility, dtype=np.float64) / max_ratio))


def weight_sum(policy: PlacementPolicy) -> float:
    return policy.weight_balance + policy.weight_colocation + policy.weight_image + policy.weight_volatility


def static_part(images: Sequence[Image], cached: Mapping[str, np.ndarray], volatility: np.ndarray,
                policy: PlacementPolicy) -> np.ndarray:
    """``(n,)`` ``(w_i·image + w_v·volatility) / Σw``: the part fixed for a template in a pass."""
    n = len(volatility)
    out = policy.weight_volatility * volatility_score(volatility, policy.volatility_max_ratio)
    if policy.weight_image and images:
        out = out + policy.weight_image * image_score(images, cached, n, policy)
    return out / weight_sum(policy)


def dynamic_part(slack: np.ndarray, request: np.ndarray, capacity: np.ndarray, has_production: np.ndarray,
                 has_batch: np.ndarray, policy: PlacementPolicy, balance: np.ndarray | None = None) -> np.ndarray:
    """``(m,)`` ``(w_b·balance + w_c·colocation) / Σw`` for rows of exact ``slack`` ``(m, 8)``
    (quantised here) — the part that changes as batch is placed. ``balance`` may be given
    precomputed (from the score cache)."""
    if balance is None:  # quantised on the balance dimensions only (the others are not read)
        dims = list(policy.balance_dims)
        balance = balance_score(quantise(slack[:, dims], np.asarray(policy.slack_buckets, dtype=np.float64)[dims]),
                                request[dims], capacity[:, dims], range(len(dims)))
    out = policy.weight_balance * balance + policy.weight_colocation * colocation_score(has_production, has_batch)
    return out / weight_sum(policy)


def total_score(slack: np.ndarray, request: np.ndarray, capacity: np.ndarray, has_production: np.ndarray,
                has_batch: np.ndarray, volatility: np.ndarray, images: Sequence[Image],
                cached: Mapping[str, np.ndarray], policy: PlacementPolicy) -> np.ndarray:
    """``(n,)`` weighted score of every node for one pod (no cache; the reference form).

    Example (default weights 1, 1, 3, 1): balance 87.5, colocation 100, image 0,
    volatility 50 → (87.5 + 100 + 0 + 50) / 6 = 39.58.
    """
    return (dynamic_part(slack, request, capacity, has_production, has_batch, policy)
            + static_part(images, cached, volatility, policy))
