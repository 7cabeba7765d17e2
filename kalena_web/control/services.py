"""Control-plane writes (keyword-only arguments, ``<entity>_<action>``)."""

from __future__ import annotations

import bisect
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from django.db import IntegrityError, transaction

from kalena_engine.errors import BlueprintRefused, InputError
from kalena_engine.kuberina import Blueprint, Infrastructure, Workloads, phase0_capacity, verify_blueprint
from kalena_engine.kuberina.identity import (
    BLUEPRINT_POD_LABEL, DAEMONSET, MAPPED, MOVED, LivePod, daemonset_extra, production_identity,
)
from kalena_engine.ledger import node_sum
from kalena_engine.overrides import KEYS, RECLAIM
from kalena_engine.placement.selectors import anti_affinity_terms_of
from kalena_engine.policy import Policy
from kalena_web.archive.models import RUN_NAME_PATTERN
from kalena_web.control import metrics
from kalena_web.control.identity import entries_for, is_entry, live_overrides, with_overrides
from kalena_web.control.models import MetricSeries, NodeCondition, ProductionPlacement
from kalena_web.inventory import mappers
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.scheduling.bulk import update_by_id


class ClusterExists(BlueprintRefused):
    """A live cluster of that name exists already."""


@dataclass(frozen=True)
class ImportedCluster:
    cluster: Cluster
    nodes: int
    production: int
    soft_violations: int


def live_cluster_import(*, name: str, infra: Infrastructure, workloads: Workloads, blueprint: Blueprint,
                        now_s: float, policy: Policy | None = None, workloads_document: str = "") -> ImportedCluster:
    """Create a live cluster from Kuberina IR: nodes at post-Phase-0 capacity, the blueprint's
    production pods with ``r = q`` (Kalena has no history yet), their ledgers, and node
    conditions. All-or-nothing. ``workloads_document`` (the workloads file's text) is kept for the
    export back to Kuberina.

    Raises:
        ClusterExists: a live cluster called ``name`` exists.
        BlueprintRefused: the blueprint has hard violations (docs/design.md §3) — listed by kind.
    """
    policy = policy or Policy()
    if not isinstance(name, str) or not re.fullmatch(RUN_NAME_PATTERN, name):
        raise InputError(f"{name!r} is not a cluster name", field="name",
                         accepted="1–64 letters, digits, '.', '_', '-', starting with a letter or digit")
    if Cluster.objects.filter(kind=Cluster.LIVE, name=name).exists():
        raise ClusterExists(f"a live cluster named {name!r} exists already", field="name",
                            accepted="a new name, or delete the old cluster first (`kalena cluster delete`)")
    capacity = phase0_capacity(infra)
    report = verify_blueprint(infra, workloads, blueprint, capacity)
    if report.hard:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(report.hard_counts.items()))
        raise BlueprintRefused(f"the blueprint has {len(report.hard)} hard violation(s): {kinds}",
                               source=blueprint.source, field="solution",
                               accepted="a blueprint with no hard violations (see `kalena replay` for the list)")
    active = np.zeros(len(infra.nodes), dtype=bool)
    active[report.active_nodes] = True
    with transaction.atomic():
        cluster = Cluster.objects.create(name=name, kind=Cluster.LIVE, workloads_document=workloads_document, sources={
            "infra": infra.source, "workloads": workloads.source, "blueprint": blueprint.source},
            daemonsets=sorted({ds.name for ds in infra.daemonsets}))
        nodes = Node.objects.bulk_create(mappers.nodes_from_ir(cluster, infra, capacity, active), batch_size=500)
        production = Workload.objects.bulk_create(
            mappers.production_from_ir(cluster, workloads, report.node_of_pod, nodes,
                                       policy.estimator.limit_ratio), batch_size=1000)
        WorkloadReservation.objects.bulk_create(
            [WorkloadReservation(workload=w, value=w.request, updated_s=now_s) for w in production], batch_size=1000)
        placed = report.node_of_pod[report.node_of_pod >= 0]
        requests = workloads.requests[report.node_of_pod >= 0]
        prod_request = node_sum(placed, requests, len(nodes))
        zeros = np.zeros(8).tolist()
        blueprint: dict[int, list[int]] = {node.id: [] for node in nodes}   # the blueprint check's reference
        for w in production:
            blueprint[w.node.id].append(w.id)
        LiveNodeLedger.objects.bulk_create([
            LiveNodeLedger(node=node, capacity=capacity[i].tolist(), prod_request=prod_request[i].tolist(),
                           prod_reservation=prod_request[i].tolist(), batch_request=zeros,
                           batch_reservation=zeros, usage=zeros, stale=True, updated_s=now_s,
                           blueprint_workloads=sorted(blueprint[node.id]))
            for i, node in enumerate(nodes)
        ], batch_size=500)
        NodeCondition.objects.bulk_create([NodeCondition(node=node, updated_s=now_s) for node in nodes], batch_size=500)
    return ImportedCluster(cluster=cluster, nodes=len(nodes), production=len(production),
                           soft_violations=len(report.soft))


