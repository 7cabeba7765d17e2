"""Scheduling reads: what a pass needs (a fixed number of queries, whatever the cluster size)
and what the console and API show."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable

import numpy as np
import orjson
from django.db.models import Count, QuerySet, TextField
from django.db.models.fields.json import KeyTransform
from django.db.models.functions import Cast

from kalena_engine.placement import BatchResidents, ClusterSnapshot, Evictions, ProductionPods
from kalena_web.archive.models import EvictionRecord
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.ledger.mappers import vector_matrix
from kalena_web.scheduling import mappers
from kalena_web.scheduling.mappers import NodeRow, PendingRow, template_of
from kalena_web.scheduling.models import BatchPod, WhyPending
from kalena_web.telemetry.models import MitigationEvent


def live_cluster(*, name: str) -> Cluster:
    """The live cluster called ``name``.

    Raises:
        Cluster.DoesNotExist: no such live cluster.
    """
    return Cluster.objects.get(kind=Cluster.LIVE, name=name)


#: The live ledger's vectors a pass reads, decoded per column in one parse.
_LEDGER_VECTORS = ("capacity", "prod_request", "prod_reservation", "batch_request", "batch_reservation")


def _json(text: str | None, default):
    return orjson.loads(text) if text else default


#: the columns a node row is read from (values_list order; the last five are the ledger vectors)
_NODE_COLUMNS = ("id", "name", "zone", "rack", "labels", "taints", "takes_batch", "live_ledger__version",
                 "live_ledger__stale", "condition__ready", "condition__schedulable", "condition__gone",
                 "condition__slack_ineligible_until_s", "condition__volatility", "condition__images",
                 *(f"live_ledger__{f}" for f in _LEDGER_VECTORS))


def node_row_keys(*, cluster: Cluster) -> list[tuple[int, str]]:
    """``(node id, key)`` of every node of ``cluster`` in row order (1 query): the key is an MD5
    the database computes over every column :func:`node_rows` reads, so a node whose key is
    unchanged reads as the same :class:`NodeRow` (the scheduler's cache re-reads only the others).
    On SQLite (the embedded default, for small clusters) the key is ``""`` — its parser cannot
    take the nested concatenation of every column — and every node is read whole each pass."""
    from django.db import connection
    from django.db.models import Value
    from django.db.models.functions import MD5, Coalesce, Concat

    if connection.vendor != "postgresql":
        return [(i, "") for i in Node.objects.filter(cluster=cluster).order_by("row").values_list("id", flat=True)]
    # the query is compiled once per cluster and connection settings: building its 40 expressions
    # cost more Python than reading 300 keys (every pass of every scheduler instance asks)
    compiled = _NODE_KEYS_SQL.get((connection.alias, cluster.id))
    if compiled is None:
        text = TextField()
        parts = []
        for column in _NODE_COLUMNS[1:]:
            parts += [Coalesce(Cast(column, text), Value("~", output_field=text), output_field=text),
                      Value("|", output_field=text)]
        query = Node.objects.filter(cluster=cluster).order_by("row").annotate(
            key=MD5(Concat(*parts, output_field=text))).values_list("id", "key").query
        compiled = _NODE_KEYS_SQL[(connection.alias, cluster.id)] = query.get_compiler(connection=connection).as_sql()
    with connection.cursor() as cursor:
        cursor.execute(*compiled)
        return [(node_id, key) for node_id, key in cursor.fetchall()]


#: (database alias, cluster id) → the compiled SQL and parameters of :func:`node_row_keys`
_NODE_KEYS_SQL: dict[tuple[str, int], tuple[str, tuple]] = {}


def node_rows(*, cluster: Cluster, ids: list[int] | None = None) -> list[NodeRow]:
    """Every node of ``cluster`` with its live ledger and condition, in row order (1 query).
    A node is ``ready`` for placement when the orchestrator reports it ready, not cordoned and
    not gone (:class:`~kalena_web.control.models.NodeCondition`). JSON columns come as text and
    the ledger vectors are decoded one column at a time (:func:`~kalena_web.ledger.mappers.vector_matrix`):
    the per-field converters were most of a 620-node read. ``ids``: only those nodes."""
    text = TextField()
    nodes = Node.objects.filter(cluster=cluster)
    if ids is not None:
        nodes = nodes.filter(id__any=ids)
    rows = list(nodes.order_by("row").values_list(
        "id", "name", "zone", "rack", Cast("labels", text), Cast("taints", text), "takes_batch",
        "live_ledger__version", "live_ledger__stale", "condition__ready", "condition__schedulable",
        "condition__gone", "condition__slack_ineligible_until_s", "condition__volatility",
        Cast("condition__images", text), *(Cast(f"live_ledger__{f}", text) for f in _LEDGER_VECTORS)))
    vectors = {f: vector_matrix([r[15 + i] for r in rows], 0.0) for i, f in enumerate(_LEDGER_VECTORS)}
    return [
        NodeRow(id=node_id, name=name, zone=zone, rack=rack, labels=_json(labels, {}), taints=_json(taints, []),
                takes_batch=takes_batch, **{f: vectors[f][i] for f in _LEDGER_VECTORS}, version=version,
                stale=stale, ready=ready and schedulable and not gone, ineligible_until_s=until_s,
                volatility=volatility, images=_json(images, {}))
        for i, (node_id, name, zone, rack, labels, taints, takes_batch, version, stale, ready, schedulable, gone,
                until_s, volatility, images, *_vectors) in enumerate(rows)
    ]


def production_fingerprint(*, cluster: Cluster) -> tuple:
    """A cheap summary that changes whenever a resident production pod is added, removed or
    moved, or its required anti-affinity terms change: ``(count, max id, Σ node id,
    Σ id · node id, pods with terms, Σ id · length of the terms' JSON)`` (1 aggregate query)."""
    from django.db.models import F, Max, Q, Sum
    from django.db.models.functions import Length

    terms = KeyTransform("anti_affinity_terms", "constraints")
    agg = Workload.objects.filter(cluster=cluster, kind=Workload.PRODUCTION, node__isnull=False).aggregate(
        n=Count("id"), top=Max("id"), nodes=Sum("node_id"), mix=Sum(F("id") * F("node_id")),
        with_terms=Count("id", filter=Q(constraints__has_key="anti_affinity_terms")),
        terms=Sum(F("id") * Length(Cast(terms, TextField()))))
    return agg["n"], agg["top"], agg["nodes"], agg["mix"], agg["with_terms"], agg["terms"]


def production_pods(*, cluster: Cluster, row_of_node: dict[int, int], cache: dict | None = None) -> ProductionPods:
    """Resident production pods with their labels, required anti-affinity terms (label selectors
    the watch read, docs/design.md §9) and Kuberina anti-affinity name lists (1 query).

    ``cache`` (a dict the caller keeps between passes, e.g. the lease-holding scheduler's):
    reused while :func:`production_fingerprint` and the node rows are unchanged (then 1
    aggregate query instead of reading every production pod)."""
    if cache is not None:
        key = production_fingerprint(cluster=cluster)
        if cache.get("key") == key and cache.get("rows") == row_of_node:
            return cache["value"]
        value = production_pods(cluster=cluster, row_of_node=row_of_node)
        cache.clear()
        cache.update(key=key, rows=dict(row_of_node), value=value)
        return value
    # labels and the anti-affinity name lists as JSON text, decoded in one orjson parse each: the
    # json module's per-row decoding was most of a 9,000-pod read
    rows = Workload.objects.filter(cluster=cluster, kind=Workload.PRODUCTION, node__isnull=False).values_list(
        "name", "node_id", "namespace", Cast("labels", TextField()),
        Cast(KeyTransform("anti_affinity", "constraints"), TextField()),
        Cast(KeyTransform("anti_affinity_terms", "constraints"), TextField()))
    ids, node, namespaces, label_texts, name_texts, term_texts = [], [], [], [], [], []
    for name, node_id, namespace, lab, anti, terms in rows:
        ids.append(name)
        node.append(row_of_node[node_id])
        namespaces.append(namespace)
        label_texts.append(lab or "{}")
        name_texts.append(anti or "null")
        term_texts.append(terms)
    labels = [lab or {} for lab in orjson.loads(f"[{','.join(label_texts)}]")]
    names = [tuple(n or ()) for n in orjson.loads(f"[{','.join(name_texts)}]")]
    return ProductionPods(ids=tuple(ids), node=np.array(node, dtype=np.int64), namespaces=tuple(namespaces),
                          labels=tuple(labels), terms=mappers.production_terms(term_texts, ids), names=tuple(names))


def batch_residents(*, cluster: Cluster, row_of_node: dict[int, int]) -> BatchResidents:
    """Bound batch pods grouped by (template, node) (1 query)."""
    rows = BatchPod.objects.filter(cluster=cluster, state=BatchPod.BOUND, workload__node__isnull=False).values_list(
        "workload__name", "workload__owner", "workload__namespace", "workload__labels", "workload__constraints",
        "workload__node_id")
    templates: dict[tuple, int] = {}
    template_list = []
    counts: dict[tuple[int, int], int] = defaultdict(int)
    for name, owner, namespace, labels, constraints, node_id in rows:
        key, _ = mappers.resident_template(owner, namespace, labels, constraints, name)
        if key not in templates:
            templates[key] = len(template_list)
            template_list.append(template_of(owner=owner, namespace=namespace, labels=labels or {},
                                             constraints=constraints or {}, min_member=None, member_id=name))
        counts[(templates[key], row_of_node[node_id])] += 1
    keys = list(counts)
    return BatchResidents(
        node=np.array([k[1] for k in keys], dtype=np.int64), count=np.array([counts[k] for k in keys], dtype=np.int64),
        template=np.array([k[0] for k in keys], dtype=np.int64), templates=tuple(template_list),
    )


def recent_evictions(*, cluster: Cluster, since_s: float, row_of_node: dict[int, int]) -> Evictions:
    """Batch evictions since ``since_s`` with the evicted pod's owner (the eviction cooldown,
    2 queries): the why-evicted records, and the agents' ``evict`` actions not yet recorded —
    records wait for their batch to settle (:data:`~kalena_web.archive.cursors.SETTLE_S`),
    while the orchestrator's watch requeues the pod as soon as its container stops, so without
    the actions the pod could be placed straight back on the node that evicted it."""
    rows = list(EvictionRecord.objects.filter(cluster=cluster, time_s__gte=since_s, tier="batch").values_list(
        "workload__owner", "node_id", "time_s"))
    rows += MitigationEvent.objects.filter(node__cluster=cluster, action="evict", tier="batch", ts__gte=since_s,
                                           workload__isnull=False).values_list("workload__owner", "node_id", "ts")
    rows = [(owner or "", node_id, t) for owner, node_id, t in rows if node_id in row_of_node]
    return Evictions(owner=np.array([r[0] for r in rows], dtype=object),
                     node=np.array([row_of_node[r[1]] for r in rows], dtype=np.int64),
                     time_s=np.array([r[2] for r in rows], dtype=np.float64))


def cluster_snapshot(*, cluster: Cluster, now_s: float, cooldown_s: float, cache: dict | None = None,
                     kubelet: bool = True, batch: Callable[[dict[int, int]], BatchResidents] | None = None,
                     rows: list[NodeRow] | None = None,
                     bound_requests: Callable[[], dict[int, np.ndarray]] | None = None,
                     ) -> tuple[list[NodeRow], ClusterSnapshot]:
    """``(rows, snapshot)``: the cluster exactly as a scheduling pass reads it — node rows, resident
    production and batch pods, the batch evictions of the last ``cooldown_s`` (the eviction
    cooldown), cached images and, where nodes publish batch capacity, the kubelet's room
    (case C11; ``kubelet=False`` leaves it out — the extender, which kube-scheduler asks before
    the kubelet sees the pod). The scheduling pass, the extender and the policy pre-flight all
    read it here (6–8 queries whatever the cluster's size; ``cache`` as :func:`production_pods`;
    ``batch(row_of_node)`` gives the resident batch pods instead of :func:`batch_residents` —
    the scheduler's cache, :mod:`kalena_web.scheduling.cache`, which passes its ``rows`` too, and
    ``bound_requests()``, the bound pods' requests per node id, which the kubelet's room then
    does not read again)."""
    from kalena_web.kubehooks.selectors import kubelet_room  # kubehooks reads through this module

    rows = node_rows(cluster=cluster) if rows is None else rows
    row_of_node = {r.id: i for i, r in enumerate(rows)}
    cached, _ = mappers.node_images(rows)
    snap = mappers.snapshot(
        rows, now_s=now_s, production=production_pods(cluster=cluster, row_of_node=row_of_node, cache=cache),
        batch=batch(row_of_node) if batch is not None else batch_residents(cluster=cluster, row_of_node=row_of_node),
        evictions=recent_evictions(cluster=cluster, since_s=now_s - cooldown_s, row_of_node=row_of_node),
        images=cached)
    room = kubelet_room(cluster=cluster, rows=rows, bound=bound_requests) if rows and kubelet else None
    if room is not None:
        snap = dataclasses.replace(snap, kubelet=room)
    return rows, snap


def pending_rows(*, cluster: Cluster) -> list[PendingRow]:
    """Pending batch pods in queue order, each with how many pods of its gang are bound (2 queries)."""
    pods = (BatchPod.objects.filter(cluster=cluster, state=BatchPod.PENDING).select_related("workload")
            .order_by("queued_s", "id"))
    running = dict(BatchPod.objects.filter(cluster=cluster, state=BatchPod.BOUND).exclude(gang="")
                   .values("gang").annotate(n=Count("id")).values_list("gang", "n"))
    return [
        PendingRow(pod_id=p.id, name=p.workload.name, namespace=p.workload.namespace, owner=p.workload.owner,
                   labels=p.workload.labels or {}, constraints=p.workload.constraints or {},
                   request=p.workload.request, priority=p.workload.priority, queued_s=p.queued_s,
                   gang=p.gang, min_member=p.min_member, gang_running=running.get(p.gang, 0) if p.gang else 0,
                   image=p.image)
        for p in pods
    ]


def pending_pods(*, cluster: Cluster) -> QuerySet[BatchPod]:
    """Pending pods with their why-pending record, oldest first (console and API; 1 query)."""
    return (BatchPod.objects.filter(cluster=cluster, state=BatchPod.PENDING)
            .select_related("workload", "why_pending").order_by("queued_s", "id"))


def batch_pod(*, cluster: Cluster, name: str) -> BatchPod:
    """One batch pod by workload name.

    Raises:
        BatchPod.DoesNotExist: no such pod in the cluster.
    """
    return BatchPod.objects.select_related("workload", "workload__node", "why_pending").get(
        cluster=cluster, workload__name=name)


def why_pending(*, pod: BatchPod) -> WhyPending | None:
    return getattr(pod, "why_pending", None)
