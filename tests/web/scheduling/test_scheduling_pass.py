"""The live scheduling loop: decide with the engine, bind with optimistic concurrency through
the orchestrator port, debit at once, record why-pending."""

from __future__ import annotations

import numpy as np
import pytest

from agents.orchestrators import FakeOrchestrator, StaleBinding
from kalena_engine.errors import InputError
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU, RAM, ir_vector, to_ir
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.inventory.models import Node
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod, WhyPending
from kalena_web.scheduling.services import (
    BatchNameTaken, BatchRejected, _bind_in_ledger, batch_finish, batch_observe_pending_many, batch_requeue, batch_requeue_many,
    batch_submit, scheduling_pass,
)

GIB = 2**30


def submit(cluster, name, cpu=1.0, ram=1.0, **kw):
    v = ir_vector(cpu=cpu, ram=ram)
    return batch_submit(cluster=cluster, name=name, owner=kw.pop("owner", "job-1"),
                        request={"cpu": v[CPU], "ram": v[RAM]}, now_s=1000.0, **kw)


def run_pass(cluster, orchestrator=None):
    return scheduling_pass(cluster=cluster, orchestrator=orchestrator or orchestrator_for(cluster), policy=Policy(),
                           now_s=1001.0, rng=np.random.default_rng(0))


def slack_cpu(cluster) -> dict[str, float]:
    out = {}
    for led in LiveNodeLedger.objects.filter(node__cluster=cluster).select_related("node"):
        out[led.node.name] = to_ir(np.array(led.capacity) - np.array(led.prod_reservation)
                                   - np.array(led.batch_reservation))[CPU]
    return out


def test_pass_binds_and_debits_the_ledger_at_once(live) -> None:
    before = slack_cpu(live)
    for i in range(3):
        submit(live, f"batch/job-1-{i}", cpu=1.0, ram=1.0)
    report = run_pass(live)
    assert report.placed == 3 and report.stale == 0
    after = slack_cpu(live)
    assert sum(before.values()) - sum(after.values()) == pytest.approx(3.0)  # 3 × 1 core debited in flight
    bound = BatchPod.objects.filter(cluster=live, state=BatchPod.BOUND).select_related("workload__node")
    assert bound.count() == 3 and all(p.workload.node is not None for p in bound)
    led = LiveNodeLedger.objects.get(node=bound[0].workload.node)
    assert led.version >= 1


def test_stale_node_takes_no_new_batch_and_why_pending_names_it(live) -> None:
    LiveNodeLedger.objects.filter(node__cluster=live).update(stale=True)
    submit(live, "batch/job-2-0")
    report = run_pass(live)
    assert report.placed == 0
    why = WhyPending.objects.get(pod__workload__name="batch/job-2-0")
    assert why.binding == "telemetry_stale" and why.record["excluded"] == {"telemetry_stale": 3}   # all 3 nodes


def test_too_big_request_is_pending_with_the_shortfall(live) -> None:
    # a whole 16 GiB node's RAM: accepted (a node could hold it), pending beside production
    # (a request no node could ever hold is refused at submission: tests/web/api/test_errors.py)
    submit(live, "batch/huge-0", cpu=1.0, ram=16.0)
    run_pass(live)
    why = WhyPending.objects.get(pod__workload__name="batch/huge-0")
    assert why.binding == "ram"
    (short,) = [s for s in why.record["shortfall"] if s["dim"] == "ram"]
    assert 0 < short["amount"] < 16 and short["unit"] == "GiB"
    assert why.record["reduction"]["fits_nodes"] >= 1


def test_stale_binding_changes_nothing(live) -> None:
    pod = submit(live, "batch/job-3-0")
    led = LiveNodeLedger.objects.filter(node__cluster=live).first()
    before = (led.version, list(led.batch_request))
    assert not _bind_in_ledger([pod], node_id=led.node_id, version=led.version - 1 if led.version else 99, now_s=1001)
    led.refresh_from_db()
    assert (led.version, list(led.batch_request)) == before
    assert BatchPod.objects.get(id=pod.id).state == BatchPod.PENDING


