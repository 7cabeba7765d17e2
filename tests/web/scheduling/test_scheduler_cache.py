"""The scheduler's own cache, its queue and its binding pool: decisions assumed in the record at
once, bindings answered off the decision path (a refused one returns the pod and its room), one
statement per table per pass, and a new scheduler that decides on the record alone."""

from __future__ import annotations

import threading
from collections import defaultdict

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.orchestrators import FakeOrchestrator, StaleBinding
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU, RAM, ir_vector, to_ir
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.binder import BindingPool
from kalena_web.scheduling.cache import SchedulerCache, residents_of
from kalena_web.scheduling.cycle import PassReport, scheduling_pass
from kalena_web.scheduling.lifecycle import batch_requeue, batch_unconfirmed
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit

NODES = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]


def submit(cluster, name, cpu=0.5, ram=0.5, owner="job-1"):
    v = ir_vector(cpu=cpu, ram=ram)
    return batch_submit(cluster=cluster, name=name, owner=owner, request={"cpu": v[CPU], "ram": v[RAM]},
                        now_s=1000.0)


def batch_cpu(cluster) -> float:
    """Cores of batch request the cluster's ledgers hold."""
    return sum(to_ir(np.array(led.batch_request))[CPU] for led in LiveNodeLedger.objects.filter(node__cluster=cluster))


def run(cluster, orchestrator, *, cache=None, binder=None, keep_going=None, now_s=1001.0):
    return scheduling_pass(cluster=cluster, orchestrator=orchestrator, policy=Policy(), now_s=now_s,
                           rng=np.random.default_rng(0), cache=cache, binder=binder, keep_going=keep_going)


class GatedOrchestrator(FakeOrchestrator):
    """Binds on pool threads, each call waiting until ``gate`` opens; refuses the pods named in
    ``refuse`` (409: another scheduler bound them)."""

    bind_concurrency = 2

    def __init__(self, refuse=()):
        super().__init__(node_names=NODES)
        self.gate = threading.Event()
        self.refuse = set(refuse)
        self.calls: list[str] = []

    def bind(self, spec, node):
        assert self.gate.wait(30), "the test never opened the gate"
        self.calls.append(spec.id)
        if spec.id in self.refuse:
            raise StaleBinding(f"bind {spec.id}: 409 already assigned")
        super().bind(spec, node)


def test_a_pass_does_not_wait_for_its_bindings_and_a_refused_one_returns_pod_and_room(live) -> None:
    for i in range(4):
        submit(live, f"batch/job-1-{i}")
    orch = GatedOrchestrator(refuse={"batch/job-1-0"})
    cache = SchedulerCache(cluster=live)
    binder = BindingPool(orch, on_answer=lambda pod_id, _bound: cache.in_flight.pop(pod_id, None))
    first = run(live, orch, cache=cache, binder=binder)
    # decided and assumed: bound in the record with the ledger debited, no call answered yet
    assert (first.assumed, first.placed) == (4, 0) and len(cache.in_flight) == 4
    assert BatchPod.objects.filter(cluster=live, state=BatchPod.BOUND).count() == 4
    assert batch_cpu(live) == pytest.approx(2.0)  # 4 × 0.5 core in flight
    orch.gate.set()
    binder.close(now_s=1002.0, report=first)  # every answer applied in this thread
    assert first.placed == 3 and first.stale_bindings == 1 and not cache.in_flight
    # the REST pod refused as stale goes back to the queue with its room given back
    refused = BatchPod.objects.get(workload__name="batch/job-1-0")
    assert refused.state == BatchPod.PENDING and refused.requeues == 1
    assert batch_cpu(live) == pytest.approx(1.5)
    second = run(live, FakeOrchestrator(node_names=NODES), cache=cache)
    assert second.pending == 1 and second.placed == 1


