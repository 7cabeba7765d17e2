"""Tester 10: "never lose … a pod" across a 410 re-list (case C9's mechanism) when a pod Kalena
holds was deleted and a new pod of the same name created while the watch was away (a user
re-applying a manifest, a StatefulSet-style controller)."""

from __future__ import annotations

import queue
import threading

from agents.orchestrators.kubernetes.watch import KubernetesWatcher
from kalena_web.scheduling.models import BatchPod
from tests.web.kubernetes.test_live_kubernetes import (  # noqa: F401 - fixture
    _apply_until, _collect, api, job_pod, orchestrator, wait_for,
)


def test_a_pod_replaced_under_the_same_name_while_the_watch_was_away_is_queued_again(live, api) -> None:
    """Observed: ``s-0`` was bound on thinkcentre-alpha and running; while the watch was down it
    was deleted and a new ``s-0`` (pending, no node) created; the watch's 410 re-list reports it
    as PodPending, which the reconciler ignores ("a pod already queued, bound or ended is never
    queued again"), and the Resynced keeps it (its name is listed): Kalena goes on holding the
    old object as bound and running on thinkcentre-alpha, with its reservation, and the new pod
    is never queued nor bound. The watch events carry no uid, so a replacement under the same
    name cannot be told from the old object. Expected: the new object queued (pending)."""
    api.create_pod(job_pod("s-0"))
    watcher = KubernetesWatcher(orchestrator(api), watch_timeout_s=30, backoff_s=0.05,
                                sleep=lambda s, stop: stop.wait(0.05))
    stop, events = threading.Event(), queue.Queue()
    from kalena_web.control.reconciler import Reconciler

    rec = Reconciler(cluster=live)
    thread = _collect(watcher, stop, events)
    try:
        _apply_until(rec, events, lambda: BatchPod.objects.filter(workload__name="batch/s-0", state="pending").exists(),
                     "s-0 queued")
        api.store.mutate("pods", "batch/s-0", lambda p: p["spec"].update(nodeName="thinkcentre-alpha"))
        api.set_pod_phase("batch/s-0", "Running")
        _apply_until(rec, events, lambda: BatchPod.objects.filter(workload__name="batch/s-0", state="bound",
                                                                  running_s__isnull=False).exists(), "s-0 running")
        api.fault("GET", r"^/api/v1/pods$", code=503, reason="ServiceUnavailable", times=10**6)
        api.drop_watches()  # the watch is away
        wait_for(lambda: watcher.reconnects["pods"] >= 1, "pods watch down")
        api.delete_pod("batch/s-0")
        api.create_pod(job_pod("s-0"))  # a new object, same name: pending, no node
        api.compact()
        api._faults.clear()
        _apply_until(rec, events, lambda: watcher.lists["pods"] >= 2 and watcher.expired["pods"] >= 1, "re-listed")
        _apply_until(rec, events, lambda: events.empty(), "the re-list applied")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not api.get("pods", "batch/s-0")["spec"].get("nodeName")  # Kubernetes: pending, no node
    pod = BatchPod.objects.select_related("workload__node").get(workload__name="batch/s-0")
    assert pod.state == "pending", (pod.state, pod.workload.node and pod.workload.node.name)