class RefusingOrchestrator(FakeOrchestrator):
    def bind(self, spec, node):
        raise StaleBinding(f"bind {spec.id}: node {node} went away")


def test_refused_binding_is_requeued_and_credited(live) -> None:
    before = slack_cpu(live)
    submit(live, "batch/job-4-0")
    report = run_pass(live, RefusingOrchestrator(node_names=["thinkcentre-alpha"]))
    assert report.failed == 1 and report.placed == 0
    pod = BatchPod.objects.get(workload__name="batch/job-4-0")
    assert pod.state == BatchPod.PENDING and pod.requeues == 1
    assert slack_cpu(live) == pytest.approx(before)


def test_a_lease_lapsing_mid_pass_requeues_every_unbound_pod_and_credits_the_ledgers(live) -> None:
    before = slack_cpu(live)
    for i in range(6):
        submit(live, f"batch/job-6-{i}", cpu=0.5, ram=0.5)
    fake = FakeOrchestrator(node_names=["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"])
    calls = iter(range(100))
    report = scheduling_pass(cluster=live, orchestrator=fake, policy=Policy(), now_s=1001.0,
                             rng=np.random.default_rng(0), keep_going=lambda: next(calls) < 3)
    assert report.stopped_early
    bound = BatchPod.objects.filter(cluster=live, state=BatchPod.BOUND)
    pending = BatchPod.objects.filter(cluster=live, state=BatchPod.PENDING)
    assert report.placed == bound.count() == len(fake.running) and 0 < bound.count() < 6
    assert pending.count() == 6 - bound.count()
    assert all(p.requeues == 1 and "lease" in p.reason for p in pending)  # placed, given back, queued again
    debited = sum(before.values()) - sum(slack_cpu(live).values())
    assert debited == pytest.approx(0.5 * bound.count())  # only what the orchestrator bound stays debited


def test_requeue_many_is_requeue_one_by_one(live) -> None:
    for i in range(4):
        submit(live, f"batch/job-7-{i}", cpu=0.5, ram=0.5)
    run_pass(live)
    pods = list(BatchPod.objects.filter(cluster=live, state=BatchPod.BOUND).select_related("workload"))
    assert len(pods) == 4
    before = slack_cpu(live)
    assert batch_requeue_many(pods=pods[:2], now_s=1002.0, reason="evicted") == 2
    after_many = slack_cpu(live)
    for pod in pods[2:]:
        batch_requeue(pod=pod, now_s=1002.0, reason="evicted")
    after_all = slack_cpu(live)
    freed = {k: after_many[k] - before[k] for k in before}
    assert sum(freed.values()) == pytest.approx(1.0)  # 2 × 0.5 core back
    assert sum(after_all.values()) - sum(after_many.values()) == pytest.approx(1.0)  # the same for the other two
    assert batch_requeue_many(pods=pods, now_s=1003.0, reason="again") == 0  # none is bound any more
    assert {(p.state, p.requeues, p.reason) for p in BatchPod.objects.filter(id__in=[p.id for p in pods])} == {
        (BatchPod.PENDING, 1, "evicted")}
    assert slack_cpu(live) == pytest.approx(after_all)


def test_requeue_and_finish_leave_the_ledgers(live) -> None:
    before = slack_cpu(live)
    pod = submit(live, "batch/job-5-0")
    run_pass(live)
    pod.refresh_from_db()
    batch_requeue(pod=pod, now_s=1002.0, reason="evicted")
    assert slack_cpu(live) == pytest.approx(before)
    run_pass(live)
    pod.refresh_from_db()
    assert pod.state == BatchPod.BOUND
    batch_finish(pod=pod, now_s=1003.0)
    assert slack_cpu(live) == pytest.approx(before)
    assert BatchPod.objects.get(id=pod.id).state == BatchPod.COMPLETED


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        pytest.param({"name": "nonamespace"}, "name", id="name without namespace"),
        pytest.param({"name": "batch/x", "priority": -1}, "priority", id="negative priority"),
        pytest.param({"name": "batch/x", "constraints": {"anti_affinity_terms": [{"labelSelector": {
            "matchExpressions": [{"key": "app", "operator": "Near"}]}}]}}, "operator", id="bad selector operator"),
    ],
)
def test_bad_submission_names_the_field_and_stores_nothing(live, kwargs, field) -> None:
    with pytest.raises(Exception) as caught:
        submit(live, **kwargs)
    assert field in str(caught.value)
    assert not BatchPod.objects.filter(cluster=live).exists()


