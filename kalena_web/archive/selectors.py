"""Archive reads for the console and the API. Each function issues a fixed number of queries,
whatever the size of the run (the console's N+1 tests hold them to it)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from django.core.paginator import Page, Paginator
from django.db.models import Q, QuerySet

from kalena_engine.estimator import pinned_mask, update_reservations
from kalena_engine.resources import CPU, RAM
from kalena_web.archive import mappers, series
from kalena_web.archive.errors import NodeNotFound, RunNotFound, WorkloadNotFound
from kalena_web.archive.models import (
    BatchEvent, BatchPlacement, ClusterSeries, NodeSeries, Run, TaskOutcome, WorkloadSeries,
)
from kalena_web.inventory.mappers import vector
from kalena_web.inventory.models import Node, Workload

CPU_RAM = [CPU, RAM]


# -- runs ---------------------------------------------------------------------------------------

def run_list() -> QuerySet[Run]:
    """Every run with its cluster, newest first (one query)."""
    return Run.objects.select_related("cluster").order_by("-created_at", "name")


def run_names() -> list[str]:
    """Names of every run, newest first (one query)."""
    return list(Run.objects.order_by("-created_at", "name").values_list("name", flat=True))


def run_exists(*, name: str) -> bool:
    return Run.objects.filter(name=name).exists()


def run_get(*, name: str) -> Run:
    """The run named ``name`` with its cluster (one query).

    Raises:
        RunNotFound: naming the run.
    """
    run = Run.objects.select_related("cluster").filter(name=name).first()
    if run is None:
        raise RunNotFound(f"no run named {name!r}")
    return run


def runs_get(*, names: list[str]) -> list[Run]:
    """Runs in the order named (one query).

    Raises:
        RunNotFound: naming every missing run.
    """
    found = {r.name: r for r in Run.objects.select_related("cluster").filter(name__in=names)}
    missing = [n for n in names if n not in found]
    if missing:
        raise RunNotFound(f"no run named {', '.join(map(repr, missing))}")
    return [found[n] for n in names]


def cluster_series(*, run: Run) -> dict[str, np.ndarray]:
    """Cluster-wide series ``{name: (T,)}`` (see :data:`series.CLUSTER_SERIES`; one query)."""
    return mappers.cluster_series_from_rows(list(ClusterSeries.objects.filter(run=run).order_by("chunk")))


def cluster_series_many(*, runs: list[Run]) -> dict[int, dict[str, np.ndarray]]:
    """:func:`cluster_series` of several runs in one query, keyed by run id."""
    rows: dict[int, list[ClusterSeries]] = {r.id: [] for r in runs}
    for row in ClusterSeries.objects.filter(run__in=runs).order_by("run_id", "chunk"):
        rows[row.run_id].append(row)
    return {rid: mappers.cluster_series_from_rows(chunks) for rid, chunks in rows.items()}


def recent_evictions(*, run: Run, limit: int = 12) -> list[BatchEvent]:
    """The run's latest batch evictions with task and node (one query)."""
    return list(BatchEvent.objects.filter(run=run, kind=BatchEvent.EVICTED)
                .select_related("workload", "node").order_by("-time_s", "-id")[:limit])


# -- nodes --------------------------------------------------------------------------------------

def node_get(*, run: Run, name: str) -> Node:
    """Node ``name`` of the run's cluster with its ledger (one query).

    Raises:
        NodeNotFound: naming the node and the run.
    """
    node = Node.objects.select_related("ledger").filter(cluster_id=run.cluster_id, name=name).first()
    if node is None:
        raise NodeNotFound(f"run {run.name!r} has no node named {name!r}")
    return node


def node_series(*, run: Run, node: Node) -> mappers.NodeTimeSeries:
    """The node's whole run (one query)."""
    return mappers.node_series_from_rows(run, list(NodeSeries.objects.filter(node=node).order_by("chunk")))


