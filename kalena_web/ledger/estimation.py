"""Live estimation (docs/design.md §5, §6, §8): stored samples → workload reservations → node ledgers.

Work queue: every stored ``samples`` batch (:class:`~kalena_web.telemetry.models.IngestBatch`)
with ``estimation_run`` NULL, per node shard (``shard_of(node name, KALENA_ESTIMATION_SHARDS)``).
:func:`estimation_run` takes up to ``max_batches`` of them (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL) and, **in one transaction**:

1. locks the ledgers of their nodes (node id order), loads every workload placed there with
   its reservation;
2. folds the samples with :func:`kalena_engine.estimator.apply_samples` (per workload in time
   order; under a peak predictor with each workload's stored usage history, written back with
   the reservation; older than the workload's last sample, from another node, or from before the
   workload's start → not applied);
3. writes the touched reservations, recomputes each node's ledger — production and batch
   Σ q and Σ r as the ledgers read them (a workload whose last sample is older than T_stale,
   or that never reported, reads ``max(r, q)``), Σ usage and batch's Σ usage, the batch pods' cpu
   throttling rate (Σ of each one's rate over its newest two samples of the last 2 × T_stale,
   :func:`~kalena_web.ledger.mappers.throttled_rates`), ``version + 1``, ``stale`` when the
   node's freshest batch is older than T_stale = max(60 s, 3 × the agent's sampling interval);
   and checks the blueprint on that state (docs/design.md §6): with every batch workload removed, each
   node holds exactly the blueprint's production set (recorded at import) and ``Σ q ≤ C``; what
   fails is stored on the ledger (``blueprint_violations``), logged as an error, shown on the
   console and exported as ``kalena_node_blueprint_violations``;
4. marks the batches with the new :class:`~kalena_web.ledger.models.EstimationRun` — the
   cursor moves in the same commit, so a redelivered task finds nothing to apply twice, and a
   worker killed mid-run leaves the batches pending for the next one.

Why a per-batch mark rather than an id cursor: ids are drawn before commit, so with more than
one writer a later-committing transaction can land rows *behind* a cursor that already passed
them. Pending batches are found through a partial index on ``(shard, id) WHERE estimation_run
IS NULL``, which stays as small as the backlog.

:func:`stale_sweep` (the periodic ``kalena.ledger.sweep``) marks fresh nodes whose telemetry
stopped (case C1) and recomputes their ledgers at ``max(r, q)``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np
from django.db import transaction

from kalena_engine import predictors
from kalena_engine.estimator import Reservations, apply_samples, effective_reservations, pinned_mask
from kalena_engine.ledger import blueprint_violations
from kalena_engine.mitigation.eviction import PressureSignal, pressure_fires
from kalena_engine.policy import Policy
from kalena_engine.resources import RAM
from kalena_web.control.locks import shard_of
from kalena_web.control.models import NodeCondition, ProductionPlacement
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.ledger import estimation_io, mappers
from kalena_web.ledger.live import ledger_point
from kalena_web.ledger.models import EstimationRun, LiveNodeLedger
from kalena_web.telemetry.models import AgentStatus, IngestBatch, NodeSample

log = logging.getLogger("kalena.estimation")


@dataclass
class EstimationResult:
    """What one run did. ``points`` are ``(node id, chart point)`` to publish after commit."""

    shard: int
    run_id: int | None = None
    batches: int = 0
    samples: int = 0
    applied: int = 0
    nodes: int = 0
    more: bool = False
    points: list[tuple[int, dict]] = field(default_factory=list)


def live_policy(node_ids: Iterable[int] = ()) -> Policy:
    """The policy in force for the cluster of ``node_ids`` (its current version, docs/design.md §10;
    the engine defaults when none is saved or no node is given). The nodes must belong to one
    cluster: :func:`estimation_run` takes one cluster's batches per run."""
    from kalena_web.policy.selectors import current_policy, node_clusters

    clusters = set(node_clusters(node_ids).values())
    if not clusters:
        return Policy()
    return current_policy(cluster_id=min(clusters)).policy


def _stale_ttls(node_ids: Iterable[int], policy: Policy) -> dict[int, float]:
    """T_stale per node from its agent's announced sampling interval (none yet → the floor)."""
    intervals = dict(AgentStatus.objects.filter(node_id__in=list(node_ids)).values_list("node_id", "sampling_interval_s"))
    return {n: policy.estimator.stale_ttl_s(intervals.get(n) or 0.0) for n in node_ids}