def test_a_lease_lost_while_calls_wait_stops_the_pool_before_the_next_call(live) -> None:
    for i in range(6):
        submit(live, f"batch/job-2-{i}")
    leader = {"held": True}
    calls_before_loss = 2

    def keep_going():
        return leader["held"]

    class LosingOrchestrator(GatedOrchestrator):
        def bind(self, spec, node):
            super().bind(spec, node)
            if len(self.calls) == calls_before_loss:
                leader["held"] = False

    losing = LosingOrchestrator()
    losing.bind_concurrency = 1  # one call at a time, made in the pass's thread
    losing.gate.set()
    report = run(live, losing, keep_going=keep_going)
    assert len(losing.calls) == calls_before_loss and report.placed == calls_before_loss
    assert report.stopped_early
    pending = BatchPod.objects.filter(cluster=live, state=BatchPod.PENDING)
    assert pending.count() == 6 - calls_before_loss and all(p.requeues == 1 for p in pending)
    assert batch_cpu(live) == pytest.approx(0.5 * calls_before_loss)  # only the bound pods hold room


def test_the_queue_reads_a_pod_whole_once_until_it_is_queued_again(live) -> None:
    submit(live, "batch/huge-0", cpu=64.0, ram=1.0)  # fits no node: stays pending pass after pass
    submit(live, "batch/job-3-0")
    orch = FakeOrchestrator(node_names=NODES)
    cache = SchedulerCache(cluster=live)
    run(live, orch, cache=cache)
    # the bound pod is a resident of its node from the moment it was assumed (no read of it whole)
    assert cache.queue.full_reads == 2 and residents_of(cache) == 1
    again = run(live, orch, cache=cache, now_s=1002.0)
    assert again.pending == 1 and again.placed == 0 and cache.queue.full_reads == 2  # nothing new read whole
    bound = BatchPod.objects.get(workload__name="batch/job-3-0")
    batch_requeue(pod=bound, now_s=1003.0, reason="evicted")
    third = run(live, FakeOrchestrator(node_names=NODES), cache=cache, now_s=1004.0)  # the pod no longer runs
    assert third.pending == 2 and third.placed == 1 and cache.queue.full_reads == 3  # the requeued pod, afresh
    assert third.generation == 3


@pytest.mark.parametrize("pods", [3, 24])
def test_a_pass_writes_its_decisions_with_a_fixed_number_of_statements(live, pods: int) -> None:
    for i in range(pods):
        submit(live, f"batch/job-4-{i}", cpu=0.1, ram=0.1, owner=f"job-{i % 3}")
    orch = FakeOrchestrator(node_names=NODES)
    with CaptureQueriesContext(connection) as queries:
        report = run(live, orch)
    assert report.placed == pods
    writes = [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(("UPDATE", "WITH",
                                                                                                   "INSERT", "DELETE"))]
    # ledgers, workloads, reservations (delete + insert), pods, why-pending (delete; none to insert)
    assert len(writes) == 6, writes


def test_a_new_scheduler_decides_on_the_record_alone(live) -> None:
    for i in range(3):
        submit(live, f"batch/job-5-{i}", cpu=1.0, ram=1.0)
    orch = GatedOrchestrator()
    old = SchedulerCache(cluster=live)
    binder = BindingPool(orch)
    run(live, orch, cache=old, binder=binder)  # assumed; the calls wait when the successor takes over
    successor = SchedulerCache(cluster=live)  # knows nothing but the record
    snap = successor.snapshot(now_s=1002.0, cooldown_s=600.0)
    assert snap.pending == [] and snap.generation == 1 and snap.cluster is None  # nothing decided twice
    submit(live, "batch/job-5-3", cpu=1.0, ram=1.0)
    snap = successor.snapshot(now_s=1003.0, cooldown_s=600.0)
    assert [r.name for r in snap.pending] == ["batch/job-5-3"]
    assert residents_of(successor) == 3  # the assumed pods count on their nodes
    assert batch_cpu(live) == pytest.approx(3.0)
    orch.gate.set()
    report = PassReport()
    binder.close(now_s=1004.0, report=report)
    assert report.placed == 3 and sorted(orch.calls) == [f"batch/job-5-{i}" for i in range(3)]


