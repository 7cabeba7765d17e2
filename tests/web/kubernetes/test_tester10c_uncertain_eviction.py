"""Tester 10c: an Eviction that timed out but landed (EvictionRetry.uncertain), then the pod's
controller makes its replacement under the same name before the retry is due (a StatefulSet,
or a Job pod named by its owner). Case C12's setup, as in test_tester10b_eviction_retry_replacement.py."""

from __future__ import annotations

import copy
import time

from kalena_web.archive.models import EvictionRecord
from kalena_web.control.escalation import escalation_pass, eviction_retries_run
from kalena_web.control.models import EvictionRetry
from kalena_web.scheduling.models import BatchPod
from tests.web.kubernetes.test_live_kubernetes import api, job_pod  # noqa: F401 - fixture
from tests.web.kubernetes.test_tester10b_eviction_retry_replacement import _pod, running_pod




def test_a_landed_late_eviction_keeps_its_record_when_the_replacement_is_queued_before_the_retry(live, api) -> None:
    """Eviction of ``p-0`` answered after the 0.5 s timeout but performed → EvictionRetry
    (uncertain). The watch reports p-0 DELETED, then at once the replacement ``p-0`` (new uid)
    ADDED — well before the retry is due (10 s). Observed: queuing the replacement deletes the
    EvictionRetry (``batch_observe_pending``: "a retry was for the old object"), so the retry never
    runs and the landed eviction is never recorded: no EvictionRecord with the escalation's cause,
    no cooldown on the owner × node, the drain's why-evicted lost. Expected: as without the
    replacement (tester10b's second test, fixed): the eviction is recorded with its cause."""
    n, core, watcher, rec, p = running_pod(live, api)
    for i, t in enumerate((1100.0, 1250.0, 1390.0)):  # 3 evictions within 300 s → N escalates (C12)
        EvictionRecord.objects.create(cluster=live, node=p.workload.node, workload_name=f"batch/x-{i}", time_s=t,
                                      cause="priority", source_key=f"agent:t10c:{i}")
    api.fault("POST", r"/pods/p-0/eviction$", times=1, delay_s=1.5)  # answered late, then performed
    escalation_pass(cluster=live, orchestrator=core, now_s=1400.0)
    assert EvictionRetry.objects.filter(pod=p, uncertain=True).exists()
    deadline = time.monotonic() + 10
    while (old := _pod(api, "batch/p-0")) is not None and time.monotonic() < deadline:
        if (old.get("metadata") or {}).get("deletionTimestamp"):
            api.delete_pod("batch/p-0")  # the kubelet finishes the graceful deletion
        time.sleep(0.1)
    assert _pod(api, "batch/p-0") is None, "the late eviction did land"
    rec.apply_all(watcher._translate("pods", "DELETED", {"metadata": {"name": "p-0", "namespace": "batch"}}))
    api.create_pod(job_pod("p-0", owner="etl", cpu="2", memory="4Gi", labels={"job": "etl"}))  # the replacement
    rec.apply_all(watcher._translate("pods", "ADDED", api.get("pods", "batch/p-0")))
    eviction_retries_run(cluster=live, orchestrator=core, now_s=1400.0 + 3600)
    causes = list(EvictionRecord.objects.filter(workload_name="batch/p-0").values_list("cause", flat=True))
    assert any(c != "priority" for c in causes), f"the landed eviction of the old p-0 is not recorded: {causes}"


