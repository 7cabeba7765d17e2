"""The reconciler applies watch events (docs/design.md §14) through services, idempotently: each case
applies its events, then applies the last one again and checks that nothing changed."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from agents.orchestrators import FakeOrchestrator
from agents.orchestrators.events import (
    NodeGone, NodeSeen, PodFinished, PodGone, PodPending, PodRefused, PodRunning, ProductionSeen, Resynced,
)
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU, RAM
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.models import NodeCondition, ProductionPlacement
from kalena_web.control.reconciler import CHANGED, REJECTED, UNCHANGED, Reconciler
from kalena_web.control.watching import watch_start
from kalena_web.inventory.models import Node, Workload
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass

GIB = 2**30
INF = math.inf
NODES = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]


def vec(cpu_cores: float, ram_gib: float) -> tuple:
    return (cpu_cores * 1000, ram_gib * GIB, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def pending(name: str, owner: str = "Job/train", cpu: float = 1.0, ram: float = 1.0, **kw) -> PodPending:
    return PodPending(f"batch/{name}", vec(cpu, ram), vec(cpu, ram), labels={"app": "train"}, priority=1,
                      owner=owner, at_s=1000.0, **kw)


def state(cluster) -> tuple:
    """Everything a reconciled event may change, comparable."""
    pods = sorted(BatchPod.objects.filter(cluster=cluster).values_list(
        "workload__name", "state", "source", "outcome", "gone", "running_s", "workload__node_id", "requeues"))
    ledgers = sorted((led.node_id, led.version, tuple(led.capacity), tuple(led.batch_request), tuple(led.prod_request))
                     for led in LiveNodeLedger.objects.filter(node__cluster=cluster))
    conditions = sorted(NodeCondition.objects.filter(node__cluster=cluster).values_list(
        "node_id", "ready", "schedulable", "gone"))
    nodes = sorted((n.name, tuple(n.capacity), repr(n.labels), repr(n.taints)) for n in Node.objects.filter(cluster=cluster))
    prod = sorted(Workload.objects.filter(cluster=cluster, kind=Workload.PRODUCTION).values_list("name", "node_id"))
    return pods, ledgers, conditions, nodes, prod, EvictionRecord.objects.count(), ProductionPlacement.objects.count()


def apply_twice(rec: Reconciler, event) -> str:
    """Apply, then apply again through a fresh reconciler (the database path, no cache) and
    through the same one: neither changes anything."""
    first = rec.apply(event)
    before = state(rec.cluster)
    fresh = Reconciler(cluster=rec.cluster, clock=rec.clock)
    assert fresh.apply(event) in (UNCHANGED, "unknown"), f"{event} applied twice changed something"
    assert rec.apply(event) in (UNCHANGED, "unknown")
    assert state(rec.cluster) == before
    return first


def run_pass(cluster, orchestrator):
    return scheduling_pass(cluster=cluster, orchestrator=orchestrator, policy=Policy(), now_s=1001.0,
                           rng=np.random.default_rng(0))


def batch_on(cluster, node: str) -> float:
    return LiveNodeLedger.objects.get(node__cluster=cluster, node__name=node).batch_request[CPU]


@pytest.fixture
def rec(live) -> Reconciler:
    return Reconciler(cluster=live, clock=lambda: 1001.0)


def test_pending_pod_enters_the_rest_queue_once(rec) -> None:
    assert apply_twice(rec, pending("a-0")) == CHANGED
    pod = BatchPod.objects.get(workload__name="batch/a-0")
    assert (pod.state, pod.source, pod.workload.owner, pod.submitted_s) == ("pending", "watch", "Job/train", 1000.0)
    assert pod.workload.request[CPU] == 1000 and pod.workload.labels["kalena.naughtian.io/tier"] == "batch"


def test_a_rest_submitted_pod_is_adopted_never_queued_twice(rec) -> None:
    batch_submit(cluster=rec.cluster, name="batch/a-0", owner="x", request={"cpu": 1000.0, "ram": GIB}, now_s=999.0)
    assert apply_twice(rec, pending("a-0")) == CHANGED
    assert BatchPod.objects.filter(workload__name="batch/a-0").count() == 1
    assert BatchPod.objects.get(workload__name="batch/a-0").source == "watch"


def test_bound_running_finished_leaves_every_ledger(rec) -> None:
    fake = FakeOrchestrator(node_names=NODES)
    rec.apply(pending("a-0", cpu=2.0))
    assert run_pass(rec.cluster, fake).placed == 1
    (_, pod_id, node), = fake.log
    assert batch_on(rec.cluster, node) == 2000
    assert apply_twice(rec, pending("a-0", cpu=2.0)) == UNCHANGED  # a late MODIFIED event never requeues
    assert apply_twice(rec, PodRunning("batch/a-0", node, at_s=1002.0)) == CHANGED
    assert BatchPod.objects.get(workload__name="batch/a-0").running_s == 1002.0
    assert apply_twice(rec, PodFinished("batch/a-0", node, "succeeded", "Completed", 0)) == CHANGED
    pod = BatchPod.objects.get(workload__name="batch/a-0")
    assert (pod.state, pod.outcome, pod.workload.node_id) == ("completed", "succeeded", None)
    assert batch_on(rec.cluster, node) == 0


def test_refused_at_admission_is_never_a_completion(rec) -> None:
    fake = FakeOrchestrator(node_names=NODES)
    rec.apply(pending("a-0"))
    run_pass(rec.cluster, fake)
    node = fake.log[0][2]
    assert apply_twice(rec, PodRefused("batch/a-0", node, "OutOfcpu")) == CHANGED
    pod = BatchPod.objects.get(workload__name="batch/a-0")
    assert pod.state == "refused" and "OutOfcpu" in pod.reason
    assert BatchPod.objects.filter(state="completed").count() == 0 and batch_on(rec.cluster, node) == 0


def test_pod_bound_by_someone_else_is_adopted_and_debited(rec) -> None:
    rec.apply(pending("a-0", cpu=3.0))
    assert apply_twice(rec, PodRunning("batch/a-0", "thinkcentre-gamma")) == CHANGED
    assert BatchPod.objects.get(workload__name="batch/a-0").state == "bound"
    assert batch_on(rec.cluster, "thinkcentre-gamma") == 3000


def test_a_refused_binding_answered_after_the_watch_adopted_the_pod_keeps_its_node_charged(rec) -> None:
    """Another binder wins the race: the watch adopts the pod on its node first, then Kalena's own
    Binding comes back 409 "already assigned" — the pod stays bound there and the node keeps its
    debit (it was dropped and charged to no node)."""
    from kalena_web.scheduling.services import batch_drop

    rec.apply(pending("a-0", cpu=3.0))
    assert rec.apply(PodRunning("batch/a-0", "thinkcentre-gamma", at_s=1002.0)) == CHANGED
    batch_drop(pod=BatchPod.objects.get(workload__name="batch/a-0"), now_s=1003.0,
               reason='pod a-0 is already assigned to node "thinkcentre-gamma"')
    pod = BatchPod.objects.select_related("workload__node").get(workload__name="batch/a-0")
    assert (pod.state, pod.workload.node.name) == ("bound", "thinkcentre-gamma")
    assert batch_on(rec.cluster, "thinkcentre-gamma") == 3000


def test_gone_pending_pod_leaves_the_queue_and_a_new_object_is_queued_afresh(rec) -> None:
    rec.apply(pending("a-0"))
    assert apply_twice(rec, PodGone("batch/a-0")) == CHANGED
    pod = BatchPod.objects.get(workload__name="batch/a-0")
    assert (pod.state, pod.gone) == ("deleted", True)
    assert rec.apply(pending("a-0")) == CHANGED  # same name, new object
    assert BatchPod.objects.get(workload__name="batch/a-0").state == "pending"


def test_node_not_ready_cordoned_or_gone_takes_no_batch(rec) -> None:
    fake = FakeOrchestrator(node_names=NODES)
    alloc = (INF,) * 8
    assert apply_twice(rec, NodeSeen("thinkcentre-alpha", ready=False, schedulable=True, allocatable=alloc)) == CHANGED
    assert apply_twice(rec, NodeSeen("thinkcentre-beta", ready=True, schedulable=False, allocatable=alloc)) == CHANGED
    for i in range(4):
        rec.apply(pending(f"a-{i}", cpu=0.5, ram=0.5))
    run_pass(rec.cluster, fake)
    assert {node for _, _, node in fake.log} == {"thinkcentre-gamma"}
    assert apply_twice(rec, NodeGone("thinkcentre-gamma")) == CHANGED
    rec.apply(pending("b-0", cpu=0.5, ram=0.5))
    run_pass(rec.cluster, fake)
    assert BatchPod.objects.get(workload__name="batch/b-0").state == "pending"


def test_allocatable_labels_taints_and_images_reach_the_ledger_and_placement(rec) -> None:
    node = Node.objects.get(cluster=rec.cluster, name="thinkcentre-alpha")
    deduction = node.allocatable[CPU] - node.capacity[CPU]
    alloc = (4000.0, 8 * GIB, 0.0, INF, INF, INF, INF, INF)
    event = NodeSeen("thinkcentre-alpha", True, True, alloc, labels={"disk": "ssd"},
                     taints=({"key": "gpu", "value": "", "effect": "NoSchedule"},), images=("train:1",),
                     image_bytes={"train:1": 5e8})
    assert apply_twice(rec, event) == CHANGED
    node.refresh_from_db()
    led = LiveNodeLedger.objects.get(node=node)
    assert node.capacity[CPU] == pytest.approx(4000.0 - deduction) and led.capacity[CPU] == node.capacity[CPU]
    assert node.capacity[RAM] <= 8 * GIB and node.labels == {"disk": "ssd"} and node.taints[0]["key"] == "gpu"
    assert node.capacity[3] != INF  # storage not reported by the orchestrator: the stored value stays
    assert NodeCondition.objects.get(node=node).images == {"train:1": 5e8}
    fake = FakeOrchestrator(node_names=NODES)
    rec.apply(pending("a-0", cpu=0.5, ram=0.5, constraints={"node_selector": {"disk": "ssd"},
                                                               "tolerations": ["gpu"]}))
    rec.apply(pending("b-0", owner="Job/other", cpu=0.5, ram=0.5))  # no toleration: never on the tainted node
    run_pass(rec.cluster, fake)
    placed = {pod: node for _, pod, node in fake.log}
    assert placed["batch/a-0"] == "thinkcentre-alpha" and placed["batch/b-0"] != "thinkcentre-alpha"


def test_production_where_the_blueprint_did_not_put_it_is_a_finding(rec) -> None:
    prod = Workload.objects.filter(cluster=rec.cluster, kind=Workload.PRODUCTION).select_related("node").first()
    other = next(n for n in NODES if n != prod.node.name)
    before = LiveNodeLedger.objects.get(node__cluster=rec.cluster, node__name=other).prod_request[CPU]
    assert apply_twice(rec, ProductionSeen(prod.name, prod.node.name, prod.request, prod.limit)) == CHANGED
    assert not ProductionPlacement.objects.get(workload=prod).finding
    assert apply_twice(rec, ProductionSeen(prod.name, other, prod.request, prod.limit)) == CHANGED
    placement = ProductionPlacement.objects.get(workload=prod)
    assert placement.finding and placement.blueprint_node_id == prod.node_id
    after = LiveNodeLedger.objects.get(node__cluster=rec.cluster, node__name=other).prod_request[CPU]
    assert after == pytest.approx(before + prod.request[CPU])
    assert apply_twice(rec, ProductionSeen("web/unknown-0", other, vec(2, 1), vec(2, 1))) == CHANGED
    assert LiveNodeLedger.objects.get(node__cluster=rec.cluster, node__name=other).prod_reservation[CPU] \
        >= after + 2000  # r = q until it reports


def test_resync_drops_what_the_list_no_longer_holds(rec) -> None:
    rec.apply(pending("a-0"))
    rec.apply(pending("b-0"))
    rec.apply(ProductionSeen("web/unknown-0", "thinkcentre-beta", vec(2, 1), vec(2, 1)))
    event = Resynced(pods=frozenset({"batch/a-0"}), nodes=frozenset(NODES[:2]))
    assert apply_twice(rec, event) == CHANGED
    states = dict(BatchPod.objects.values_list("workload__name", "state"))
    assert states == {"batch/a-0": "pending", "batch/b-0": "deleted"}
    assert not Workload.objects.filter(name="web/unknown-0", node__isnull=False).exists()
    assert NodeCondition.objects.get(node__name="thinkcentre-gamma").gone


def test_orchestrator_eviction_cools_the_owner_down_on_that_node(rec) -> None:
    fake = FakeOrchestrator(node_names=NODES)
    rec.apply(pending("a-0"))
    run_pass(rec.cluster, fake)
    node = fake.log[0][2]
    assert apply_twice(rec, PodFinished("batch/a-0", node, "evicted", "Evicted", at_s=1001.0)) == CHANGED
    (record,) = EvictionRecord.objects.all()
    assert record.workload.owner == "Job/train" and record.node.name == node
    rec.apply(pending("a-1"))  # the Job's replacement pod: a new object, the same owner
    rec.apply(pending("z-0", owner="Job/other"))
    run_pass(rec.cluster, fake)
    placed = {pod: n for verb, pod, n in fake.log if verb == "bind"}
    assert placed["batch/a-1"] != node


@pytest.mark.parametrize("event, field", [
    (PodPending("batch/x-0", (float("nan"),) + (0.0,) * 7, (0.0,) * 8), "requests[0]"),
    (PodPending("Not A Ref", vec(1, 1), vec(1, 1)), "ref"),
    (PodPending("batch/x-0", vec(1, 1)[:3], vec(1, 1)), "requests"),
    (PodPending("batch/x-0", vec(1, 1), vec(1, 1), constraints={"node_selector": ["a"]}), "node_selector"),
    (NodeSeen("", True, True, (0.0,) * 8), "name"),
    (NodeSeen("n-9", True, True, (-1.0,) + (0.0,) * 7), "allocatable[0]"),
    (ProductionSeen("web/p-0", "no-such-node", vec(1, 1), vec(1, 1)), "node"),
])
def test_bad_input_is_counted_named_and_changes_nothing(rec, event, field) -> None:
    before = state(rec.cluster)
    assert rec.apply(event) == REJECTED
    assert state(rec.cluster) == before
    assert field in rec.rejected[-1][2]
    assert rec.counts[type(event).__name__][REJECTED] == 1


@pytest.mark.django_db(transaction=True)
def test_the_fake_orchestrator_emits_the_same_events(rec) -> None:
    fake = FakeOrchestrator(node_names=NODES)
    fake.create_pending(pending("old-0"))
    woken = []
    running = watch_start(cluster=rec.cluster, orchestrator=fake,
                          reconciler=Reconciler(cluster=rec.cluster, wake=woken.append))
    try:
        fake.create_pending(pending("new-0"))
        deadline = time.monotonic() + 30
        while BatchPod.objects.filter(state="pending").count() < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(BatchPod.objects.values_list("workload__name", flat=True)) == {"batch/old-0", "batch/new-0"}
        fake.delete("batch/old-0")
        fake.relist()
        while BatchPod.objects.filter(state="pending").count() > 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(BatchPod.objects.filter(state="pending").values_list("workload__name", flat=True)) == ["batch/new-0"]
        assert woken and set(woken) == {rec.cluster.id}
    finally:
        running.stop()
    assert running.reconciler.counts["Resynced"][CHANGED] + running.reconciler.counts["Resynced"][UNCHANGED] == 2


def test_runs_of_events_applied_in_bulk_answer_as_one_by_one(rec) -> None:
    bad = PodPending("batch/x-0", (float("nan"),) + (0.0,) * 7, (0.0,) * 8)
    events = [pending("a-0", cpu=0.5), pending("a-0", cpu=0.5), bad, pending("b-0", cpu=0.25)]
    assert rec.apply_many(events) == [CHANGED, UNCHANGED, REJECTED, CHANGED]
    assert sorted(BatchPod.objects.values_list("workload__name", "state")) == [("batch/a-0", "pending"),
                                                                                ("batch/b-0", "pending")]
    assert BatchPod.objects.get(workload__name="batch/b-0").workload.request[CPU] == 250
    before = state(rec.cluster)
    assert Reconciler(cluster=rec.cluster).apply_many(events) == [UNCHANGED, UNCHANGED, REJECTED, UNCHANGED]
    assert state(rec.cluster) == before
    fake = FakeOrchestrator(node_names=NODES)
    run_pass(rec.cluster, fake)
    placed = {pod: node for _, pod, node in fake.log}
    running = [PodRunning(ref, node, at_s=1003.0) for ref, node in placed.items()] + [PodRunning("batch/zz-0", NODES[0])]
    assert rec.apply_many(running) == [CHANGED, CHANGED, "unknown"]
    assert set(BatchPod.objects.values_list("running_s", flat=True)) == {1003.0}
    assert Reconciler(cluster=rec.cluster).apply_many(running) == [UNCHANGED, UNCHANGED, "unknown"]


def test_node_runs_applied_in_bulk_answer_as_one_by_one(rec) -> None:
    alloc = (INF,) * 8
    events = [NodeSeen("thinkcentre-alpha", False, True, alloc), NodeSeen("thinkcentre-beta", True, False, alloc,
                                                                          labels={"disk": "ssd"}),
              NodeSeen("", True, True, alloc), NodeSeen("new-node", True, True, (8000.0, 16 * GIB) + (INF,) * 6)]
    assert rec.apply_many(events) == [CHANGED, CHANGED, REJECTED, CHANGED]
    conditions = dict(NodeCondition.objects.values_list("node__name", "ready"))
    assert conditions["thinkcentre-alpha"] is False and conditions["new-node"] is True
    assert Node.objects.get(name="thinkcentre-beta").labels == {"disk": "ssd"}
    before = state(rec.cluster)
    assert Reconciler(cluster=rec.cluster).apply_many(events) == [UNCHANGED, UNCHANGED, REJECTED, UNCHANGED]
    assert state(rec.cluster) == before


def test_fidelity_findings_reach_the_console_and_drift(rec, client) -> None:
    from django.contrib.auth.models import User

    from kalena_web.replan.models import ReplanRecommendation
    from kalena_web.replan.services import drift_pass

    prod = Workload.objects.filter(cluster=rec.cluster, kind=Workload.PRODUCTION).select_related("node").first()
    other = next(n for n in NODES if n != prod.node.name)
    rec.apply(ProductionSeen(prod.name, other, prod.request, prod.limit))
    report = drift_pass(cluster=rec.cluster, now_s=1001.0)
    assert report.fidelity_findings == 1 and report.recommended
    (recommendation,) = ReplanRecommendation.objects.filter(cluster=rec.cluster)
    assert recommendation.report["fidelity_findings"] == [{"pod": prod.name, "blueprint_node": prod.node.name,
                                                           "seen_node": other}]
    client.force_login(User.objects.create_user("viewer", password="x" * 12))
    page = client.get(f"/live/{rec.cluster.name}/").content.decode()
    assert "Blueprint fidelity" in page and prod.name in page
    assert "the watch saw 1 production pod off its blueprint node" in page  # the re-plan banner


def test_a_pod_replaced_under_its_name_while_its_deletion_was_missed_is_queued_afresh(rec) -> None:
    """The watch was away while a pod was deleted and a new one of the same name created (a
    re-applied manifest): the re-list reports it pending. The old object ran on a node, so it
    cannot be pending again: it leaves every ledger and the new object is queued."""
    fake = FakeOrchestrator(node_names=NODES)
    rec.apply(pending("s-0", cpu=2.0))
    run_pass(rec.cluster, fake)
    node = fake.log[0][2]
    assert rec.apply(PodRunning("batch/s-0", node, at_s=1002.0)) == CHANGED
    assert batch_on(rec.cluster, node) == 2000
    assert apply_twice(rec, pending("s-0", cpu=2.0)) == CHANGED  # the same event as the old object's first
    pod = BatchPod.objects.select_related("workload").get(workload__name="batch/s-0")
    assert (pod.state, pod.workload.node_id, pod.running_s, pod.gone) == ("pending", None, None, False)
    assert batch_on(rec.cluster, node) == 0  # the old object's debit is gone
    run_pass(rec.cluster, fake)
    node2 = fake.log[-1][2]
    assert rec.apply(PodRunning("batch/s-0", node2, at_s=1010.0)) == CHANGED  # the new object's own report
    assert batch_on(rec.cluster, node2) == 2000


def test_a_pod_that_ended_is_queued_again_only_for_an_object_created_after_it(rec) -> None:
    fake = FakeOrchestrator(node_names=NODES)
    rec.apply(pending("b-0"))
    run_pass(rec.cluster, fake)
    node = fake.log[0][2]
    rec.apply(PodRunning("batch/b-0", node, at_s=1002.0))
    rec.apply(PodFinished("batch/b-0", node, "succeeded", "Completed", 0))
    fresh = Reconciler(cluster=rec.cluster, clock=rec.clock)  # no cache: the database decides
    assert fresh.apply(pending("b-0")) == UNCHANGED  # the old object's own (late) report: it stays completed
    assert BatchPod.objects.get(workload__name="batch/b-0").state == "completed"
    later = PodPending("batch/b-0", vec(1, 1), vec(1, 1), labels={"app": "train"}, priority=1, owner="Job/train",
                       at_s=2000.0)
    assert apply_twice(rec, later) == CHANGED  # created after the old one ended: a new object
    pod = BatchPod.objects.get(workload__name="batch/b-0")
    assert (pod.state, pod.outcome, pod.submitted_s) == ("pending", "", 2000.0)


def test_a_burst_arriving_in_chunks_is_applied_in_one_batch_and_a_long_one_in_several(rec, monkeypatch) -> None:
    """Each batch costs a few queries whatever its size: events that keep coming (here every
    20 ms, while the quiet interval is 1 s) wait for each other and are applied together; a
    stream longer than the batch's longest wait still gets batches applied along the way."""
    from kalena_web.control import reconciler as module

    def chunks(names, pause_s):
        for i, name in enumerate(names):
            if i and i % 10 == 0:
                time.sleep(pause_s)
            yield pending(name)

    monkeypatch.setattr(module, "close_old_connections", lambda: None)  # the test's transaction stays open
    monkeypatch.setattr(module, "BATCH_QUIET_S", 1.0)
    monkeypatch.setattr(module, "BATCH_MAX_WAIT_S", 10.0)
    rec.run(chunks([f"a-{i}" for i in range(60)], 0.02))
    assert rec.batches == 1
    assert BatchPod.objects.filter(cluster=rec.cluster, state=BatchPod.PENDING).count() == 60

    monkeypatch.setattr(module, "BATCH_MAX_WAIT_S", 0.2)
    rec.run(chunks([f"b-{i}" for i in range(60)], 0.1))  # 0.5 s or more in all
    assert rec.batches >= 1 + 2
    assert BatchPod.objects.filter(cluster=rec.cluster, state=BatchPod.PENDING).count() == 120


