"""Kalena as a Kubernetes secondary scheduler, end to end against the wire-faithful test API
server and the real ``kubernetes`` client: watched → placed → bound → Running → Succeeded →
ledgers freed; an eviction and the owner's replacement; cases C9 and C12 with their numbers;
two schedulers with one lease, the leader killed mid-run."""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter

import numpy as np
import pytest
from kubernetes import client as k8s

from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.lease import LeaderElector
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod
from agents.orchestrators.kubernetes.watch import KubernetesWatcher
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU, GIB, RAM
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.escalation import escalation_pass, eviction_retries_run
from kalena_web.control.leading import ClusterScheduler
from kalena_web.control.models import Escalation, EvictionRetry, NodeCondition
from kalena_web.control.reconciler import Reconciler
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import scheduling_pass

NODES = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]
DEADLINE_S = 60.0


def wait_for(check, what: str, timeout_s: float = DEADLINE_S):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def orchestrator(api: TestAPIServer, identity: str = "kalena-test") -> KubernetesOrchestrator:
    return KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)), request_timeout_s=5.0,
                                  identity=identity)


def scheduler(cluster, api: TestAPIServer, identity: str) -> ClusterScheduler:
    orch = orchestrator(api, identity)
    elector = LeaderElector(orch, identity=identity, lease_duration_s=2.0, renew_deadline_s=1.5, retry_period_s=0.2)
    return ClusterScheduler(cluster=cluster, orchestrator=orch, elector=elector, pass_period_s=0.3,
                            rng=np.random.default_rng(0))


@pytest.fixture
def api():
    with TestAPIServer(bookmark_interval_s=0.5) as server:
        for name in NODES:
            server.create("nodes", node(name, cpu="16", memory="64Gi",
                                        images=[{"names": ["docker.io/library/busybox:1.36"], "sizeBytes": 2160000}]))
        yield server


def job_pod(name: str, owner: str = "train", **kw) -> dict:
    return pod("batch", name, tier="batch", owner_kind="Job", owner_name=owner, cpu=kw.pop("cpu", "1"),
               memory=kw.pop("memory", "1Gi"), limit_cpu="2", limit_memory="2Gi", **kw)


def batch_on(cluster) -> dict[str, float]:
    return {led.node.name: led.batch_request[CPU]
            for led in LiveNodeLedger.objects.filter(node__cluster=cluster).select_related("node")}


@pytest.mark.django_db(transaction=True)
def test_a_job_is_watched_placed_bound_run_and_freed_and_a_replacement_goes_elsewhere(live, api) -> None:
    s = scheduler(live, api, "kalena-a")
    s.start()
    try:
        for i in range(3):
            api.create_pod(job_pod(f"train-{i}"))
        wait_for(lambda: all(api.get("pods", f"batch/train-{i}")["spec"].get("nodeName") for i in range(3)), "binds")
        wait_for(lambda: BatchPod.objects.filter(state="bound", running_s__isnull=False).count() == 3, "Running seen")
        assert sum(batch_on(live).values()) == 3000  # 3 × 1 core at request, in flight
        s.orchestrator.flush_events()
        reasons = Counter(e["reason"] for e in api.objects("events"))
        assert reasons["Scheduled"] == 3
        for i in range(3):
            api.set_pod_phase(f"batch/train-{i}", "Succeeded", exit_code=0)
        wait_for(lambda: BatchPod.objects.filter(state="completed", outcome="succeeded").count() == 3, "Succeeded")
        assert sum(batch_on(live).values()) == 0  # terminated pods never count
        # the kubelet evicts a pod of the Job; the Job's replacement is a new pod: queued, placed elsewhere
        api.create_pod(job_pod("train-3"))
        victim_node = wait_for(lambda: api.get("pods", "batch/train-3")["spec"].get("nodeName"), "bind train-3")
        wait_for(lambda: BatchPod.objects.filter(workload__name="batch/train-3", running_s__isnull=False).exists(),
                 "train-3 running")
        api.set_pod_phase("batch/train-3", "Failed", reason="Evicted", message="The node was low on memory.")
        wait_for(lambda: EvictionRecord.objects.filter(workload__name="batch/train-3").exists(), "eviction seen")
        api.create_pod(job_pod("train-4"))
        where = wait_for(lambda: api.get("pods", "batch/train-4")["spec"].get("nodeName"), "bind train-4")
        assert where != victim_node  # cooldown keyed on the owner (Job/train) × node
        assert BatchPod.objects.get(workload__name="batch/train-3").state == "completed"
        assert BatchPod.objects.get(workload__name="batch/train-3").outcome == "evicted"
        bindings = Counter(p for v, p, _ in api.requests if v == "POST" and p.endswith("/binding"))
        assert set(bindings.values()) == {1}  # every pod bound once
    finally:
        s.stop()


