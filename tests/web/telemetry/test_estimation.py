"""Live estimation: stored samples fold into the same reservations the engine computes, node
ledgers read them as docs/design.md §6 says, a batch is applied exactly once however often a run is
repeated, and case C1 (stale telemetry) with its exact numbers.

Samples go in through the real ingest path (checks → entries → the group write) without the
WebSocket; estimation runs are called with an explicit ``now_s``.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from django.conf import settings

from kalena_engine.estimator import Reservations, apply_samples, effective_reservations
from kalena_engine.policy import Policy
from kalena_engine.resources import RAM
from kalena_web.control.locks import shard_of
from kalena_web.inventory.models import Node, Workload
from kalena_web.ledger.estimation import estimation_run, stale_candidates, stale_sweep
from kalena_web.ledger.models import EstimationRun, LiveNodeLedger, WorkloadReservation
from kalena_web.telemetry.ingest import prepare_message
from kalena_web.telemetry.models import IngestBatch
from kalena_web.telemetry.selectors import node_view_load
from kalena_web.telemetry.storage import store_entries
from kalena_web.telemetry.validation import Limits
from tests.web.live_cluster import import_homelab
from tests.web.telemetry.conftest import record, samples

GIB = 2.0**30
T0 = 1_700_000_000.0   # "t = 0" of the cases, as a Unix time


def ingest(node: Node, seq: int, records: list[dict], *, now_s: float, node_sample: dict | None = None) -> None:
    view = node_view_load(node_id=node.id, shards=settings.KALENA_ESTIMATION_SHARDS)
    entry = prepare_message(samples(node.name, seq, records, ts=now_s, node_sample=node_sample), view=view,
                            now_s=now_s, received_s=now_s, limits=Limits())
    assert not entry.rejected, entry.rejected
    store_entries([entry], now_s=now_s)


def shard(node: Node) -> int:
    return shard_of(node.name, settings.KALENA_ESTIMATION_SHARDS)


@pytest.fixture
def homelab(db, kuberina_dir, tmp_path):
    return import_homelab(kuberina_dir, tmp_path, now_s=T0 - 1000.0)


def test_reservations_equal_the_engine_fold_of_the_same_samples(homelab) -> None:
    node = Node.objects.get(cluster=homelab, name="thinkcentre-beta")
    pods = list(Workload.objects.filter(node=node).order_by("id"))
    rng = np.random.default_rng(7)
    times, rows, usage = [], [], []
    for seq, base in enumerate([0.0, 40.0, 95.0, 400.0]):          # irregular batches, runs in between
        records = []
        for i, pod in enumerate(pods):
            for k in range(1 + (i + seq) % 2):                      # one or two samples per pod per batch
                t = T0 + base + 7.0 * k + i
                u = np.asarray(pod.request) * rng.uniform(0.05, 1.3)
                records.append(record(pod.name, t, cpu_mcpu=float(u[0]), ram_bytes=float(u[1])))
                times.append(t)
                rows.append(i)
                usage.append([u[0], u[1], 0, 0, 0, 0, 0, 0])
        for r in records:                                           # io measured as 0, gpu/storage not measured
            r["usage"].update(disk_read_bps=0.0, disk_write_bps=0.0, net_in_bps=0.0, net_out_bps=0.0)
        ingest(node, seq, records, now_s=T0 + base + 20)
        if seq % 2:
            estimation_run(shard=shard(node), now_s=T0 + base + 21)
    estimation_run(shard=shard(node), now_s=T0 + 430.0)

    request = np.array([p.request for p in pods])
    policy = Policy().estimator
    pinned = np.zeros((len(pods), 8), dtype=bool)
    pinned[:, 2:4] = True                                           # gpu always; storage not measured
    expected, _ = apply_samples(
        Reservations(value=request.copy(), updated_s=np.full(len(pods), T0 - 1000.0),
                     last_sample_s=np.full(len(pods), -np.inf)),
        workload=np.array(rows), time_s=np.array(times), usage=np.array(usage), request=request,
        limit=np.array([p.limit for p in pods]), start_s=np.full(len(pods), -np.inf),
        grace_s=np.full(len(pods), policy.grace_s), pinned=pinned, policy=policy)
    stored = {r.workload_id: r for r in WorkloadReservation.objects.filter(workload__in=pods)}
    np.testing.assert_allclose([stored[p.id].value for p in pods], expected.value, rtol=1e-12)
    np.testing.assert_allclose([stored[p.id].last_sample_s for p in pods], expected.last_sample_s)
    ledger = LiveNodeLedger.objects.get(node=node)
    fresh = effective_reservations(expected, request, T0 + 430.0, 60.0)
    np.testing.assert_allclose(ledger.prod_reservation, fresh.sum(axis=0), rtol=1e-12)
    np.testing.assert_allclose(ledger.prod_request, request.sum(axis=0))
    assert ledger.stale is False and ledger.last_sample_s == T0 + 420.0 and ledger.version == 2  # two runs


def test_a_batch_is_applied_once_however_often_estimation_runs(homelab) -> None:
    node = Node.objects.get(cluster=homelab, name="thinkcentre-beta")
    ingest(node, 1, [record("database/postgres-0", T0, cpu_mcpu=100.0)], now_s=T0 + 1)
    first = estimation_run(shard=shard(node), now_s=T0 + 2)
    before = WorkloadReservation.objects.get(workload__name="database/postgres-0").value
    again = estimation_run(shard=shard(node), now_s=T0 + 3)          # a redelivered task
    assert (first.batches, first.samples, first.applied) == (1, 1, 1)
    assert again.run_id is None and again.batches == 0
    assert WorkloadReservation.objects.get(workload__name="database/postgres-0").value == before
    assert list(IngestBatch.objects.values_list("estimation_run", flat=True)) == [first.run_id]
    run = EstimationRun.objects.get()
    assert (run.shard, run.batches, run.samples, run.nodes) == (shard(node), 1, 1, 1)
    assert run.committed_s >= run.applied_s >= run.started_s


C1_INFRA = """
nodes:
  - name: c1-node
    zone: z
    rack: r
    labels: {}
    taints: []
    allocatable: {cpu: 64, ram: 128Gi, gpu: 0, storage: 1000Gi, disk: {read: 500M, write: 500M}, network: {in: 1G, out: 1G}}