def test_a_duplicate_name_with_another_spec_is_refused_naming_the_fields(live) -> None:
    first = submit(live, "batch/dup-0")
    assert submit(live, "batch/dup-0") == first  # the same spec again: the same pod, nothing new
    with pytest.raises(BatchNameTaken, match="exists") as err:
        submit(live, "batch/dup-0", priority=first.workload.priority + 1)
    assert err.value.differing == ("priority",)


@pytest.mark.parametrize("labels, field", [
    ({"app": ["a", "b"]}, "labels.app"),
    ({"app": 7}, "labels.app"),
    ({"app": None}, "labels.app"),
    ({"": "x"}, "labels"),
    (["app=a"], "labels"),
])
def test_a_label_that_is_not_a_string_pair_is_refused_and_the_queue_goes_on(live, labels, field) -> None:
    with pytest.raises(BatchRejected) as err:
        submit(live, "batch/bad-0", labels=labels)
    assert err.value.field == field
    assert not BatchPod.objects.filter(workload__name="batch/bad-0").exists()  # nothing stored
    (watched,) = batch_observe_pending_many(cluster=live, pods=[dict(  # the watch's path refuses it the same way
        ref="batch/bad-1", request=[1000.0, GIB] + [0.0] * 6, limit=[1000.0, GIB] + [0.0] * 6, labels=labels,
        priority=0, owner="Job/x", at_s=1000.0)], now_s=1000.0)
    assert isinstance(watched, BatchRejected) and watched.field == field
    assert not BatchPod.objects.filter(workload__name="batch/bad-1").exists()
    submit(live, "batch/good-0")
    assert run_pass(live).placed == 1


def test_a_submitted_required_node_affinity_is_honoured_and_a_malformed_one_refused(live) -> None:
    target = Node.objects.filter(cluster=live).order_by("name").values_list("name", flat=True)[1]
    affinity = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [target]}]}]
    for i in range(3):
        submit(live, f"batch/aff-{i}", cpu=0.1, ram=0.1, constraints={"node_affinity": affinity})
    assert run_pass(live).placed == 3
    assert set(BatchPod.objects.filter(workload__name__startswith="batch/aff-")
               .values_list("workload__node__name", flat=True)) == {target}
    with pytest.raises(InputError) as err:  # as every malformed constraint (the REST API answers 400)
        submit(live, "batch/aff-bad", constraints={"node_affinity": [{"matchExpressions": [
            {"key": "pool", "operator": "Near", "values": ["x"]}]}]})
    assert err.value.field == "constraints.node_affinity[0].matchExpressions[0]"
    assert not BatchPod.objects.filter(workload__name="batch/aff-bad").exists()


def test_one_pass_binds_many_pods_on_one_node_without_calling_its_own_bindings_stale(live) -> None:
    for i in range(12):
        submit(live, f"batch/many-{i}", cpu=0.1, ram=0.1)
    report = run_pass(live)
    assert (report.placed, report.stale) == (12, 0)
    versions = LiveNodeLedger.objects.filter(node__cluster=live).values_list("version", flat=True)
    assert max(versions) == 1  # each touched node's version bumped once for the whole pass