def _collect(watcher: KubernetesWatcher, stop: threading.Event, out: queue.Queue) -> threading.Thread:
    t = threading.Thread(target=lambda: [out.put(e) for e in watcher.events(stop)], daemon=True)
    t.start()
    return t


def _apply_until(rec: Reconciler, events: queue.Queue, check, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        try:
            rec.apply(events.get(timeout=0.1))
        except queue.Empty:
            pass
        if check():
            return
    raise AssertionError(f"timed out waiting for {what}")


def test_c9_a_watch_that_expires_loses_nothing(live, api) -> None:
    """C9: seen up to rv 1000; a-0 created (1003) and queued b-0 deleted (1004) while away; the
    watch from 1000 answers ERROR 410 "too old resource version: 1000 (1005)"."""
    api.store.rv = 999
    api.create_pod(job_pod("b-0"))  # rv 1000
    assert api.store.rv == 1000
    watcher = KubernetesWatcher(orchestrator(api), watch_timeout_s=30, backoff_s=0.05,
                                sleep=lambda s, stop: stop.wait(0.05))
    stop, events = threading.Event(), queue.Queue()
    rec = Reconciler(cluster=live)
    thread = _collect(watcher, stop, events)
    try:
        _apply_until(rec, events, lambda: BatchPod.objects.filter(workload__name="batch/b-0", state="pending").exists(),
                     "b-0 queued")
        api.fault("GET", r"^/api/v1/pods$", code=503, reason="ServiceUnavailable", times=10**6)
        api.drop_watches()  # disconnected
        wait_for(lambda: watcher.reconnects["pods"] >= 1, "pods watch down")
        for i in range(2):  # 1001, 1002
            api.create("events", {"metadata": {"name": f"noise-{i}", "namespace": "batch"}, "reason": "Noise"})
        api.create_pod(job_pod("a-0"))  # 1003
        api.delete_pod("batch/b-0")  # 1004
        api.create("events", {"metadata": {"name": "noise-2", "namespace": "batch"}, "reason": "Noise"})  # 1005
        assert api.store.rv == 1005
        api.compact()
        watch_queries_before = len(api.queries)
        api._faults.clear()  # back
        _apply_until(rec, events, lambda: watcher.versions.get("pods") == "1005" and
                     BatchPod.objects.filter(workload__name="batch/b-0", state="deleted").exists(), "re-list")
        _apply_until(rec, events, lambda: any(q.get("watch") == "true" and q.get("resourceVersion") == "1005"
                                              for v, p, q in api.queries if p == "/api/v1/pods"), "watch from 1005")
    finally:
        stop.set()
        thread.join(timeout=10)
    pods = [(q.get("watch"), q.get("resourceVersion")) for v, p, q in api.queries[watch_queries_before:]
            if p == "/api/v1/pods"]
    assert ("true", "1000") in pods  # answered with ERROR 410 "too old resource version: 1000 (1005)"
    assert watcher.expired["pods"] >= 1 and watcher.lists["pods"] == 2
    every_watch = [q.get("resourceVersion") for v, p, q in api.queries if q.get("watch") == "true"]
    assert all(rv not in (None, "", "0", "None") for rv in every_watch)  # never from an empty version
    a0 = BatchPod.objects.get(workload__name="batch/a-0")
    assert a0.state == "pending" and a0.requeues == 0 and BatchPod.objects.filter(workload__name="batch/a-0").count() == 1
    b0 = BatchPod.objects.get(workload__name="batch/b-0")
    assert (b0.state, b0.gone, b0.workload.node_id) == ("deleted", True, None)
    assert not WorkloadReservation.objects.filter(workload=b0.workload).exists()
    assert rec.counts["PodPending"]["changed"] == 2  # b-0 once, a-0 once: none queued twice


def test_c12_a_disruption_budget_refuses_an_eviction(live, api) -> None:
    """C12: P (2 cores / 4 GiB request, 2 cores / 8 GiB limit, reservation 2 cores / 4.6 GiB)
    on escalating node N under a PDB with maxUnavailable 0."""
    n = "thinkcentre-alpha"
    api.create_pod(job_pod("p-0", owner="etl", cpu="2", memory="4Gi", labels={"job": "etl"}))
    api.get("pods", "batch/p-0")
    core = orchestrator(api)
    rec = Reconciler(cluster=live, clock=lambda: 1000.0)
    rec.apply_all(e for e in KubernetesWatcher(core)._translate("pods", "ADDED", api.get("pods", "batch/p-0")))
    api.store.mutate("pods", "batch/p-0", lambda p: p["spec"].update(nodeName=n))
    api.set_pod_phase("batch/p-0", "Running")
    rec.apply_all(KubernetesWatcher(core)._translate("pods", "MODIFIED", api.get("pods", "batch/p-0")))
    p = BatchPod.objects.select_related("workload").get(workload__name="batch/p-0")
    assert p.state == "bound" and p.workload.node.name == n
    reservation = [2000.0, 4.6 * GIB] + [0.0] * 6  # min(2, 1.15·2) cores, min(8, 1.15·4) GiB
    WorkloadReservation.objects.filter(workload=p.workload).update(value=reservation, last_sample_s=1000.0)
    LiveNodeLedger.objects.filter(node=p.workload.node).update(batch_reservation=reservation)
    api.add_pdb("batch", "etl-budget", {"job": "etl"}, max_unavailable=0)
    for i, t in enumerate((1100.0, 1250.0, 1390.0)):  # 3 evictions within 300 s → N escalates
        EvictionRecord.objects.create(cluster=live, node=p.workload.node, workload_name=f"batch/x-{i}", time_s=t,
                                      cause="priority", source_key=f"agent:c12:{i}")
    report = escalation_pass(cluster=live, orchestrator=core, now_s=1400.0)
    assert report.escalated == [n]
    p.refresh_from_db()
    assert p.state == "bound"  # still running in Kalena's view ...
    assert WorkloadReservation.objects.get(workload=p.workload).value[RAM] == pytest.approx(4.6 * GIB)  # ... keeps r
    assert LiveNodeLedger.objects.get(node=p.workload.node).batch_reservation[RAM] == pytest.approx(4.6 * GIB)
    assert not EvictionRecord.objects.filter(workload=p.workload).exists()  # no why-evicted record
    (escalation,) = Escalation.objects.filter(node=p.workload.node)
    assert "refused" in escalation.detail and "etl-budget" in escalation.detail
    retry = EvictionRetry.objects.get(pod=p)
    assert (retry.attempts, retry.next_s) == (1, 1410.0)  # backoff 10 s
    # N takes no new batch during its cooldown
    api.create_pod(job_pod("q-0", owner="other"))
    rec.apply_all(KubernetesWatcher(core)._translate("pods", "ADDED", api.get("pods", "batch/q-0")))
    assert NodeCondition.objects.get(node=p.workload.node).slack_ineligible_until_s == 2000.0
    scheduling_pass(cluster=live, orchestrator=core, policy=Policy(), now_s=1405.0, rng=np.random.default_rng(0))
    assert api.get("pods", "batch/q-0")["spec"]["nodeName"] != n
    assert eviction_retries_run(cluster=live, orchestrator=core, now_s=1405.0) == 0  # not due yet
    assert eviction_retries_run(cluster=live, orchestrator=core, now_s=1410.0) == 0  # refused again
    retry.refresh_from_db()
    assert (retry.attempts, retry.next_s) == (2, 1430.0)  # backoff doubled: 20 s
    api.store.delete("poddisruptionbudgets", "batch/etl-budget")  # the budget allows it now
    assert eviction_retries_run(cluster=live, orchestrator=core, now_s=1430.0) == 1
    assert eviction_retries_run(cluster=live, orchestrator=core, now_s=1500.0) == 0
    evictions = [path for verb, path, _ in api.requests if path.endswith("/p-0/eviction")]
    assert len(evictions) == 3  # two refused, one accepted: evicted exactly once
    (record,) = EvictionRecord.objects.filter(workload=p.workload)
    assert record.detail["escalation"] == escalation.reason and record.detail["refused_before"] == 2
    core.flush_events()
    (evicted,) = [e for e in api.objects("events") if e["reason"] == "Evicted" and e["involvedObject"]["name"] == "p-0"]
    assert evicted["message"].startswith(f"Evicted by Kalena: escalation: {escalation.reason} 3 evictions within")
    assert "escalation: escalation" not in evicted["message"]  # the cause once, as on the first attempt
    p.refresh_from_db()
    assert (p.state, p.outcome) == ("completed", "evicted") and api.objects("pods")[0]["metadata"]["name"] == "q-0"


@pytest.mark.django_db(transaction=True)
def test_two_schedulers_one_lease_the_leader_killed_mid_run(live, api) -> None:
    a, b = scheduler(live, api, "kalena-a"), scheduler(live, api, "kalena-b")
    a.start()
    wait_for(a.elector.is_leader, "a leads")
    b.start()
    try:
        for i in range(20):
            api.create_pod(job_pod(f"w-{i}", owner=f"w{i % 4}", cpu="250m", memory="256Mi"))
        wait_for(lambda: sum(1 for p in api.objects("pods") if p["spec"].get("nodeName")) >= 5, "a binds some")
        a.stop(release=False)  # killed: the lease is left to expire
        for i in range(20, 40):
            api.create_pod(job_pod(f"w-{i}", owner=f"w{i % 4}", cpu="250m", memory="256Mi"))
        wait_for(b.elector.is_leader, "b takes over")
        gap_s = b.elector.acquired_at - a.elector._renewed_at  # a's last renewal → b's takeover
        wait_for(lambda: all(p["spec"].get("nodeName") for p in api.objects("pods")), "every pod bound", 120)
    finally:
        b.stop()
    assert gap_s >= 2.0  # b waited a whole lease duration; a stopped acting 1.5 s after its last renewal
    lease = api.get("leases", "kube-system/kalena-scheduler")
    assert lease["spec"]["leaseTransitions"] >= 1
    bindings = Counter(p for v, p, _ in api.requests if v == "POST" and p.endswith("/binding"))
    codes = Counter(code for v, p, code in api.answers if v == "POST" and p.endswith("/binding"))
    assert len(bindings) == 40 and set(bindings.values()) == {1}, (codes, a.stats, b.stats)  # none lost or bound twice
    assert BatchPod.objects.filter(state="bound").count() == 40, list(BatchPod.objects.values_list("workload__name", "state", "outcome", "reason", "requeues"))


def test_a_binding_that_timed_out_is_settled_by_reading_the_pod_not_by_binding_again(live, api) -> None:
    api.create_pod(job_pod("t-0"))
    api.create_pod(job_pod("t-1"))
    s = scheduler(live, api, "kalena-a")
    s.orchestrator.timeout_s = 0.5
    rec = Reconciler(cluster=live)
    core = s.orchestrator
    for key in ("batch/t-0", "batch/t-1"):
        rec.apply_all(KubernetesWatcher(core)._translate("pods", "ADDED", api.get("pods", key)))
    api.fault("POST", r"/t-0/binding$", delay_s=1.5)  # lands, but after the client gave up
    api.fault("POST", r"/t-1/binding$", code=None, delay_s=0.0, times=0)
    s.elector.try_acquire_or_renew()
    report = s.run_pass(now_s=1000.0)
    assert report.uncertain == 1 and report.placed == 1
    t0 = BatchPod.objects.get(workload__name="batch/t-0")
    assert t0.state == "bound" and t0.running_s is None  # not requeued: it may have landed
    wait_for(lambda: api.get("pods", "batch/t-0")["spec"].get("nodeName"), "the slow binding lands")
    s.elector.try_acquire_or_renew()
    s.run_pass(now_s=1040.0)  # 30 s later, still unconfirmed by any watch: read, confirmed, not rebound
    t0.refresh_from_db()
    assert t0.state == "bound" and t0.running_s is not None
    assert t0.workload.node.name == api.get("pods", "batch/t-0")["spec"]["nodeName"]
    assert [p for v, p, _ in api.requests if p.endswith("/t-0/binding")] == ["/api/v1/namespaces/batch/pods/t-0/binding"]
    # t-1's binding was acknowledged (201): the watch being behind is no reason to ask about it —
    # under a burst those reads were most of the scheduler's CPU — until the acknowledgement is 600 s old
    def reads(name: str) -> list[str]:
        return [p for v, p, _ in api.requests if v == "GET" and p.endswith(f"/pods/{name}")]

    assert reads("t-0") and not reads("t-1")
    t1 = BatchPod.objects.get(workload__name="batch/t-1")
    assert t1.state == "bound" and t1.running_s is None
    s.elector.try_acquire_or_renew()
    s.run_pass(now_s=1700.0)
    t1.refresh_from_db()
    assert len(reads("t-1")) == 1 and t1.state == "bound" and t1.running_s is not None


@pytest.mark.django_db(transaction=True)
def test_a_pod_that_fits_nowhere_is_explained_on_the_pod_itself(live, api) -> None:
    s = scheduler(live, api, "kalena-a")
    s.start()
    try:
        api.create_pod(job_pod("huge", cpu="64"))  # each node has 16 cores
        api.create_pod(job_pod("small"))
        wait_for(lambda: api.get("pods", "batch/small")["spec"].get("nodeName"), "the small pod bound")
        wait_for(lambda: s.stats.passes >= 3, "a few passes")
        s.orchestrator.flush_events()
    finally:
        s.stop()
    huge = api.get("pods", "batch/huge")
    assert not huge["spec"].get("nodeName")
    failed = [e for e in api.objects("events")
              if e["involvedObject"]["name"] == "huge" and e["reason"] == "FailedScheduling"]
    assert len(failed) == 1  # at most one per pod per 60 s, however many passes ran
    assert failed[0]["type"] == "Warning" and failed[0]["message"].startswith(f"0/{len(NODES)} nodes are available")
    assert "cpu" in failed[0]["message"]
    (condition,) = [c for c in huge["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert condition["message"] == failed[0]["message"]
    assert not [e for e in api.objects("events") if e["involvedObject"]["name"] == "small"
                and e["reason"] == "FailedScheduling"]


@pytest.mark.django_db(transaction=True)
def test_what_the_watch_skipped_and_applied_is_in_the_cluster_metrics(live, api, client) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    bad = job_pod("bad")
    bad["spec"]["containers"] = "not-a-list"
    s = scheduler(live, api, "kalena-a")
    s.start()
    try:
        wait_for(lambda: s.watch is not None and s.orchestrator.watchers, "the watch started")
        api.create_pod(bad)
        api.create_pod(job_pod("good"))
        wait_for(lambda: api.get("pods", "batch/good")["spec"].get("nodeName"), "the good pod bound")
        api.inject_watch_line("pods", b'{"type": "ADDED"}')
        wait_for(lambda: s.orchestrator.watchers[-1].malformed["pods"] == 2, "both counted")
    finally:
        s.stop()  # records what was still in the process
    samples = {(m.name, tuple(sorted(m.labels.items()))): m.value
               for f in text_string_to_metric_families(client.get("/metrics/cluster").content.decode())
               for m in f.samples}
    cluster = (("cluster", live.name),)
    assert samples["kalena_watch_malformed_objects_total", (*cluster, ("resource", "pods"))] == 2
    assert samples["kalena_watch_lists_total", (*cluster, ("resource", "pods"))] == 1
    assert samples["kalena_reconciler_events_total", (*cluster, ("kind", "PodPending"), ("outcome", "changed"))] == 1
    assert not any(name == "kalena_reconciler_events_total" and dict(labels).get("outcome") == "rejected"
                   for name, labels in samples)
    assert BatchPod.objects.filter(workload__name="batch/bad").count() == 0  # skipped: nothing changed


@pytest.mark.django_db(transaction=True)
def test_a_required_node_affinity_is_honoured_and_explained(live, api) -> None:
    """The kubelet refuses a pod on a node its required node affinity does not match, so Kalena
    binds only where it matches — and says so, as kube-scheduler does, where none does."""
    api.store.mutate("nodes", "thinkcentre-beta", lambda n: n["metadata"]["labels"].update(pool="batch"))

    def with_affinity(name: str, pool: str) -> dict:
        p = job_pod(name)
        p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": [pool]}]}]}}}
        return p

    s = scheduler(live, api, "kalena-a")
    s.start()
    try:
        for i in range(3):
            api.create_pod(with_affinity(f"aff-{i}", "batch"))
        api.create_pod(with_affinity("nowhere", "gpu"))
        wait_for(lambda: all(api.get("pods", f"batch/aff-{i}")["spec"].get("nodeName") for i in range(3)), "binds")
        wait_for(lambda: s.stats.passes >= 3, "a few passes")
        s.orchestrator.flush_events()
    finally:
        s.stop()
    assert {api.get("pods", f"batch/aff-{i}")["spec"]["nodeName"] for i in range(3)} == {"thinkcentre-beta"}
    assert not api.get("pods", "batch/nowhere")["spec"].get("nodeName")
    (failed,) = [e for e in api.objects("events")
                 if e["involvedObject"]["name"] == "nowhere" and e["reason"] == "FailedScheduling"]
    assert f"{len(NODES)} node(s) didn't match Pod's node affinity/selector" in failed["message"]


def test_a_pass_woken_by_a_burst_waits_for_the_burst_but_not_for_ever(live, api) -> None:
    """Pods that arrive together are decided in one pass: a pass the watch woke waits while the
    watch keeps queuing (here every 10 ms, for 5 s), but never longer than ``COALESCE_MAX_S``;
    once the watch is quiet it waits only ``COALESCE_QUIET_S``. Bounds, not timings: the wait
    can only end early by the rule, and the waker runs far longer than the cap."""
    from kalena_web.control.leading import COALESCE_MAX_S, COALESCE_QUIET_S

    s = scheduler(live, api, "kalena-a")
    stop = threading.Event()

    def watch_queuing() -> None:
        while not stop.wait(0.01):
            s.wake.set()

    waker = threading.Thread(target=watch_queuing, daemon=True)
    waker.start()
    try:
        started = time.monotonic()
        s._let_the_burst_arrive()
        waited = time.monotonic() - started
        assert waker.is_alive() and COALESCE_MAX_S <= waited < 5.0, waited
    finally:
        stop.set()
        waker.join()
    started = time.monotonic()
    s._let_the_burst_arrive()  # quiet: one quiet interval
    assert COALESCE_QUIET_S <= time.monotonic() - started < COALESCE_MAX_S + 5.0


def test_a_burst_the_reconciler_hands_over_in_batches_is_waited_for_whole(live, api) -> None:
    """Under a burst the reconciler applies the watch's pods in batches up to its
    ``BATCH_MAX_WAIT_S`` apart, and wakes the scheduler once per batch: a woken pass waits
    through those gaps (its quiet interval is longer), so the burst is decided in one pass, not
    one pass per batch. The wakes' real times are recorded: the wait may end early only at a
    gap the waker overslept (a loaded machine) that is a quiet interval or more."""
    from kalena_web.control.leading import COALESCE_MAX_S, COALESCE_QUIET_S
    from kalena_web.control.reconciler import BATCH_MAX_WAIT_S

    s = scheduler(live, api, "kalena-a")
    batches = max(2, int(COALESCE_MAX_S / BATCH_MAX_WAIT_S) - 1)  # inside the cap
    woke: list[float] = []

    def reconciler_batches() -> None:
        for _ in range(batches):
            time.sleep(BATCH_MAX_WAIT_S)
            woke.append(time.monotonic())
            s.wake.set()

    waker = threading.Thread(target=reconciler_batches, daemon=True)
    started = time.monotonic()
    waker.start()
    s._let_the_burst_arrive()
    ended = time.monotonic()
    waker.join()
    gaps = [b - a for a, b in zip([started, *woke], woke, strict=False)]
    late = BATCH_MAX_WAIT_S + 0.04  # a gap the waker overslept: the wait may end there, if it is quiet enough
    last_in_burst = next((woke[i - 1] if i else started for i, g in enumerate(gaps)
                          if g > late and g >= COALESCE_QUIET_S), woke[-1])
    assert ended >= last_in_burst, (ended - started, gaps)
