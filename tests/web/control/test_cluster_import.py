"""A live cluster imported from Kuberina IR: nodes, production, ledgers, conditions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kalena_engine.errors import BlueprintRefused
from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads, phase0_capacity
from kalena_engine.resources import CPU, RAM, to_ir
from kalena_web.control.models import NodeCondition
from kalena_web.control.services import ClusterExists, live_cluster_import
from kalena_web.inventory.models import Cluster, Workload
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def homelab(kuberina_dir: Path):
    infra = load_infrastructure(kuberina_dir / "homelab/homelab_infra.yaml")
    workloads = load_workloads(kuberina_dir / "homelab/homelab_workloads.yaml")
    return infra, workloads


def blueprint(tmp_path: Path, workloads, assignment: dict[str, str]):
    path = tmp_path / "bp.yaml"
    path.write_text("solution:\n" + "".join(f"  {pod}: {node}\n" for pod, node in assignment.items()))
    return load_blueprint(path, workloads)


def spread(workloads) -> dict[str, str]:
    nodes = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]
    out = {pod.id: nodes[i % 3] for i, pod in enumerate(workloads.pods)}
    out["smart-home/home-assistant-0"] = out["smart-home/zigbee2mqtt-0"] = "thinkcentre-beta"  # USB dongle
    return out


def test_import_creates_nodes_production_ledgers_and_conditions(homelab, tmp_path: Path) -> None:
    infra, workloads = homelab
    result = live_cluster_import(name="home", infra=infra, workloads=workloads,
                                 blueprint=blueprint(tmp_path, workloads, spread(workloads)), now_s=1000.0)
    assert (result.nodes, result.production) == (3, 10)
    cluster = Cluster.objects.get(kind=Cluster.LIVE, name="home")
    ledger = LiveNodeLedger.objects.get(node__cluster=cluster, node__name="thinkcentre-beta")
    np.testing.assert_allclose(to_ir(np.array(ledger.capacity))[[CPU, RAM]], [3.55, 15.75])
    on_beta = Workload.objects.filter(cluster=cluster, node__name="thinkcentre-beta")
    np.testing.assert_allclose(ledger.prod_request, np.sum([w.request for w in on_beta], axis=0))
    assert ledger.stale  # no agent has reported yet: reservations read max(r, q), no batch taken
    reservation = WorkloadReservation.objects.get(workload__name="database/postgres-0")
    assert reservation.value == reservation.workload.request and reservation.last_sample_s is None
    assert NodeCondition.objects.filter(node__cluster=cluster).count() == 3


def test_import_refuses_duplicates_and_hard_violations_and_writes_nothing(homelab, tmp_path: Path) -> None:
    infra, workloads = homelab
    good = blueprint(tmp_path, workloads, spread(workloads))
    live_cluster_import(name="home", infra=infra, workloads=workloads, blueprint=good, now_s=0.0)
    with pytest.raises(ClusterExists):
        live_cluster_import(name="home", infra=infra, workloads=workloads, blueprint=good, now_s=0.0)
    bad = spread(workloads)
    bad["smart-home/home-assistant-0"] = "thinkcentre-alpha"  # no USB dongle there: selector violation
    with pytest.raises(BlueprintRefused, match="selector 1"):
        live_cluster_import(name="home2", infra=infra, workloads=workloads,
                            blueprint=blueprint(tmp_path, workloads, bad), now_s=0.0)
    assert not Cluster.objects.filter(name="home2").exists()
    assert phase0_capacity(infra).shape == (3, 8)


def test_an_empty_live_cluster_takes_its_nodes_from_the_watch() -> None:
    # `kalena lab up` (and a Docker deployment) start from an empty live cluster: the watch's
    # NodeSeen adds each engine as a node
    from kalena_engine.errors import InputError
    from kalena_web.control.observed_nodes import node_observe
    from kalena_web.control.services import live_cluster_create

    cluster = live_cluster_create(name="lab")
    assert (cluster.kind, cluster.nodes.count()) == (Cluster.LIVE, 0)
    inf = float("inf")
    assert node_observe(cluster=cluster, name="lab-1", ready=True, schedulable=True,
                        allocatable=[250.0, 256 * 2**20, 0.0, inf, inf, inf, inf, inf], labels={}, taints=[], images={},
                        at_s=1.0, now_s=1.0)
    assert list(cluster.nodes.values_list("name", flat=True)) == ["lab-1"]
    with pytest.raises(ClusterExists):
        live_cluster_create(name="lab")
    with pytest.raises(InputError) as bad:
        live_cluster_create(name="-no")
    assert bad.value.field == "name"
    assert Cluster.objects.filter(kind=Cluster.LIVE).count() == 1