def test_a_live_gang_without_min_member_is_all_or_nothing(live) -> None:
    slack = slack_cpu(live)                              # cores of slack on each of the three nodes
    fit = sum(int(np.floor(s + 1e-9)) for s in slack.values())
    size = fit + 1                                       # one 1-core pod more than the slack holds
    for i in range(size):
        submit(live, f"batch/mpi-{i}", cpu=1.0, ram=0.1, owner="mpi", gang="mpi")
    report = run_pass(live)
    # min_member defaults to the gang's size: only size − 1 pods would fit, so none is placed
    assert report.placed == 0
    assert BatchPod.objects.filter(cluster=live, gang="mpi", state=BatchPod.BOUND).count() == 0
    why = WhyPending.objects.get(pod__workload__name="batch/mpi-0")
    assert why.record["gang"]["min_member"] == size and why.record["gang"]["placeable"] == fit
    assert slack_cpu(live) == pytest.approx(slack)      # the rolled-back gang debited nothing


def test_a_live_gang_places_whole_and_a_requeued_member_rejoins_its_running_gang(live) -> None:
    pods = [submit(live, f"batch/pair-{i}", cpu=1.0, ram=0.1, owner="pair", gang="pair") for i in range(2)]
    assert run_pass(live).placed == 2
    pods[0].refresh_from_db()
    batch_requeue(pod=pods[0], now_s=1002.0, reason="evicted")
    # one member still runs: it counts toward the gang's size of 2, so the requeued one is placed alone
    assert run_pass(live).placed == 1
    assert BatchPod.objects.filter(cluster=live, gang="pair", state=BatchPod.BOUND).count() == 2
def test_the_production_cache_is_reused_until_a_production_pod_moves(live) -> None:
    from kalena_web.inventory.models import Node, Workload
    from kalena_web.scheduling import selectors

    rows = selectors.node_rows(cluster=live)
    row_of_node = {r.id: i for i, r in enumerate(rows)}
    cache: dict = {}
    first = selectors.production_pods(cluster=live, row_of_node=row_of_node, cache=cache)
    assert selectors.production_pods(cluster=live, row_of_node=row_of_node, cache=cache) is first
    prod = Workload.objects.filter(cluster=live, kind=Workload.PRODUCTION).first()
    other = Node.objects.filter(cluster=live).exclude(id=prod.node_id).first()
    Workload.objects.filter(id=prod.id).update(node=other)
    moved = selectors.production_pods(cluster=live, row_of_node=row_of_node, cache=cache)
    assert moved is not first
    assert moved.node[list(moved.ids).index(prod.name)] == row_of_node[other.id]


class UnpullableOrchestrator(FakeOrchestrator):
    """Every engine refuses to run the pod's container (its image is on no node and the
    registry cannot be reached), in Docker's words."""

    tried: list

    def bind(self, spec, node):
        from agents.orchestrators import OrchestratorError

        self.tried.append(node)
        raise OrchestratorError(f'engine unix:///run/{node}/docker.sock ({node}) run: Get '
                                f'"https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host')


def test_a_pod_no_engine_can_run_backs_off_says_why_and_tries_another_node(live, caplog) -> None:
    from kalena_web.scheduling.whypending import pending_message

    submit(live, "batch/nope-0", cpu=0.5, image="kalena/nope:1")  # every node has the room
    orch = UnpullableOrchestrator(node_names=[n.name for n in Node.objects.filter(cluster=live)])
    orch.tried = []
    attempts, now = [], 1001.0
    while now < 1001.0 + 200 and len(orch.tried) < 3:
        before = len(orch.tried)
        scheduling_pass(cluster=live, orchestrator=orch, policy=Policy(), now_s=now, rng=np.random.default_rng(0))
        if len(orch.tried) > before:
            attempts.append(now)
        now += 5.0  # the Celery loop's pass interval
    # backoff 10 s, then 20 s (not a pass every 5 s); a node that refused is not tried again while another fits
    assert [b - a for a, b in zip(attempts, attempts[1:])] == [10.0, 20.0]
    assert len(set(orch.tried)) == 3, orch.tried  # each attempt on a node that had not refused it
    pod = BatchPod.objects.select_related("why_pending").get(workload__name="batch/nope-0")
    assert pod.state == BatchPod.PENDING and pod.requeues == 3 and pod.retry_s == attempts[-1] + 40.0
    assert "no such host" in pod.reason and orch.tried[-1] in pod.reason
    record = pod.why_pending.record
    assert pod.why_pending.binding == "bind_refused"
    assert [r["node"] for r in record["refused"]] == orch.tried[::-1]
    # the 4th attempt: every node refused it and is still avoided, so it is retried on one of them
    scheduling_pass(cluster=live, orchestrator=orch, policy=Policy(), now_s=pod.retry_s, rng=np.random.default_rng(0))
    assert len(orch.tried) == 4 and orch.tried[3] in orch.tried[:3]
    text = pending_message(record)
    assert f"{orch.tried[-1]} refused to run it: engine unix:///run/{orch.tried[-1]}" in text
    assert "no such host" in text and "avoided until" in text and "Next attempt at" in text
    # the console log says it once per pod, node and error
    said = [r.getMessage() for r in caplog.records if "batch/nope-0" in r.getMessage()]
    assert len(said) == 3 and all("no such host" in m for m in said)