def test_a_node_run_writes_capacity_taints_images_and_conditions_as_one_by_one(rec) -> None:
    """The bulk path (a re-list's run of nodes) writes every column the one-by-one path writes:
    allocatable and capacity (the ledger's too, its version moved once), labels, taints, the
    condition and the images; a node of the run that did not change stays as it was."""
    alpha = Node.objects.get(cluster=rec.cluster, name="thinkcentre-alpha")
    deduction = alpha.allocatable[CPU] - alpha.capacity[CPU]
    version = LiveNodeLedger.objects.get(node=alpha).version
    gamma_before = state(rec.cluster)[3][2]
    alloc = (6000.0, 12 * GIB, 0.0, INF, INF, INF, INF, INF)
    events = [NodeSeen("thinkcentre-alpha", True, True, alloc, labels={"disk": "nvme"},
                       taints=({"key": "gpu", "value": "a100", "effect": "NoSchedule"},), images=("train:2",),
                       image_bytes={"train:2": 7e8}),
              NodeSeen("thinkcentre-beta", True, False, (INF,) * 8)]
    assert rec.apply_many(events) == [CHANGED, CHANGED]
    alpha.refresh_from_db()
    led = LiveNodeLedger.objects.get(node=alpha)
    assert alpha.allocatable[CPU] == 6000.0 and alpha.capacity[CPU] == pytest.approx(6000.0 - deduction)
    assert alpha.capacity[3] != INF and led.capacity[CPU] == alpha.capacity[CPU] and led.version == version + 1
    assert alpha.labels == {"disk": "nvme"} and alpha.taints == [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]
    cond = NodeCondition.objects.get(node=alpha)
    assert cond.images == {"train:2": 7e8} and cond.ready and cond.schedulable and cond.updated_s == 1001.0
    assert NodeCondition.objects.get(node__name="thinkcentre-beta").schedulable is False
    assert state(rec.cluster)[3][2] == gamma_before  # not in the run: untouched
    before = state(rec.cluster)
    assert Reconciler(cluster=rec.cluster, clock=rec.clock).apply_many(events) == [UNCHANGED, UNCHANGED]
    assert state(rec.cluster) == before


