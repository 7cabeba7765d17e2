"""The Kuberina readers on the real data sets, with the counts the data README states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kalena_engine.kuberina import (
    load_blueprint, load_infrastructure, load_workloads, phase0_capacity, verify_blueprint,
)
from kalena_engine.resources import CPU, GPU, RAM, STORAGE, to_ir


@pytest.fixture(scope="module")
def irina186(kuberina_dir: Path):
    infra = load_infrastructure(kuberina_dir / "irina-186-3d/irina_infra.yaml")
    workloads = load_workloads(kuberina_dir / "irina-186-3d/irina_workloads.yaml")
    blueprint = load_blueprint(kuberina_dir / "irina-186-3d/kuberina_solution.yaml", workloads)
    return infra, workloads, blueprint


def test_irina_186_counts_and_blueprint(irina186) -> None:
    infra, workloads, blueprint = irina186
    assert len(infra.nodes) == 186
    assert len(infra.daemonsets) == 4
    assert len(workloads.pods) == 2714
    assert len(blueprint.assignment) == 2714  # bare-name keys resolved to ns/pod
    assert all("/" in key for key in blueprint.assignment)
    totals = to_ir(workloads.requests.sum(axis=0))
    assert totals[CPU] == pytest.approx(7198)
    assert totals[RAM] == pytest.approx(27840)
    assert totals[GPU] == pytest.approx(152)
    capacity = phase0_capacity(infra)
    report = verify_blueprint(infra, workloads, blueprint, capacity)
    assert len(report.active_nodes) == 152
    assert report.hard == ()
    # Kuberina's anti-affinity is soft: the real blueprint co-locates hundreds of pairs.
    assert report.soft_counts["anti_affinity"] > 100


def test_phase0_standard_node(irina186) -> None:
    infra, _, _ = irina186
    capacity = to_ir(phase0_capacity(infra))
    std = infra.node_index["std-000"]
    assert capacity[std, CPU] == pytest.approx(61.75)
    assert capacity[std, RAM] == pytest.approx(253.25)
    assert np.isinf(capacity[std, STORAGE])  # omitted node storage is unconstrained


def test_irina_620_joins_legacy_list_without_reunrolling(kuberina_dir: Path) -> None:
    infra = load_infrastructure(kuberina_dir / "irina-620-8d/irina_infra.yaml")
    workloads = load_workloads(kuberina_dir / "irina-620-8d/irina_workloads.yaml")
    assert len(infra.nodes) == 620
    assert len(workloads.pods) == 2714  # not 40 × 40 for llm-inference
    pod = workloads.pods[workloads.index["ai/llm-inference-0000"]]
    # affinity lists come only from the legacy pods: list
    assert "ai/llm-inference-0008" in pod.anti_affinity
    assert pod.affinity == ("ai/embedding-server-0000",)
    assert pod.topology_spread is not None and pod.topology_spread.topology_key == "zone"
    assert to_ir(pod.requests)[STORAGE] == pytest.approx(20.0)
    assert "" not in {node.rack for node in infra.nodes}
    assert workloads.unresolved == ()


def test_homelab_case_c8(kuberina_dir: Path) -> None:
    infra = load_infrastructure(kuberina_dir / "homelab/homelab_infra.yaml")
    workloads = load_workloads(kuberina_dir / "homelab/homelab_workloads.yaml")
    assert len(infra.nodes) == 3
    assert len(workloads.pods) == 10
    capacity = to_ir(phase0_capacity(infra))
    np.testing.assert_allclose(capacity[:, CPU], 3.55)
    np.testing.assert_allclose(capacity[:, RAM], 15.75)
    nextcloud = workloads.pods[workloads.index["cloud/nextcloud-0"]]
    assert nextcloud.affinity == ("database/postgres-0",)  # declaration name `postgres`
    jellyfin = workloads.pods[workloads.index["media/jellyfin-0"]]
    assert jellyfin.anti_affinity == ("database/postgres-0",)
    # `adguard` exists nowhere: reported with file and pod, never fatal
    assert len(workloads.unresolved) == 1
    assert "dns/pihole-0" in workloads.unresolved[0] and "adguard" in workloads.unresolved[0]
    assert "homelab_workloads.yaml" in workloads.unresolved[0]
