"""The reconciler on pods Kalena started itself (Docker, Swarm; kalena_web/control/started.py):
only the current placement's events count, an eviction requeues exactly once, an OOM kill is
recorded with its numbers unless the agent's own report explains it, a vanished container or
a full re-list without it requeues a bound pod — and the same event twice changes nothing."""

from __future__ import annotations

import time

import numpy as np
import pytest

from agents.orchestrators.events import PodFinished, PodGone, Resynced
from kalena_engine.policy import Policy
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.control.reconciler import CHANGED, UNCHANGED, Reconciler
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit, scheduling_pass
from kalena_web.telemetry.models import IngestBatch, MitigationEvent

MIB = 2**20


@pytest.fixture
def bound(live):
    now = time.time()
    LiveNodeLedger.objects.filter(node__cluster=live).update(stale=False, last_sample_s=now)
    batch_submit(cluster=live, name="batch/job-0", owner="job/j", request={"cpu": 100, "ram": 64 * MIB},
                 limit={"cpu": 200, "ram": 128 * MIB}, now_s=now - 100)
    scheduling_pass(cluster=live, orchestrator=orchestrator_for(live), policy=Policy(), now_s=now - 100,
                    rng=np.random.default_rng(0))
    pod = BatchPod.objects.select_related("workload__node").get(workload__name="batch/job-0")
    assert pod.state == BatchPod.BOUND
    return pod


def state(pod):
    pod = BatchPod.objects.select_related("workload__node").get(id=pod.id)
    return pod.state, pod.requeues, pod.workload.node.name if pod.workload.node_id else None


def test_an_eviction_requeues_once_and_an_earlier_placement_changes_nothing(live, bound) -> None:
    rec = Reconciler(cluster=live)
    node = bound.workload.node.name
    other = next(n.name for n in live.nodes.all() if n.name != node)
    late = PodFinished(ref="batch/job-0", node=other, outcome="succeeded", reason="Completed", exit_code=0, at_s=1.0)
    assert rec.apply(late) == UNCHANGED and state(bound) == ("bound", 0, node)   # another placement's end
    evicted = PodFinished(ref="batch/job-0", node=node, outcome="evicted", reason="Killed (signal 15)", exit_code=143,
                          at_s=time.time())
    assert rec.apply(evicted) == CHANGED and state(bound) == ("pending", 1, None)
    assert rec.apply(evicted) == UNCHANGED and state(bound) == ("pending", 1, None)  # requeued exactly once
    record = EvictionRecord.objects.get(workload__name="batch/job-0")
    assert record.cause == "orchestrator" and record.node.name == node  # the owner × node cooldown
    assert BatchPod.objects.get(id=bound.id).reason == "Killed (signal 15) on " + node


def test_an_oom_kill_is_recorded_with_its_numbers(live, bound) -> None:
    node = bound.workload.node.name
    oom = PodFinished(ref="batch/job-0", node=node, outcome="oom", reason="OOMKilled: memory limit 134217728 bytes",
                      exit_code=137, at_s=time.time())
    assert Reconciler(cluster=live).apply(oom) == CHANGED
    pod = BatchPod.objects.get(id=bound.id)
    assert (pod.state, pod.outcome) == ("completed", "oom") and "exit 137" in pod.reason
    record = EvictionRecord.objects.get(workload__name="batch/job-0")
    assert record.cause == "oom_kill" and record.detail["limit"] == 128 * MIB and record.detail["request"] == 64 * MIB


def test_an_oom_the_agent_explains_is_its_eviction(live, bound) -> None:
    w = bound.workload
    now = time.time()
    batch = IngestBatch.objects.create(node=w.node, batch_id="a:1", kind=IngestBatch.ACTION, shard=0, ts=now,
                                       received_s=now, stored_s=now)
    MitigationEvent.objects.create(batch=batch, node=w.node, ts=time.time(), action="evict", reason="priority",
                                   workload=w, workload_name=w.name, trigger_source="poll", result_ok=True)
    oom = PodFinished(ref="batch/job-0", node=w.node.name, outcome="oom", reason="OOMKilled", exit_code=137,
                      at_s=time.time())
    assert Reconciler(cluster=live).apply(oom) == CHANGED
    assert state(bound) == ("pending", 1, None)
    assert not EvictionRecord.objects.filter(cause__in=("oom_kill", "orchestrator")).exists()  # the agent's is the record


