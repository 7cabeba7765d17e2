"""Tester 10c: ``metadata.uid`` on watch events (516350b) against rows stored before it (uid "")."""

from __future__ import annotations

from agents.orchestrators import FakeOrchestrator
from agents.orchestrators.events import PodPending
from kalena_engine.resources import GIB
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit
from tests.web.control.test_reconciler import NODES, batch_on, rec, run_pass, vec  # noqa: F401 - fixture


def test_a_pod_adopted_from_rest_before_the_upgrade_is_not_taken_for_a_replacement(rec) -> None:
    """Before 516350b, the watch adopting a REST-submitted pod kept the REST ``submitted_s`` and
    stored no uid. Automation submits ``a-0`` through REST at t=1000, then creates the pod
    (creationTimestamp 1005); the old watch adopted it; Kalena bound it (not yet Running). After
    the upgrade the watch re-lists (the pod still has no node in its first list, the Binding in
    flight) and reports it pending with its uid. Observed: held uid "" → the fallback reads
    ``at_s 1005 > submitted_s 1000`` as a new object: the bound pod is taken off its node's ledger
    and queued again (the next pass binds it twice: 409). Expected: the same object — unchanged,
    still bound (its uid just learnt)."""
    fake = FakeOrchestrator(node_names=NODES)
    batch_submit(cluster=rec.cluster, name="batch/a-0", owner="Job/train", request={"cpu": 1000.0, "ram": GIB},
                 labels={"app": "train"}, now_s=1000.0)
    BatchPod.objects.filter(workload__name="batch/a-0").update(source=BatchPod.WATCH)  # the old adoption: uid ""
    run_pass(rec.cluster, fake)
    pod = BatchPod.objects.select_related("workload").get(workload__name="batch/a-0")
    assert pod.state == "bound" and pod.uid == ""
    node = pod.workload.node.name
    rec.apply(PodPending("batch/a-0", vec(1, 1), vec(1, 1), labels={"app": "train"}, priority=0,
                         owner="Job/train", at_s=1005.0, uid="uid-a0"))
    pod = BatchPod.objects.get(id=pod.id)
    assert (pod.state, batch_on(rec.cluster, node)) == ("bound", 1000.0)
