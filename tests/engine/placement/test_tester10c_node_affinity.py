"""Tester 10c: required node affinity (681b624) against kube-scheduler's and the kubelet's rules."""

from __future__ import annotations

import numpy as np

from kalena_engine.placement import BatchResidents, BatchTemplate, NodeRequirement, NodeSelectorTerm, SpreadConstraint
from kalena_engine.placement import filters as F
from tests.engine.placement.builders import Node, snapshot
from tests.engine.placement.test_filters import View, run_filter

T = BatchTemplate


def test_spread_counts_only_pods_on_nodes_the_affinity_allows() -> None:
    """kube-scheduler PodTopologySpread, nodeAffinityPolicy Honor (the default): a node that fails
    the pod's required node affinity is left out of the counting — its pods count in no domain
    (``calPreFilterState``: ``matchNodeInclusionPolicies`` per node). Zone a holds a-gpu (free) and
    a-cpu (2 matching batch pods placed there by pods without the affinity); zone b holds b-gpu.
    The new pod requires accelerator=a100. Kubernetes: counts a=0, b=0 → a-gpu and b-gpu both pass
    (maxSkew 1). Observed: a=2 (a-cpu's pods counted), b=0 → a-gpu rejected (2 + 1 − 0 > 1)."""
    nodes = [Node("a-gpu", zone="a", labels={"accelerator": "a100"}), Node("a-cpu", zone="a"),
             Node("b-gpu", zone="b", labels={"accelerator": "a100"})]
    plain = T("batch/w", labels={"app": "w"})
    gpu = T("batch/w", labels={"app": "w"}, spread=(SpreadConstraint(1, "zone"),),
            node_affinity=(NodeSelectorTerm((NodeRequirement("accelerator", "In", ("a100",)),)),))
    residents = BatchResidents(node=np.array([1]), count=np.array([2]), template=np.array([0]), templates=(plain,))
    view = View(snapshot(nodes, batch=residents))
    got, reasons = run_filter(F.SpreadFilter, view, gpu)
    assert 0 in got, reasons  # a-gpu: zone a holds no pod on a node the pod may use


def test_gt_does_not_read_a_label_go_cannot_parse_as_an_integer() -> None:
    """The kubelet and kube-scheduler read a Gt/Lt label with Go's ``strconv.ParseInt(v, 10, 64)``;
    ``1_0`` is a valid label value but not an integer there, so ``gpu-count gt (3)`` does not match
    (the kubelet would refuse the pod: NodeAffinity). Observed: Python's ``int("1_0") == 10`` →
    Kalena matches it and binds the pod to a node the kubelet refuses."""
    requirement = NodeRequirement("gpu-count", "Gt", ("3",))
    assert requirement.matches({"gpu-count": "10"}, "n")
    assert not requirement.matches({"gpu-count": "1_0"}, "n")