"""
C1_WORKLOADS = """
namespaces:
  prod:
    - name: p
      replicas: 1
      requests: {cpu: 8, ram: 64Gi}
"""


@pytest.fixture
def c1(db, tmp_path):
    """Case C1's node: C_ram = 128 GiB; P (prod, q = L = 64 GiB); batch B1 (q = L = 40 GiB,
    priority 0) and B2 (30 GiB, priority 1) bound to it."""
    from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads
    from kalena_web.control.services import live_cluster_import
    from kalena_web.scheduling.models import BatchPod

    (tmp_path / "infra.yaml").write_text(C1_INFRA)
    (tmp_path / "workloads.yaml").write_text(C1_WORKLOADS)
    (tmp_path / "bp.yaml").write_text("solution:\n  prod/p-0: c1-node\n")
    workloads = load_workloads(tmp_path / "workloads.yaml")
    cluster = live_cluster_import(name="c1", infra=load_infrastructure(tmp_path / "infra.yaml"), workloads=workloads,
                                  blueprint=load_blueprint(tmp_path / "bp.yaml", workloads), now_s=T0 - 3600).cluster
    node = Node.objects.get(cluster=cluster)
    for row, (name, ram_gib, priority) in enumerate([("b1", 40, 0), ("b2", 30, 1)]):
        request = [1000.0, ram_gib * GIB, 0, 0, 0, 0, 0, 0]
        w = Workload.objects.create(cluster=cluster, kind=Workload.BATCH, row=row, name=f"batch/{name}", namespace="batch",
                                    tier="batch", priority=priority, node=node, request=request, limit=request,
                                    start_s=T0 - 1800)
        WorkloadReservation.objects.create(workload=w, value=request, updated_s=T0 - 1800)
        BatchPod.objects.create(cluster=cluster, workload=w, state=BatchPod.BOUND, submitted_s=T0 - 1900,
                                queued_s=T0 - 1900, bound_s=T0 - 1800)
    return node


def _c1_sample(ts: float, *, p_gib: float) -> list[dict]:
    return [record("prod/p-0", ts, cpu_mcpu=1000.0, ram_bytes=p_gib * GIB),
            record("batch/b1", ts, cpu_mcpu=1000.0, ram_bytes=40 * GIB, tier="batch"),
            record("batch/b2", ts, cpu_mcpu=1000.0, ram_bytes=30 * GIB, tier="batch")]


def _c1_takes_no_batch_and_says_stale(node: Node) -> None:
    """C1 at t = 90 beyond estimation: the scheduling loop places nothing on the stale node (its
    why-pending names it), and the console page and the API show the node as telemetry stale."""
    import numpy as np
    from django.contrib.auth.models import User
    from django.test import Client

    from kalena_engine.policy import Policy
    from kalena_web.control.orchestrators import orchestrator_for
    from kalena_web.scheduling.models import BatchPod, WhyPending
    from kalena_web.scheduling.services import batch_submit, scheduling_pass

    batch_submit(cluster=node.cluster, name="batch/new-0", owner="new", request={"cpu": 100.0, "ram": GIB},
                 now_s=T0 + 90)
    report = scheduling_pass(cluster=node.cluster, orchestrator=orchestrator_for(node.cluster), policy=Policy(),
                             now_s=T0 + 90, rng=np.random.default_rng(0))
    assert report.placed == 0
    assert BatchPod.objects.get(workload__name="batch/new-0").state == BatchPod.PENDING
    assert "telemetry_stale" in WhyPending.objects.get(pod__workload__name="batch/new-0").record["excluded"]
    client = Client()
    client.force_login(User.objects.create_user("c1-viewer", password="x" * 12))
    page = client.get(f"/live/{node.cluster.name}/nodes/{node.name}/").content.decode()
    assert "telemetry stale" in page and "every reservation reads max(r, request)" in page
    (api_node,) = client.get(f"/api/clusters/{node.cluster.name}/nodes").json()
    assert api_node["telemetry_stale"] is True and api_node["reservations"]["ram"] == 134.0  # 64 + 40 + 30 GiB
    metrics = client.get("/metrics/cluster").content.decode()
    assert f'kalena_node_telemetry_stale{{cluster="{node.cluster.name}",node="{node.name}"}} 1.0' in metrics


def _ram_gib(node: Node) -> tuple[float, float, bool]:
    ledger = LiveNodeLedger.objects.get(node=node)
    return ledger.prod_reservation[1] / GIB, ledger.batch_reservation[1] / GIB, ledger.stale


def test_case_c1_stale_telemetry_reads_max_r_q_and_estimation_resumes_from_the_new_sample(c1) -> None:
    from kalena_web.control.escalation import escalation_pass
    from kalena_web.control.orchestrators import orchestrator_for

    psi = {"memory": {"some": {"avg10": 30.0, "avg60": 0, "avg300": 0, "total_us": 1}, "full": None}}
    # t = 0: P uses 62 GiB → r_P = min(64, 1.15 · 62 = 71.3) = 64; B1, B2 use their requests → 40, 30.
    ingest(c1, 1, _c1_sample(T0, p_gib=62.0), now_s=T0 + 0.5,
           node_sample={"ts": T0, "working_set_bytes": 126 * GIB, "psi": psi})
    estimation_run(shard=shard(c1), now_s=T0 + 1)
    assert _ram_gib(c1) == (pytest.approx(64.0), pytest.approx(70.0), False)      # Σ r = 134 > 128, fresh

    # The agent dies. At t = 50 the node is still fresh (T_stale = 60 s) …
    assert stale_candidates(now_s=T0 + 50) == {}
    # … and at t = 90 the loops run: the node reads stale, every reservation at max(r, q).
    marked = [n for nodes in stale_candidates(now_s=T0 + 90).values() for n in nodes]
    assert marked == [c1.id]
    stale_sweep(node_ids=marked, now_s=T0 + 90)
    assert _ram_gib(c1) == (pytest.approx(64.0), pytest.approx(70.0), True)       # 64 + 40 + 30, stale
    report = escalation_pass(cluster=c1.cluster, orchestrator=orchestrator_for(c1.cluster), now_s=T0 + 90)
    assert report.escalated == [] and report.drained == 0                          # nothing planned from t = 0
    _c1_takes_no_batch_and_says_stale(c1)

    # Samples resume at t = 120: P uses 20 GiB → τ = μ_mem · 20, decay from 64 over Δt = 120 s:
    # r_P = τ + (64 − τ) · 2^(−120/h). The case's numbers (μ 1.15, h 600 s): τ = 23, r_P = 58.6926 GiB;
    # the shipped default (memory margin 1.6, h 1200 s): τ = 32, r_P = 61.8571 GiB. Fresh again.
    ingest(c1, 2, _c1_sample(T0 + 120, p_gib=20.0), now_s=T0 + 120.5)
    estimation_run(shard=shard(c1), now_s=T0 + 121)
    prod, batch, stale = _ram_gib(c1)
    shipped = Policy().estimator
    tau = shipped.margins[RAM] * 20.0
    assert prod == pytest.approx(tau + (64 - tau) * 2 ** (-120 / shipped.half_life_s), rel=1e-12)
    assert prod == pytest.approx(61.8571, abs=1e-4)
    assert (batch, stale) == (pytest.approx(70.0), False)


def test_raw_samples_past_retention_are_pruned_once_applied_and_rolled_up_and_actions_are_kept(homelab) -> None:
    from kalena_web.archive.samples import samples_rollup
    from kalena_web.telemetry.models import MitigationEvent, Sample
    from kalena_web.telemetry.services import telemetry_prune

    node = Node.objects.get(cluster=homelab, name="thinkcentre-beta")
    ingest(node, 1, [record("database/postgres-0", T0)], now_s=T0 + 1)          # old, applied below
    estimation_run(shard=shard(node), now_s=T0 + 2)
    ingest(node, 2, [record("database/postgres-0", T0 + 5)], now_s=T0 + 6)      # old but still pending
    view = node_view_load(node_id=node.id, shards=settings.KALENA_ESTIMATION_SHARDS)
    action = {"type": "action", "v": 1, "batch_id": f"{node.name}:3", "node": node.name, "ts": T0, "action": "hold",
              "reason": "stale_sample", "workload": None, "trigger": {"source": "poll"}, "numbers": {},
              "result": {"ok": True}}
    store_entries([prepare_message(action, view=view, now_s=T0, received_s=T0, limits=Limits())], now_s=T0)
    assert telemetry_prune(before_s=T0 + 100) == 0               # not yet rolled into minute rows: kept
    samples_rollup(cluster=homelab, now_s=T0 + 100)
    assert telemetry_prune(before_s=T0 + 100) == 1
    assert list(IngestBatch.objects.order_by("id").values_list("batch_id", flat=True)) == \
        [f"{node.name}:2", f"{node.name}:3"]
    assert Sample.objects.count() == 1 and MitigationEvent.objects.count() == 1
    assert EstimationRun.objects.count() == 1                    # its run is recent (wall clock): kept
    assert telemetry_prune(before_s=time.time() + 1) == 0        # nothing applied is left to prune …
    assert not EstimationRun.objects.exists()                    # … and runs past retention go too
    assert IngestBatch.objects.count() == 2


def test_a_report_of_the_node_alone_keeps_it_fresh(homelab) -> None:
    """An idle node's agent has no workload to report, only the node: that keeps its telemetry
    current, so the node can take batch."""
    idle = Node.objects.filter(cluster=homelab).order_by("name").first()
    assert LiveNodeLedger.objects.get(node=idle).stale  # nothing heard yet
    ingest(idle, 1, [], now_s=T0 + 1, node_sample={"ts": T0, "working_set_bytes": 2 * GIB, "psi": None})
    estimation_run(shard=shard(idle), now_s=T0 + 2)
    ledger = LiveNodeLedger.objects.get(node=idle)
    assert (ledger.stale, ledger.last_sample_s) == (False, T0 + 1)  # the report's time


def test_a_peak_predictor_keeps_each_workloads_history_across_estimation_runs(homelab) -> None:
    # Under a percentile predictor the live passes, one per batch, give the engine's fold of all
    # the samples at once: the usage history is stored beside the reservation between passes.
    policy = Policy().with_estimator(predictor="percentile", percentile=90.0, bucket_s=60.0, window_s=600.0,
                                     min_history_s=120.0)
    node = Node.objects.get(cluster=homelab, name="thinkcentre-beta")
    pod = Workload.objects.get(node=node, name="database/postgres-0")
    q = np.asarray(pod.request, dtype=np.float64)
    cpu = [0.9, 0.2, 0.3, 0.8, 0.25, 0.2, 0.3, 0.2, 0.25, 0.2, 0.2, 0.3, 0.2, 0.25, 0.2, 0.2]
    times = [T0 + 400.0 + 60.0 * k for k in range(len(cpu))]         # after grace, one a minute
    for seq, (t, share) in enumerate(zip(times, cpu, strict=True)):
        ingest(node, seq, [record(pod.name, t, cpu_mcpu=share * q[0], ram_bytes=0.5 * q[1])], now_s=t + 1)
        estimation_run(shard=shard(node), now_s=t + 2, policy=policy)
    usage = np.zeros((len(cpu), 8))
    usage[:, 0] = np.array(cpu) * q[0]
    usage[:, 1] = 0.5 * q[1]
    pinned = np.zeros((1, 8), dtype=bool)
    pinned[:, 2:] = True                                            # only cpu and ram measured
    expected, _ = apply_samples(
        Reservations(value=q[None, :].copy(), updated_s=np.array([T0 - 1000.0]), last_sample_s=np.array([-np.inf])),
        workload=np.zeros(len(cpu), dtype=np.int64), time_s=np.array(times), usage=usage, request=q[None, :],
        limit=np.array([pod.limit], dtype=np.float64), start_s=np.array([-np.inf]),
        grace_s=np.array([policy.estimator.grace_s]), pinned=pinned, policy=policy.estimator)
    stored = WorkloadReservation.objects.get(workload=pod)
    assert stored.history is not None
    np.testing.assert_allclose(stored.value[:2], expected.value[0, :2], rtol=1e-12)
    # the 90th percentile of the last ten 1-minute peaks, × the peak margin (1.1, the shipped
    # default's): the early 0.9 burst has left the window
    assert stored.value[0] == pytest.approx(1.1 * np.percentile(usage[-11:-1, 0], 90), rel=1e-9)
    assert policy.estimator.leaf_margin == 1.1


def test_the_node_page_says_which_predictor_serves_each_workload_and_why(homelab, client) -> None:
    from django.contrib.auth.models import User

    from kalena_engine.policy_file import PolicyDocument
    from kalena_web.policy.services import policy_version_create

    policy = Policy().with_estimator(predictor="percentile", bucket_s=60.0, window_s=600.0, min_history_s=300.0)
    policy_version_create(cluster=homelab, document=PolicyDocument(policy=policy), user="op")
    node = Node.objects.get(cluster=homelab, name="thinkcentre-beta")
    pod = Workload.objects.get(node=node, name="database/postgres-0")
    client.force_login(User.objects.create_user("op", password="x" * 12))

    def predictor_cell() -> str:
        page = client.get(f"/live/{homelab.name}/nodes/{node.name}/").content.decode()
        row = page[page.index(f'data-workload="{pod.name}"'):]
        return row[row.index("data-predictor="):row.index("</tr>")]

    for seq in range(8):                                            # one sample a minute, a pass after each
        t = T0 + 400.0 + 60.0 * seq
        ingest(node, seq, [record(pod.name, t, cpu_mcpu=0.3 * pod.request[0], ram_bytes=0.5 * pod.request[1])],
               now_s=t + 1)
        estimation_run(shard=shard(node), now_s=t + 2)              # the cluster's saved policy
        if seq == 2:
            assert "too little history for percentile: 2 of 5 min" in predictor_cell()
    assert 'data-predictor="percentile"' in predictor_cell()


def _throttling(us: float) -> dict:
    return {"nr_periods": 600, "nr_throttled": 30, "throttled_time_us": us}


def test_the_node_ledger_and_its_minute_rows_split_batch_usage_and_read_batch_throttling_as_cores(c1) -> None:
    """The live node chart's data (issue: node charts show usage production first, batch on top,
    and throttled batch as its own series): batch's Σ u beside the node's, and the batch pods'
    cpu.stat throttled time as a rate — b1 throttled 30 s more over 60 s is 0.5 s/s (500). A counter
    that went down (the pod restarted) adds nothing; production's throttling is not batch's."""
    from kalena_web.archive.live import fold_hours, node_snapshot_rollup
    from kalena_web.archive.models import UsageRollup
    from kalena_web.control.selectors import node_history

    def sample(ts: float, b1_us: float, b2_us: float, p_us: float) -> list[dict]:
        return [record("prod/p-0", ts, cpu_mcpu=1000.0, ram_bytes=20 * GIB, cpu_throttling=_throttling(p_us)),
                record("batch/b1", ts, cpu_mcpu=1500.0, ram_bytes=10 * GIB, tier="batch", cpu_throttling=_throttling(b1_us)),
                record("batch/b2", ts, cpu_mcpu=500.0, ram_bytes=5 * GIB, tier="batch", cpu_throttling=_throttling(b2_us))]

    ingest(c1, 1, sample(T0, 1e6, 4e6, 0.0), now_s=T0 + 0.5)
    estimation_run(shard=shard(c1), now_s=T0 + 1)
    ledger = LiveNodeLedger.objects.get(node=c1)
    assert (ledger.usage[0], ledger.batch_usage[0], ledger.batch_usage[1]) == (3000.0, 2000.0, 15 * GIB)
    assert ledger.batch_throttled_mcpu is None            # one counter per pod: no rate yet

    ingest(c1, 2, sample(T0 + 60, 31e6, 4e6, 60e6), now_s=T0 + 60.5)   # b1 +30 s, b2 +0, production +60 s
    result = estimation_run(shard=shard(c1), now_s=T0 + 61)
    assert LiveNodeLedger.objects.get(node=c1).batch_throttled_mcpu == pytest.approx(500.0)
    (_, point), = result.points                           # what the page's socket receives
    assert point["batch_throttled"] == pytest.approx(500.0) and point["batch_usage"][0] == 2000.0
    node_snapshot_rollup(cluster=c1.cluster, now_s=T0 + 61)

    ingest(c1, 3, sample(T0 + 120, 2e6, 10e6, 60e6), now_s=T0 + 120.5)  # b1 restarted (counter reset), b2 +6 s
    estimation_run(shard=shard(c1), now_s=T0 + 121)
    assert LiveNodeLedger.objects.get(node=c1).batch_throttled_mcpu == pytest.approx(100.0)
    node_snapshot_rollup(cluster=c1.cluster, now_s=T0 + 121)
    # the same figures reach scripts: the REST node list (IR units: cores, GiB; seconds per second)
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    client.force_login(User.objects.create_user("throttle-viewer", password="x" * 12))
    (api_node,) = client.get(f"/api/clusters/{c1.cluster.name}/nodes").json()
    assert api_node["batch_throttled_s_per_s"] == pytest.approx(0.1)
    assert api_node["batch_usage"]["cpu"] == pytest.approx(2.0) and api_node["batch_usage"]["ram"] == pytest.approx(15.0)

    history = node_history(node=c1, since_s=T0)
    np.testing.assert_allclose(history["batch_throttled"], [500.0, 100.0])
    np.testing.assert_allclose(history["prod_usage"][:, 0], [1000.0, 1000.0])    # Σ u − batch's Σ u
    np.testing.assert_allclose(history["batch_usage"][:, 1], [15 * GIB, 15 * GIB])
    fold_hours(cluster=c1.cluster, now_s=T0 + 7200)       # the hour row keeps the minutes' mean
    hour = UsageRollup.objects.get(node=c1, resolution=UsageRollup.HOUR)
    assert hour.batch_throttled_mcpu == pytest.approx(300.0) and hour.batch_usage[0] == pytest.approx(2000.0)
