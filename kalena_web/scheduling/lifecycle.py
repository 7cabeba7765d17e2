"""A batch pod's life after it was queued: requeued, dropped, evicted, finished or gone — each
leaves the node's ledger at once (docs/design.md §9, §14). The watch's reconciler, the escalation loop,
the archive's eviction records and the binder call these."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

import numpy as np
from django.db import transaction

from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.scheduling.bulk import update_by_id
from kalena_web.scheduling.models import BatchPod, WhyPending

log = logging.getLogger(__name__)

#: the backoff after a refused binding: ``BACKOFF_BASE_S`` doubled per refusal in a row, at most
#: ``BACKOFF_MAX_S`` — the kubelet's image-pull / crash-loop backoff (10 s → 300 s); kube-scheduler's
#: own pod backoff (1 s → 10 s) is shorter than one Celery pass (5 s), so it would retry every pass
BACKOFF_BASE_S, BACKOFF_MAX_S = 10.0, 300.0
#: how long a node that refused to run a pod is avoided for it while another node fits
AVOID_S = 600.0


def bind_backoff_s(refusals: int) -> float:
    """Seconds to wait before the next attempt after ``refusals`` (≥ 1) refused bindings in a
    row: 10, 20, 40, 80, 160, 300, 300, … s."""
    return min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2.0 ** max(0, refusals - 1))


def batch_drop(*, pod: BatchPod, now_s: float, reason: str, uid: str = "") -> None:
    """The orchestrator refused a watched pod's binding because the world moved on (409
    already assigned, or another object under its name — the Binding's uid precondition — 404
    gone): the debit is undone and the pod leaves the queue — it is never bound again (no
    loop). The watch reports where it actually runs (adopted by :func:`~kalena_web.scheduling.observe.batch_observe_running`),
    that it is gone, or the new object under its name (queued and decided afresh). When the
    watch has already reported it running on a node (adopted there before the refusal's answer
    came back), or already queued the new object of that name (the row holds another ``uid``
    than the binding's), the refusal is stale news and nothing changes."""
    with transaction.atomic():
        pod = BatchPod.objects.select_for_update(of=("self",), no_key=True).select_related("workload").get(id=pod.id)
        if pod.state in BatchPod.TERMINAL or (uid and pod.uid and pod.uid != uid):
            return
        if pod.state == BatchPod.BOUND and pod.running_s is not None and pod.workload.node_id is not None:
            return
        if pod.state == BatchPod.BOUND and pod.workload.node_id is not None:
            ledger_credit(pod, pod.workload.node_id)
        Workload.objects.filter(id=pod.workload_id).update(node_id=None, start_s=None)
        WorkloadReservation.objects.filter(workload_id=pod.workload_id).delete()
        WhyPending.objects.filter(pod=pod).delete()
        BatchPod.objects.filter(id=pod.id).update(state=BatchPod.DELETED, ended_s=now_s, bound_s=None,
                                                  outcome="dropped", reason=reason[:300])


def batch_requeue(*, pod: BatchPod, now_s: float, reason: str) -> None:
    """Take a bound pod off its node (evicted, or its binding refused): its request leaves the
    node's ledger at once (terminated workloads never count) and it is pending again, from
    scratch (no migration): not running, ``reason`` kept as why it was requeued."""
    with transaction.atomic():
        pod = BatchPod.objects.select_for_update(of=("self",), no_key=True).select_related("workload").get(id=pod.id)
        if pod.state != BatchPod.BOUND or pod.workload.node_id is None:
            return
        ledger_credit(pod, pod.workload.node_id)
        Workload.objects.filter(id=pod.workload_id).update(node_id=None, start_s=None)
        WorkloadReservation.objects.filter(workload_id=pod.workload_id).delete()
        BatchPod.objects.filter(id=pod.id).update(state=BatchPod.PENDING, queued_s=now_s, bound_s=None,
                                                  bound_version=None, running_s=None, admitted_s=None,
                                                  reason=reason[:300],
                                                  requeues=pod.requeues + 1)


def batch_bind_refused(*, pod: BatchPod, now_s: float, error: str) -> None:
    """The orchestrator refused to bind or run a bound pod on its node (Docker: the engine could
    not pull or create its container). As :func:`batch_requeue`, and: ``error`` (the engine's
    words) becomes the pod's reason and its why-pending record (``binding`` ``bind_refused``,
    ``refused`` naming each node that refused it and until when it is avoided, ``retry_s``);
    the pod waits :func:`bind_backoff_s` before it is tried again (``retry_s``, kept in the
    record, so a restarted scheduler keeps the backoff); the refusing node is avoided for it
    for ``AVOID_S`` while another node fits (:func:`~kalena_web.scheduling.cycle.prefer_other_nodes`).
    The console log says it once per pod, node and error."""
    with transaction.atomic():
        pod = BatchPod.objects.select_for_update(of=("self",), no_key=True).select_related("workload").get(id=pod.id)
        if pod.state != BatchPod.BOUND or pod.workload.node_id is None:
            return
        node = Node.objects.filter(id=pod.workload.node_id).values_list("name", flat=True).first() or ""
        refusals = pod.refusals + 1
        retry_s = now_s + bind_backoff_s(refusals)
        refused_on = {name: v for name, v in (pod.refused_on or {}).items()
                      if isinstance(v, dict) and v.get("until_s", 0.0) > now_s}
        told = (pod.refused_on or {}).get(node, {}).get("error") == error
        refused_on[node] = {"until_s": now_s + AVOID_S, "error": error[:300]}
        batch_requeue(pod=pod, now_s=now_s, reason=error)
        BatchPod.objects.filter(id=pod.id).update(refusals=refusals, retry_s=retry_s, refused_on=refused_on)
        record = {"binding": "bind_refused", "nodes_total": 0, "excluded": {}, "shortfall": [], "rejections": [],
                  "refused": refusal_list(refused_on), "retry_s": retry_s, "refusals": refusals}
        WhyPending.objects.update_or_create(pod=pod, defaults={"time_s": now_s, "binding": "bind_refused",
                                                               "record": record})
    if not told:
        log.warning("batch pod %s: %s refused to run it (%s); next attempt in %g s, %s avoided for it for %g s "
                    "while another node fits", pod.workload.name, node, error, retry_s - now_s, node, AVOID_S)


def refusal_list(refused_on: dict) -> list[dict]:
    """``refused_on`` (node → {until_s, error}) as the why-pending record's ``refused`` list,
    the latest first: ``[{node, until_s, error}]``."""
    return [{"node": n, "until_s": v["until_s"], "error": v.get("error", "")}
            for n, v in sorted(refused_on.items(), key=lambda kv: -kv[1]["until_s"])]


def batch_requeue_many(*, pods: Sequence[BatchPod], now_s: float, reason: str) -> int:
    """:func:`batch_requeue` for many pods in one transaction (a fixed number of queries; a
    scheduler whose lease lapsed mid-pass gives back everything it had not bound yet). Pods no
    longer bound are left as they are. Returns how many were requeued."""
    from django.db.models import F

    if not pods:
        return 0
    with transaction.atomic():
        locked = [p for p in BatchPod.objects.select_for_update(of=("self",), no_key=True).select_related("workload")
                  .filter(id__any=[p.id for p in pods]).order_by("id")
                  if p.state == BatchPod.BOUND and p.workload.node_id is not None]
        if not locked:
            return 0
        workload_ids = [p.workload_id for p in locked]
        reserved = dict(WorkloadReservation.objects.filter(workload_id__any=workload_ids)
                        .values_list("workload_id", "value"))
        ledgers = {led.node_id: led for led in LiveNodeLedger.objects.select_for_update().filter(
            node_id__any={p.workload.node_id for p in locked}).order_by("node_id")}
        for pod in locked:  # as _credit, node by node (clamping at 0 once equals clamping each time)
            led = ledgers[pod.workload.node_id]
            request = np.asarray(pod.workload.request)
            r = np.asarray(reserved[pod.workload_id]) if pod.workload_id in reserved else request
            led.batch_request = (np.asarray(led.batch_request) - request).tolist()
            led.batch_reservation = (np.asarray(led.batch_reservation) - r).tolist()
        for led in ledgers.values():
            led.batch_request = np.maximum(0.0, led.batch_request).tolist()
            led.batch_reservation = np.maximum(0.0, led.batch_reservation).tolist()
            led.version += 1
        update_by_id(LiveNodeLedger._meta.db_table, [("batch_request", "vector"), ("batch_reservation", "vector"),
                                                      ("version", "int")],
                      [(led.id, led.batch_request, led.batch_reservation, led.version) for led in ledgers.values()])
        Workload.objects.filter(id__any=workload_ids).update(node_id=None, start_s=None)
        WorkloadReservation.objects.filter(workload_id__any=workload_ids).delete()
        BatchPod.objects.filter(id__any=[p.id for p in locked]).update(
            state=BatchPod.PENDING, queued_s=now_s, bound_s=None, bound_version=None, running_s=None, admitted_s=None,
            reason=reason[:300], requeues=F("requeues") + 1)
    return len(locked)


def batch_finish(*, pod: BatchPod, now_s: float, state: str = BatchPod.COMPLETED, outcome: str = "",
                 reason: str = "", by_hand: bool = False) -> bool:
    """A pod ended (completed, refused at admission, deleted): it leaves every ledger at once
    and the queue. Finishing a finished pod changes nothing; returns whether anything changed.
    The audit entry's actor is the reconciler loop, or with ``by_hand`` the request's user or
    the command line."""
    with transaction.atomic():
        pod = BatchPod.objects.select_for_update(of=("self",), no_key=True).select_related("workload").get(id=pod.id)
        if pod.state in BatchPod.TERMINAL:
            return False
        ran_on = ""
        if pod.state == BatchPod.BOUND and pod.workload.node_id is not None:
            ledger_credit(pod, pod.workload.node_id)
            ran_on = Node.objects.filter(id=pod.workload.node_id).values_list("name", flat=True).first() or ""
        Workload.objects.filter(id=pod.workload_id).update(node_id=None)
        WorkloadReservation.objects.filter(workload_id=pod.workload_id).delete()
        WhyPending.objects.filter(pod=pod).delete()
        BatchPod.objects.filter(id=pod.id).update(state=state, ended_s=now_s, outcome=outcome,
                                                  reason=reason[:300] or pod.reason, ran_on=ran_on)
        from kalena_web.policy.audit import audit

        action = {BatchPod.DELETED: "delete", BatchPod.COMPLETED: "complete"}.get(state, state)
        audit(f"batch.{action}", cluster_name=pod.cluster.name, target=pod.workload.name,
              before={"state": pod.state}, after={"state": state, **({"outcome": outcome} if outcome else {})},
              **({} if by_hand else {"actor_kind": "loop", "actor": "reconciler"}))
    return True


def batch_evicted(*, pod: BatchPod, now_s: float, reason: str) -> None:
    """A bound pod was evicted (by an agent, a drain, the orchestrator). A submitted pod is
    requeued from scratch; a watched pod object is terminal (docs/design.md §14: its owner's
    replacement is a new pod the watch queues) and leaves every ledger and the queue."""
    if pod.source == BatchPod.WATCH:
        batch_finish(pod=pod, now_s=now_s, outcome="evicted", reason=reason)
    else:
        batch_requeue(pod=pod, now_s=now_s, reason=reason)


def ledger_credit(pod: BatchPod, node_id: int) -> None:
    ledger = LiveNodeLedger.objects.select_for_update().get(node_id=node_id)
    reservation = WorkloadReservation.objects.filter(workload_id=pod.workload_id).values_list("value", flat=True).first()
    request = np.asarray(pod.workload.request)
    r = np.asarray(reservation) if reservation is not None else request
    ledger.batch_request = np.maximum(0.0, np.asarray(ledger.batch_request) - request).tolist()
    ledger.batch_reservation = np.maximum(0.0, np.asarray(ledger.batch_reservation) - r).tolist()
    ledger.version += 1
    ledger.save(update_fields=["batch_request", "batch_reservation", "version"])


def batch_gone(*, pod: BatchPod, now_s: float, reason: str = "deleted") -> bool:
    """The pod object no longer exists: it leaves every ledger and the queue at once (deleted,
    unless it had ended already) and is marked gone; returns whether anything changed."""
    changed = batch_finish(pod=pod, now_s=now_s, state=BatchPod.DELETED, outcome="gone", reason=reason)
    marked = BatchPod.objects.filter(id=pod.id, gone=False).update(gone=True)
    return changed or bool(marked)


UNCONFIRMED_S = 30.0  # a binding the watch has not confirmed this long after it was made is checked


def batch_unconfirmed(*, cluster: Cluster, now_s: float, older_than_s: float = UNCONFIRMED_S,
                      limit: int = 100, skip: Collection[int] = ()) -> list[BatchPod]:
    """Watched pods Kalena bound more than ``older_than_s`` ago that the watch never reported
    on a node (no ``PodRunning``), oldest first: their binding call may never have reached the
    orchestrator (a scheduler died between its ledger commit and the call, a timeout). The
    caller asks the orchestrator where each one is and settles it with
    :func:`~kalena_web.scheduling.observe.batch_observe_running`, :func:`batch_requeue` or :func:`batch_gone` (1 query).
    ``skip``: ids whose binding the orchestrator acknowledged (the scheduler's cache,
    :meth:`~kalena_web.scheduling.cache.SchedulerCache.acknowledge`): left out, and the ``limit``
    counts the others (then 2 queries: the ids, then the rows)."""
    unconfirmed = BatchPod.objects.filter(cluster=cluster, source=BatchPod.WATCH, state=BatchPod.BOUND,
                                          running_s__isnull=True, bound_s__lt=now_s - older_than_s)
    if skip:
        ids = [i for i in unconfirmed.order_by("bound_s", "id").values_list("id", flat=True) if i not in skip][:limit]
        if not ids:
            return []
        unconfirmed = BatchPod.objects.filter(id__any=ids)
    return list(unconfirmed.select_related("workload").order_by("bound_s", "id")[:limit])
