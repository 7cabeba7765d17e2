"""The blueprint check on live state (docs/design.md §6): every estimation pass removes all batch from
the nodes it touches and checks that each keeps exactly the blueprint's production set (as
imported) with Σ q ≤ C; what fails is stored on the ledger, shown on the console (cluster and
node pages) and exported in ``/metrics`` as ``kalena_node_blueprint_violations``."""

from __future__ import annotations

import numpy as np
import pytest
from django.contrib.auth.models import User
from prometheus_client.parser import text_string_to_metric_families

from kalena_engine.resources import ir_vector
from kalena_web.inventory.models import Node, Workload
from kalena_web.ledger.estimation import estimation_run
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from tests.web.live_cluster import import_homelab
from tests.web.telemetry.conftest import record
from tests.web.telemetry.test_estimation import ingest, shard

T0 = 1_700_000_000.0
GRAFANA = "monitoring/grafana-0"


def metric(client, node: str, kind: str) -> float:
    for family in text_string_to_metric_families(client.get("/metrics/cluster").content.decode()):
        for s in family.samples:
            if s.name == "kalena_node_blueprint_violations" and s.labels == {
                    "cluster": "home", "node": node, "kind": kind}:
                return s.value
    raise AssertionError(f"no kalena_node_blueprint_violations for {node} {kind}")


def estimate(nodes: list[Node], seq: int, now_s: float) -> None:
    for node in nodes:
        pods = Workload.objects.filter(node=node, kind=Workload.PRODUCTION).values_list("name", flat=True)
        ingest(node, seq, [record(p, now_s) for p in pods], now_s=now_s)
        estimation_run(shard=shard(node), now_s=now_s)


@pytest.fixture
def homelab(db, kuberina_dir, tmp_path):
    return import_homelab(kuberina_dir, tmp_path, now_s=T0 - 1000.0)


def test_every_estimation_pass_checks_the_blueprint_and_a_broken_one_is_loud(homelab, client) -> None:
    alpha, beta, gamma = (Node.objects.get(cluster=homelab, name=f"thinkcentre-{n}") for n in ("alpha", "beta", "gamma"))
    client.force_login(User.objects.create_user("op", password="x" * 12))
    estimate([alpha, beta, gamma], 1, T0)
    for led in LiveNodeLedger.objects.filter(node__cluster=homelab):
        assert led.blueprint_violations == [] and led.blueprint_checked_s == T0
    assert metric(client, "thinkcentre-beta", "missing") == 0.0
    # a batch workload far beyond the node's capacity is no blueprint violation: removing batch removes it
    huge = Workload.objects.create(cluster=homelab, kind=Workload.BATCH, row=0, name="batch/huge-0", tier="batch",
                                   node=gamma, request=ir_vector(cpu=64, ram=512).tolist(),
                                   limit=ir_vector(cpu=64, ram=512).tolist())
    WorkloadReservation.objects.create(workload=huge, value=huge.request, updated_s=T0)
    # grafana leaves its blueprint node (beta) for alpha, where it still fits
    Workload.objects.filter(cluster=homelab, name=GRAFANA).update(node=alpha)
    estimate([alpha, beta, gamma], 2, T0 + 10)
    ledgers = {led.node.name: led for led in LiveNodeLedger.objects.filter(node__cluster=homelab).select_related("node")}
    assert [(v["kind"], v["workloads"]) for v in ledgers["thinkcentre-beta"].blueprint_violations] == [("missing", [GRAFANA])]
    assert [(v["kind"], v["workloads"]) for v in ledgers["thinkcentre-alpha"].blueprint_violations] == [("extra", [GRAFANA])]
    assert ledgers["thinkcentre-gamma"].blueprint_violations == []
    assert metric(client, "thinkcentre-beta", "missing") == 1.0
    assert metric(client, "thinkcentre-alpha", "extra") == 1.0
    assert metric(client, "thinkcentre-gamma", "over_capacity") == 0.0
    page = client.get("/live/home/").content.decode()
    assert "Blueprint check failed on 2 nodes" in page and "the blueprint placed monitoring/grafana-0 here" in page
    node_page = client.get("/live/home/nodes/thinkcentre-alpha/").content.decode()
    assert "Blueprint check failed" in node_page and "monitoring/grafana-0 is here but the blueprint did not place" in node_page
    # a production pod the blueprint never placed, too big for gamma: extra, and the request ledger is over C
    intruder = Workload.objects.create(cluster=homelab, kind=Workload.PRODUCTION, row=99, name="web/intruder-0",
                                       node=gamma, request=ir_vector(cpu=8, ram=1).tolist(),
                                       limit=ir_vector(cpu=8, ram=1).tolist())
    WorkloadReservation.objects.create(workload=intruder, value=intruder.request, updated_s=T0)
    estimate([gamma], 3, T0 + 20)
    gamma_led = LiveNodeLedger.objects.get(node=gamma)
    kinds = {v["kind"]: v for v in gamma_led.blueprint_violations}
    assert set(kinds) == {"extra", "over_capacity"} and kinds["extra"]["workloads"] == ["web/intruder-0"]
    over = kinds["over_capacity"]
    assert over["dimension"] == "cpu" and over["capacity"] == gamma_led.capacity[0]
    assert over["request"] == pytest.approx(gamma_led.prod_request[0]) and over["request"] > over["capacity"]
    assert metric(client, "thinkcentre-gamma", "over_capacity") == 1.0
    # the pods go back where the blueprint put them: the next pass finds the blueprint state again
    Workload.objects.filter(cluster=homelab, name=GRAFANA).update(node=beta)
    intruder.delete()
    estimate([alpha, beta, gamma], 4, T0 + 30)
    assert all(led.blueprint_violations == [] for led in LiveNodeLedger.objects.filter(node__cluster=homelab))
    assert "Blueprint check failed" not in client.get("/live/home/").content.decode()
    assert np.isfinite(LiveNodeLedger.objects.get(node=beta).blueprint_checked_s)