def live_cluster_create(*, name: str) -> Cluster:
    """Create an empty live cluster ``name``: its nodes come from the orchestrator's watch
    (``node_observe``: an engine of ``KALENA_DOCKER_ENGINES``, a Kubernetes Node), not from IR.

    Raises:
        InputError: ``name`` is not a cluster name.
        ClusterExists: a live cluster called ``name`` exists.
    """
    if not isinstance(name, str) or not re.fullmatch(RUN_NAME_PATTERN, name):
        raise InputError(f"{name!r} is not a cluster name", field="name",
                         accepted="1–64 letters, digits, '.', '_', '-', starting with a letter or digit")
    with transaction.atomic():
        if Cluster.objects.filter(kind=Cluster.LIVE, name=name).exists():
            raise ClusterExists(f"a live cluster named {name!r} exists already", field="name",
                                accepted="a new name, or delete the old cluster first (`kalena cluster delete`)")
        return Cluster.objects.create(name=name, kind=Cluster.LIVE, daemonsets=[])


def loop_run_record(*, loop: str, cluster: Cluster | None, started_s: float, finished_s: float, outcome: str,
                    detail: dict) -> None:
    """Record one loop run for the operator (kept for a day by the archive loop)."""
    from kalena_web.control.models import LoopRun

    LoopRun.objects.create(loop=loop, cluster=cluster, started_s=started_s, finished_s=finished_s,
                           outcome=outcome, detail=detail)
    metric_observe(name="kalena_loop_duration_seconds", labels={"loop": loop, "outcome": outcome},
                   values_s=[max(0.0, finished_s - started_s)])


def live_cluster_delete(*, name: str) -> int:
    """Delete the live cluster ``name`` with everything recorded about it (nodes, workloads,
    ledgers, samples, batch pods, archive rows, recommendations); returns the rows deleted.

    Raises:
        InputError: no live cluster is called ``name``.
    """
    with transaction.atomic():
        cluster = Cluster.objects.filter(kind=Cluster.LIVE, name=name).first()
        if cluster is None:
            names = ", ".join(Cluster.objects.filter(kind=Cluster.LIVE).values_list("name", flat=True))
            raise InputError(f"no live cluster named {name!r}", field="name", accepted=names or "none exists")
        deleted, _ = cluster.delete()
    return deleted


def _series_key(name: str, labels: Mapping[str, str]) -> str:
    return name + json.dumps(dict(sorted(labels.items())), separators=(",", ":"))


def _locked_series(name: str, labels: Mapping[str, str], n_buckets: int) -> MetricSeries:
    key = _series_key(name, labels)
    try:
        with transaction.atomic():
            MetricSeries.objects.get_or_create(key=key, defaults={"name": name, "labels": dict(labels),
                                                                  "buckets": [0] * n_buckets})
    except IntegrityError:  # created meanwhile by another process
        pass
    return MetricSeries.objects.select_for_update().get(key=key)


def metric_observe(*, name: str, labels: Mapping[str, str], values_s: Iterable[float]) -> None:
    """Add observations (seconds) to the histogram ``name`` (one of :data:`HISTOGRAMS`).

    Raises:
        KeyError: ``name`` is not a declared histogram.
    """
    bounds = metrics.HISTOGRAMS[name][1]
    values = [float(v) for v in values_s]
    if not values:
        return
    with transaction.atomic():
        row = _locked_series(name, labels, len(bounds) + 1)
        buckets = list(row.buckets) + [0] * (len(bounds) + 1 - len(row.buckets))
        for v in values:
            buckets[bisect.bisect_left(bounds, v)] += 1
        row.buckets, row.count, row.total = buckets, row.count + len(values), row.total + sum(values)
        row.save(update_fields=["buckets", "count", "total"])


def metric_increment(*, name: str, labels: Mapping[str, str], by: float = 1.0) -> None:
    """Add ``by`` (≥ 0) to the counter ``name`` (one of :data:`COUNTERS`).

    Raises:
        KeyError: ``name`` is not a declared counter. ValueError: ``by`` is negative.
    """
    metrics.COUNTERS[name]  # noqa: B018 - declared names only
    if by < 0:
        raise ValueError(f"counter {name}: cannot add {by} (counters only rise)")
    if by == 0:
        return
    with transaction.atomic():
        row = _locked_series(name, labels, 0)
        row.count += by
        row.save(update_fields=["count"])


def scheduling_pass_metrics_record(*, cluster: Cluster, report: object, started_s: float, finished_s: float,
                                   now_s: float) -> None:
    """Record one scheduling pass: its duration, its attempts by result and the queue → bind
    latency of every pod it bound (``bound_s == now_s``)."""
    metric_observe(name="kalena_scheduling_attempt_duration_seconds", labels={"cluster": cluster.name},
                   values_s=[max(0.0, finished_s - started_s)])
    unschedulable = max(0, report.pending - report.placed - report.failed - report.stale)
    for result, n in (("scheduled", report.placed), ("unschedulable", unschedulable), ("error", report.failed),
                      ("stale", report.stale)):
        metric_increment(name="kalena_scheduling_attempts", labels={"cluster": cluster.name, "result": result}, by=n)
    from kalena_web.scheduling.models import BatchPod

    latencies = [now_s - q for q in BatchPod.objects.filter(cluster=cluster, bound_s=now_s)
                 .values_list("queued_s", flat=True)]
    metric_observe(name="kalena_scheduling_bind_latency_seconds", labels={"cluster": cluster.name},
                   values_s=[max(0.0, v) for v in latencies])
