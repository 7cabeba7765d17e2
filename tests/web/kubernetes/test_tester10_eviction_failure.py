"""Tester 10: an eviction the API did not perform (a timeout, a 500, a 403) is not an eviction.
Case C12's setup (tests/web/kubernetes/test_live_kubernetes.py) with the Eviction call failing
instead of a PodDisruptionBudget's 429."""

from __future__ import annotations

import pytest

from agents.orchestrators.kubernetes.watch import KubernetesWatcher
from kalena_engine.resources import GIB, RAM
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.escalation import escalation_pass
from kalena_web.control.reconciler import Reconciler
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.scheduling.models import BatchPod
from tests.web.kubernetes.test_live_kubernetes import api, job_pod, orchestrator  # noqa: F401 - fixture


@pytest.mark.parametrize("fault", [dict(code=500, reason="InternalError"), dict(code=403, reason="Forbidden"),
                                   dict(delay_s=2.0)], ids=["500", "403", "timeout"])
def test_an_eviction_the_api_did_not_perform_keeps_the_pod_and_its_reservation(live, api, fault) -> None:
    """Observed: ``KubernetesOrchestrator.evict`` raises ``OrchestratorError`` for a timeout or
    any refusal other than 404/429 (its comment: "timeouts: the caller keeps the pod and
    retries"), but ``escalation._evict_one`` treats every ``OrchestratorError`` as "gone
    already: still take it off the ledger": an EvictionRecord is written, the pod is marked
    evicted and its reservation credited, while the pod still runs in Kubernetes. Expected: as
    for a 429 (case C12), the pod stays bound with its reservation and the eviction is retried."""
    n = "thinkcentre-alpha"
    core = orchestrator(api)
    core.timeout_s = 0.5
    rec = Reconciler(cluster=live, clock=lambda: 1000.0)
    api.create_pod(job_pod("p-0", owner="etl", cpu="2", memory="4Gi", labels={"job": "etl"}))
    rec.apply_all(KubernetesWatcher(core)._translate("pods", "ADDED", api.get("pods", "batch/p-0")))
    api.store.mutate("pods", "batch/p-0", lambda p: p["spec"].update(nodeName=n))
    api.set_pod_phase("batch/p-0", "Running")
    rec.apply_all(KubernetesWatcher(core)._translate("pods", "MODIFIED", api.get("pods", "batch/p-0")))
    p = BatchPod.objects.select_related("workload").get(workload__name="batch/p-0")
    reservation = [2000.0, 4.6 * GIB] + [0.0] * 6
    WorkloadReservation.objects.filter(workload=p.workload).update(value=reservation, last_sample_s=1000.0)
    LiveNodeLedger.objects.filter(node=p.workload.node).update(batch_reservation=reservation)
    for i, t in enumerate((1100.0, 1250.0, 1390.0)):  # 3 evictions within 300 s → N escalates (C12)
        EvictionRecord.objects.create(cluster=live, node=p.workload.node, workload_name=f"batch/x-{i}", time_s=t,
                                      cause="priority", source_key=f"agent:t10:{i}")
    api.fault("POST", r"/pods/p-0/eviction$", times=1, **fault)
    report = escalation_pass(cluster=live, orchestrator=core, now_s=1400.0)
    assert report.escalated == [n]
    assert api.get("pods", "batch/p-0")["status"]["phase"] == "Running"  # Kubernetes: still running
    p.refresh_from_db()
    assert p.state == "bound", (p.state, p.outcome, p.reason)
    assert LiveNodeLedger.objects.get(node=p.workload.node).batch_reservation[RAM] == pytest.approx(4.6 * GIB)
    assert not EvictionRecord.objects.filter(workload=p.workload).exists()
