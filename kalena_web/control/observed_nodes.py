"""Nodes the orchestrator's watch reports (docs/design.md §14), applied by
:mod:`kalena_web.control.reconciler`: a node seen (readiness, cordon, allocatable, labels,
taints, cached images) or gone, one at a time or a re-list's batch at once; and
:class:`ObservationRejected`, the answer to a watch event Kalena cannot apply (also for the
production pods of :mod:`kalena_web.control.observed_production`)."""

from __future__ import annotations

import math

from django.db import transaction

from kalena_engine.errors import InputError
from kalena_web.control.models import NodeCondition
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.bulk import update_by_id


class ObservationRejected(InputError):
    """A watch event Kalena cannot apply (malformed name or vector); nothing was changed."""


def observed_vector(values, field_name: str) -> list[float]:
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
    reported = observed_vector(allocatable, "allocatable")
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
            reported = observed_vector(d["allocatable"], "allocatable")
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
            reported = observed_vector(d["allocatable"], "allocatable")
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