# -- nodes and production pods the orchestrator's watch reports (docs/design.md §14) ----------------------


class ObservationRejected(InputError):
    """A watch event Kalena cannot apply (malformed name or vector); nothing was changed."""


def _observed_vector(values, field_name: str) -> list[float]:
    items = list(values)
    if len(items) != 8:
        raise ObservationRejected(f"{len(items)} values", field=field_name, accepted="an 8-vector (docs/design.md §2)")
    out = []
    for i, v in enumerate(items):
        if isinstance(v, bool) or not isinstance(v, int | float) or v != v or v < 0:
            raise ObservationRejected(f"{v!r} is not a non-negative number", field=f"{field_name}[{i}]",
                                      accepted="internal units; +inf = not reported by the orchestrator")
        out.append(float(v))
    return out


def node_observe(*, cluster: Cluster, name: str, ready: bool, schedulable: bool, allocatable, labels,
                 taints, images: dict[str, float], at_s: float, now_s: float) -> bool:
    """Apply what the orchestrator reports of node ``name``; returns whether anything changed.

    ``allocatable`` entries that are ``+inf`` are dimensions the orchestrator does not report
    (Kubernetes has no disk or network bandwidth): the stored value is kept. A known node keeps
    its Phase-0 deduction: ``C = allocatable − (stored allocatable − stored C)``, floored at 0
    (e.g. allocatable 16 cores, stored 16 and C 14 → C 14; allocatable 12 → C 10). An unknown
    node is added (takes batch, no blueprint production, ledger stale until its agent reports).
    Readiness, cordon (``schedulable``), labels, taints and cached images take effect in the
    next scheduling pass. A node reported again unchanged changes nothing.

    Raises:
        ObservationRejected: an empty name or a malformed vector; nothing changed.
    """
    if not isinstance(name, str) or not name or len(name) > 253:
        raise ObservationRejected(f"{str(name)[:60]!r} is not a node name", field="name")
    reported = _observed_vector(allocatable, "allocatable")
    labels = {str(k): str(v) for k, v in dict(labels or {}).items()}
    taints = [{"key": str(t.get("key", "")), "value": str(t.get("value", "") or ""),
               "effect": str(t.get("effect", "NoSchedule"))} for t in taints or ()]
    images = {str(k): float(v) for k, v in dict(images or {}).items()}
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(cluster=cluster, name=name).first()
        if node is None:
            row = (Node.objects.filter(cluster=cluster).order_by("-row").values_list("row", flat=True).first())
            node = Node.objects.create(cluster=cluster, row=0 if row is None else row + 1, name=name, labels=labels,
                                       taints=taints, allocatable=reported, capacity=reported, takes_batch=True,
                                       zone=labels.get("topology.kubernetes.io/zone", ""))
            zeros = [0.0] * 8
            LiveNodeLedger.objects.create(node=node, capacity=reported, prod_request=zeros, prod_reservation=zeros,
                                          batch_request=zeros, batch_reservation=zeros, usage=zeros, stale=True,
                                          updated_s=now_s)
            NodeCondition.objects.create(node=node, ready=bool(ready), schedulable=bool(schedulable), images=images,
                                         seen_s=at_s, updated_s=now_s)
            return True
        old_alloc, old_cap = list(node.allocatable), list(node.capacity)
        alloc = [o if r == math.inf else r for r, o in zip(reported, old_alloc, strict=True)]
        capacity = [a if a == math.inf else max(0.0, a - (o - c if o != math.inf and c != math.inf else 0.0))
                    for a, o, c in zip(alloc, old_alloc, old_cap, strict=True)]
        changed = False
        if (alloc, capacity, labels, taints) != (old_alloc, old_cap, node.labels, node.taints):
            Node.objects.filter(id=node.id).update(allocatable=alloc, capacity=capacity, labels=labels, taints=taints)
            changed = True
        if capacity != old_cap:
            ledger = LiveNodeLedger.objects.select_for_update().get(node=node)
            ledger.capacity = capacity
            ledger.version += 1
            ledger.save(update_fields=["capacity", "version"])
        cond = NodeCondition.objects.select_for_update().get(node=node)
        if (cond.ready, cond.schedulable, cond.gone, cond.images) != (bool(ready), bool(schedulable), False, images):
            NodeCondition.objects.filter(id=cond.id).update(ready=bool(ready), schedulable=bool(schedulable),
                                                            gone=False, images=images, seen_s=at_s, updated_s=now_s)
            changed = True
        return changed


def node_gone(*, cluster: Cluster, name: str, at_s: float, now_s: float) -> bool:
    """Node ``name`` left the cluster: it takes no new batch (its rows stay for the history; its
    pods leave the ledgers as the watch reports them gone). Returns whether anything changed."""
    return bool(NodeCondition.objects.filter(node__cluster=cluster, node__name=name, gone=False).update(
        gone=True, ready=False, seen_s=at_s, updated_s=now_s))