def tightest_step(ts: mappers.NodeTimeSeries) -> int:
    """The step at which the node's reservation ledger was fullest: the largest ``Σ r / C`` on
    cpu or ram (step 0 for a node without capacity)."""
    capacity = ts.get("capacity")[:, CPU_RAM]
    reserved = ts.total("reservation")[:, CPU_RAM]
    with np.errstate(divide="ignore", invalid="ignore"):
        fill = np.where(capacity > 0, reserved / capacity, 0.0).max(axis=1)
    return int(np.argmax(fill)) if len(fill) else 0


@dataclass(frozen=True, eq=False)
class PodAt:
    """A production pod on the node at one step: per-instance request and limit ``(8,)``;
    ``usage``/``reservation`` ``(2,)`` cpu, ram at the step; ``usage_peak``/``usage_mean`` over
    the run."""

    workload: Workload
    request: np.ndarray
    limit: np.ndarray
    usage: np.ndarray
    reservation: np.ndarray
    usage_mean: np.ndarray
    usage_peak: np.ndarray


def node_pods_at(*, run: Run, node: Node, step: int) -> list[PodAt]:
    """The node's production pods with their values at ``step`` (one query), biggest cpu
    request first."""
    rows = list(WorkloadSeries.objects.filter(node=node).select_related("workload").order_by("workload__row", "chunk"))
    by_id = {r.workload_id: r.workload for r in rows}
    pods = []
    for wid, values in mappers.workload_series_from_rows(rows).items():
        workload = by_id[wid]
        usage = values[:, series.WORKLOAD_SERIES.index("usage")]
        reservation = values[:, series.WORKLOAD_SERIES.index("reservation")]
        pods.append(PodAt(workload=workload, request=vector(workload.request), limit=vector(workload.limit),
                          usage=usage[step], reservation=reservation[step],
                          usage_mean=usage.mean(axis=0), usage_peak=usage.max(axis=0)))
    pods.sort(key=lambda p: (-p.request[CPU], -p.request[RAM], p.workload.name))
    return pods


@dataclass(frozen=True, eq=False)
class BatchAt:
    """A batch task running on the node at one step (all its groups there).

    ``instances`` running; ``weight``-ed totals ``(2,)`` cpu, ram of request, reservation and
    usage — a group that ends within the step counts for the part of the step it runs, exactly
    as the node's series do, so the rows add up to the node's batch aggregates.
    """

    workload: Workload
    instances: int
    started_s: float
    ends_s: float
    request: np.ndarray
    reservation: np.ndarray
    usage: np.ndarray


def _shown_end(end_s: float, planned_end_s: float) -> float:
    return float(end_s) if np.isfinite(end_s) else float(planned_end_s)


