"""The ``live`` fixture: a live homelab cluster (3 nodes, 10 production pods) whose agents have
just reported (every node fresh). Registered for all web tests by ``tests/web/conftest.py``."""

from __future__ import annotations

from pathlib import Path

import pytest

from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads
from kalena_web.control.services import live_cluster_import
from kalena_web.ledger.models import LiveNodeLedger

NODES = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]


def import_homelab(kuberina_dir: Path, tmp_path: Path, *, now_s: float, name: str = "home", nodes: int = 3):
    """The homelab spread over its three nodes (the smart-home pair together) as a live cluster;
    ``nodes`` > 3 replicates it to that many nodes (the benchmarks' way, ``bench_cluster.replicate``)."""
    infra = load_infrastructure(kuberina_dir / "homelab/homelab_infra.yaml")
    workloads = load_workloads(kuberina_dir / "homelab/homelab_workloads.yaml")
    assignment = {pod.id: NODES[i % 3] for i, pod in enumerate(workloads.pods)}
    assignment["smart-home/home-assistant-0"] = assignment["smart-home/zigbee2mqtt-0"] = "thinkcentre-beta"
    path = tmp_path / f"bp-{name}.yaml"
    path.write_text("solution:\n" + "".join(f"  {p}: {n}\n" for p, n in assignment.items()))
    blueprint = load_blueprint(path, workloads)
    if nodes != 3:
        from kalena_web.cli.bench_cluster import replicate

        infra, workloads, blueprint = replicate(infra, workloads, blueprint, nodes)
    return live_cluster_import(name=name, infra=infra, workloads=workloads, blueprint=blueprint,
                               now_s=now_s,
                               workloads_document=(kuberina_dir / "homelab/homelab_workloads.yaml").read_text()).cluster


@pytest.fixture
def live(db, kuberina_dir: Path, tmp_path: Path):
    cluster = import_homelab(kuberina_dir, tmp_path, now_s=1000.0)
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=1000.0)
    return cluster