def _load_live(node_ids: list[int], policy: Policy) -> mappers.LiveWorkloads:
    return mappers.live_workloads(estimation_io.load_workloads(node_ids), limit_ratio=policy.estimator.limit_ratio)


def _blueprint_check(ledgers: dict[int, LiveNodeLedger], live: mappers.LiveWorkloads, *, now_s: float) -> None:
    """Remove all batch from ``live`` and check each node of ``ledgers`` against the blueprint
    (:func:`kalena_engine.ledger.blueprint_violations`, docs/design.md §6): its production set is the
    blueprint's (live pods that map to no entry are explained extras, docs/design.md §15: shown on the
    node page, not violations) and ``Σ q ≤ C``. Sets ``blueprint_violations`` (workload and node names) and
    ``blueprint_checked_s``; a violation is logged as an error."""
    order = list(ledgers)
    row_of = {node_id: i for i, node_id in enumerate(order)}
    prod = ~live.batch
    recorded = all(ledgers[n].blueprint_workloads is not None for n in order)
    bp_ids = [str(w) for n in order for w in (ledgers[n].blueprint_workloads or [])]
    bp_node = np.array([row_of[n] for n in order for _ in (ledgers[n].blueprint_workloads or [])], dtype=np.int64)
    explained = ProductionPlacement.objects.filter(
        identity=ProductionPlacement.EXTRA, workload_id__in=[int(w) for w in live.ids[prod]]).values_list(
        "workload_id", flat=True) if prod.any() else []
    found = blueprint_violations(
        node_names=[str(n) for n in order], capacity=np.array([ledgers[n].capacity for n in order], dtype=np.float64),
        prod_ids=[str(w) for w in live.ids[prod]],
        prod_node=np.array([row_of.get(int(n), -1) for n in live.node_ids[prod]], dtype=np.int64),
        prod_request=live.request[prod], blueprint_ids=bp_ids if recorded else None,
        blueprint_node=bp_node if recorded else None, explained=[str(w) for w in explained])
    by_node: dict[int, list[dict]] = {n: [] for n in order}
    if found:
        names = dict(Workload.objects.filter(id__in={int(w) for v in found for w in v.workloads})
                     .values_list("id", "name"))
        nodes = dict(Node.objects.filter(id__in=order).values_list("id", "name"))
        for v in found:
            node_id = int(v.node)
            row = {**v.to_dict(), "node": nodes.get(node_id, v.node),
                   "workloads": [names.get(int(w), w) for w in v.workloads]}
            by_node[node_id].append(row)
            log.error("blueprint check failed: %s", replace(v, node=row["node"], workloads=tuple(row["workloads"])))
    for node_id, ledger in ledgers.items():
        ledger.blueprint_violations = by_node[node_id]
        ledger.blueprint_checked_s = now_s


#: The throttling rate reads the batch pods' samples of the last 2 × T_stale (each pod's newest two).
THROTTLE_WINDOW_TTLS = 2.0


def _recompute(ledgers: dict[int, LiveNodeLedger], live: mappers.LiveWorkloads, state: Reservations,
               last_usage: np.ndarray, *, now_s: float, ttl: dict[int, float],
               fresh_s: dict[int, float]) -> list[tuple[int, dict]]:
    """Recompute the locked ``ledgers`` from ``live`` (see module doc, step 3); returns points."""
    row_ttl = np.array([ttl[n] for n in live.node_ids], dtype=np.float64)
    effective = effective_reservations(state, live.request, now_s, row_ttl) if len(live) else state.value
    throttled = mappers.throttled_rates(live, estimation_io.load_throttle_counters(
        live.ids[live.batch], since_s=now_s - THROTTLE_WINDOW_TTLS * max(ttl.values(), default=0.0)))
    points = []
    changed = []
    for node_id, ledger in ledgers.items():
        on = live.node_ids == node_id
        prod, batch = on & ~live.batch, on & live.batch
        ledger.prod_request = live.request[prod].sum(axis=0).tolist()
        ledger.prod_reservation = effective[prod].sum(axis=0).tolist()
        ledger.batch_request = live.request[batch].sum(axis=0).tolist()
        ledger.batch_reservation = effective[batch].sum(axis=0).tolist()
        ledger.usage = last_usage[on].sum(axis=0).tolist()
        ledger.batch_usage = last_usage[batch].sum(axis=0).tolist()
        measured = throttled[batch][~np.isnan(throttled[batch])]
        ledger.batch_throttled_mcpu = float(measured.sum()) if len(measured) or not batch.any() else None
        newest = fresh_s.get(node_id)
        if newest is not None and (ledger.last_sample_s is None or newest > ledger.last_sample_s):
            ledger.last_sample_s = newest
        ledger.stale = ledger.last_sample_s is None or now_s - ledger.last_sample_s > ttl[node_id]
        ledger.version += 1
        ledger.updated_s = now_s
        changed.append(ledger)
        points.append((node_id, ledger_point(ledger, limits=live.limit[on].sum(axis=0).tolist())))
    _blueprint_check(ledgers, live, now_s=now_s)
    estimation_io.write_ledgers(changed)
    return points