def production_observe(*, cluster: Cluster, ref: str, node_name: str, request, limit, labels, at_s: float,
                       now_s: float, annotations=None, owner: str = "", owner_error: str = "",
                       start_s: float = 0.0, anti_affinity=()) -> bool:
    """A service-tier pod and where it actually runs, joined to its blueprint entry by owner and
    replica (docs/design.md §15, :mod:`kalena_engine.kuberina.identity`) and checked against the blueprint
    (docs/design.md §14).

    The pod's claim on an entry is persisted (:class:`ProductionPlacement` ``pod``) and kept on
    every later report, restart or re-list. A pod on the node the blueprint put its entry
    changes no ledger: the entry is already charged there. Elsewhere (``moved``): a fidelity
    finding, and the entry's request and reservation move to the node it runs on. A pod that
    maps to no entry (``extra``) is charged once, as production at ``r = q`` on its node until
    it reports, with the reason recorded. ``start_s`` (the pod's start, 0 = unknown) becomes the
    workload's start, so the startup grace g runs from it (docs/design.md §5); a new pod on an entry
    starts its reservation afresh at the request. A DaemonSet's pod changes nothing when the
    infrastructure's Phase 0 knows its DaemonSet (:func:`in_phase0`: already out of the node's
    capacity); any other DaemonSet's pod is an explained extra, charged once on its node
    ("DaemonSet kube-system/node-exporter is not in the infrastructure's Phase 0"). The override keys (reclaim, startup grace)
    are read from ``annotations`` over ``labels``. ``anti_affinity``: the pod's required
    anti-affinity terms (constraint shape, ``{labelSelector, topologyKey, namespaces}``), kept in
    the claimed workload's ``constraints.anti_affinity_terms``: the scheduler keeps matching batch
    out of the pod's topology domain (docs/design.md §9). ``node_name`` ``""`` (not placed yet: a pod's
    node never changes once bound, so an unscheduled report under a known name is the pod
    re-created by its controller, e.g. a StatefulSet's ``db-1``): a pod with no node holds no
    node's resources. A claim holder keeps its entry (the pod will be placed again) and the
    entry's request and reserve return to the node the blueprint put it on — the blueprint's
    reserve is never lent to batch; an extra's charge leaves its node (it is identified afresh
    once placed); a pod without a claim changes nothing. Returns whether anything changed.

    Example: blueprint ``shop/web-0000`` on n1 (42 cores of production requests there); live
    pod ``shop/web-7d9c5b6f4-x2k9q`` of ReplicaSet ``web-7d9c5b6f4`` on n1 → it holds
    ``shop/web-0000``; n1 still holds 42 cores, not 42 + its request.

    Raises:
        ObservationRejected: a malformed ref, vector or anti-affinity term, or a node the cluster
            does not know; nothing changed.
    """
    if not isinstance(ref, str) or "/" not in ref or len(ref) > 300:
        raise ObservationRejected(f"{str(ref)[:60]!r} is not namespace/pod", field="ref")
    req, lim = _observed_vector(request, "requests"), _observed_vector(limit, "limits")
    terms = _observed_terms(anti_affinity)
    if not node_name:
        return _claim_unplaced(cluster, ref, at_s=at_s)
    node = Node.objects.filter(cluster=cluster, name=node_name).first()
    if node is None:
        raise ObservationRejected(f"node {node_name!r} is not in cluster {cluster.name!r}", field="node",
                                  accepted="a node the watch reported")
    start = float(start_s) if isinstance(start_s, int | float) and start_s > 0 else None
    pod = LivePod(ref, node_name, owner=str(owner or ""),
                  labels={str(k): str(v) for k, v in dict(labels or {}).items()},
                  start_s=start or 0.0, owner_error=str(owner_error or ""))
    overrides = live_overrides(pod.labels, annotations)
    if pod.owner.startswith("DaemonSet/"):
        # a DaemonSet outside the infrastructure's Phase 0 (those in it are never charged, below):
        # its request is Phase-0 ballast too — the agents take every DaemonSet row's request out of
        # the capacity their eviction ledger reads — so it is never reclaimed (r pinned at q), or
        # the console would lend batch room the node's agent then evicts for
        overrides = {**overrides, RECLAIM: "disabled"}
    with transaction.atomic():
        claim = (ProductionPlacement.objects.select_for_update(of=("self",)).filter(workload__cluster=cluster, pod=ref)
                 .select_related("workload").first())
        if claim is not None and claim.identity == ProductionPlacement.EXTRA and _extra_stale(claim.workload, pod, req,
                                                                                             lim):
            _extra_release(claim)  # adopted, given a forge label or re-created: identified afresh below
            claim = None
        if claim is not None:
            changed = _claim_refresh(claim, node, overrides=overrides, start_s=start, at_s=at_s, now_s=now_s)
            return _production_terms_set(claim.workload, terms) or changed
        (identity,), rows = _identify(cluster, [pod])
        if identity.outcome == DAEMONSET:
            if in_phase0(cluster, identity.declaration):
                return False  # in the Phase 0 capacity reduction already: never charged
            identity = daemonset_extra(identity)
        if identity.outcome in (MAPPED, MOVED):
            workload = _claim(rows[identity.entry], pod, node, identity, overrides=overrides, start_s=start,
                              at_s=at_s, now_s=now_s)
        else:
            workload = _extra(cluster, pod, node, identity, request=req, limit=lim, overrides=overrides,
                              start_s=start, at_s=at_s, now_s=now_s)
        _production_terms_set(workload, terms)
        return True