def test_a_capped_pass_takes_whole_gangs_and_defers_the_rest(live) -> None:
    for i in range(3):
        submit(live, f"batch/solo-{i}", cpu=0.1, ram=0.1, owner="solo")
    for i in range(3):
        v = ir_vector(cpu=0.1, ram=0.1)
        batch_submit(cluster=live, name=f"batch/gang-{i}", owner="trainer", request={"cpu": v[CPU], "ram": v[RAM]},
                     gang="trainer", min_member=3, now_s=1000.0)
    for i in range(3, 5):
        submit(live, f"batch/solo-{i}", cpu=0.1, ram=0.1, owner="solo")
    cache = SchedulerCache(cluster=live)
    report = scheduling_pass(cluster=live, orchestrator=FakeOrchestrator(node_names=NODES), policy=Policy(),
                             now_s=1001.0, rng=np.random.default_rng(0), cache=cache, max_pods=4)
    # the first 4 in queue order hold one member of the gang: its other two come along, whole
    assert (report.pending, report.placed, report.deferred) == (8, 6, 2)
    bound = set(BatchPod.objects.filter(cluster=live, state=BatchPod.BOUND).values_list("workload__name", flat=True))
    assert {"batch/gang-0", "batch/gang-1", "batch/gang-2"} <= bound and "batch/solo-4" not in bound
    rest = scheduling_pass(cluster=live, orchestrator=FakeOrchestrator(node_names=NODES), policy=Policy(),
                           now_s=1002.0, rng=np.random.default_rng(0), cache=cache, max_pods=4)
    assert (rest.pending, rest.placed, rest.deferred) == (2, 2, 0)


def test_the_cache_reads_a_node_whole_again_only_when_its_row_changed(live) -> None:
    from kalena_web.control.models import NodeCondition
    from kalena_web.inventory.models import Node
    from kalena_web.scheduling.selectors import node_rows

    submit(live, "batch/huge-1", cpu=64.0, ram=1.0)  # never fits: every pass snapshots the nodes
    cache = SchedulerCache(cluster=live)
    cache.snapshot(now_s=1001.0, cooldown_s=600.0)
    assert cache.nodes_read == 3
    cache.snapshot(now_s=1002.0, cooldown_s=600.0)
    assert cache.nodes_read == 3  # nothing changed: nothing read whole
    beta = Node.objects.get(cluster=live, name="thinkcentre-beta")
    NodeCondition.objects.filter(node=beta).update(schedulable=False)  # cordoned by another process
    snap = cache.snapshot(now_s=1003.0, cooldown_s=600.0)
    assert cache.nodes_read == 4
    full = node_rows(cluster=live)  # the same rows a full read gives
    assert [(r.id, r.name, r.ready, r.version, r.labels) for r in snap.rows] == [
        (r.id, r.name, r.ready, r.version, r.labels) for r in full]
    assert all(np.array_equal(a.batch_request, b.batch_request) and np.array_equal(a.capacity, b.capacity)
               for a, b in zip(snap.rows, full, strict=True))
    assert [r.ready for r in snap.rows if r.name == "thinkcentre-beta"] == [False]


