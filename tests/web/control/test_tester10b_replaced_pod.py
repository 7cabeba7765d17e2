"""Tester 10b: D2's fix (``services._replaced``) re-checked with other replacements under the same
name while the watch was away (a 410 re-list reports the new object as ``PodPending``; its
DELETED was never seen). The watch events carry no ``metadata.uid``, so the reconciler guesses."""

from __future__ import annotations

from agents.orchestrators import FakeOrchestrator
from agents.orchestrators.events import PodFinished, PodPending, PodRunning, Resynced
from kalena_engine.resources import CPU
from kalena_web.control.reconciler import CHANGED, Reconciler
from kalena_web.scheduling.models import BatchPod
from tests.web.control.test_reconciler import NODES, batch_on, rec, run_pass, vec  # noqa: F401 - fixture


def test_a_pending_pod_replaced_by_a_bigger_one_while_the_watch_was_away_is_queued_with_the_new_requests(rec) -> None:
    """``q-0`` (1 core, created at t=1000) is queued; while the watch is away it is deleted and a
    new ``q-0`` created at t=2000 asking 4 cores and a nodeSelector. The re-list reports the new
    object. Observed: ``batch_observe_pending`` leaves the queued pod "as it is" (``_replaced``
    only covers a pod seen running, or one that ended), so Kalena keeps the old object's 1-core
    request and no selector; it will debit 1 core for a pod that uses 4 (and bind it where the
    kubelet refuses it). Expected: the new object's requests and constraints."""
    old = PodPending("batch/q-0", vec(1, 1), vec(1, 1), labels={"app": "train"}, priority=1, owner="Job/train",
                     at_s=1000.0)
    assert rec.apply(old) == CHANGED
    new = PodPending("batch/q-0", vec(4, 1), vec(4, 1), labels={"app": "train"}, priority=1, owner="Job/train",
                     at_s=2000.0, constraints={"node_selector": {"disk": "ssd"}})
    rec.apply(new)
    rec.apply(Resynced(pods=frozenset({"batch/q-0"}), nodes=frozenset(NODES)))
    pod = BatchPod.objects.select_related("workload").get(workload__name="batch/q-0")
    assert pod.state == "pending"
    assert (pod.workload.request[CPU], pod.workload.constraints.get("node_selector"), pod.submitted_s) == (
        4000.0, {"disk": "ssd"}, 2000.0)


def test_a_pod_that_ended_and_was_replaced_in_the_same_second_is_queued_again(rec) -> None:
    """``b-0`` created at t=1000 (RFC 3339 has whole seconds), bound, Running, Succeeded; while
    the watch is away it is deleted and a new ``b-0`` created in the same second. After the 410
    the re-list reports the new object pending (a list shows the present: an object that ended
    is never pending again). Observed: ``_replaced`` needs ``at_s > submitted_s``, so the report
    is taken for the old object's and ignored; the new pod stays Pending in Kubernetes forever,
    never queued. Expected: queued (pending). Telling the two apart needs ``metadata.uid``, which
    the watch events now carry (without it, a same-second replacement stays undetectable)."""
    fake = FakeOrchestrator(node_names=NODES)
    first = PodPending("batch/b-0", vec(1, 1), vec(1, 1), labels={"app": "train"}, priority=1, owner="Job/train",
                       at_s=1000.0, uid="uid-first")  # the watch carries metadata.uid: it tells the two apart
    rec.apply(first)
    run_pass(rec.cluster, fake)
    node = fake.log[0][2]
    rec.apply(PodRunning("batch/b-0", node, at_s=1000.0))
    rec.apply(PodFinished("batch/b-0", node, "succeeded", "Completed", 0))
    after_410 = Reconciler(cluster=rec.cluster, clock=rec.clock)  # the watcher's re-list, applied
    after_410.apply(PodPending("batch/b-0", vec(1, 1), vec(1, 1), labels={"app": "train"}, priority=1,
                               owner="Job/train", at_s=1000.0, uid="uid-second"))
    assert after_410.apply(PodPending("batch/b-0", vec(1, 1), vec(1, 1), labels={"app": "train"}, priority=1,
                                      owner="Job/train", at_s=1000.0, uid="uid-second")) == "unchanged"
    after_410.apply(Resynced(pods=frozenset({"batch/b-0"}), nodes=frozenset(NODES)))
    assert BatchPod.objects.get(workload__name="batch/b-0").state == "pending"


def test_a_pod_bound_but_not_yet_seen_running_and_replaced_meanwhile_is_queued_with_the_new_requests(rec) -> None:
    """Kalena binds ``c-0`` (1 core); before the watch reports it on its node the watch goes away,
    the pod is deleted and a new ``c-0`` (3 cores, created later) made. The re-list reports it
    pending. Observed: ``_replaced`` needs ``running_s``, so the report is ignored; the pod stays
    bound to the old node with the old 1-core debit (``batch_unconfirmed`` requeues it 30 s later,
    still with 1 core). Expected: the new object queued with its own request."""
    fake = FakeOrchestrator(node_names=NODES)
    rec.apply(PodPending("batch/c-0", vec(1, 1), vec(1, 1), labels={"app": "train"}, priority=1,
                         owner="Job/train", at_s=1000.0, uid="uid-old"))
    run_pass(rec.cluster, fake)
    assert BatchPod.objects.get(workload__name="batch/c-0").state == "bound"
    # the uid tells them apart (a bound pod is never unbound on a creation-time guess: tester10c)
    rec.apply(PodPending("batch/c-0", vec(3, 1), vec(3, 1), labels={"app": "train"}, priority=1,
                         owner="Job/train", at_s=1500.0, uid="uid-new"))
    pod = BatchPod.objects.select_related("workload").get(workload__name="batch/c-0")
    assert (pod.state, pod.workload.request[CPU]) == ("pending", 3000.0)
