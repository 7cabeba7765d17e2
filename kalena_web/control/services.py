"""Control-plane writes (keyword-only arguments, ``<entity>_<action>``): live clusters, loop runs and
metrics. What the orchestrator's watch reports is written by :mod:`kalena_web.control.observed_nodes`
and :mod:`kalena_web.control.observed_production`."""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np
from django.db import IntegrityError, transaction

from kalena_engine.errors import BlueprintRefused, InputError
from kalena_engine.kuberina import Blueprint, Infrastructure, Workloads, phase0_capacity, verify_blueprint
from kalena_engine.ledger import node_sum
from kalena_engine.policy import Policy
from kalena_web.archive.models import RUN_NAME_PATTERN
from kalena_web.control import metrics
from kalena_web.control.models import MetricSeries, NodeCondition
from kalena_web.inventory import mappers
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation


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
    (:func:`~kalena_web.control.observed_nodes.node_observe`: an engine of ``KALENA_DOCKER_ENGINES``,
    a Kubernetes Node), not from IR.

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
