"""The ``live`` fixture: a live homelab cluster (3 nodes, 10 production pods) whose agents have
just reported (every node fresh). Registered for all web tests by ``tests/web/conftest.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
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


def fill_node_archive(cluster, node_name: str, *, now_s: float, minutes: int, old: int = 0) -> dict[str, np.ndarray]:
    """``minutes`` one-minute rows of node ``node_name`` ending the minute before ``now_s``,
    written as the archive loop writes them (the ledger set, then :func:`node_snapshot_rollup`):
    production and batch usage that move, within capacity, and batch throttled while batch runs
    high. The first ``old`` rows lack batch usage and throttling (written before they were
    recorded). Returns what was written, ``(minutes,)`` arrays in cores and GiB (NaN: not recorded)."""
    from kalena_web.archive.live import node_snapshot_rollup

    ledger = LiveNodeLedger.objects.get(node__cluster=cluster, node__name=node_name)
    cpu, ram = ledger.capacity[0], ledger.capacity[1]
    k = np.arange(minutes, dtype=np.float64)
    prod = np.stack([cpu * (0.30 + 0.08 * np.sin(2 * np.pi * k / 17)), ram * (0.38 + 0.04 * np.sin(2 * np.pi * k / 29))], 1)
    batch = np.stack([cpu * (0.28 + 0.22 * np.sin(2 * np.pi * k / 23 + 1.0)), ram * (0.22 + 0.1 * np.sin(2 * np.pi * k / 19))], 1)
    throttled = np.maximum(batch[:, 0] - 0.36 * cpu, 0.0) * 1.6
    for i in range(minutes):
        ledger.usage = [prod[i, 0] + batch[i, 0], prod[i, 1] + batch[i, 1], 0, 0, 0, 0, 0, 0]
        ledger.batch_usage = None if i < old else [batch[i, 0], batch[i, 1], 0, 0, 0, 0, 0, 0]
        ledger.batch_throttled_mcpu = None if i < old else float(throttled[i])
        ledger.save(update_fields=["usage", "batch_usage", "batch_throttled_mcpu"])
        node_snapshot_rollup(cluster=cluster, now_s=now_s - 60.0 * (minutes - i))
    gone = np.arange(minutes) < old
    return {"usage_cores": (prod[:, 0] + batch[:, 0]) / 1000.0, "usage_gib": (prod[:, 1] + batch[:, 1]) / 2**30,
            "prod_cores": np.where(gone, np.nan, prod[:, 0] / 1000.0), "prod_gib": np.where(gone, np.nan, prod[:, 1] / 2**30),
            "throttled_cores": np.where(gone, np.nan, throttled / 1000.0)}