def _claim_unplaced(cluster: Cluster, ref: str, *, at_s: float) -> bool:
    """The pod ``ref`` is reported with no node (see :func:`production_observe`): an extra's
    charge leaves; a claim holder's entry goes back to its blueprint node, claim kept. Returns
    whether anything changed."""
    with transaction.atomic():
        claim = (ProductionPlacement.objects.select_for_update(of=("self",)).filter(workload__cluster=cluster, pod=ref)
                 .select_related("workload").first())
        if claim is None:
            return False
        if claim.identity == ProductionPlacement.EXTRA or claim.blueprint_node_id is None:
            _extra_release(claim)
            return True
        workload = Workload.objects.select_for_update(no_key=True).get(id=claim.workload_id)
        changed = workload.node_id != claim.blueprint_node_id
        if changed:
            _prod_move(workload, workload.node_id, claim.blueprint_node_id, _reservation_of(workload))
            Workload.objects.filter(id=workload.id).update(node_id=claim.blueprint_node_id)
        if changed or (claim.seen_node_id, claim.identity, claim.finding) != (None, MAPPED, False):
            ProductionPlacement.objects.filter(id=claim.id).update(seen_node=None, identity=MAPPED, finding=False,
                                                                   seen_s=at_s)
            changed = True
        return changed


def in_phase0(cluster: Cluster, daemonset: str) -> bool:
    """Whether DaemonSet ``daemonset`` (``namespace/name``) is one the cluster's infrastructure
    deducted in Phase 0 (:attr:`Cluster.daemonsets`, matched by name or ``namespace/name``; a
    cluster that did not keep them counts every DaemonSet as deducted)."""
    if cluster.daemonsets is None:
        return True
    return daemonset in cluster.daemonsets or daemonset.split("/", 1)[-1] in cluster.daemonsets


def _observed_terms(anti_affinity) -> list[dict]:
    """Required anti-affinity terms as reported → JSON-ready constraint-shape terms.

    Raises:
        ObservationRejected: naming ``anti_affinity[i]…`` (the selector parser's checks).
    """
    terms = [dict(t) if isinstance(t, Mapping) else t for t in anti_affinity or ()]
    try:
        anti_affinity_terms_of(terms, "anti_affinity")
    except InputError as exc:
        raise ObservationRejected(exc.problem, field=exc.field, accepted=exc.accepted) from None
    return json.loads(json.dumps(terms))


def _production_terms_set(workload: Workload, terms: list[dict]) -> bool:
    """Keep ``terms`` as the workload's ``constraints.anti_affinity_terms`` (Kuberina name lists
    beside them are kept). Returns whether they changed."""
    constraints = dict(workload.constraints or {})
    if terms:
        constraints["anti_affinity_terms"] = terms
    else:
        constraints.pop("anti_affinity_terms", None)
    if constraints == (workload.constraints or {}):
        return False
    Workload.objects.filter(id=workload.id).update(constraints=constraints)
    workload.constraints = constraints
    return True


def _identify(cluster: Cluster, pods: list[LivePod], declarations: list[tuple[str, str]] = ()):
    entries, held, rows = entries_for(cluster, pods, declarations=declarations)
    return production_identity(pods, entries, held=held), rows


def _reservation_of(workload: Workload):
    r = WorkloadReservation.objects.filter(workload=workload).values_list("value", flat=True).first()
    return r if r is not None else workload.request


def _start(workload: Workload, start_s: float | None, now_s: float) -> bool:
    """A pod with a new start on ``workload``: the start is recorded (the startup grace runs
    from it) and the reservation starts afresh at the request (docs/design.md §6: a new workload is
    charged its full request). Returns whether it changed anything."""
    if start_s is None or workload.start_s == start_s:
        return False
    old = _reservation_of(workload)
    Workload.objects.filter(id=workload.id).update(start_s=start_s)
    WorkloadReservation.objects.update_or_create(workload=workload, defaults=dict(
        value=list(workload.request), updated_s=now_s, last_sample_s=None))
    if workload.node_id is not None and list(old) != list(workload.request):
        ledger = LiveNodeLedger.objects.select_for_update().get(node_id=workload.node_id)
        ledger.prod_reservation = np.maximum(0.0, np.asarray(ledger.prod_reservation) - np.asarray(old)
                                             + np.asarray(workload.request)).tolist()
        ledger.version += 1
        ledger.save(update_fields=["prod_reservation", "version"])
    workload.start_s = start_s
    return True


def _labels(workload: Workload, overrides: dict[str, str]) -> bool:
    labels = with_overrides(workload.labels, overrides)
    if labels == (workload.labels or {}):
        return False
    Workload.objects.filter(id=workload.id).update(labels=labels)
    workload.labels = labels
    return True


