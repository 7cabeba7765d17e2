"""Reads for the live console pages: a live cluster's nodes with their ledgers and conditions,
node history from the archive, workloads on a node, and the operator's recent events. Each
function runs a fixed number of queries whatever the cluster size."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from django.db.models import Count, Max, Q

from kalena_engine.ledger import reclaimed_in_use, slack_of
from kalena_engine.resources import CPU, RAM
from kalena_web.archive.models import EvictionRecord, UsageRollup
from kalena_web.control.models import Escalation, LoopRun
from kalena_web.inventory.mappers import vector
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.replan.models import ReplanRecommendation
from kalena_web.scheduling.models import BatchPod


class NotFound(LookupError):
    """An unknown live cluster or node (the page answers 404 with this message)."""


def live_clusters() -> list[Cluster]:
    return list(Cluster.objects.filter(kind=Cluster.LIVE).annotate(node_count=Count("nodes")).order_by("name"))


def live_cluster_get(*, name: str) -> Cluster:
    try:
        return Cluster.objects.get(kind=Cluster.LIVE, name=name)
    except Cluster.DoesNotExist:
        raise NotFound(f"no live cluster named {name!r}") from None


@dataclass(frozen=True)
class NodeView:
    """One node's ledgers and condition, vectors ``(8,)`` in internal units."""

    node: Node
    capacity: np.ndarray
    request: np.ndarray
    prod_request: np.ndarray
    reservation: np.ndarray
    usage: np.ndarray
    batch_request: np.ndarray
    stale: bool
    last_sample_s: float | None
    version: int
    ineligible_until_s: float
    ineligible_reason: str
    pressure_since_s: float | None
    batch_pods: int
    #: the last estimation pass's blueprint check (docs/design.md §6): violation dicts, empty = holds
    blueprint_violations: tuple[dict, ...] = ()
    blueprint_checked_s: float | None = None
    #: the orchestrator's watch: the node is ready, and schedulable (not cordoned, drained or paused)
    ready: bool = True
    schedulable: bool = True
    #: Σ usage of the node's batch pods ``(8,)`` (None before the agent reported it) and their CFS
    #: throttled time per second, summed over the pods, ×1000 (None while none reported it)
    batch_usage: np.ndarray | None = None
    batch_throttled_mcpu: float | None = None

    @property
    def slack(self) -> np.ndarray:
        return slack_of(self.capacity, self.reservation, self.request)

    @property
    def headroom(self) -> np.ndarray:
        return self.capacity - self.prod_request

    @property
    def reclaimed(self) -> np.ndarray:
        return reclaimed_in_use(self.capacity, self.request)


#: the columns a list of every node reads (``values_list``: no model instances, and none of the
#: node's labels, taints or the ledger's blueprint workloads decoded — 54 → ~20 ms for 620 nodes)
LIST_COLUMNS = ("id", "row", "name", "zone", "active", "takes_batch", "live_ledger__capacity",
                "live_ledger__prod_request", "live_ledger__batch_request", "live_ledger__prod_reservation",
                "live_ledger__batch_reservation", "live_ledger__usage", "live_ledger__stale",
                "live_ledger__last_sample_s", "live_ledger__version", "live_ledger__blueprint_violations",
                "live_ledger__blueprint_checked_s", "condition__slack_ineligible_until_s",
                "condition__ineligible_reason", "condition__pressure_since_s", "condition__ready",
                "condition__schedulable", "live_ledger__batch_usage", "live_ledger__batch_throttled_mcpu")


def node_views(*, cluster: Cluster, name: str | None = None) -> list[NodeView]:
    """Every node of a live cluster in row order (2 queries); only the node ``name`` when given
    (then ``NodeView.node`` is the full model row; in the list it carries id, row, name, zone,
    active, takes_batch and the cluster)."""
    bound = BatchPod.objects.filter(cluster=cluster, state=BatchPod.BOUND)
    nodes = Node.objects.filter(cluster=cluster).order_by("row")
    if name is not None:
        bound, nodes = bound.filter(workload__node__name=name), nodes.filter(name=name)
    bound = dict(bound.values_list("workload__node_id").annotate(n=Count("id")).values_list("workload__node_id", "n"))
    out = []
    if name is not None:
        for node in nodes.select_related("live_ledger", "condition"):
            led, cond = node.live_ledger, node.condition
            out.append(_view(node, led.capacity, led.prod_request, led.batch_request, led.prod_reservation,
                             led.batch_reservation, led.usage, led.stale, led.last_sample_s, led.version,
                             led.blueprint_violations, led.blueprint_checked_s, cond.slack_ineligible_until_s,
                             cond.ineligible_reason, cond.pressure_since_s, cond.ready, cond.schedulable,
                             led.batch_usage, led.batch_throttled_mcpu, bound))
        return out
    for node_id, row, node_name, zone, active, takes_batch, *rest in nodes.values_list(*LIST_COLUMNS):
        node = Node(id=node_id, row=row, name=node_name, zone=zone, active=active, takes_batch=takes_batch,
                    cluster=cluster)
        out.append(_view(node, *rest, bound))
    return out