def _observe_pressure(ledgers: dict[int, LiveNodeLedger], batch_ids: list[int], policy: Policy) -> None:
    """Hand a node's newest reading to escalation's episode bookkeeping when its state changes
    (an episode starts or ends) — never for every reading."""
    newest: dict[int, tuple] = {}
    for node_id, ts, ws, some, full in (NodeSample.objects.filter(batch_id__in=batch_ids).order_by("ts").values_list(
            "node_id", "ts", "working_set_bytes", "psi_memory_some_avg10", "psi_memory_full_avg10")):
        newest[node_id] = (ts, ws, some, full)
    if not newest:
        return
    since = dict(NodeCondition.objects.filter(node_id__in=list(newest)).values_list("node_id", "pressure_since_s"))
    from kalena_web.control.escalation import node_pressure_observe

    for node_id, (ts, ws, some, full) in newest.items():
        ledger = ledgers[node_id]
        capacity = float(ledger.capacity[RAM])
        pressure, _ = pressure_fires(PressureSignal(dimension=RAM, working_set=float(ws or 0.0),
                                                    psi_some_avg10_pct=some, psi_full_avg10_pct=full),
                                     capacity, policy.eviction)
        in_episode = pressure and ledger.prod_reservation[RAM] + ledger.batch_reservation[RAM] > capacity
        if node_id in since and in_episode != (since[node_id] is not None):
            node_pressure_observe(node=Node(id=node_id), ts=ts, working_set_bytes=ws, psi_some_avg10_pct=some,
                                  psi_full_avg10_pct=full, policy=policy.eviction)


def estimation_run(*, shard: int, now_s: float | None = None, max_batches: int = 2000,
                   policy: Policy | None = None) -> EstimationResult:
    """Apply up to ``max_batches`` pending sample batches of ``shard`` (module doc). Safe to run
    twice or concurrently: a batch is applied by exactly one committed run."""
    started = time.time()
    now = started if now_s is None else now_s
    result = EstimationResult(shard=shard)
    with transaction.atomic():
        batches = list(IngestBatch.objects.filter(shard=shard, estimation_run__isnull=True).order_by("id")
                       .select_for_update(skip_locked=True).values_list("id", "node_id", "ts")[:max_batches])
        if not batches:
            return result
        batches, left = _one_cluster(batches)
        policy = policy or live_policy([batches[0][1]])
        batch_ids = [b[0] for b in batches]
        fresh_s: dict[int, float] = {}
        for _, node_id, ts in batches:
            fresh_s[node_id] = max(ts, fresh_s.get(node_id, -np.inf))
        node_ids = sorted(fresh_s)
        ledgers = {led.node_id: led for led in
                   LiveNodeLedger.objects.select_for_update().filter(node_id__in=node_ids).order_by("node_id")}
        samples = mappers.sample_arrays(estimation_io.load_samples(batch_ids))
        live = _load_live(list(ledgers), policy)
        if policy.estimator.predictor != "asymmetric":          # the predictors read each workload's history
            stored = estimation_io.load_histories(live.ids)
            live = replace(live, state=replace(live.state, history=predictors.unpack_rows(
                [stored.get(int(i)) for i in live.ids], live.state.value, policy.estimator)))
        kept, rows, unmeasured = mappers.estimator_inputs(live, samples)
        usage = np.nan_to_num(samples.usage[kept], nan=0.0)
        state, applied = apply_samples(
            live.state, workload=rows, time_s=samples.ts[kept], usage=usage, request=live.request,
            limit=live.limit, start_s=live.start_s, grace_s=live.grace_s(policy.estimator.grace_s),
            pinned=pinned_mask(live.reclaim_disabled), policy=policy.estimator, unmeasured=unmeasured)
        last_usage = live.last_usage.copy()
        done = np.flatnonzero(applied)
        order = done[np.lexsort((samples.ts[kept][done], rows[done]))]      # by workload, then time
        newest = order[np.r_[rows[order][1:] != rows[order][:-1], True]] if len(order) else order
        last_usage[rows[newest]] = usage[newest]            # each workload's newest applied sample
        touched = rows[newest]
        estimation_io.write_reservations([
            (int(live.ids[i]), state.value[i], float(state.updated_s[i]), float(state.last_sample_s[i]), last_usage[i])
            for i in touched])
        if state.history is not None and len(touched):
            estimation_io.write_histories(list(zip((int(live.ids[i]) for i in touched),
                                                   predictors.pack_rows(state.history, touched), strict=True)))
        ttl = _stale_ttls(ledgers, policy)
        result.points = _recompute(ledgers, live, state, last_usage, now_s=now, ttl=ttl, fresh_s=fresh_s)
        _observe_pressure(ledgers, batch_ids, policy)
        applied_s = time.time()
        run = EstimationRun.objects.create(
            shard=shard, started_s=started, applied_s=applied_s, batches=len(batch_ids), samples=len(samples.ids),
            applied=int(applied.sum()), nodes=len(ledgers),
            first_sample_id=int(samples.ids.min()) if len(samples.ids) else None,
            last_sample_id=int(samples.ids.max()) if len(samples.ids) else None,
            max_lag_s=applied_s - min(b[2] for b in batches))
        IngestBatch.objects.filter(id__in=batch_ids).update(estimation_run=run.id)
    EstimationRun.objects.filter(id=run.id).update(committed_s=time.time())
    result.run_id, result.batches, result.samples = run.id, len(batch_ids), len(samples.ids)
    result.applied, result.nodes = int(applied.sum()), len(ledgers)
    result.more = left or len(batch_ids) >= max_batches
    return result