def test_a_pods_pending_and_bound_reports_in_one_batch_keep_their_order_and_the_rest_go_in_bulk(rec) -> None:
    """A stream of arrivals puts a pod's pending report and its bound one in the same batch
    between other pods' reports: the batch is applied kind by kind in waves (every pod's first
    report, then every pod's second), so each pod's own reports keep their order."""
    from kalena_web.control import event_batches

    fake = FakeOrchestrator(node_names=NODES)
    rec.apply_many([pending("a-0", cpu=0.5)])
    run_pass(rec.cluster, fake)
    (_, _, node_a), = fake.log
    events = [pending("e-0", cpu=0.5), PodRunning("batch/a-0", node_a, at_s=1003.0), pending("f-0", cpu=0.25),
              PodRunning("batch/e-0", NODES[2], at_s=1004.0)]
    grouped, order = event_batches.grouped(events)
    assert order == [0, 2, 1, 3]  # wave 0: pending e, f, running a; wave 1: running e (after its pending)
    assert rec.apply_many(events) == [CHANGED, CHANGED, CHANGED, CHANGED]
    pods = {name: (st, node) for name, st, node in BatchPod.objects.values_list(
        "workload__name", "state", "workload__node__name")}
    assert pods == {"batch/a-0": ("bound", node_a), "batch/e-0": ("bound", NODES[2]), "batch/f-0": ("pending", None)}
    assert batch_on(rec.cluster, NODES[2]) >= 500  # the pod bound by someone else is charged to its node
