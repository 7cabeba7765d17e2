"""The scheduling cycle: one pass takes a snapshot of the cache, asks the engine, assumes its
decisions and hands them to the binder (kube-scheduler's ``schedule_one.go``), docs/design.md §9.

The same cycle runs for every orchestrator: the Lease holder of ``kalena watch`` (Kubernetes,
:mod:`kalena_web.control.leading`) keeps its :class:`~kalena_web.scheduling.cache.SchedulerCache`
and :class:`~kalena_web.scheduling.binder.BindingPool` between passes and never waits for a
binding; the Celery loop (Docker, Swarm, REST clusters, :mod:`kalena_web.scheduling.tasks`)
builds both for its pass — from the record, as a newly elected scheduler does — and waits for
its bindings before the pass ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from agents.orchestrators import Orchestrator
from kalena_engine.placement import schedule_batch
from kalena_engine.policy import Policy
from kalena_web.inventory.models import Cluster
from kalena_web.scheduling import mappers
from kalena_web.scheduling.binder import BindingPool
from kalena_web.scheduling.cache import SchedulerCache
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.shard_view import ClusterWideCheck, assume_whole
from kalena_web.scheduling.whypending import pending_notice, why_pending_record

#: pods one pass of a long-lived scheduler decides at most (whole gangs beyond it): its decisions
#: are written and handed to the binder while the next pass decides the next ones
PASS_PODS = 2000


@dataclass
class PassReport:
    """What one scheduling pass did. ``placed``, ``failed``, ``stale_bindings`` and
    ``uncertain`` count the binding answers applied during the pass (with a long-lived binder,
    some are answers to an earlier pass's calls); ``assumed`` the pods this pass bound in the
    record and handed to the binder; ``generation`` the cache snapshot it decided on."""

    pending: int = 0
    placed: int = 0
    stale: int = 0
    failed: int = 0
    why_pending: int = 0
    stale_bindings: int = 0
    uncertain: int = 0
    noticed: int = 0
    assumed: int = 0
    in_flight: int = 0
    deferred: int = 0
    generation: int = 0
    stopped_early: bool = False
    errors: list[str] = field(default_factory=list)
    phase_s: dict[str, float] = field(default_factory=dict)  # wall seconds: read, engine, ledger, bind_api, why_pending


def scheduling_pass(*, cluster: Cluster, orchestrator: Orchestrator, policy: Policy, now_s: float,
                    rng: np.random.Generator, keep_going: Callable[[], bool] | None = None,
                    cache: SchedulerCache | None = None, binder: BindingPool | None = None,
                    max_pods: int | None = None, shard=None) -> PassReport:
    """Place pending batch into reservation-ledger slack (docs/design.md §9).

    Applies the binding answers that came back since the last pass, takes the cache's next
    snapshot and decides with the engine's scheduler; then *assumes* every decision in one
    transaction (:func:`~kalena_web.scheduling.recording.assume_in_ledger`: a node whose ledger
    version changed since the snapshot accepts nothing — its pods stay pending, counted
    ``stale`` — and an accepted node's ledger is debited at its pods' requests at once, in
    flight) and hands the pods to the binder. A refused binding undoes the debit and requeues
    the pod (:mod:`~kalena_web.scheduling.binder`). Every pod left pending gets its why-pending
    record, and the orchestrator's notice at most once a minute.

    ``cache`` and ``binder``: a long-lived scheduler's (then the pass does not wait for its
    bindings); without them the pass builds both and waits for every answer before it returns.
    ``max_pods``: a pass decides at most this many pods, the first in queue order, with every
    pod of a gang among them (a gang is placed whole or not at all); the rest are ``deferred``
    to the next pass, which the caller runs at once (the binder works meanwhile).
    ``shard``: a sharded instance's :class:`~kalena_web.scheduling.shard_view.ShardView` (issue 32):
    only the pods hashed to its active vnodes are decided, on its own nodes first, and a gang is
    assumed whole or not at all; None decides every pod on every node.
    ``keep_going`` (e.g. "this scheduler still holds its Lease") is asked before the decisions
    are assumed and before every binding call: once it answers False nothing more is bound and
    the rest goes back to the queue, so no pass outlives the right to bind.
    """
    report = PassReport()
    own_binder = binder is None
    if own_binder:
        binder = BindingPool(orchestrator, keep_going=keep_going)
    cache = cache if cache is not None else SchedulerCache(cluster=cluster)
    try:
        mark = time.perf_counter()
        binder.collect(now_s=now_s, report=report)
        mark = _phase(report, "bind_api", mark)
        snap = cache.snapshot(now_s=now_s, cooldown_s=policy.eviction.cooldown_s)
        report.generation = snap.generation
        report.pending = len(snap.pending)
        if not snap.pending or snap.cluster is None:
            _phase(report, "read", mark)
            return report
        rows = snap.rows
        queue_rows = snap.pending if shard is None else shard.mine(snap.pending)  # issue 32: the shard's pods
        queue_rows = prefer_other_nodes(queue_rows, snap.cluster, now_s)
        considered = _first_pods(queue_rows, max_pods)
        report.deferred = len(queue_rows) - len(considered)
        if shard is None:
            _, image_sizes = mappers.node_images(rows)
            pending, pods_of_entry = mappers.pending_batch(considered, image_sizes)
            mark = _phase(report, "read", mark)
            result = schedule_batch(snap.cluster, pending, policy, rng=rng)
        else:  # issue 32 (sharding): the shard's pods, own nodes first (kalena_web.scheduling.shards)
            mark = _phase(report, "read", mark)
            result, pods_of_entry = shard.decide(snap, considered, policy, rng)
        mark = _phase(report, "engine", mark)
        queued = cache.queue.by_id()
        taken = [0] * len(pods_of_entry)
        bindings = result.bindings
        by_node: dict[int, list] = {}
        version_of: dict[int, int] = {}
        for b in range(len(bindings)):
            entry, node_row, count = int(bindings.entry[b]), int(bindings.node[b]), int(bindings.count[b])
            by_node.setdefault(node_row, []).extend(
                queued[i] for i in pods_of_entry[entry][taken[entry]:taken[entry] + count])
            taken[entry] += count
            version_of[node_row] = int(bindings.version[b])
        if by_node and keep_going is not None and not keep_going():
            report.stopped_early = True  # the lease lapsed while deciding: nothing is assumed
        elif by_node:
            groups = [(rows[r].id, version_of[r], pods) for r, pods in by_node.items()]
            # a gang whole or not at all, sharded or not: a member's node whose ledger moved since the
            # snapshot (another writer) takes the whole gang out of this write
            # and the rules over many nodes (namespace caps, topology spread) re-checked in the record
            accepted = assume_whole(groups, now_s=now_s, gang_of={r.pod_id: r.gang for r in considered if r.gang},
                                    cluster_wide=ClusterWideCheck(
                                        cluster_id=cluster.id, namespace_of={r.pod_id: r.namespace for r in considered},
                                        cap=policy.placement.batch_cap, seen=cache.resident_ids,
                                        spread=frozenset(r.pod_id for r in considered if r.constraints.get("spread"))))
            name_of = {rows[r].id: rows[r].name for r in by_node}
            report.stale = sum(len(pods) for pods in by_node.values()) - sum(len(p) for p in accepted.values())
            calls = [(pod, name_of[node_id]) for node_id, pods in accepted.items() for pod in pods]
            report.assumed = len(calls)
            cache.assume(calls, now_s=now_s, node_ids={rows[r].name: rows[r].id for r in by_node})
            mark = _phase(report, "ledger", mark)
            binder.submit(calls)
            if own_binder:
                binder.collect(now_s=now_s, report=report, wait=True)
            mark = _phase(report, "bind_api", mark)
        left = set(BatchPod.objects.filter(id__any=[i for ids in pods_of_entry for i in ids], state=BatchPod.PENDING)
                   .values_list("id", flat=True))
        report.why_pending = why_pending_record(result.why_pending(), pods_of_entry, left, now_s)
        report.noticed = pending_notice(orchestrator, left, now_s=now_s)
        _phase(report, "why_pending", mark)
    finally:
        if own_binder:
            binder.close(now_s=now_s, report=report)
    report.in_flight = len(binder.in_flight)
    return report


def prefer_other_nodes(rows: list, cluster, now_s: float) -> list:
    """Pods a node refused to run are kept off it while another ready, batch-taking node has
    the slack for their request (:func:`~kalena_web.scheduling.mappers.prefer_other_nodes`);
    ``cluster`` is the pass's :class:`~kalena_engine.placement.ClusterSnapshot`."""
    if not any(r.avoid for r in rows):
        return rows
    usable = cluster.ready & cluster.telemetry_fresh & cluster.slack_eligible
    free = np.where(usable[:, None], cluster.slack, -np.inf)
    return mappers.prefer_other_nodes(rows, cluster.nodes.names, free, now_s)


def _first_pods(rows: list, max_pods: int | None) -> list:
    """The first ``max_pods`` of ``rows`` (queue order), and every other row of a gang among them."""
    if max_pods is None or len(rows) <= max_pods:
        return rows
    gangs = {r.gang for r in rows[:max_pods] if r.gang}
    return rows[:max_pods] + [r for r in rows[max_pods:] if r.gang and r.gang in gangs]


def _phase(report: PassReport, name: str, since: float) -> float:
    """Add the wall time since ``since`` to ``report.phase_s[name]``; returns now."""
    now = time.perf_counter()
    report.phase_s[name] = round(report.phase_s.get(name, 0.0) + now - since, 4)
    return now