def test_the_watch_feeds_the_cache_queued_pods_whole_and_confirms_what_it_assumed(live) -> None:
    """The reconciler hands the pods it queued to the cache (no row read whole by the queue)
    and its PodRunning reports confirm the assumptions; a binding refused forgets the pod."""
    from agents.orchestrators.events import PodPending, PodRunning
    from kalena_web.control.reconciler import Reconciler

    v = ir_vector(cpu=0.5, ram=0.5)
    cache = SchedulerCache(cluster=live)
    rec = Reconciler(cluster=live, clock=lambda: 1000.0, listeners=[cache.watch_feed])
    rec.apply_many([PodPending(f"batch/w-{i}", tuple(v), tuple(v), owner="job-w", at_s=999.0, uid=f"u{i}")
                    for i in range(3)])
    orch = GatedOrchestrator(refuse={"batch/w-2"})
    binder = BindingPool(orch, on_answer=cache.answer, on_acknowledged=cache.acknowledge)
    report = run(live, orch, cache=cache, binder=binder)
    assert report.assumed == 3 and cache.queue.fed == 3 and cache.queue.full_reads == 0
    orch.gate.set()
    binder.close(now_s=1002.0, report=report)
    # bound ones wait for the watch; the refused one (409: a watched pod, dropped) is forgotten
    assert set(cache.in_flight) == set(cache.bound_unconfirmed) and len(cache.in_flight) == 2
    # the two the API accepted are not the record's to question while the watch is behind (600 s)
    assert cache.acknowledged_ids(1040.0) == set(cache.in_flight)
    assert len(batch_unconfirmed(cluster=live, now_s=1040.0)) == 2
    assert batch_unconfirmed(cluster=live, now_s=1040.0, skip=cache.acknowledged_ids(1040.0)) == []
    node = {pod.name: n for pod, n, _ in cache.in_flight.values()}
    rec.apply_many([PodRunning(name, n, at_s=1003.0) for name, n in node.items()])
    cache.drain()
    assert not cache.in_flight and cache.confirmed == 2 and not cache.acknowledged
    assert BatchPod.objects.filter(cluster=live, state=BatchPod.BOUND, running_s__isnull=False).count() == 2


def test_a_long_lived_cache_reads_the_cluster_before_the_first_pod_arrives(live) -> None:
    """A ``kalena watch`` scheduler's cache (``warm``) reads every node once at its first
    snapshot, pods pending or not, as an informer fills at start: the first pass that has pods
    reads no node whole (issue 32: every instance read the whole cluster there, inside the
    burst it decides). A cache made for one pass still reads nothing while none is pending."""
    cold = SchedulerCache(cluster=live)
    assert cold.snapshot(now_s=1000.0, cooldown_s=600.0).cluster is None and cold.nodes_read == 0
    cache = SchedulerCache(cluster=live, warm=True)
    snap = cache.snapshot(now_s=1000.0, cooldown_s=600.0)
    assert snap.cluster is None and not snap.pending and cache.nodes_read == 3
    cache.snapshot(now_s=1000.5, cooldown_s=600.0)
    assert cache.nodes_read == 3  # once
    from kalena_web.control.models import NodeCondition

    NodeCondition.objects.filter(node__cluster=live, node__name="thinkcentre-beta").update(schedulable=False)
    cache.snapshot(now_s=1000.7, cooldown_s=600.0)
    assert cache.nodes_read == 4  # kept current while idle: the moved node alone
    submit(live, "batch/job-1-0")
    snap = cache.snapshot(now_s=1001.0, cooldown_s=600.0)
    assert len(snap.pending) == 1 and len(snap.rows) == 3 and cache.nodes_read == 4
    assert [r.ready for r in snap.rows if r.name == "thinkcentre-beta"] == [False]



def test_the_kubelet_room_counts_every_bound_pod_without_reading_them_again(live) -> None:
    """The kubelet's room (published batch capacity less what the bound pods hold, case C11)
    comes from the cache's residents: pods this cache assumed and pods another scheduler bound
    count exactly as the record's read counts them, and a finished pod stops counting."""
    from kalena_web.inventory.models import Node
    from kalena_web.kubehooks.models import PublishedBatch
    from kalena_web.kubehooks.selectors import kubelet_room
    from kalena_web.scheduling.lifecycle import batch_finish

    for node in Node.objects.filter(cluster=live):
        PublishedBatch.objects.create(node=node, cpu_mcpu=8000.0, memory_bytes=16 * 2**30, changed_s=1000.0)
    fake = FakeOrchestrator(node_names=NODES)
    for i in range(4):
        submit(live, f"batch/mine-{i}", cpu=0.1 + i / 20, ram=0.25)
    cache = SchedulerCache(cluster=live)
    assert run(live, fake, cache=cache).placed == 4
    for i in range(3):
        submit(live, f"batch/other-{i}", cpu=0.2, ram=0.5, owner="job-2")
    assert run(live, fake, now_s=1002.0).placed == 3  # another scheduler, with a cache of its own
    batch_finish(pod=BatchPod.objects.get(workload__name="batch/mine-0"), now_s=1003.0, outcome="succeeded")
    submit(live, "batch/huge", cpu=64.0)  # never fits: the next passes take snapshots
    cache.snapshot(now_s=1004.0, cooldown_s=600.0)  # reads the other scheduler's pods once
    with CaptureQueriesContext(connection) as queries:
        snap = cache.snapshot(now_s=1005.0, cooldown_s=600.0)
    from_record = kubelet_room(cluster=live, rows=snap.rows)
    assert snap.cluster.kubelet is not None and from_record is not None
    assert np.array_equal(snap.cluster.kubelet.room, from_record.room)
    assert sorted(from_record.room[:, 0]) != [8000.0] * 3  # the bound pods hold room on their nodes
    # no bound pod's request read again (the evicted ones still terminating are: a small read)
    assert not [q["sql"] for q in queries.captured_queries if '."request"' in q["sql"] and "'bound'" in q["sql"]]


