"""Production identity in the control plane (docs/design.md §15, §5, §4): pods read from pod JSON shaped
as real controllers make it, through the watch's translation and the reconciler — a pod's start
time is its workload's start (startup grace from the real start), its annotations' overrides
take effect as the labels' do, samples under its live name land on its entry, a moved pod is a
finding, an extra is counted once and leaves the ledgers when it goes."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import User

from agents.orchestrators.events import PodGone, ProductionSeen, Resynced
from agents.orchestrators.kubernetes.objects import pod_events
from agents.orchestrators.kubernetes.testpods import deployment_pod, statefulset_pod
from kalena_engine.policy import Policy
from kalena_web.control.locks import shard_of
from kalena_web.control.models import ProductionPlacement
from kalena_web.control.reconciler import CHANGED, UNCHANGED, Reconciler
from kalena_web.inventory.models import Node, Workload
from kalena_web.ledger.estimation import estimation_run
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.telemetry.ingest import prepare_message
from kalena_web.telemetry.selectors import node_view_load
from kalena_web.telemetry.storage import store_entries
from kalena_web.telemetry.validation import Limits
from tests.web.shop_cluster import import_shop
from tests.web.telemetry.conftest import record, samples

T0 = 1_700_000_000.0
CPU = 0


@pytest.fixture
def shop(db, tmp_path):
    return import_shop(tmp_path, now_s=T0 - 7200.0)


def seen(rec: Reconciler, pod_json: dict) -> str:
    (event,) = pod_events("ADDED", pod_json)
    assert isinstance(event, ProductionSeen)
    return rec.apply(event)


def ingest_low_usage(node_name: str, refs: list[str], *, until_s: float, cpu_mcpu: float = 500.0) -> None:
    """The node's agent reports each live pod at ``cpu_mcpu`` every 20 s from T0 to ``until_s``,
    then estimation runs."""
    node = Node.objects.get(name=node_name)
    view = node_view_load(node_id=node.id, shards=settings.KALENA_ESTIMATION_SHARDS)
    for seq, t in enumerate(range(int(T0) + 20, int(until_s) + 1, 20)):
        entry = prepare_message(samples(node.name, seq, [record(r, float(t), cpu_mcpu=cpu_mcpu) for r in refs],
                                        ts=float(t)), view=view, now_s=float(t), received_s=float(t), limits=Limits())
        assert not entry.rejected, entry.rejected
        store_entries([entry], now_s=float(t))
    estimation_run(shard=shard_of(node.name, settings.KALENA_ESTIMATION_SHARDS), now_s=until_s)


def reservation_cpu(name: str) -> float:
    return WorkloadReservation.objects.get(workload__name=name).value[CPU]


def test_startup_grace_runs_from_the_pods_start_time(shop) -> None:
    """Two web pods at 0.5 core of a 6-core request, 200 s of samples. The one that started 10 s
    before T0 is inside g = 300 s throughout: r = max(q, τ) = 6 cores. The one that started an
    hour ago decays from the first sample at the shipped half-life h (1200 s; the periodic member
    has no day of history yet, so the asymmetric rule serves): r(T0 + 200) ≈ 0.575 + 5.425 ·
    2^(−200/h) ≈ 5.41 cores."""
    half_life_s = Policy().estimator.half_life_s
    rec = Reconciler(cluster=shop, clock=lambda: T0)
    seen(rec, deployment_pod("shop", "web", "7d9c5b6f4", "young", "kube-a", cpu="6", started_s=T0 - 10.0))
    seen(rec, deployment_pod("shop", "web", "7d9c5b6f4", "older", "kube-b", cpu="6", started_s=T0 - 3600.0))
    assert Workload.objects.get(name="shop/web-0000").start_s == T0 - 10.0
    ingest_low_usage("kube-a", ["shop/web-7d9c5b6f4-young"], until_s=T0 + 200.0)
    ingest_low_usage("kube-b", ["shop/web-7d9c5b6f4-older"], until_s=T0 + 200.0)
    assert reservation_cpu("shop/web-0000") == 6000.0                      # in grace: the request
    assert reservation_cpu("shop/web-0002") == pytest.approx(575.0 + 5425.0 * 2 ** (-200 / half_life_s), rel=1e-3)


@pytest.mark.parametrize("annotations, started_ago_s, pinned", [
    pytest.param({"kalena.naughtian.io/reclaim": "disabled"}, 3600.0, True, id="reclaim-disabled"),
    # its own grace of an hour: still in it 600 s after the start, where the policy's 300 s has ended
    pytest.param({"kalena.naughtian.io/startup-grace-s": "3600"}, 600.0, True, id="startup-grace-annotation"),
    pytest.param({}, 600.0, False, id="no-annotation-decays"),
])
def test_override_annotations_reach_the_control_plane(shop, annotations, started_ago_s, pinned) -> None:
    rec = Reconciler(cluster=shop, clock=lambda: T0)
    seen(rec, deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "kube-b", cpu="6", started_s=T0 - started_ago_s,
                             annotations=annotations))
    ingest_low_usage("kube-b", ["shop/web-7d9c5b6f4-x2k9q"], until_s=T0 + 200.0)
    ledger = LiveNodeLedger.objects.get(node__name="kube-b")
    if pinned:  # no slack opened centrally from it: its reservation stays at its request
        assert reservation_cpu("shop/web-0002") == 6000.0
        assert ledger.prod_reservation[CPU] == ledger.prod_request[CPU] == 18000.0
    else:
        # past its grace: decays from the first sample at the shipped half-life, as the older pod above
        half_life_s = Policy().estimator.half_life_s
        assert reservation_cpu("shop/web-0002") == pytest.approx(575.0 + 5425.0 * 2 ** (-200 / half_life_s), rel=1e-3)
        assert ledger.prod_reservation[CPU] < ledger.prod_request[CPU]


def test_a_moved_pod_is_a_finding_and_its_charge_follows_it_until_it_goes(shop, client) -> None:
    rec = Reconciler(cluster=shop, clock=lambda: T0)
    assert seen(rec, statefulset_pod("shop", "db", 0, "kube-b", cpu="12", started_s=T0)) == CHANGED
    claim = ProductionPlacement.objects.select_related("workload").get(pod="shop/db-0")
    assert (claim.workload.name, claim.identity, claim.finding) == ("shop/db-0000", "moved", True)
    cpu = {led.node.name: led.prod_request[CPU] for led in LiveNodeLedger.objects.select_related("node")}
    assert cpu == {"kube-a": 30000.0, "kube-b": 30000.0}
    client.force_login(User.objects.create_user("viewer", password="x" * 12))
    page = client.get("/live/shop/").content.decode()
    assert "Blueprint fidelity" in page and "shop/db-0000 <span class=\"muted small\">live as shop/db-0" in page
    assert Reconciler(cluster=shop, clock=lambda: T0).apply(pod_events("ADDED", statefulset_pod(
        "shop", "db", 0, "kube-b", cpu="12", started_s=T0))[0]) == UNCHANGED  # a re-list: nothing changes
    assert rec.apply(PodGone("shop/db-0")) == CHANGED
    cpu = {led.node.name: led.prod_request[CPU] for led in LiveNodeLedger.objects.select_related("node")}
    assert cpu == {"kube-a": 42000.0, "kube-b": 18000.0}  # back where the blueprint put it
    assert not ProductionPlacement.objects.exists()


def test_a_daemonset_pod_reported_by_a_watch_is_never_charged(shop) -> None:
    """Phase 0 took the DaemonSet out of the node's capacity (the Kubernetes watch does not even
    report its pods; an orchestrator that does is told apart by the owner)."""
    rec = Reconciler(cluster=shop, clock=lambda: T0)
    before = {led.node.name: led.prod_request[CPU] for led in LiveNodeLedger.objects.select_related("node")}
    event = ProductionSeen("kube-system/fluentd-8x2kq", "kube-a", (500.0,) + (0.0,) * 7, (500.0,) + (0.0,) * 7,
                           owner="DaemonSet/fluentd", start_s=T0)
    assert rec.apply(event) == UNCHANGED
    assert {led.node.name: led.prod_request[CPU] for led in LiveNodeLedger.objects.select_related("node")} == before
    assert not ProductionPlacement.objects.exists()


def test_an_extra_with_unreadable_owner_is_explained_counted_once_and_leaves(shop) -> None:
    rec = Reconciler(cluster=shop, clock=lambda: T0)
    pod = deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "kube-a", cpu="2", started_s=T0)
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": 7, "name": "web-7d9c5b6f4",
                                           "controller": True}]
    assert seen(rec, pod) == CHANGED
    claim = ProductionPlacement.objects.get(pod="shop/web-7d9c5b6f4-x2k9q")
    assert claim.identity == "extra" and claim.reason_text == (
        "its ownerReferences cannot be read: metadata.ownerReferences[0].kind: expected a string, got int 7")
    assert LiveNodeLedger.objects.get(node__name="kube-a").prod_request[CPU] == 44000.0  # 42 + 2, once
    ingest_low_usage("kube-a", ["shop/web-7d9c5b6f4-x2k9q"], until_s=T0 + 40.0)
    ledger = LiveNodeLedger.objects.get(node__name="kube-a")
    assert ledger.prod_request[CPU] == 44000.0 and ledger.blueprint_checked_s == T0 + 40.0
    assert ledger.blueprint_violations == []  # explained on the node page, not a broken blueprint
    assert seen(Reconciler(cluster=shop, clock=lambda: T0), pod) == UNCHANGED
    assert rec.apply(Resynced(pods=frozenset(), nodes=frozenset({"kube-a", "kube-b"}))) == CHANGED
    assert LiveNodeLedger.objects.get(node__name="kube-a").prod_request[CPU] == 42000.0
    assert not ProductionPlacement.objects.exists()
