"""Pre-flight of a policy change (docs/design.md §10: "which batch workloads would this change evict
now?"): the live cluster's ledgers recomputed under a proposed :class:`~kalena_engine.policy.Policy`
beside the current one, before anything is saved.

Three answers, each from the engine's own functions:

* **evicted now** — each workload's newest usage applied as a sample at ``now_s`` under the
  proposed estimator (:func:`~kalena_engine.estimator.update_reservations`, the estimation
  pass's update: a rise is immediate, a fall decays; under a peak predictor with each workload's
  stored peak history, so the predictor serves as it does live), then
  :func:`~kalena_engine.mitigation.eviction.plan_evictions` on every node and non-compressible
  dimension with the proposed eviction thresholds. Victims the current policy would not also
  choose are flagged ``new``.
* **slack** per node — now (as the ledgers read it today), after the change now, and once the
  change has settled (every decay finished: ``r = τ = min(L, μ·u)``, or ``max(q, τ)`` in grace,
  ``q`` when pinned; docs/design.md §5; under a peak predictor what it serves beside that
  ``τ``). ``S = C − Σ r`` (GPU: ``C − Σ q``; :func:`~kalena_engine.ledger.slack_of`).
* **placeable** — the pending batch pods the scheduler itself
  (:func:`~kalena_engine.placement.schedule_batch`, docs/design.md §9) places on the scheduling pass's
  own snapshot with its slack replaced by the settled slack under each policy: every filter
  applies (node readiness and telemetry freshness, batch node set and escalation cooldown,
  eviction cooldown, nodeSelector, taints, anti-affinity, spread, the policy's namespace caps,
  the kubelet's room) and the ledger fit. The pass is decided only, never bound; its node
  sampling uses a fixed seed (0), so the same inputs give the same count.

Worked example: one node, C_ram = 10 GiB, a service pod (L = 12 GiB) using 8 GiB with r = 9.2 GiB (μ = 1.15)
and a batch pod r = 1 GiB; raising μ to 1.3 gives r = 10.4 GiB at once, Σ r = 11.4 > 10 and the
working set 9 GiB ≥ 0.9 · C (a proposed ``evict_threshold_ratio`` of 0.9) → the batch pod is
evicted now, ``new`` (μ = 1.15 keeps Σ r = 10.2 > 10, but 9 GiB < 0.95 · C: no pressure).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kalena_engine import predictors
from kalena_engine.estimator import Reservations, pinned_mask, update_reservations
from kalena_engine.ledger import node_sum, slack_of
from kalena_engine.mitigation.eviction import TIER_BATCH, TIER_SERVICE, NodeWorkloads, PressureSignal, plan_evictions
from kalena_engine.placement import ClusterSnapshot, PendingBatch, schedule_batch
from kalena_engine.policy import Policy
from kalena_engine.resources import DIMS, RAM, STORAGE


@dataclass(frozen=True, eq=False)
class PreflightCluster:
    """The live cluster as the pre-flight reads it: ``m`` nodes, ``n`` running workloads and
    the pending batch queue; vectors ``(…, 8)`` in internal units (docs/design.md §2).

    Attributes:
        node_names: ``(m,)`` names; ``capacity``: ``(m, 8)``.
        sampling_interval_s: ``(m,)`` each agent's sampling interval (0 when unknown).
        names: ``(n,)`` workload names; ``node_of``: ``(n,)`` node row; ``batch``: ``(n,)`` bool.
        priority: ``(n,)`` int (batch eviction order).
        request, limit, usage: ``(n, 8)``; ``limit`` is the declared limit (inf where none).
        start_s: ``(n,)``; ``reclaim_disabled``: ``(n,)`` bool; ``state``: the estimator state.
        snapshot: the scheduling pass's :class:`~kalena_engine.placement.ClusterSnapshot` of
            the same ``m`` nodes in the same order (its slack is replaced), or None with no queue.
        pending: the queue as the scheduling pass reads it (:class:`~kalena_engine.placement.PendingBatch`).
        grace_override_s: ``(n,)`` per-workload startup grace (NaN = the policy's), or None.
        histories: ``(n,)`` each workload's stored peak history (the estimation pass's bytes,
            :func:`~kalena_engine.predictors.pack_rows`; None where it has none), or None: under
            a peak predictor the pre-flight reads it as the estimation pass does
            (:func:`~kalena_engine.predictors.unpack_rows`: a history written under another
            predictor's layout starts empty, the asymmetric rule serving).

    Raises:
        ValueError: ``snapshot`` does not have the ``m`` nodes.
    """

    node_names: tuple[str, ...]
    capacity: np.ndarray
    sampling_interval_s: np.ndarray
    names: tuple[str, ...]
    node_of: np.ndarray
    batch: np.ndarray
    priority: np.ndarray
    request: np.ndarray
    limit: np.ndarray
    usage: np.ndarray
    start_s: np.ndarray
    reclaim_disabled: np.ndarray
    state: Reservations
    snapshot: ClusterSnapshot | None = None
    pending: PendingBatch | None = None
    grace_override_s: np.ndarray | None = None
    histories: tuple[bytes | None, ...] | None = None

    def __post_init__(self) -> None:
        if self.snapshot is not None and tuple(self.snapshot.nodes.names) != tuple(self.node_names):
            raise ValueError(f"the scheduling snapshot's nodes {list(self.snapshot.nodes.names)[:5]} are "
                             f"not the pre-flight's {len(self.node_names)} in the same order")

    @property
    def pending_pods(self) -> int:
        """Pods in the pending queue."""
        return 0 if self.pending is None else int(np.sum(self.pending.count))

    def grace_s(self, policy: Policy) -> np.ndarray:
        """``(n,)`` startup grace per workload under ``policy`` (its override wins)."""
        g = np.full(len(self.names), policy.estimator.grace_s)
        return g if self.grace_override_s is None else np.where(np.isnan(self.grace_override_s), g,
                                                                 self.grace_override_s)


@dataclass(frozen=True)
class PreflightEviction:
    """A batch pod (or a limit breacher) the proposed policy evicts now on ``node``."""

    node: str
    workload: str
    dimension: str
    reason: str
    priority: int
    usage: float
    reservation: float
    ledger_before: float
    ledger_after: float
    capacity: float
    new: bool


@dataclass(frozen=True)
class NodeSlackChange:
    """One node's slack on cpu (mcpu) and ram (bytes): now, after the change now, settled."""

    node: str
    cpu_now_mcpu: float
    cpu_after_mcpu: float
    cpu_settled_mcpu: float
    ram_now_bytes: float
    ram_after_bytes: float
    ram_settled_bytes: float


@dataclass(frozen=True)
class Preflight:
    """Result of :func:`policy_preflight`; ``placeable_*`` count pending pods the scheduler
    places; ``unplaced_proposed``: the pods it leaves pending under the proposed policy by
    binding constraint (the why-pending ``binding``: a rule kind such as ``taint`` or
    ``node_selector``, or a dimension such as ``ram``), most first; ``history_restarts``: saving
    the proposal starts every workload's peak history afresh
    (:func:`~kalena_engine.predictors.history_restarts`)."""

    evictions: tuple[PreflightEviction, ...]
    nodes: tuple[NodeSlackChange, ...]
    pending: int
    placeable_current: int
    placeable_proposed: int
    unplaced_proposed: tuple[tuple[str, int], ...] = ()
    history_restarts: bool = False

    @property
    def new_evictions(self) -> int:
        return sum(1 for e in self.evictions if e.new)


def _limit(cluster: PreflightCluster, policy: Policy) -> np.ndarray:
    declared = np.isfinite(cluster.limit)
    return np.where(declared, cluster.limit, cluster.request * policy.estimator.limit_ratio)


def _updated(cluster: PreflightCluster, policy: Policy, now_s: float) -> Reservations:
    """The estimator state once the newest usage is applied at ``now_s`` under ``policy`` — the
    estimation pass's own update (:func:`~kalena_engine.estimator.update_reservations`), its peak
    history included under a peak predictor."""
    state = cluster.state
    if policy.estimator.predictor != "asymmetric" and cluster.histories is not None:
        state = replace(state, history=predictors.unpack_rows(list(cluster.histories), state.value, policy.estimator))
    measured = np.isfinite(state.last_sample_s) & ~_stale(cluster, policy, now_s)
    updated = update_reservations(
        state, request=cluster.request, limit=_limit(cluster, policy), usage=cluster.usage,
        sampled=measured, now_s=np.maximum(now_s, state.updated_s), start_s=cluster.start_s,
        grace_s=cluster.grace_s(policy), pinned=pinned_mask(cluster.reclaim_disabled),
        policy=policy.estimator)
    return replace(updated, last_sample_s=cluster.state.last_sample_s)


def _after_now(cluster: PreflightCluster, policy: Policy, now_s: float) -> np.ndarray:
    """Reservations once the newest usage is applied at ``now_s`` under ``policy`` (stale rows
    read ``max(r, q)``)."""
    return _stale_read(cluster, _updated(cluster, policy, now_s).value, policy, now_s)


def _settled(cluster: PreflightCluster, policy: Policy, now_s: float) -> np.ndarray:
    """Every decay over: the asymmetric rule's ``τ = min(L, μ·u)`` with grace (``max(q, τ)``) and
    pinning (``q``); under a peak predictor, what it serves with that ``τ`` as its asymmetric
    member (its forecasts are its history's, which waiting does not change)."""
    limit = _limit(cluster, policy)
    target = np.minimum(limit, policy.estimator.margins * cluster.usage)
    in_grace = (now_s - cluster.start_s) < cluster.grace_s(policy)
    value = np.where(in_grace[:, None], np.maximum(cluster.request, target), target)
    pinned = pinned_mask(cluster.reclaim_disabled)
    value = np.where(pinned, cluster.request, value)
    history = _updated(cluster, policy, now_s).history if policy.estimator.predictor != "asymmetric" else None
    if history is not None:
        served = predictors.served(history, np.arange(len(cluster.names)), target, limit, value, policy.estimator)
        value = np.where(in_grace[:, None] | pinned, value, served)
    fresh = np.isfinite(cluster.state.last_sample_s) & ~_stale(cluster, policy, now_s)
    value = np.where(fresh[:, None], value, cluster.state.value)   # no fresh sample: r is held
    return _stale_read(cluster, value, policy, now_s)


def _stale(cluster: PreflightCluster, policy: Policy, now_s: float) -> np.ndarray:
    """``(n,)`` rows whose newest sample is older than their node's T_stale (never sampled: stale)."""
    if not len(cluster.names):
        return np.zeros(0, dtype=bool)
    # T_stale per distinct sampling interval (a cluster has one or a few), spread over the nodes
    intervals, node_interval = np.unique(cluster.sampling_interval_s, return_inverse=True)
    ttl = np.array([policy.estimator.stale_ttl_s(float(i)) for i in intervals])[node_interval.reshape(-1)]
    return (now_s - cluster.state.last_sample_s) > ttl[cluster.node_of]


def _stale_read(cluster: PreflightCluster, value: np.ndarray, policy: Policy, now_s: float) -> np.ndarray:
    """Stale telemetry never creates slack: stale rows read ``max(r, q)`` (docs/design.md §5)."""
    stale = _stale(cluster, policy, now_s)
    return np.where(stale[:, None], np.maximum(value, cluster.request), value) if stale.any() else value


def _node_slack(cluster: PreflightCluster, reservation: np.ndarray) -> np.ndarray:
    m = len(cluster.node_names)
    return slack_of(cluster.capacity.copy(), node_sum(cluster.node_of, reservation, m),
                    node_sum(cluster.node_of, cluster.request, m))


def _evictions(cluster: PreflightCluster, reservation: np.ndarray, policy: Policy,
               now_s: float) -> dict[tuple[int, int], tuple[int, object]]:
    """``{(workload row, dimension): (node row, Victim)}`` under ``policy``."""
    tier = np.where(cluster.batch, TIER_BATCH, TIER_SERVICE)
    limit = _limit(cluster, policy)
    chosen: dict[tuple[int, int], tuple[int, object]] = {}
    m = len(cluster.node_names)
    # plan_evictions chooses no victim where Σ r ≤ C: only nodes over capacity on ram or storage
    # are planned (the margin keeps float summation order from deciding).
    ledger = node_sum(cluster.node_of, reservation, m)
    over = np.flatnonzero(np.any(ledger[:, [RAM, STORAGE]] > cluster.capacity[:, [RAM, STORAGE]] * (1 - 1e-9), axis=1))
    order = np.argsort(cluster.node_of, kind="stable")
    bounds = np.searchsorted(cluster.node_of[order], np.arange(m + 1))
    for node in over:
        rows = order[bounds[node]:bounds[node + 1]]
        if not len(rows):
            continue
        last = cluster.state.last_sample_s[rows]
        age = float(now_s - np.max(last)) if np.isfinite(last).any() else float("inf")
        workloads = NodeWorkloads(reservation=reservation[rows], usage=cluster.usage[rows], limit=limit[rows],
                                  tier=tier[rows], priority=cluster.priority[rows], start_s=cluster.start_s[rows],
                                  terminating=np.zeros(len(rows), dtype=bool), count=np.ones(len(rows), dtype=np.int64))
        ttl = policy.estimator.stale_ttl_s(float(cluster.sampling_interval_s[node]))
        for d in (RAM, STORAGE):
            if not np.isfinite(cluster.capacity[node, d]):
                continue
            signal = PressureSignal(dimension=d, working_set=float(np.sum(cluster.usage[rows, d])), sample_age_s=age)
            plan = plan_evictions(workloads, cluster.capacity[node], signal, now_s=now_s, stale_ttl_s=ttl,
                                  policy=policy.eviction)
            for victim in plan.victims:
                chosen.setdefault((int(rows[victim.row]), d), (node, victim))
    return chosen


def _placeable(cluster: PreflightCluster, slack: np.ndarray, policy: Policy, now_s: float, *,
               explain: bool = False) -> tuple[int, tuple[tuple[str, int], ...]]:
    """Pending pods the engine scheduler places on ``slack`` under ``policy`` (module doc), and
    with ``explain`` the pods left pending by binding constraint."""
    if cluster.snapshot is None or cluster.pending is None or not cluster.pending_pods:
        return 0, ()
    snapshot = replace(cluster.snapshot, slack=np.array(slack, dtype=np.float64), now_s=now_s)
    result = schedule_batch(snapshot, cluster.pending, policy, rng=np.random.default_rng(0))
    if not explain or not result.pending:
        return result.placed, ()
    left: dict[str, int] = {}
    for record in result.why_pending():
        left[record.binding] = left.get(record.binding, 0) + int(record.pending)
    return result.placed, tuple(sorted(left.items(), key=lambda kv: (-kv[1], kv[0])))


def policy_preflight(cluster: PreflightCluster, *, current: Policy, proposed: Policy, now_s: float) -> Preflight:
    """What changing ``current`` to ``proposed`` does to ``cluster`` at ``now_s`` (module doc).

    Returns:
        :class:`Preflight`: evictions (``new`` when ``current`` would not also choose them),
        per-node slack now / after / settled on cpu and ram, the pending pods placeable
        under each policy, and why the rest stay pending under ``proposed``. Never raises on
        an empty cluster.
    """
    now_r = _after_now(cluster, current, now_s)
    after_r = _after_now(cluster, proposed, now_s)
    before = _evictions(cluster, now_r, current, now_s)
    after = _evictions(cluster, after_r, proposed, now_s)
    evictions = []
    for (row, d), (node, victim) in sorted(after.items(), key=lambda kv: (kv[1][0], kv[0])):
        evictions.append(PreflightEviction(
            node=cluster.node_names[node], workload=cluster.names[row], dimension=DIMS[d], reason=victim.reason,
            priority=int(victim.priority), usage=float(victim.usage), reservation=float(victim.reservation),
            ledger_before=float(victim.ledger_before), ledger_after=float(victim.ledger_after),
            capacity=float(cluster.capacity[node, d]), new=(row, d) not in before))
    slack_now = _node_slack(cluster, now_r)
    slack_after = _node_slack(cluster, after_r)
    settled_current = _node_slack(cluster, _settled(cluster, current, now_s))
    settled_proposed = _node_slack(cluster, _settled(cluster, proposed, now_s))
    nodes = tuple(NodeSlackChange(
        node=name, cpu_now_mcpu=float(slack_now[i, 0]), cpu_after_mcpu=float(slack_after[i, 0]),
        cpu_settled_mcpu=float(settled_proposed[i, 0]), ram_now_bytes=float(slack_now[i, RAM]),
        ram_after_bytes=float(slack_after[i, RAM]), ram_settled_bytes=float(settled_proposed[i, RAM]))
        for i, name in enumerate(cluster.node_names))
    placed_current, _ = _placeable(cluster, settled_current, current, now_s)
    placed_proposed, unplaced = _placeable(cluster, settled_proposed, proposed, now_s, explain=True)
    return Preflight(evictions=tuple(evictions), nodes=nodes, pending=cluster.pending_pods,
                     placeable_current=placed_current, placeable_proposed=placed_proposed, unplaced_proposed=unplaced,
                     history_restarts=predictors.history_restarts(current.estimator, proposed.estimator))