def test_pods_another_scheduler_bound_group_as_the_record_does_and_each_template_is_read_once(live) -> None:
    """Bound pods this cache did not assume (another shard's, another scheduler's) become residents
    grouped exactly as the record's read groups them — pods alike in owner, namespace, labels and
    constraints share a template, any difference splits them, each pod keeps its own request — and
    on PostgreSQL only the first pod of each template and request is read whole."""
    import re

    from kalena_web.scheduling.selectors import batch_residents

    def queue(name, owner, cpu, **kw):
        batch_submit(cluster=live, name=name, owner=owner, request={"cpu": ir_vector(cpu=cpu)[CPU]}, now_s=1000.0, **kw)

    for i in range(5):
        queue(f"batch/a-{i}", "job-a", 0.2, labels={"app": "a", "team": "x"})
    for i in range(3):
        queue(f"batch/b-{i}", "job-a", 0.3, labels={"team": "x", "app": "b"})
    queue("batch/b-3", "job-a", 0.4, labels={"app": "b", "team": "x"})  # b's template, another request
    queue("batch/c-0", "job-c", 0.1, constraints={"tolerations": ["gpu"]})
    assert run(live, FakeOrchestrator(node_names=NODES)).placed == 10  # another scheduler: none assumed here
    cache = SchedulerCache(cluster=live)
    submit(live, "batch/huge", cpu=64.0)  # never fits: the snapshot is taken, nothing is decided
    with CaptureQueriesContext(connection) as queries:
        snap = cache.snapshot(now_s=1002.0, cooldown_s=600.0)
    record = batch_residents(cluster=live, row_of_node={r.id: i for i, r in enumerate(snap.rows)})

    def groups(residents):
        return sorted((int(n), int(c), t.owner, tuple(sorted(t.labels.items())), len(t.tolerations))
                      for n, c, t in zip(residents.node, residents.count,
                                         (residents.templates[k] for k in residents.template), strict=True))

    assert groups(snap.cluster.batch) == groups(record)
    assert len(snap.cluster.batch.templates) == 3 and int(snap.cluster.batch.count.sum()) == 10
    held: dict[int, float] = defaultdict(float)
    for pod in BatchPod.objects.filter(cluster=live, state=BatchPod.BOUND).select_related("workload"):
        held[pod.workload.node_id] += pod.workload.request[CPU]
    assert {n: float(v[CPU]) for n, v in cache._bound_requests().items()} == pytest.approx(held)
    if connection.vendor == "postgresql":  # one read whole: the first pod of each template and request
        whole = [q["sql"] for q in queries.captured_queries
                 if q["sql"].startswith('SELECT "scheduling_batchpod"."id"') and '"inventory_workload"."constraints"' in q["sql"]
                 and '"scheduling_batchpod"."state"' not in q["sql"] and "MD5" not in q["sql"] and "= ANY(" in q["sql"]]
        assert len(whole) == 1 and len(re.findall(r"\d+", re.search(r"ANY\('\{([^}]*)\}", whole[0])[1])) == 4, whole