def _claim_refresh(claim, node: Node, *, overrides: dict[str, str], start_s: float | None, at_s: float,
                   now_s: float) -> bool:
    """A pod that holds a claim reported again: follow it if it moved; overrides and start."""
    workload = Workload.objects.select_for_update(no_key=True).get(id=claim.workload_id)
    changed = _labels(workload, overrides)
    if workload.node_id != node.id:
        _prod_move(workload, workload.node_id, node.id, _reservation_of(workload))
        Workload.objects.filter(id=workload.id).update(node=node)
        workload.node_id = node.id
        changed = True
    changed |= _start(workload, start_s, now_s)
    bp = claim.blueprint_node_id
    identity = claim.identity if claim.identity == ProductionPlacement.EXTRA else MOVED if bp != node.id else MAPPED
    finding = claim.identity != ProductionPlacement.EXTRA and bp is not None and bp != node.id
    if changed or (claim.seen_node_id, claim.identity, claim.finding) != (node.id, identity, finding):
        ProductionPlacement.objects.filter(id=claim.id).update(seen_node=node, identity=identity, finding=finding,
                                                               seen_s=at_s, started_s=start_s or claim.started_s)
        changed = True
    return changed


def _claim(workload: Workload, pod: LivePod, node: Node, identity, *, overrides: dict[str, str],
           start_s: float | None, at_s: float, now_s: float) -> Workload:
    """``pod`` takes the free entry ``workload``: charged where it runs (no change when that is
    the blueprint's node)."""
    workload = Workload.objects.select_for_update(no_key=True).get(id=workload.id)
    blueprint_node = workload.node_id
    if workload.node_id != node.id:
        _prod_move(workload, workload.node_id, node.id, _reservation_of(workload))
        Workload.objects.filter(id=workload.id).update(node=node)
        workload.node_id = node.id
    _labels(workload, overrides)
    _start(workload, start_s, now_s)
    ProductionPlacement.objects.update_or_create(workload=workload, defaults=dict(
        pod=pod.ref, seen_node=node, blueprint_node_id=blueprint_node, seen_s=at_s, started_s=start_s,
        finding=blueprint_node is not None and blueprint_node != node.id,
        identity=MAPPED if blueprint_node == node.id else MOVED, declaration=identity.declaration, reason={},
        rule=identity.rule))
    return workload


def _extra(cluster: Cluster, pod: LivePod, node: Node, identity, *, request, limit, overrides: dict[str, str],
           start_s: float | None, at_s: float, now_s: float) -> Workload:
    """``pod`` maps to no entry: a workload of its own, charged once at r = q on its node."""
    name = pod.ref
    workload = (Workload.objects.select_for_update(no_key=True)
                .filter(cluster=cluster, kind=Workload.PRODUCTION, name=name).first())
    if workload is not None and is_entry(workload):  # its name is an entry another pod holds
        name = f"{pod.ref} (extra)"
        workload = Workload.objects.select_for_update(no_key=True).filter(cluster=cluster, kind=Workload.PRODUCTION,
                                                               name=name).first()
    fields = dict(namespace=pod.namespace, owner=pod.owner, tier="service", node=node, request=request,
                  limit=[max(a, b) for a, b in zip(limit, request, strict=True)],
                  labels=with_overrides(pod.labels, overrides), start_s=start_s)
    if workload is None:
        workload = Workload.objects.create(
            cluster=cluster, kind=Workload.PRODUCTION, name=name,
            row=Workload.objects.filter(cluster=cluster, kind=Workload.PRODUCTION).count(), **fields)
    else:
        if workload.node_id is not None:
            _prod_move(workload, workload.node_id, None, _reservation_of(workload))
        Workload.objects.filter(id=workload.id).update(**fields)
        workload.refresh_from_db()
    WorkloadReservation.objects.update_or_create(workload=workload, defaults=dict(
        value=list(request), updated_s=now_s, last_sample_s=None))
    _prod_move(workload, None, node.id, request)
    ProductionPlacement.objects.update_or_create(workload=workload, defaults=dict(
        pod=pod.ref, seen_node=node, blueprint_node=None, finding=False, seen_s=at_s, started_s=start_s,
        identity=ProductionPlacement.EXTRA, declaration=identity.declaration, rule="",
        reason=identity.reason.to_dict() if identity.reason is not None else {}))
    return workload


def _prod_move(workload: Workload, from_id: int | None, to_id: int | None, reservation) -> None:
    """Move a production pod's request and reservation between node ledgers."""
    for node_id, sign in ((from_id, -1.0), (to_id, 1.0)):
        if node_id is None:
            continue
        ledger = LiveNodeLedger.objects.select_for_update().get(node_id=node_id)
        ledger.prod_request = np.maximum(0.0, np.asarray(ledger.prod_request) + sign * np.asarray(workload.request)).tolist()
        ledger.prod_reservation = np.maximum(0.0, np.asarray(ledger.prod_reservation)
                                             + sign * np.asarray(reservation)).tolist()
        ledger.version += 1
        ledger.save(update_fields=["prod_request", "prod_reservation", "version"])


