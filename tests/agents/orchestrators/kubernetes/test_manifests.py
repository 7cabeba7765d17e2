"""Kubernetes-shaped import of data/kuberina/forge-manifests: Kubernetes quantity rules, the
Kubernetes toleration rule for DaemonSets, required podAffinity hard (the issue's counts)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from agents.orchestrators.kubernetes.manifests import ManifestError, node_counts, parse_manifests
from kalena_engine.kuberina import Blueprint, phase0_capacity, verify_blueprint

GIB = 2.0**30


def load(forge: Path):
    docs = []
    for path in sorted(forge.glob("*.yaml")):
        docs += [(str(path), d) for d in yaml.safe_load_all(path.read_text())]
    return parse_manifests(docs)


@pytest.fixture
def forge(kuberina_dir: Path) -> Path:
    return kuberina_dir / "forge-manifests"


def test_forge_counts(forge):
    m = load(forge)
    assert [n.name for n in m.infra.nodes] == ["gpu-a", "gpu-b", "std-a"]
    assert node_counts(m) == {"monitoring/node-exporter": 3}  # tolerates dedicated (Exists): all 3
    pods = {p.id: p for p in m.workloads.pods}
    assert sorted(pods) == ["ai/parameter-server-0", "ai/trainer-0000", "ai/trainer-0001"]
    for trainer in ("ai/trainer-0000", "ai/trainer-0001"):
        # containers summed: 8 + 0.25 cores, 32 Gi + 512 Mi, 1 GPU; log-shipper has no limit → undefined
        assert pods[trainer].requests[:3].tolist() == [8250.0, 32.5 * GIB, 1.0]
        assert pods[trainer].limits is None
    assert pods["ai/parameter-server-0"].requests[:2].tolist() == [4000.0, 16 * GIB]
    capacity = phase0_capacity(m.infra)
    # Phase 0: 64 − 0.1 cores, 256 Gi − 128 Mi (node-exporter) on the GPU nodes; 16 − 0.1 / 64 Gi − 128 Mi on std-a
    assert capacity[:, 0].tolist() == [63900.0, 63900.0, 15900.0]
    assert (capacity[:, 1] / GIB).tolist() == [255.875, 255.875, 63.875]
    assert capacity[:2, 2].tolist() == [8.0, 8.0] and capacity[2, 2] == 0.0  # no nvidia.com/gpu → 0 devices
    assert capacity[:2, 3].tolist() == [2 * 2**40 - 0, 2 * 2**40] and np.isinf(capacity[2, 3])
    assert any("parameter-server: spec.selector missing" in n for n in m.notes)
    assert any("Service ai/trainer: skipped" in n for n in m.notes)


@pytest.mark.parametrize("ps_node, violations", [
    ("gpu-b", {}),                         # with trainer-0001: the required podAffinity holds
    ("std-a", {"pod_affinity": 1}),        # no trainer on std-a: hard in Kubernetes
    ("gpu-a", {"taint": 1}),               # a trainer is there, but dedicated=ml is not tolerated
])
def test_required_pod_affinity_is_hard(forge, ps_node, violations):
    m = load(forge)
    bp = Blueprint("bp", {"ai/trainer-0000": "gpu-a", "ai/trainer-0001": "gpu-b", "ai/parameter-server-0": ps_node})
    report = verify_blueprint(m.infra, m.workloads, bp, phase0_capacity(m.infra))
    assert report.hard_counts == violations


def test_untolerated_daemonset_skips_the_tainted_node(forge):
    docs = [("x", yaml.safe_load((forge / "cluster-nodes.yaml").read_text().split("---")[0])),
            ("x", {"kind": "DaemonSet", "metadata": {"name": "plain", "namespace": "kube-system"},
                   "spec": {"template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}}})]
    assert node_counts(parse_manifests(docs)) == {"kube-system/plain": 0}  # gpu-a is tainted dedicated:NoSchedule


@pytest.mark.parametrize("doc, field", [
    ({"kind": "Node", "metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "4x", "memory": "1Gi"}}},
     "Node n: status.allocatable.cpu"),
    ({"kind": "Node", "metadata": {"name": "n"}, "status": {}}, "Node n: status.allocatable"),
    ({"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"selector": {"matchLabels": {"app": "x"}},
      "template": {"metadata": {"labels": {"app": "y"}}, "spec": {"containers": [{"name": "c"}]}}}},
     "Deployment default/d: spec.selector"),
    ({"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"template": {"spec": {"containers": []}}}},
     "Deployment default/d: spec.template.spec.containers"),
    ({"kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": -1, "template": {"spec": {
        "containers": [{"name": "c"}]}}}}, "Deployment default/d: spec.replicas"),
], ids=["bad-quantity", "no-allocatable", "selector-mismatch", "no-containers", "negative-replicas"])
def test_bad_manifest_refused_naming_object_and_field(doc, field):
    with pytest.raises(ManifestError) as info:
        parse_manifests([("f.yaml", doc)])
    assert info.value.source == "f.yaml" and info.value.field.startswith(field), str(info.value)
