"""Pods the orchestrator's watch reports (docs/design.md §14), applied by
:mod:`kalena_web.control.reconciler`: queued when pending, noted or adopted when running."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from django.db import transaction

from kalena_engine.errors import InputError
from kalena_engine.resources import DIM_INDEX
from kalena_web.inventory.models import Cluster, Workload
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.scheduling import mappers
from kalena_web.scheduling.bulk import update_by_id
from kalena_web.scheduling.checks import NAME_MAX, POD_NAME, BatchRejected, check_pending, vector8
from kalena_web.scheduling.lifecycle import batch_gone, ledger_credit
from kalena_web.scheduling.models import BatchPod, WhyPending


def batch_observe_pending(*, cluster: Cluster, ref: str, request: Sequence[float], limit: Sequence[float],
                          labels: Mapping[str, str], priority: int, owner: str, gang: str = "",
                          min_member: int | None = None, image: str = "", constraints: Mapping[str, Any] | None = None,
                          grace_s: float = 30.0, uid: str = "", at_s: float, now_s: float) -> tuple[BatchPod, bool]:
    """Queue a pod the watch reports pending (the same queue :func:`batch_submit` feeds).

    Idempotent: a pod already queued, bound or ended is left as it is (its object cannot be
    pending again); a pod submitted through REST under the same name is adopted (one queue
    entry, never two); a pod whose object was gone and that reappears under its name is a new
    object, queued afresh — also when the deletion was missed (the watch was away), told by its
    ``uid`` (:func:`_replaced`); any eviction retry of the old object is dropped. ``at_s`` (its
    creation time) orders the queue. Returns the pod and whether anything changed.

    Raises:
        BatchRejected: a malformed name, vector, priority, owner, image or constraints —
            naming the field; nothing is stored.
    """
    if not isinstance(ref, str) or not POD_NAME.fullmatch(ref) or len(ref) > NAME_MAX:
        raise BatchRejected(f"{ref!r} is not namespace/pod", field="ref", accepted="namespace/pod (DNS-1123)")
    req, lim = vector8(request, "requests"), vector8(limit, "limits")
    if not isinstance(priority, int) or isinstance(priority, bool) or priority < 0:
        raise BatchRejected(f"{priority!r} is not a non-negative integer", field="priority")
    if req[DIM_INDEX["cpu"]] <= 0 and req[DIM_INDEX["ram"]] <= 0:
        raise BatchRejected("a batch pod must request cpu or ram", field="requests", accepted="cpu > 0 or ram > 0")
    lim = [max(lv, rv) if lv else rv for lv, rv in zip(lim, req, strict=True)]  # no limit: limit = request
    for field_name, text, longest in (("owner", owner, 200), ("image", image, 300), ("gang", gang, 200)):
        if not isinstance(text, str) or "\x00" in text or len(text) > longest:
            raise BatchRejected(f"{str(text)[:40]!r} is not a string of at most {longest} characters", field=field_name)
    if not isinstance(grace_s, int | float) or not math.isfinite(grace_s) or grace_s < 0:
        raise BatchRejected(f"{grace_s!r} is not a grace in seconds", field="grace_s")
    namespace = ref.split("/", 1)[0]
    constraints = dict(constraints or {})
    mappers.template_of(owner=owner, namespace=namespace, labels=labels or {}, constraints=constraints,
                        min_member=min_member)  # raises InputError on malformed constraints
    owner = owner or ref
    fields = dict(namespace=namespace, owner=owner, tier="batch", priority=priority, request=req, limit=lim,
                  labels={**dict(labels or {}), "kalena.naughtian.io/tier": "batch"}, constraints=constraints)
    queued_s = at_s or now_s
    with transaction.atomic():
        workload = (Workload.objects.select_for_update(of=("self",), no_key=True)
                    .filter(cluster=cluster, kind=Workload.BATCH, name=ref).select_related("batch").first())
        if workload is None:
            workload = Workload.objects.create(
                cluster=cluster, kind=Workload.BATCH, name=ref, instances=1,
                row=Workload.objects.filter(cluster=cluster, kind=Workload.BATCH).count(), **fields)
            pod = BatchPod.objects.create(cluster=cluster, workload=workload, image=image, gang=gang,
                                          min_member=min_member, submitted_s=queued_s, queued_s=queued_s,
                                          source=BatchPod.WATCH, grace_s=float(grace_s), uid=uid)
            return pod, True
        pod = workload.batch
        replaced = _replaced(pod.source, pod.state, pod.running_s, pod.submitted_s, at_s, pod.uid, uid)
        if replaced and not pod.gone:  # the old object went while the watch was away: it leaves every ledger
            batch_gone(pod=pod, now_s=now_s, reason="replaced by a new pod of the same name")
        if pod.gone or replaced or (pod.source == BatchPod.REST and pod.state in BatchPod.TERMINAL):
            from kalena_web.control.escalation import eviction_retry_settle

            pod.refresh_from_db()
            eviction_retry_settle(pod=pod, now_s=now_s)  # a retry was for the old object, never the new one
            Workload.objects.filter(id=workload.id).update(node=None, start_s=None, **fields)
            BatchPod.objects.filter(id=pod.id).update(
                state=BatchPod.PENDING, source=BatchPod.WATCH, gone=False, outcome="", reason="", image=image,
                gang=gang, min_member=min_member, submitted_s=queued_s, queued_s=queued_s, bound_s=None,
                ended_s=None, bound_version=None, running_s=None, admitted_s=None, noticed_s=None, requeues=0,
                grace_s=float(grace_s),
                uid=uid, ran_on="")
            pod.refresh_from_db()
            return pod, True
        if pod.source == BatchPod.REST and pod.state in (BatchPod.PENDING, BatchPod.BOUND):
            BatchPod.objects.filter(id=pod.id).update(source=BatchPod.WATCH, grace_s=float(grace_s), uid=uid,
                                                      submitted_s=at_s or pod.submitted_s)
            pod.source = BatchPod.WATCH
            return pod, True
        if uid and not pod.uid:  # known from now on
            BatchPod.objects.filter(id=pod.id).update(uid=uid)
        return pod, False


def _replaced(source: str, state: str, running_s: float | None, submitted_s: float, at_s: float,
              held_uid: str = "", uid: str = "") -> bool:
    """Whether a pending report for a watched pod Kalena holds is a new object under the same
    name (the old one deleted while the watch was away, its DELETED never seen). Their
    ``metadata.uid`` decide when both are known (rows stored before the uid was kept have
    none). Otherwise: a bound pod only when it was seen running on a node (a pod's node never
    changes, so it cannot be pending again); a queued or ended one when the report's object was
    created after it (``at_s``, its creationTimestamp, is immutable; 0 when unknown)."""
    if source != BatchPod.WATCH:
        return False
    if held_uid and uid:
        return held_uid != uid
    if state == BatchPod.BOUND:  # never unbind on a guess: only an object seen on a node is surely another
        return running_s is not None
    return at_s > 0 and at_s > submitted_s


def _debit(pod: BatchPod, node_id: int) -> None:
    ledger = LiveNodeLedger.objects.select_for_update().get(node_id=node_id)
    request = np.asarray(pod.workload.request)
    ledger.batch_request = (np.asarray(ledger.batch_request) + request).tolist()
    ledger.batch_reservation = (np.asarray(ledger.batch_reservation) + request).tolist()
    ledger.version += 1
    ledger.save(update_fields=["batch_request", "batch_reservation", "version"])


def batch_observe_running(*, pod: BatchPod, node_id: int, at_s: float, now_s: float, admitted: bool = True) -> bool:
    """The watch reports ``pod`` on the node ``node_id`` (``admitted``: the node accepted it, see
    :class:`~agents.orchestrators.events.PodRunning`); returns whether anything changed.

    Bound there already: its running time is noted (once), and its admission (once, as
    ``admitted_s``: from then on it counts in the published batch floor). Pending, or dropped after a refused
    binding: it is adopted on that node — its request debits the node's ledger at once, as an
    in-flight placement (someone else bound it; it uses the node either way). Bound elsewhere:
    the debit moves with it. Ended: nothing changes (a terminal object never runs again).
    """
    with transaction.atomic():
        pod = BatchPod.objects.select_for_update(of=("self",), no_key=True).select_related("workload").get(id=pod.id)
        dropped = pod.state == BatchPod.DELETED and pod.outcome == "dropped" and not pod.gone
        if (pod.state in BatchPod.TERMINAL and not dropped) or pod.gone:
            return False
        w = pod.workload
        if pod.state == BatchPod.BOUND and w.node_id == node_id:
            noted = {} if pod.running_s is not None else {"running_s": at_s or now_s}
            if admitted and pod.admitted_s is None:
                noted["admitted_s"] = now_s
            if not noted:
                return False
            BatchPod.objects.filter(id=pod.id).update(**noted)
            return True
        if pod.state == BatchPod.BOUND and w.node_id is not None:
            ledger_credit(pod, w.node_id)
        _debit(pod, node_id)
        Workload.objects.filter(id=w.id).update(node_id=node_id, start_s=at_s or now_s)
        WorkloadReservation.objects.update_or_create(
            workload_id=w.id, defaults={"value": w.request, "updated_s": now_s, "last_sample_s": None})
        WhyPending.objects.filter(pod=pod).delete()
        BatchPod.objects.filter(id=pod.id).update(state=BatchPod.BOUND, bound_s=pod.bound_s or now_s,
                                                  running_s=at_s or now_s, outcome="", ended_s=None,
                                                  admitted_s=now_s if admitted else None)
        return True


def batch_observe_pending_many(*, cluster: Cluster, pods: Sequence[Mapping[str, Any]], now_s: float,
                               created: list | None = None) -> list[bool | BatchRejected]:
    """:func:`batch_observe_pending` for many pods (keyword dicts of its arguments) with a fixed
    number of queries for the common cases — names Kalena does not hold yet, created in bulk, and
    watched pods it holds already (a re-list repeats every pending pod: valid, they change
    nothing); the others (gone, or submitted through REST) go one by one. Returns, per pod,
    whether it changed anything or the :class:`BatchRejected` that refused it (nothing stored
    for that pod). ``created``: gets the :class:`BatchPod` rows created in bulk (ids set, their
    ``workload`` loaded) — what the watch feeds the scheduler's cache."""
    out: list[bool | BatchRejected] = [False] * len(pods)
    names = [p.get("ref") for p in pods]
    held = {row[0]: row[1:] for row in Workload.objects.filter(  # (source, gone, state, running_s, submitted_s, uid)
        cluster=cluster, kind=Workload.BATCH, name__any=names).values_list(
        "name", "batch__source", "batch__gone", "batch__state", "batch__running_s", "batch__submitted_s",
        "batch__uid")}
    existing = set(held)
    fresh, seen = [], set()
    for i, p in enumerate(pods):
        if p.get("ref") in existing or p.get("ref") in seen:
            continue
        try:
            check_pending(**p)
        except InputError as exc:
            out[i] = exc if isinstance(exc, BatchRejected) else BatchRejected(exc.problem, field=exc.field,
                                                                                 accepted=exc.accepted)
            seen.add(p.get("ref"))
            continue
        seen.add(p["ref"])
        fresh.append(i)
    if fresh:
        with transaction.atomic():
            row = Workload.objects.filter(cluster=cluster, kind=Workload.BATCH).count()
            workloads = []
            for k, i in enumerate(fresh):
                p = pods[i]
                req, lim = vector8(p["request"], "requests"), vector8(p["limit"], "limits")
                workloads.append(Workload(
                    cluster=cluster, kind=Workload.BATCH, name=p["ref"], instances=1, row=row + k,
                    namespace=p["ref"].split("/", 1)[0], owner=p.get("owner") or p["ref"], tier="batch",
                    priority=p.get("priority", 0), request=req,
                    limit=[max(lv, rv) if lv else rv for lv, rv in zip(lim, req, strict=True)],
                    labels={**dict(p.get("labels") or {}), "kalena.naughtian.io/tier": "batch"},
                    constraints=dict(p.get("constraints") or {})))
            Workload.objects.bulk_create(workloads, batch_size=1000)
            made = BatchPod.objects.bulk_create([
                BatchPod(cluster=cluster, workload=w, image=pods[i].get("image", ""), gang=pods[i].get("gang", ""),
                         min_member=pods[i].get("min_member"), submitted_s=pods[i].get("at_s") or now_s,
                         queued_s=pods[i].get("at_s") or now_s, source=BatchPod.WATCH,
                         grace_s=float(pods[i].get("grace_s", 30.0)), uid=pods[i].get("uid") or "")
                for w, i in zip(workloads, fresh, strict=True)], batch_size=1000)
        if created is not None:
            created += made
        for i in fresh:
            out[i] = True
    fresh_set = set(fresh)
    for i, p in enumerate(pods):
        if i in fresh_set or isinstance(out[i], BatchRejected):
            continue
        if p.get("ref") in existing:
            source, gone, state, running_s, submitted_s, held_uid = held[p["ref"]]
            uid = p.get("uid") or ""
            if source == BatchPod.WATCH and not gone and (not uid or held_uid) and not _replaced(
                    source, state, running_s, submitted_s, p.get("at_s") or 0.0, held_uid, uid):  # unchanged
                try:
                    check_pending(**p)
                    out[i] = False
                except InputError as exc:
                    out[i] = exc if isinstance(exc, BatchRejected) else BatchRejected(
                        exc.problem, field=exc.field, accepted=exc.accepted)
                continue
            try:
                out[i] = batch_observe_pending(cluster=cluster, now_s=now_s, **p)[1]
            except BatchRejected as exc:
                out[i] = exc
    return out