def production_gone(*, cluster: Cluster, ref: str, now_s: float) -> bool:
    """The live production pod ``ref`` left the cluster. An extra leaves the ledgers. A pod
    holding a blueprint entry releases it: the entry stays charged where the blueprint put it
    (its controller recreates the pod; the blueprint's reserve is never lent to batch), and an
    extra of the same declaration waiting for a replica (a rollout's surge pod) inherits it at
    once — its own charge leaves, so nothing is charged twice. Returns whether anything changed."""
    with transaction.atomic():
        claim = (ProductionPlacement.objects.select_for_update(of=("self",)).filter(workload__cluster=cluster, pod=ref)
                 .select_related("workload").first())
        if claim is None:
            return False
        if claim.identity == ProductionPlacement.EXTRA or claim.blueprint_node_id is None:
            _extra_release(claim)
            return True
        workload = Workload.objects.select_for_update(no_key=True).get(id=claim.workload_id)
        r = _reservation_of(workload)
        if workload.node_id != claim.blueprint_node_id:  # back to the blueprint's charge
            _prod_move(workload, workload.node_id, claim.blueprint_node_id, r)
            Workload.objects.filter(id=workload.id).update(node_id=claim.blueprint_node_id)
        declaration = claim.declaration
        claim.delete()
        if declaration:
            _inherit(cluster, declaration, now_s=now_s)
        return True


def _extra_stale(workload: Workload, pod: LivePod, request: list[float], limit: list[float]) -> bool:
    """Whether an extra's claim no longer describes the pod reported under its name: its
    controller changed (a ReplicaSet adopted the orphan: ``""`` → ``ReplicaSet/web-7d9c5b6f4``),
    its forge label changed, or its request or limit did (the pod was deleted and re-created
    under its name while no watch saw it, or resized in place). Such a pod is identified afresh:
    it may now hold an entry, or is charged its new request — never both its old charge and a
    new one."""
    labels = workload.labels or {}
    return (workload.owner != pod.owner
            or labels.get(BLUEPRINT_POD_LABEL) != pod.labels.get(BLUEPRINT_POD_LABEL)
            or [float(x) for x in workload.request] != [float(x) for x in request]
            or [float(x) for x in workload.limit] != [max(a, b) for a, b in zip(limit, request, strict=True)])


def _extra_release(claim) -> None:
    """An extra's charge leaves its node's ledgers and its claim is deleted (its row stays)."""
    workload = Workload.objects.select_for_update(no_key=True).get(id=claim.workload_id)
    _prod_move(workload, workload.node_id, None, _reservation_of(workload))
    Workload.objects.filter(id=workload.id).update(node=None)
    claim.delete()


def _inherit(cluster: Cluster, declaration: str, *, now_s: float) -> None:
    """Extras of ``declaration`` (``namespace/name``) that now map to an entry take it."""
    waiting = list(ProductionPlacement.objects.select_for_update(of=("self",)).filter(
        workload__cluster=cluster, identity=ProductionPlacement.EXTRA, declaration=declaration)
        .select_related("workload", "seen_node"))
    if not waiting:
        return
    pods = [LivePod(c.pod, c.seen_node.name if c.seen_node else "", owner=c.workload.owner,
                    labels=dict(c.workload.labels or {}), start_s=c.started_s or 0.0) for c in waiting]
    namespace, _, name = declaration.partition("/")
    identities, rows = _identify(cluster, pods, [(namespace, name)])
    for claim, pod, identity in zip(waiting, pods, identities, strict=True):
        if identity.outcome not in (MAPPED, MOVED) or claim.seen_node is None:
            continue
        extra = Workload.objects.select_for_update(no_key=True).get(id=claim.workload_id)
        _prod_move(extra, extra.node_id, None, _reservation_of(extra))
        Workload.objects.filter(id=extra.id).update(node=None)
        claim.delete()
        overrides = {k: v for k, v in (extra.labels or {}).items() if k in KEYS}
        _claim(rows[identity.entry], pod, claim.seen_node, identity, overrides=overrides,
               start_s=claim.started_s, at_s=claim.seen_s, now_s=now_s)


def _nodes_unchanged(cluster: Cluster, nodes: list[dict]) -> set[int]:
    """Indexes of the ``nodes`` observations :func:`node_observe_many` would find unchanged
    (well-formed, held, and the same allocatable, capacity, labels, taints, readiness and
    images), from one read of those columns for those nodes only (no model instances: the
    watch applies a re-list, or a large cluster's status updates, in batches of a few hundred
    nodes, and each batch read every node of the cluster before)."""
    names = [d.get("name") for d in nodes if isinstance(d.get("name"), str)]
    try:
        held = {row[0]: row[1:] for row in Node.objects.filter(cluster=cluster, name__any=names).values_list(
            "name", "allocatable", "capacity", "labels", "taints", "condition__ready", "condition__schedulable",
            "condition__gone", "condition__images")}
    except Exception:  # noqa: BLE001 - the full path decides (and says why)
        return set()
    same = set()
    for i, d in enumerate(nodes):
        name = d.get("name")
        row = held.get(name) if isinstance(name, str) else None
        if row is None or row[4] is None:
            continue
        allocatable, capacity, labels, taints, ready, schedulable, gone, images = row
        try:
            reported = _observed_vector(d["allocatable"], "allocatable")
            wanted_labels = {str(k): str(v) for k, v in dict(d.get("labels") or {}).items()}
            wanted_taints = [{"key": str(t.get("key", "")), "value": str(t.get("value", "") or ""),
                              "effect": str(t.get("effect", "NoSchedule"))} for t in d.get("taints") or ()]
            wanted_images = {str(k): float(v) for k, v in dict(d.get("images") or {}).items()}
            alloc = [o if r == math.inf else r for r, o in zip(reported, allocatable, strict=True)]
            cap = [a if a == math.inf else max(0.0, a - (o - c if o != math.inf and c != math.inf else 0.0))
                   for a, o, c in zip(alloc, allocatable, capacity, strict=True)]
            if ((alloc, cap, wanted_labels, wanted_taints) == (list(allocatable), list(capacity), labels, taints)
                    and (ready, schedulable, gone, images) == (bool(d["ready"]), bool(d["schedulable"]), False,
                                                               wanted_images)):
                same.add(i)
        except (InputError, KeyError, TypeError, ValueError, AttributeError):
            continue
    return same