def _view(node, capacity, prod_request, batch_request, prod_reservation, batch_reservation, usage, stale,
          last_sample_s, version, violations, checked_s, ineligible_until_s, ineligible_reason, pressure_since_s,
          ready, schedulable, batch_usage, batch_throttled_mcpu, bound) -> NodeView:
    prod_q, batch_q = vector(prod_request), vector(batch_request)
    return NodeView(
        node=node, capacity=vector(capacity), request=prod_q + batch_q, prod_request=prod_q,
        reservation=vector(prod_reservation) + vector(batch_reservation), usage=vector(usage),
        batch_request=batch_q, stale=stale, last_sample_s=last_sample_s, version=version,
        ineligible_until_s=ineligible_until_s, ineligible_reason=ineligible_reason,
        pressure_since_s=pressure_since_s, batch_pods=bound.get(node.id, 0),
        blueprint_violations=tuple(violations or ()), blueprint_checked_s=checked_s,
        ready=ready is not False, schedulable=schedulable is not False,
        batch_usage=None if batch_usage is None else vector(batch_usage), batch_throttled_mcpu=batch_throttled_mcpu)


def node_view(*, cluster: Cluster, name: str) -> NodeView:
    views = node_views(cluster=cluster, name=name)
    if not views:
        raise NotFound(f"no node {name!r} in live cluster {cluster.name!r}")
    return views[0]


def node_history(*, node: Node, since_s: float) -> dict[str, np.ndarray]:
    """The node's 1-minute archive since ``since_s``: ``times_s (m,)``; ``(m, 8)`` series
    capacity, limit, request, reservation, usage (Σ u), batch_usage (Σ u of batch) and
    prod_usage (usage − batch_usage); ``batch_throttled (m,)`` the batch pods' cpu throttling
    rate, mcpu. Internal units; NaN where a row has no value (rows written before batch usage
    and throttling were recorded). 1 query."""
    rows = list(UsageRollup.objects.filter(node=node, resolution=UsageRollup.MINUTE, bucket_s__gte=since_s)
                .order_by("bucket_s").values_list("bucket_s", "limit", "request", "reservation", "usage_mean",
                                                  "batch_usage", "batch_throttled_mcpu"))
    m = len(rows)
    capacity = vector(node.live_ledger.capacity)

    def col(i: int, missing: float = 0.0) -> np.ndarray:
        return np.array([np.full(8, missing) if r[i] is None else vector(r[i]) for r in rows]).reshape(m, 8)

    usage, batch = col(4), col(5, np.nan)
    return {"times_s": np.array([r[0] for r in rows], dtype=np.float64),
            "capacity": np.repeat(capacity[None, :], m, axis=0), "limit": col(1), "request": col(2),
            "reservation": col(3), "usage": usage, "batch_usage": batch, "prod_usage": usage - batch,
            "batch_throttled": np.array([np.nan if r[6] is None else r[6] for r in rows], dtype=np.float64)}


def node_workloads(*, node: Node) -> list[Workload]:
    """Production and bound batch workloads on the node with their reservation and, for
    production, the live pod holding it (``placement``; 1 query)."""
    return list(Workload.objects.filter(node=node).select_related("reservation", "batch", "placement")
                .order_by("kind", "name"))


def node_extras(*, node: Node) -> list:
    """Live production pods on the node that map to no blueprint entry (production identity,
    docs/design.md §15), each charged once at its request, with the reason (1 query)."""
    from kalena_web.control.models import ProductionPlacement

    return list(ProductionPlacement.objects.filter(seen_node=node, identity=ProductionPlacement.EXTRA,
                                                   workload__node=node).select_related("workload")
                .order_by("pod"))


def cluster_events(*, cluster: Cluster, limit: int = 20) -> dict[str, list]:
    """Recent escalations, evictions, open recommendations and each loop's last run."""
    loops = {}
    for loop, last in LoopRun.objects.filter(Q(cluster=cluster) | Q(cluster__isnull=True)).values_list("loop").annotate(
            last=Max("started_s")).values_list("loop", "last"):
        loops[loop] = last
    last_runs = {r.loop: r for r in LoopRun.objects.filter(cluster=cluster, started_s__in=list(loops.values()))}
    return {
        "escalations": list(Escalation.objects.filter(node__cluster=cluster).select_related("node")[:limit]),
        "evictions": list(EvictionRecord.objects.filter(cluster=cluster).select_related("node")[:limit]),
        "recommendations": list(ReplanRecommendation.objects.filter(cluster=cluster, state="open")[:5]),
        "fidelity": fidelity_findings(cluster=cluster, limit=limit),
        "loops": [last_runs[name] for name in sorted(last_runs)],
    }


def fidelity_findings(*, cluster: Cluster, limit: int | None = None) -> list:
    """Production pods the orchestrator reports running where the blueprint did not put them
    (docs/design.md §14), newest first (1 query)."""
    from kalena_web.control.models import ProductionPlacement

    rows = (ProductionPlacement.objects.filter(workload__cluster=cluster, finding=True)
            .select_related("workload", "seen_node", "blueprint_node").order_by("-seen_s"))
    return list(rows[:limit] if limit else rows)


def totals(views: list[NodeView], *, now_s: float) -> dict[str, float]:
    """Cluster headline: reclaimed in use as a share of running requests, slack, counts."""
    request = np.sum([v.request for v in views], axis=0) if views else np.zeros(8)
    reclaimed = np.sum([v.reclaimed for v in views], axis=0) if views else np.zeros(8)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(request > 0, reclaimed / request, 0.0)
    return {
        "reclaimed_cpu": float(share[CPU]), "reclaimed_ram": float(share[RAM]),
        "reclaimed_cores": float(reclaimed[CPU] / 1000.0), "reclaimed_gib": float(reclaimed[RAM] / 2**30),
        "stale": sum(v.stale for v in views), "ineligible": sum(v.ineligible_until_s > now_s for v in views),
        "batch_pods": sum(v.batch_pods for v in views),
        "blueprint_broken": sum(bool(v.blueprint_violations) for v in views),
        "blueprint_unchecked": sum(v.blueprint_checked_s is None for v in views),
    }