def batch_observe_running_many(*, cluster: Cluster, reports: Sequence[tuple[str, int, float, bool]], now_s: float,
                               ) -> list[bool | None]:
    """:func:`batch_observe_running` for many ``(ref, node_id, at_s, admitted)``: the common
    case (bound there, running or admission not yet noted) in one update; the rest one by one.
    Returns per report whether it changed anything, None for a pod Kalena does not hold."""
    # key columns only (no model instance per pod): the common case needs nothing more
    held = {row[0]: row[1:] for row in BatchPod.objects.filter(
        cluster=cluster, workload__name__any=[r[0] for r in reports]).values_list(
        "workload__name", "id", "state", "workload__node_id", "gone", "running_s", "admitted_s")}
    out: list[bool | None] = [None] * len(reports)
    quick: dict[int, tuple[float | None, float | None]] = {}
    for i, (ref, node_id, at_s, admitted) in enumerate(reports):
        if ref not in held:
            continue
        pod_id, state, on_node, gone, pod_running_s, pod_admitted_s = held[ref]
        if state == BatchPod.BOUND and on_node == node_id and not gone:
            running_s, admitted_s = quick.get(pod_id, (pod_running_s, pod_admitted_s))
            new = (running_s if running_s is not None else at_s or now_s,
                   admitted_s if admitted_s is not None or not admitted else now_s)
            out[i] = new != (running_s, admitted_s)
            if out[i]:
                quick[pod_id] = new
            continue
        pod = BatchPod.objects.select_related("workload").get(id=pod_id)
        out[i] = batch_observe_running(pod=pod, node_id=node_id, at_s=at_s, now_s=now_s, admitted=admitted)
    if quick:
        update_by_id(BatchPod._meta.db_table, [("running_s", "float"), ("admitted_s", "float")],
                      [(k, *v) for k, v in quick.items()])
    return out