def node_observe_many(*, cluster: Cluster, nodes: list[dict], now_s: float) -> list[bool | InputError]:
    """:func:`node_observe` for many nodes (keyword dicts of its arguments) in a fixed number of
    queries for nodes Kalena holds; unknown nodes are added one by one. Returns per node whether
    it changed anything, or the :class:`ObservationRejected` that refused it."""
    out: list[bool | InputError] = [False] * len(nodes)
    unchanged = _nodes_unchanged(cluster, nodes)  # a re-list repeats every node: no model read for those
    todo = [i for i in range(len(nodes)) if i not in unchanged]
    if not todo:
        return out
    sub = node_observe_many(cluster=cluster, nodes=[nodes[i] for i in todo], now_s=now_s) if unchanged else None
    if sub is not None:
        for i, answer in zip(todo, sub, strict=True):
            out[i] = answer
        return out
    rows = {n.name: n for n in Node.objects.filter(cluster=cluster, name__any=[d.get("name") for d in nodes])
            .select_related("condition", "live_ledger")}
    node_updates, ledger_updates, condition_updates = {}, {}, {}
    for i, d in enumerate(nodes):
        name = d.get("name")
        node = rows.get(name) if isinstance(name, str) else None
        if node is None:
            try:
                out[i] = node_observe(cluster=cluster, now_s=now_s, **d)
            except InputError as exc:
                out[i] = exc
            continue
        try:
            reported = _observed_vector(d["allocatable"], "allocatable")
        except InputError as exc:
            out[i] = exc
            continue
        labels = {str(k): str(v) for k, v in dict(d.get("labels") or {}).items()}
        taints = [{"key": str(t.get("key", "")), "value": str(t.get("value", "") or ""),
                   "effect": str(t.get("effect", "NoSchedule"))} for t in d.get("taints") or ()]
        images = {str(k): float(v) for k, v in dict(d.get("images") or {}).items()}
        alloc = [o if r == math.inf else r for r, o in zip(reported, node.allocatable, strict=True)]
        capacity = [a if a == math.inf else max(0.0, a - (o - c if o != math.inf and c != math.inf else 0.0))
                    for a, o, c in zip(alloc, node.allocatable, node.capacity, strict=True)]
        if (alloc, capacity, labels, taints) != (list(node.allocatable), list(node.capacity), node.labels, node.taints):
            if capacity != list(node.capacity):
                led = node.live_ledger
                led.capacity, led.version = capacity, led.version + 1
                ledger_updates[led.id] = led
            node.allocatable, node.capacity, node.labels, node.taints = alloc, capacity, labels, taints
            node_updates[node.id] = node
            out[i] = True
        cond = node.condition
        wanted = (bool(d["ready"]), bool(d["schedulable"]), False, images)
        if (cond.ready, cond.schedulable, cond.gone, cond.images) != wanted:
            cond.ready, cond.schedulable, cond.gone, cond.images = wanted
            cond.seen_s, cond.updated_s = d.get("at_s", 0.0), now_s
            condition_updates[cond.id] = cond
            out[i] = True
    # one UPDATE … FROM a VALUES list per table (Django's bulk_update builds a CASE per row and
    # column: most of a 5,000-node re-list's CPU in the watch)
    with transaction.atomic():
        if node_updates:
            update_by_id(Node._meta.db_table, [("allocatable", "vector"), ("capacity", "vector"), ("labels", "json"),
                                               ("taints", "json")],
                         [(n.id, n.allocatable, n.capacity, n.labels, n.taints) for n in node_updates.values()])
        if ledger_updates:  # under lock: only capacity and version move here, the version from the row
            locked = dict(LiveNodeLedger.objects.select_for_update().filter(id__any=list(ledger_updates))
                          .values_list("id", "version"))
            update_by_id(LiveNodeLedger._meta.db_table, [("capacity", "vector"), ("version", "int")],
                         [(led_id, led.capacity, locked[led_id] + 1) for led_id, led in ledger_updates.items()
                          if led_id in locked])
        if condition_updates:
            update_by_id(NodeCondition._meta.db_table,
                         [("ready", "bool"), ("schedulable", "bool"), ("gone", "bool"), ("images", "json"),
                          ("seen_s", "float"), ("updated_s", "float")],
                         [(c.id, c.ready, c.schedulable, c.gone, c.images, c.seen_s, c.updated_s)
                          for c in condition_updates.values()])
    return out
