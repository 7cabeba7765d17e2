"""Tester 10b: D2b's fix re-checked with an eviction that times out but lands (the API performs
it after Kalena gave up waiting). Case C12's setup, as in test_tester10_eviction_failure.py."""

from __future__ import annotations

import time

from agents.orchestrators.kubernetes.teststore import APIError
from agents.orchestrators.kubernetes.watch import KubernetesWatcher
from kalena_engine.resources import GIB
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.escalation import escalation_pass, eviction_retries_run
from kalena_web.control.reconciler import Reconciler
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.scheduling.models import BatchPod
from tests.web.kubernetes.test_live_kubernetes import api, job_pod, orchestrator  # noqa: F401 - fixture


def _pod(api, key: str) -> dict | None:
    try:
        return api.get("pods", key)
    except APIError:
        return None


def running_pod(live, api):
    """Case C12's pod: ``batch/p-0`` (2 cores / 4 GiB) watched, bound on thinkcentre-alpha and
    Running, with a 0.5 s API timeout; returns ``(node, orchestrator, watcher, reconciler, pod)``."""
    n = "thinkcentre-alpha"
    core = orchestrator(api)
    core.timeout_s = 0.5
    watcher = KubernetesWatcher(core)
    rec = Reconciler(cluster=live, clock=lambda: 1000.0)
    api.create_pod(job_pod("p-0", owner="etl", cpu="2", memory="4Gi", labels={"job": "etl"}))
    rec.apply_all(watcher._translate("pods", "ADDED", api.get("pods", "batch/p-0")))
    api.store.mutate("pods", "batch/p-0", lambda p: p["spec"].update(nodeName=n))
    api.set_pod_phase("batch/p-0", "Running")
    rec.apply_all(watcher._translate("pods", "MODIFIED", api.get("pods", "batch/p-0")))
    return n, core, watcher, rec, BatchPod.objects.select_related("workload").get(workload__name="batch/p-0")


def test_a_retry_of_an_eviction_that_landed_late_never_evicts_the_replacement_pod(live, api) -> None:
    """The escalation's Eviction of ``p-0`` is answered after the 0.5 s timeout but performed:
    Kalena schedules an EvictionRetry (D2b's fix). The pod goes (DELETED), its controller makes a
    new ``p-0`` (a StatefulSet-style name), and it is running on a node before the retry is due.
    Observed: the retry is keyed on the BatchPod row, which the new object reuses, and the Eviction
    names the pod only (no ``deleteOptions.preconditions.uid``): the retry evicts the *new* pod,
    which did nothing. Expected: the retry ends with the object it was for; the new pod runs on."""
    n, core, watcher, rec, p = running_pod(live, api)
    reservation = [2000.0, 4.6 * GIB] + [0.0] * 6
    WorkloadReservation.objects.filter(workload=p.workload).update(value=reservation, last_sample_s=1000.0)
    LiveNodeLedger.objects.filter(node=p.workload.node).update(batch_reservation=reservation)
    for i, t in enumerate((1100.0, 1250.0, 1390.0)):  # 3 evictions within 300 s → N escalates (C12)
        EvictionRecord.objects.create(cluster=live, node=p.workload.node, workload_name=f"batch/x-{i}", time_s=t,
                                      cause="priority", source_key=f"agent:t10b:{i}")
    api.fault("POST", r"/pods/p-0/eviction$", times=1, delay_s=1.5)  # answered late, then performed
    escalation_pass(cluster=live, orchestrator=core, now_s=1400.0)
    assert BatchPod.objects.get(id=p.id).state == "bound"  # D2b's fix: not taken as evicted
    deadline = time.monotonic() + 10
    while (old := _pod(api, "batch/p-0")) is not None and time.monotonic() < deadline:
        if (old.get("metadata") or {}).get("deletionTimestamp"):
            api.delete_pod("batch/p-0")  # the kubelet finishes the graceful deletion
        time.sleep(0.1)
    assert _pod(api, "batch/p-0") is None, "the late eviction did land"
    rec.apply_all(watcher._translate("pods", "DELETED", {"metadata": {"name": "p-0", "namespace": "batch"}}))
    api.create_pod(job_pod("p-0", owner="etl", cpu="2", memory="4Gi", labels={"job": "etl"}))  # the replacement
    rec.apply_all(watcher._translate("pods", "ADDED", api.get("pods", "batch/p-0")))
    api.store.mutate("pods", "batch/p-0", lambda p: p["spec"].update(nodeName="thinkcentre-beta"))
    api.set_pod_phase("batch/p-0", "Running")
    rec.apply_all(watcher._translate("pods", "MODIFIED", api.get("pods", "batch/p-0")))
    assert BatchPod.objects.get(id=p.id).state == "bound"
    eviction_retries_run(cluster=live, orchestrator=core, now_s=1400.0 + 3600)
    new = _pod(api, "batch/p-0")
    assert new is not None and not (new.get("metadata") or {}).get("deletionTimestamp"), \
        "the retry evicted the replacement pod"


def test_an_eviction_that_landed_late_and_was_seen_by_the_watch_keeps_its_why_evicted_record(live, api) -> None:
    """Same late-but-performed Eviction; the watch reports the pod gone before the retry is due
    (the usual order: the watch is quick, the retry waits 10 s). Observed: the retry finds the pod
    no longer bound and is deleted; no EvictionRecord names the escalation for ``p-0`` and no
    ``Evicted`` Event was sent — the drain's why-evicted is lost, as if nobody evicted it.
    Expected: the eviction Kalena asked for is recorded with its cause (as the 404 path does)."""
    n, core, watcher, rec, p = running_pod(live, api)
    for i, t in enumerate((1100.0, 1250.0, 1390.0)):
        EvictionRecord.objects.create(cluster=live, node=p.workload.node, workload_name=f"batch/x-{i}", time_s=t,
                                      cause="priority", source_key=f"agent:t10b:{i}")
    api.fault("POST", r"/pods/p-0/eviction$", times=1, delay_s=1.5)
    escalation_pass(cluster=live, orchestrator=core, now_s=1400.0)
    deadline = time.monotonic() + 10
    while (old := _pod(api, "batch/p-0")) is not None and time.monotonic() < deadline:
        if (old.get("metadata") or {}).get("deletionTimestamp"):
            api.delete_pod("batch/p-0")
        time.sleep(0.1)
    rec.apply_all(watcher._translate("pods", "DELETED", {"metadata": {"name": "p-0", "namespace": "batch"}}))
    eviction_retries_run(cluster=live, orchestrator=core, now_s=1400.0 + 3600)
    assert EvictionRecord.objects.filter(workload_name="batch/p-0").exclude(cause="priority").exists(), \
        list(EvictionRecord.objects.values_list("workload_name", "cause"))
