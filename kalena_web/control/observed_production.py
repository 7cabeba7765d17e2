"""Production pods the orchestrator's watch reports (docs/design.md §14, §15), applied by
:mod:`kalena_web.control.reconciler`: each live pod joined to its blueprint entry by owner and
replica, its claim kept in :class:`~kalena_web.control.models.ProductionPlacement`, and charged
where it really runs (a fidelity finding when that is not the blueprint's node); a pod that
maps to no entry is an explained extra, charged once; a pod gone releases its entry."""

from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np
from django.db import transaction

from kalena_engine.errors import InputError
from kalena_engine.kuberina.identity import (
    BLUEPRINT_POD_LABEL, DAEMONSET, MAPPED, MOVED, LivePod, daemonset_extra, production_identity,
)
from kalena_engine.overrides import KEYS, RECLAIM
from kalena_engine.placement.selectors import anti_affinity_terms_of
from kalena_web.control.identity import entries_for, is_entry, live_overrides, with_overrides
from kalena_web.control.models import ProductionPlacement
from kalena_web.control.observed_nodes import ObservationRejected, observed_vector
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation


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
    req, lim = observed_vector(request, "requests"), observed_vector(limit, "limits")
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


def _locked_claim(cluster: Cluster, ref: str) -> tuple[ProductionPlacement, Workload | None] | None:
    """Inside a transaction: pod ``ref``'s claim, locked, with its entry's workload locked —
    ``None`` when it holds no claim; an extra's claim (or one with no blueprint node) is released
    here and comes back with no workload."""
    claim = (ProductionPlacement.objects.select_for_update(of=("self",)).filter(workload__cluster=cluster, pod=ref)
             .select_related("workload").first())
    if claim is None:
        return None
    if claim.identity == ProductionPlacement.EXTRA or claim.blueprint_node_id is None:
        _extra_release(claim)
        return claim, None
    return claim, Workload.objects.select_for_update(no_key=True).get(id=claim.workload_id)


def _claim_unplaced(cluster: Cluster, ref: str, *, at_s: float) -> bool:
    """The pod ``ref`` is reported with no node (see :func:`production_observe`): an extra's
    charge leaves; a claim holder's entry goes back to its blueprint node, claim kept. Returns
    whether anything changed."""
    with transaction.atomic():
        held = _locked_claim(cluster, ref)
        if held is None:
            return False
        claim, workload = held
        if workload is None:
            return True
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
        held = _locked_claim(cluster, ref)
        if held is None:
            return False
        claim, workload = held
        if workload is None:
            return True
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