def node_batch_at(*, run: Run, node: Node, step: int) -> list[BatchAt]:
    """Batch running on the node at ``step`` (one query); reservations from the engine's
    estimator for each group since its placement (docs/design.md §5), largest cpu request first."""
    now_s = run.start_s + step * run.step_s
    rows = list(BatchPlacement.objects.filter(node=node, start_s__lte=now_s)
                .filter(Q(end_s__gt=now_s) | Q(end_s__isnull=True))
                .select_related("workload").order_by("workload__row", "start_s"))
    if not rows:
        return []
    rb = mappers.running_batch_from_rows(rows)
    policy = mappers.estimator_policy(run)
    b = len(rows)
    res = update_reservations(
        rb.reservations, request=rb.request, limit=rb.limit, usage=rb.usage, sampled=np.ones(b, dtype=bool),
        now_s=now_s, start_s=rb.start_s, grace_s=np.full(b, policy.grace_s), pinned=pinned_mask(np.zeros(b, dtype=bool)),
        policy=policy,
    )
    # a throttled group ends later than planned (docs/design.md §11): a completed row's end is the real one, a
    # row still running at the run's end holds the engine's projected end, an evicted one ran past this step
    ends = np.array([np.inf if r.end_kind == BatchPlacement.EVICTED else
                     (r.end_s if r.end_s is not None else rb.planned_end_s[i])
                     for i, r in enumerate(rows)], dtype=np.float64)
    weight = rb.count * np.clip((ends - now_s) / run.step_s, 0.0, 1.0)
    out: dict[int, dict] = {}
    for i, row in enumerate(rows):
        acc = out.setdefault(row.workload_id, {"workload": row.workload, "instances": 0, "started_s": row.start_s,
                                               "ends_s": _shown_end(ends[i], rb.planned_end_s[i]), "request": np.zeros(2),
                                               "reservation": np.zeros(2), "usage": np.zeros(2)})
        acc["instances"] += row.count
        acc["started_s"] = min(acc["started_s"], row.start_s)
        acc["ends_s"] = max(acc["ends_s"], _shown_end(ends[i], rb.planned_end_s[i]))
        acc["request"] += weight[i] * rb.request[i, CPU_RAM]
        acc["reservation"] += weight[i] * res.value[i, CPU_RAM]
        acc["usage"] += weight[i] * rb.usage[i, CPU_RAM]
    batch = [BatchAt(**acc) for acc in out.values()]
    batch.sort(key=lambda b: (-b.request[0], -b.request[1], b.workload.name))
    return batch


def node_evictions(*, node: Node, limit: int = 100) -> list[BatchEvent]:
    """Batch evictions on the node, in time order, with their task (one query)."""
    return list(BatchEvent.objects.filter(node=node, kind=BatchEvent.EVICTED)
                .select_related("workload").order_by("time_s", "id")[:limit])


# -- batch tasks --------------------------------------------------------------------------------

def task_get(*, run: Run, name: str) -> Workload:
    """Batch task ``name`` of the run with its outcome (one query).

    Raises:
        WorkloadNotFound: naming the task and the run.
    """
    task = (Workload.objects.select_related("outcome")
            .filter(cluster_id=run.cluster_id, kind=Workload.BATCH, name=name).first())
    if task is None:
        raise WorkloadNotFound(f"run {run.name!r} has no batch task named {name!r}")
    return task


def task_events(*, task: Workload, page: int, per_page: int = 200) -> Page:
    """One page of the task's lifecycle events in time order, with their nodes (two queries).

    Raises:
        django.core.paginator.InvalidPage: ``page`` out of range.
    """
    events = BatchEvent.objects.filter(workload=task).select_related("node").order_by("time_s", "id")
    return Paginator(events, per_page).page(page)


def task_timeline(*, run: Run, task: Workload) -> dict[str, np.ndarray]:
    """Instances of the task ``pending`` and ``running`` after each step ``(T,)`` (one query)."""
    rows = list(BatchEvent.objects.filter(workload=task).values_list("kind", "step", "count"))
    per_kind = {kind: np.zeros(run.steps) for kind in ("submitted", "placed", "evicted", "completed")}
    for kind, step, count in rows:
        if kind in per_kind and step < run.steps:
            per_kind[kind][step] += count
    cum = {kind: np.cumsum(v) for kind, v in per_kind.items()}
    return {
        "pending": cum["submitted"] - cum["placed"] + cum["evicted"],
        "running": cum["placed"] - cum["evicted"] - cum["completed"],
    }


BATCH_FILTERS = {
    "all": Q(),
    "evicted": Q(evicted__gt=0),
    "unfinished": Q(pending_at_end__gt=0) | Q(running_at_end__gt=0),
    "pending": Q(pending_at_end__gt=0),
    "never_placed": Q(placed=0),
}


def batch_outcome_rows(*, run: Run) -> QuerySet[TaskOutcome]:
    """The run's batch tasks with their outcomes and task, in arrival order (one query; the
    console's list filters it by :data:`BATCH_FILTERS`, searches, sorts and pages it)."""
    return TaskOutcome.objects.filter(run=run).select_related("workload").order_by("workload__row")
