"""Reservation rules: what a replay reserves for production, the one thing ``kalena evaluate
policies`` swaps (docs/design.md §11). Everything else — the estimator run, the ledgers, the batch
scheduler, node-local eviction, OOM, compressible cpu, escalation — is the same simulator.

Each rule maps one step's inputs (:class:`RuleInputs`) to the ``(p, 8)`` production
reservations the ledgers read. GPU always reads the request (never reclaimed, docs/design.md §6).

* ``kalena`` — the engine's estimator (docs/design.md §5), as the live control plane runs it.
* ``none`` — no reclamation: ``r = q``.
* ``koordinator`` — Koordinator's slo-controller BatchResource plugin with the ``usage``
  policy and the published defaults of its ``colocation-config`` (see :class:`KoordinatorRule`).
* ``vpa`` — the Kubernetes VPA recommender's target (see :class:`VpaRule`).
* ``oracle-60m`` — each production reservation is its maximum usage over the next 60 min,
  no margin: the zero-contention reference for batch that stays up to an hour.
* ``oracle-exact`` — the usage of the step being decided exactly (the replay holds a step's
  sample over the step that follows it, docs/design.md §5): the physical limit of harvest — nothing
  causal reclaims more without contention at the moment it places.

Under every rule but ``kalena``, batch reservations stay at their requests (the baselines
account batch by request: Koordinator's scheduler sums ``batch-cpu``/``batch-memory`` requests;
the oracles and VPA say nothing about batch). With the trace's batch usage at its request the
Kalena estimator gives ``r_b = q_b`` too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from kalena_engine.replay.state import Production
from kalena_engine.replay.usage import ProductionUsage
from kalena_engine.resources import CPU, GPU, RAM

RULES = ("kalena", "none", "koordinator", "vpa", "oracle-60m", "oracle-exact")


@dataclass(frozen=True, eq=False)
class RuleInputs:
    """One step as a rule sees it.

    Attributes:
        step, now_s: step index and replay time (s).
        usage: ``(p, 8)`` production usage this step (clipped at the limit).
        fresh: ``(p,)`` bool, the pod's source sample is within T_stale.
        estimated: ``(p, 8)`` the Kalena estimator's reservations as the ledgers read them.
    """

    step: int
    now_s: float
    usage: np.ndarray
    fresh: np.ndarray
    estimated: np.ndarray


class ReservationRule(Protocol):
    """What the simulator asks of a rule: ``production(inputs)`` → ``(p, 8)`` reservations;
    ``pins_batch``: batch reservations stay at their requests."""

    name: str
    pins_batch: bool

    def production(self, inputs: RuleInputs) -> np.ndarray: ...


@dataclass(frozen=True, eq=False)
class RuleContext:
    """What a rule may know of the cluster: production, its usage model (the oracles read
    the future from it), node capacity before and after Phase 0, and the step length."""

    production: Production
    usage: ProductionUsage
    allocatable: np.ndarray
    capacity: np.ndarray
    step_s: float


class KalenaRule:
    """docs/design.md §5: the estimator's reservations, unchanged."""

    name = "kalena"
    pins_batch = False

    def production(self, inputs: RuleInputs) -> np.ndarray:
        return inputs.estimated


@dataclass(eq=False)
class NoneRule:
    """No reclamation: every production reservation is its request."""

    context: RuleContext
    name: str = "none"
    pins_batch: bool = True

    def production(self, inputs: RuleInputs) -> np.ndarray:
        return self.context.production.request