def test_a_landed_late_eviction_seen_as_failed_then_deleted_is_recorded_as_kalenas_escalation(live, api) -> None:
    """Same late-but-performed Eviction. The API puts the ``DisruptionTarget`` condition on the pod
    (Kubernetes ≥ 1.26; the test server too), and the kubelet moves a deleted pod to phase
    Failed before it is removed (Kubernetes ≥ 1.27): the watch reports MODIFIED (Failed +
    DisruptionTarget → PodFinished(evicted)) and then DELETED. Observed: the reconciler records
    the eviction as the orchestrator's own (cause ``orchestrator``, "evicted by the orchestrator"),
    and the due retry finds the pod ended but not yet gone and is deleted unrecorded: Kalena's
    escalation (its cause and why-evicted) is never recorded. Expected: the eviction Kalena asked for
    is recorded with its cause ``escalation`` (as when the DELETED comes alone)."""
    n, core, watcher, rec, p = running_pod(live, api)
    for i, t in enumerate((1100.0, 1250.0, 1390.0)):
        EvictionRecord.objects.create(cluster=live, node=p.workload.node, workload_name=f"batch/x-{i}", time_s=t,
                                      cause="priority", source_key=f"agent:t10c:{i}")
    running = api.get("pods", "batch/p-0")
    api.fault("POST", r"/pods/p-0/eviction$", times=1, delay_s=1.5)
    escalation_pass(cluster=live, orchestrator=core, now_s=1400.0)
    assert EvictionRetry.objects.filter(pod=p, uncertain=True).exists()
    deadline = time.monotonic() + 10
    while _pod(api, "batch/p-0") is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _pod(api, "batch/p-0") is None, "the late eviction did land"
    # what the watch saw on the way: the DisruptionTarget condition, then the kubelet's Failed phase
    failed = copy.deepcopy(running)
    failed["metadata"]["deletionTimestamp"] = failed["status"]["startTime"]
    failed["status"]["phase"] = "Failed"
    failed["status"]["conditions"] = [{"type": "DisruptionTarget", "status": "True",
                                       "reason": "EvictionByEvictionAPI", "message": "Eviction API: evicting"}]
    rec.apply_all(watcher._translate("pods", "MODIFIED", failed))
    eviction_retries_run(cluster=live, orchestrator=core, now_s=1400.0 + 3600)
    rec.apply_all(watcher._translate("pods", "DELETED", {"metadata": {"name": "p-0", "namespace": "batch"}}))
    causes = list(EvictionRecord.objects.filter(workload_name="batch/p-0").values_list("cause", flat=True))
    assert "escalation" in causes, f"Kalena's escalation of p-0 is not recorded: {causes}"


def test_an_eviction_that_timed_out_and_did_not_land_is_not_recorded_when_the_pod_then_succeeds(live, api) -> None:
    """The escalation's Eviction of ``p-0`` times out (0.5 s) and is *not* performed (the API
    answers 500 after 1.5 s) → EvictionRetry (uncertain). The pod then completes by itself
    (Succeeded) and its Job's TTL controller deletes it before the retry is due. Observed: the
    retry sees "uncertain and gone" and records an eviction that never happened
    (``landed_after_timeout``, cause escalation): a false why-evicted for a pod that succeeded,
    an owner × node cooldown and one more eviction counted towards the node's escalation.
    Expected: a pod that ended by itself (outcome succeeded) was not evicted — nothing recorded."""
    n, core, watcher, rec, p = running_pod(live, api)
    for i, t in enumerate((1100.0, 1250.0, 1390.0)):
        EvictionRecord.objects.create(cluster=live, node=p.workload.node, workload_name=f"batch/x-{i}", time_s=t,
                                      cause="priority", source_key=f"agent:t10c:{i}")
    api.fault("POST", r"/pods/p-0/eviction$", code=500, times=1, delay_s=1.5)  # late, and not performed
    escalation_pass(cluster=live, orchestrator=core, now_s=1400.0)
    assert EvictionRetry.objects.filter(pod=p, uncertain=True).exists()
    time.sleep(1.5)  # the injected answer has been sent; the pod was not evicted
    assert _pod(api, "batch/p-0") is not None
    api.set_pod_phase("batch/p-0", "Succeeded", exit_code=0)
    rec.apply_all(watcher._translate("pods", "MODIFIED", api.get("pods", "batch/p-0")))
    assert BatchPod.objects.get(id=p.id).outcome == "succeeded"
    api.delete_pod("batch/p-0")  # the Job's ttlSecondsAfterFinished
    rec.apply_all(watcher._translate("pods", "DELETED", {"metadata": {"name": "p-0", "namespace": "batch"}}))
    eviction_retries_run(cluster=live, orchestrator=core, now_s=1400.0 + 3600)
    records = list(EvictionRecord.objects.filter(workload_name="batch/p-0").values_list("cause", "detail"))
    assert records == [], f"a pod that succeeded is recorded as evicted: {records}"