def test_the_backoff_survives_a_restart_and_a_refusing_node_is_reused_when_no_other_fits(live) -> None:
    from kalena_web.scheduling.lifecycle import bind_backoff_s

    assert [bind_backoff_s(n) for n in range(1, 8)] == [10, 20, 40, 80, 160, 300, 300]
    names = [n.name for n in Node.objects.filter(cluster=live)]
    submit(live, "batch/nope-1", image="kalena/nope:1")
    orch = UnpullableOrchestrator(node_names=names)
    orch.tried = []
    scheduling_pass(cluster=live, orchestrator=orch, policy=Policy(), now_s=1001.0, rng=np.random.default_rng(0))
    # a new scheduler (a fresh cache and queue, as after a restart) still waits out the backoff
    report = scheduling_pass(cluster=live, orchestrator=orch, policy=Policy(), now_s=1006.0,
                             rng=np.random.default_rng(0))
    assert report.pending == 0 and len(orch.tried) == 1
    # past the backoff, with every other node kept off batch, the refusing node is tried again
    Node.objects.filter(cluster=live).exclude(name=orch.tried[0]).update(takes_batch=False)
    scheduling_pass(cluster=live, orchestrator=orch, policy=Policy(), now_s=1011.0, rng=np.random.default_rng(0))
    assert orch.tried == [orch.tried[0]] * 2
    # once an engine runs it, the backoff starts again from 10 s
    from kalena_web.scheduling.lifecycle import batch_requeue

    scheduling_pass(cluster=live, orchestrator=FakeOrchestrator(node_names=names), policy=Policy(), now_s=1031.0,
                    rng=np.random.default_rng(0))
    pod = BatchPod.objects.get(workload__name="batch/nope-1")
    assert pod.state == BatchPod.BOUND and (pod.refusals, pod.retry_s) == (0, None)
    batch_requeue(pod=pod, now_s=1040.0, reason="evicted")
    scheduling_pass(cluster=live, orchestrator=orch, policy=Policy(), now_s=1041.0, rng=np.random.default_rng(0))
    assert BatchPod.objects.get(id=pod.id).retry_s == 1041.0 + 10.0


def test_only_the_pod_a_node_refused_has_the_refusal_in_its_why_pending(live) -> None:
    from types import SimpleNamespace

    from kalena_web.scheduling.whypending import why_pending_record

    a, b = submit(live, "batch/twin-0"), submit(live, "batch/twin-1")  # one entry: identical pods
    BatchPod.objects.filter(id=a.id).update(refused_on={"thinkcentre-beta": {"until_s": 2000.0, "error": "no such host"}})
    engine = SimpleNamespace(entry=0, to_dict=lambda: {"binding": "cpu", "nodes_total": 3, "excluded": {"cpu": 3}})
    assert why_pending_record([engine], [[a.id, b.id]], {a.id, b.id}, 1500.0) == 2
    records = {w.pod_id: w.record for w in WhyPending.objects.filter(pod_id__in=[a.id, b.id])}
    assert records[a.id]["refused"] == [{"node": "thinkcentre-beta", "until_s": 2000.0, "error": "no such host"}]
    assert "refused" not in records[b.id] and records[b.id]["excluded"] == {"cpu": 3}