@dataclass(eq=False)
class KoordinatorRule:
    """Koordinator slo-controller BatchResource, ``usage`` calculate policy (colocation-config
    defaults: ``cpuReclaimThresholdPercent`` 60, ``memoryReclaimThresholdPercent`` 65,
    ``metricAggregateDurationSeconds`` 300). Per node and dimension d ∈ {cpu, ram}::

        batch_allocatable = max(0, A · θ_d − Σ_DaemonSet q − Σ_prod ū_5min)

    where ``A`` is the raw node allocatable (before Phase 0), DaemonSets count as high-priority
    usage at their requests (``A − C`` per node), ``ū`` is each production pod's mean usage
    over the last 300 s, or its request when its sample is stale, and system usage is 0 (the
    traces have none). Expressed in the engine as production reservations summing to
    ``C − batch_allocatable`` on the node, split in proportion to the pods' requests — so the
    ledger's slack ``C − Σ r_prod − Σ q_batch`` is exactly Koordinator's room for batch.
    Other dimensions read the request (Koordinator reclaims cpu and memory only).

    Worked example: A = 64 cores, C = 63 (1 core of DaemonSets), two pods of q = 20 with
    5-minute means 6 and 10 → batch allocatable = 64 · 0.6 − 1 − 16 = 21.4 cores; Σ r_prod =
    63 − 21.4 = 41.6, i.e. 20.8 each.

    Not modelled: the lazy publication (``resourceDiffThreshold`` 0.1,
    ``updateTimeThresholdSeconds`` 300), ``degradeTimeMinutes`` (a whole node's metrics stale
    for 15 min resets its batch allocatable to 0; here only stale pods count at request), the
    koordlet's own BE suppression and memory eviction (Kalena's node-local mitigation runs for
    every rule), and Mid-tier resources.
    """

    context: RuleContext
    cpu_threshold_ratio: float = 0.60
    ram_threshold_ratio: float = 0.65
    window_s: float = 300.0
    name: str = "koordinator"
    pins_batch: bool = True
    _window: list[np.ndarray] = field(default_factory=list)

    def __post_init__(self) -> None:
        ctx = self.context
        n = len(ctx.capacity)
        prod = ctx.production
        self._steps = max(1, int(round(self.window_s / ctx.step_s)))
        with np.errstate(invalid="ignore"):  # unconstrained (+inf) dimensions: no DaemonSet term
            self._daemonsets = np.nan_to_num(ctx.allocatable - ctx.capacity, nan=0.0, posinf=0.0, neginf=0.0)
        self._request_sum = np.zeros((n, 8))
        np.add.at(self._request_sum, prod.node, prod.request)

    def production(self, inputs: RuleInputs) -> np.ndarray:
        ctx = self.context
        prod = ctx.production
        observed = np.where(inputs.fresh[:, None], inputs.usage, prod.request)
        self._window.append(observed[:, [CPU, RAM]])
        if len(self._window) > self._steps:
            self._window.pop(0)
        mean = np.mean(self._window, axis=0)  # (p, 2)
        n = len(ctx.capacity)
        used = np.zeros((n, 2))
        np.add.at(used, prod.node, mean)
        out = prod.request.copy()
        for col, (dim, theta) in enumerate(((CPU, self.cpu_threshold_ratio), (RAM, self.ram_threshold_ratio))):
            allocatable = np.maximum(0.0, ctx.allocatable[:, dim] * theta - self._daemonsets[:, dim] - used[:, col])
            held = np.maximum(0.0, ctx.capacity[:, dim] - allocatable)  # Σ r_prod per node
            total = self._request_sum[:, dim]
            share = np.divide(held, total, out=np.zeros(n), where=total > 0)
            out[:, dim] = prod.request[:, dim] * share[prod.node]
        return out


#: VPA recommender histogram options (pkg/recommender/model: first bucket, ratio, max value).
VPA_CPU_BUCKETS = (0.01, 1.05, 1000.0)      # cores
VPA_MEMORY_BUCKETS = (1e7, 1.05, 1e12)      # bytes


def histogram_bucket_starts(first: float, ratio: float, maximum: float) -> np.ndarray:
    """Bucket edges of a VPA exponential histogram, ``(N + 1,)`` for ``N`` buckets:
    ``start(n) = first · (ratioⁿ − 1) / (ratio − 1)`` with ``N = ⌈log(max·(ratio − 1)/first + 1)
    / log ratio⌉ + 1`` (upstream ``NewExponentialHistogramOptions``), so the last bucket starts
    at or above ``maximum``. Example: first 0.01, ratio 1.05 → 0, 0.01, 0.0205, 0.0315…"""
    count = int(np.ceil(np.log(maximum * (ratio - 1) / first + 1) / np.log(ratio))) + 1
    n = np.arange(count + 1, dtype=np.float64)
    return first * (ratio ** n - 1) / (ratio - 1)