def _one_cluster(batches: list[tuple]) -> tuple[list[tuple], bool]:
    """The batches of the first batch's cluster (each cluster has its own policy version) and
    whether others were left for the next run."""
    from kalena_web.policy.selectors import node_clusters

    cluster_of = node_clusters({b[1] for b in batches})
    first = cluster_of.get(batches[0][1])
    kept = [b for b in batches if cluster_of.get(b[1]) == first]
    return kept, len(kept) < len(batches)


def stale_candidates(*, now_s: float, policy: Policy | None = None) -> dict[int, list[int]]:
    """``{shard: [node id, …]}`` of live nodes read fresh whose freshest batch is older than their
    T_stale at ``now_s``."""
    from django.conf import settings

    policy = policy or live_policy()
    floor = policy.estimator.stale_min_s
    rows = list(LiveNodeLedger.objects.filter(stale=False, node__cluster__kind=Cluster.LIVE,
                                              last_sample_s__lt=now_s - floor)
                .values_list("node_id", "node__name", "last_sample_s"))
    ttl = _stale_ttls([r[0] for r in rows], policy)
    out: dict[int, list[int]] = {}
    for node_id, name, last in rows:
        if now_s - last > ttl[node_id]:
            out.setdefault(shard_of(name, settings.KALENA_ESTIMATION_SHARDS), []).append(node_id)
    return out


def stale_sweep(*, node_ids: list[int], now_s: float | None = None, policy: Policy | None = None) -> list[tuple[int, dict]]:
    """Mark ``node_ids`` stale where they still are due (re-checked under the ledger lock: a run
    that just brought fresh samples wins) and recompute their ledgers; returns chart points."""
    now = time.time() if now_s is None else now_s
    with transaction.atomic():
        ledgers = {led.node_id: led for led in
                   LiveNodeLedger.objects.select_for_update().filter(node_id__in=sorted(node_ids)).order_by("node_id")}
        policy = policy or live_policy(list(ledgers)[:1])
        ttl = _stale_ttls(ledgers, policy)
        due = {n: led for n, led in ledgers.items()
               if not led.stale and (led.last_sample_s is None or now - led.last_sample_s > ttl[n])}
        if not due:
            return []
        live = _load_live(list(due), policy)
        return _recompute(due, live, live.state, live.last_usage, now_s=now, ttl=ttl, fresh_s={})


def pending_shards() -> list[int]:
    """Shards with sample batches waiting for estimation."""
    return sorted(set(IngestBatch.objects.filter(estimation_run__isnull=True).values_list("shard", flat=True)
                      .distinct()))