def test_a_vanished_container_or_a_relist_without_it_requeues(live, bound) -> None:
    rec = Reconciler(cluster=live)
    nodes = frozenset(live.nodes.values_list("name", flat=True))
    recent = Resynced(pods=frozenset(), nodes=nodes, at_s=(bound.bound_s or 0) + 5)
    assert rec.apply(recent) == UNCHANGED and state(bound)[0] == "bound"  # bound 5 s ago: not listed yet is fine
    listed = Resynced(pods=frozenset({"batch/job-0"}), nodes=nodes, at_s=time.time())
    assert rec.apply(listed) == UNCHANGED and state(bound)[0] == "bound"
    assert rec.apply(Resynced(pods=frozenset(), nodes=nodes, at_s=time.time())) == CHANGED
    assert state(bound) == ("pending", 1, None)
    assert rec.apply(PodGone(ref="batch/job-0", at_s=time.time())) == UNCHANGED  # pending: nothing to take off


def test_an_agent_eviction_not_yet_recorded_keeps_the_pod_off_that_node(live, bound) -> None:
    # the agent's evict action is stored; its why-evicted record waits for the batch to settle,
    # but the watch requeues the pod at once: the next pass must not put it back on that node
    w = bound.workload
    node = w.node
    now = time.time()
    batch = IngestBatch.objects.create(node=node, batch_id="a:2", kind=IngestBatch.ACTION, shard=0, ts=now,
                                       received_s=now, stored_s=now)
    MitigationEvent.objects.create(batch=batch, node=node, ts=now, action="evict", reason="priority", workload=w,
                                   workload_name=w.name, tier="batch", trigger_source="poll", result_ok=True)
    BatchPod.objects.filter(id=bound.id).update(state=BatchPod.PENDING)
    from kalena_web.inventory.models import Workload
    Workload.objects.filter(id=w.id).update(node=None)
    assert not EvictionRecord.objects.exists()
    scheduling_pass(cluster=live, orchestrator=orchestrator_for(live), policy=Policy(), now_s=now + 1,
                    rng=np.random.default_rng(0))
    pod_state, _, placed_on = state(bound)
    assert placed_on != node.name, (pod_state, placed_on)


@pytest.mark.parametrize("reason, drained, cause, words", [
    ("Shutdown", True, "node_drained", "node drained"),   # `docker node update --availability drain`
    ("NodeLost", False, "node_lost", "node lost"),        # its node (engine) was lost
    ("Shutdown", False, "orchestrator", "stopped by the orchestrator"),
])
def test_a_drain_and_a_lost_node_are_recorded_as_such_not_as_node_pressure(live, bound, capsys, reason, drained,
                                                                           cause, words) -> None:
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    from kalena_web.cli import main
    from kalena_web.control.models import NodeCondition

    node = bound.workload.node
    NodeCondition.objects.update_or_create(node=node, defaults={"schedulable": not drained})
    evicted = PodFinished(ref="batch/job-0", node=node.name, outcome="evicted", reason=reason, exit_code=None,
                          at_s=time.time())
    assert Reconciler(cluster=live).apply(evicted) == CHANGED
    record = EvictionRecord.objects.get(workload__name="batch/job-0")
    assert record.cause == cause
    assert main(["batch", "describe", live.name, "batch/job-0"]) == 0
    out = capsys.readouterr().out
    assert f"from {node.name}: {words}" in out and "node pressure" not in out
    client = Client()
    client.force_login(User.objects.create_superuser("root", "r@x", "pw"))
    page = client.get(reverse("console:live_evictions", args=[live.name])).content.decode()
    assert words in page and "node pressure" not in page