def histogram_bucket(values: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Bucket index of each value (values below the first bucket's end go to bucket 0; values
    beyond the last go to the last)."""
    return np.clip(np.searchsorted(starts, values, side="right") - 1, 0, len(starts) - 2)


def histogram_percentile(weights: np.ndarray, starts: np.ndarray, percentile: float) -> np.ndarray:
    """Per row of ``weights`` ``(k, buckets)``: the *end* of the first bucket at which the
    cumulative weight reaches ``percentile`` × total (the start of the last, overflow, bucket),
    as VPA's ``decayingHistogram.Percentile`` returns; rows without weight give 0."""
    total = weights.sum(axis=1)
    cumulative = np.cumsum(weights, axis=1)
    bucket = np.argmax(cumulative >= (percentile * total)[:, None] * (1 - 1e-12), axis=1)
    last = weights.shape[1] - 1
    value = np.where(bucket < last, starts[np.minimum(bucket + 1, last)], starts[bucket])
    return np.where(total > 0, value, 0.0)


@dataclass(eq=False)
class VpaRule:
    """The VPA recommender's target as the production reservation (cpu and memory)::

        r = min(L, max(floor, p90(histogram) × 1.15))      once the pod has 300 s of samples
        r = q                                               before that

    Histograms (one per pod and resource) are VPA's decaying histograms: exponential buckets
    (first 0.01 core / 10⁷ bytes, ratio 1.05), each sample weighted ``2^((t − t₀)/24 h)`` —
    the 24 h half-life — so older samples count less. CPU adds one sample per step; memory
    adds the **peak per aggregation interval** (24 h), replacing the interval's previous peak
    when a higher one arrives, as upstream does. The percentile is the end of the bucket that
    reaches 90 % of the weight; the 1.15 is ``--recommendation-margin-fraction`` 0.15; the
    floor is the recommender's pod minimum (25 mcpu, 250 MiB). Other dimensions read the request.

    Worked example: a pod whose cpu usage sat at 1.0 core for its first 300 s has all weight in
    the bucket [0.9584, 1.0163) cores → p90 = 1.0163 → r = 1.15 · 1.0163 = 1.169 cores.

    Not modelled: CPU sample weights by request (constant per pod here, so percentiles do not
    change), OOM-bumped memory samples (a replay's OOM kills batch, not production), the
    confidence-scaled lower/upper bounds (only the target drives requests), the 8-day window,
    checkpoints, and the updater (VPA would evict pods to apply a recommendation; here it is a
    reservation and production is never restarted).
    """

    context: RuleContext
    percentile: float = 0.90
    margin_ratio: float = 1.15
    half_life_s: float = 24 * 3600.0
    memory_interval_s: float = 24 * 3600.0
    warmup_s: float = 300.0
    min_cpu_mcpu: float = 25.0
    min_memory_bytes: float = 250 * 2**20
    name: str = "vpa"
    pins_batch: bool = True

    def __post_init__(self) -> None:
        p = len(self.context.production.ids)
        self._cpu_starts = histogram_bucket_starts(*VPA_CPU_BUCKETS)
        self._mem_starts = histogram_bucket_starts(*VPA_MEMORY_BUCKETS)
        self._cpu = np.zeros((p, len(self._cpu_starts) - 1))
        self._mem = np.zeros((p, len(self._mem_starts) - 1))
        self._first_sample_s = np.full(p, np.nan)
        self._interval = -1
        self._peak = np.zeros(p)
        self._peak_bucket = np.full(p, -1)
        self._peak_weight = 0.0

    def production(self, inputs: RuleInputs) -> np.ndarray:
        prod = self.context.production
        p = len(prod.ids)
        rows = np.arange(p)
        fresh = inputs.fresh
        now = inputs.now_s
        self._first_sample_s = np.where(fresh & np.isnan(self._first_sample_s), now, self._first_sample_s)
        weight = 2.0 ** (now / self.half_life_s)
        cpu_bucket = histogram_bucket(inputs.usage[:, CPU] / 1000.0, self._cpu_starts)
        np.add.at(self._cpu, (rows[fresh], cpu_bucket[fresh]), weight)
        interval = int(now // self.memory_interval_s)
        if interval != self._interval:  # a new interval: its peak starts afresh
            self._interval = interval
            self._peak = np.zeros(p)
            self._peak_bucket = np.full(p, -1)
            self._peak_weight = 2.0 ** (((interval + 1) * self.memory_interval_s) / self.half_life_s)
        higher = fresh & (inputs.usage[:, RAM] > self._peak)
        old = higher & (self._peak_bucket >= 0)
        np.subtract.at(self._mem, (rows[old], self._peak_bucket[old]), self._peak_weight)
        self._peak = np.where(higher, inputs.usage[:, RAM], self._peak)
        self._peak_bucket = np.where(higher, histogram_bucket(self._peak, self._mem_starts), self._peak_bucket)
        np.add.at(self._mem, (rows[higher], self._peak_bucket[higher]), self._peak_weight)
        cpu = np.maximum(self.min_cpu_mcpu, histogram_percentile(self._cpu, self._cpu_starts, self.percentile)
                         * 1000.0 * self.margin_ratio)
        mem = np.maximum(self.min_memory_bytes,
                         histogram_percentile(np.maximum(self._mem, 0.0), self._mem_starts, self.percentile) * self.margin_ratio)
        out = prod.request.copy()
        ready = (now - self._first_sample_s) >= self.warmup_s  # nan (never sampled) → False
        out[:, CPU] = np.where(ready, np.minimum(prod.limit[:, CPU], cpu), prod.request[:, CPU])
        out[:, RAM] = np.where(ready, np.minimum(prod.limit[:, RAM], mem), prod.request[:, RAM])
        return out


def forward_max(values: np.ndarray, window: int) -> np.ndarray:
    """``out[t] = max(values[t : t + window])`` along axis 0 (the window is cut at the end).

    Doubling (sparse-table) construction: ``O(s · log window)``. Example: ``[1, 3, 2, 0]``
    with window 2 → ``[3, 3, 2, 0]``.
    """
    if window <= 1:
        return values.copy()
    span = 1
    table = values.copy()
    while span * 2 <= window:
        shifted = np.concatenate([table[span:], table[-span:]]) if span < len(table) else table
        table = np.maximum(table, shifted[: len(table)])
        span *= 2
    if span == window:
        return table
    offset = window - span
    tail = np.concatenate([table[offset:], np.repeat(table[-1:], offset, axis=0)])[: len(table)]
    return np.maximum(table, tail)


@dataclass(eq=False)
class OracleRule:
    """Future usage as the reservation: ``r(t) = max_{t ≤ t' < t + horizon} u(t')`` on every
    measured dimension, no margin, capped at the limit (usage is clipped there already).
    ``horizon_s`` 3,600 s is ``oracle-60m``; one step (``horizon_s`` = step) is ``oracle-exact``.
    Staleness does not apply: an oracle knows.

    Worked example (60-s steps, horizon 180 s): usage 1, 4, 2, 0 cores → r = 4, 4, 2, 0.
    """

    context: RuleContext
    horizon_s: float
    name: str = "oracle-60m"
    pins_batch: bool = True

    def __post_init__(self) -> None:
        window = max(1, int(round(self.horizon_s / self.context.step_s)))
        self._shapes = forward_max(self.context.usage.shapes, window)

    def production(self, inputs: RuleInputs) -> np.ndarray:
        usage = self.context.usage
        future = usage.usage_of_shape(self._shapes[inputs.step])
        out = np.minimum(future, usage.limit)
        out[:, GPU] = self.context.production.request[:, GPU]
        return out


def make_rule(name: str, context: RuleContext) -> ReservationRule:
    """The rule called ``name`` (one of :data:`RULES`).

    Raises:
        ValueError: unknown name, naming the accepted ones.
    """
    if name == "kalena":
        return KalenaRule()
    if name == "none":
        return NoneRule(context)
    if name == "koordinator":
        return KoordinatorRule(context)
    if name == "vpa":
        return VpaRule(context)
    if name == "oracle-60m":
        return OracleRule(context, horizon_s=3600.0, name="oracle-60m")
    if name == "oracle-exact":
        return OracleRule(context, horizon_s=context.step_s, name="oracle-exact")
    raise ValueError(f"reservation rule {name!r} is not one of {', '.join(RULES)}")
