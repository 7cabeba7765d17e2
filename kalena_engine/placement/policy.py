"""Batch placement policy (docs/design.md §9): score weights, cache bucket widths, sampling, caps.

One frozen value, part of :class:`kalena_engine.policy.Policy` (``policy.placement``); the
console edits it at run time. The eviction cooldown per (workload group, node) is
``policy.eviction.cooldown_s`` (600 s), shared with the mitigation side.
"""

from __future__ import annotations

from dataclasses import dataclass

from kalena_engine.resources import CPU, DIMS, RAM

#: Default quantisation of slack for the score cache, per dimension in internal units:
#: 50 mcpu, 128 MiB, 1 device, 1 GiB, 1 MB/s × 4. Scores read slack at this resolution
#: (Borg §3.4: "ignoring small changes in resource quantities reduces cache invalidations").
DEFAULT_SLACK_BUCKETS: tuple[float, ...] = (50.0, 128.0 * 2**20, 1.0, 2.0**30, 1e6, 1e6, 1e6, 1e6)


@dataclass(frozen=True)
class PlacementPolicy:
    """Parameters of the batch scheduler.

    Attributes:
        weight_balance: weight of the stranded-slack balance score (1).
        weight_colocation: weight of the co-location preference (1).
        weight_image: weight of image locality (3 — kube-scheduler's default ImageLocality
            weight is 1 of a default total of 12, ≈ 8 % of the score; here it is 3 of 6, 50 %).
        weight_volatility: weight of the volatility penalty (1).
        balance_dims: dimensions whose remaining-slack fractions must stay balanced
            (cpu, ram — kube-scheduler's BalancedAllocation default); a dimension whose
            capacity is unconstrained (+inf) or 0 on a node takes no part there.
        image_min_bytes, image_max_bytes: kube-scheduler ImageLocality thresholds (23 MB and
            1000 MB per container image).
        volatility_max_ratio: node volatility (σ of the production reservation / capacity) at
            which the volatility score reaches 0 (0.10).
        volatility_half_life_s: half-life of the exponentially weighted mean and variance of
            each node's production reservation (3,600 s).
        slack_buckets: ``(8,)`` bucket width per dimension, internal units (see
            :data:`DEFAULT_SLACK_BUCKETS`); scores are computed from slack rounded down to a
            bucket edge, so a cached score is exact while the bucket is unchanged.
        score_cache_entries: distinct requests the score cache keeps (least recently used go).
        percentage_of_nodes_to_score: kube-scheduler semantics: 0 = adaptive
            (``50 − n/125`` %, at least ``adaptive_min_percentage``), else 1–100; the scan stops
            after finding that many feasible nodes, and never fewer than
            ``min_feasible_nodes_to_find``.
        adaptive_min_percentage: the adaptive percentage's floor (20 %; kube-scheduler's is 5 %).
            Kalena departs from kube-scheduler here: a batch pod lands on reclaimed capacity
            where a worse fit means more evictions later, and its decisions are cheap, so it
            looks further. Measured at 5,000 nodes (docs/scheduler.md): the reclaimed-fraction
            gap to scoring every node spans 0.0–1.4 % across sampling seeds at 10 % and
            0.2–0.6 % at 20 %.
        min_feasible_nodes_to_find: floor of the feasible nodes to find (100, as kube-scheduler).
        namespace_batch_caps: ``((namespace, cap), …)`` running-batch pod cap per namespace.
        default_namespace_batch_cap: cap for namespaces not listed (``None`` = unlimited).
        max_examples_per_reason: typed rejection examples kept per reason in why-pending (3).
    """

    weight_balance: float = 1.0
    weight_colocation: float = 1.0
    weight_image: float = 3.0
    weight_volatility: float = 1.0
    balance_dims: tuple[int, ...] = (CPU, RAM)
    image_min_bytes: float = 23e6
    image_max_bytes: float = 1000e6
    volatility_max_ratio: float = 0.10
    volatility_half_life_s: float = 3600.0
    slack_buckets: tuple[float, ...] = DEFAULT_SLACK_BUCKETS
    score_cache_entries: int = 1024
    percentage_of_nodes_to_score: float = 0.0
    adaptive_min_percentage: float = 20.0
    min_feasible_nodes_to_find: int = 100
    namespace_batch_caps: tuple[tuple[str, int], ...] = ()
    default_namespace_batch_cap: int | None = None
    max_examples_per_reason: int = 3

    def __post_init__(self) -> None:
        weights = (self.weight_balance, self.weight_colocation, self.weight_image, self.weight_volatility)
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"score weights {weights} must be ≥ 0 with a positive sum")
        if len(self.slack_buckets) != len(DIMS) or any(not b > 0 for b in self.slack_buckets):
            raise ValueError(f"slack_buckets needs {len(DIMS)} positive widths ({', '.join(DIMS)}), "
                             f"got {self.slack_buckets}")
        if not 0 < self.adaptive_min_percentage <= 100:
            raise ValueError(f"adaptive_min_percentage {self.adaptive_min_percentage} is not in (0, 100]")
        if not 0 <= self.percentage_of_nodes_to_score <= 100:
            raise ValueError(f"percentage_of_nodes_to_score {self.percentage_of_nodes_to_score} "
                             "is not in 0–100 (0 = adaptive)")
        if self.volatility_max_ratio <= 0 or self.volatility_half_life_s <= 0:
            raise ValueError("volatility_max_ratio and volatility_half_life_s must be positive")
        if self.image_max_bytes <= self.image_min_bytes:
            raise ValueError("image_max_bytes must exceed image_min_bytes")
        if any(d not in range(len(DIMS)) for d in self.balance_dims):
            raise ValueError(f"balance_dims {self.balance_dims} must be dimension indices 0–{len(DIMS) - 1}")

    def batch_cap(self, namespace: str) -> int | None:
        """Running-batch pod cap of ``namespace`` (``None`` = unlimited)."""
        for name, cap in self.namespace_batch_caps:
            if name == namespace:
                return cap
        return self.default_namespace_batch_cap

    def feasible_nodes_to_find(self, n_nodes: int) -> int:
        """How many feasible nodes a scan looks for before scoring (kube-scheduler
        ``numFeasibleNodesToFind``).

        ``n < min_feasible`` or 100 % → all ``n``; percentage 0 → adaptive
        ``max(adaptive_min_percentage, 50 − ⌊n/125⌋)`` % (integer division, as the Go code,
        whose floor is 5); result ``max(min_feasible, ⌊n · pct / 100⌋)``. Examples: 186 nodes,
        adaptive → 49 % → 91 → 100; 5,000 nodes → max(20, 10) = 20 % → 1,000 (kube-scheduler's
        floor of 5 gives 10 % → 500).
        """
        pct = self.percentage_of_nodes_to_score
        if n_nodes < self.min_feasible_nodes_to_find or pct >= 100:
            return n_nodes
        if pct == 0:
            pct = max(self.adaptive_min_percentage, 50 - n_nodes // 125)
        return min(n_nodes, max(self.min_feasible_nodes_to_find, int(n_nodes * pct / 100.0)))
