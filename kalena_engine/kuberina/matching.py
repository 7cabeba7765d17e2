"""Label selectors, taints and tolerations (docs/design.md §3) — shared by Phase 0, blueprint
verification and batch placement."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kalena_engine.kuberina.model import BLOCKING_EFFECTS, DaemonSetSpec, NodeSpec, Taint, Toleration


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """True when every ``key: value`` pair of ``selector`` is in ``labels`` (nodeSelector)."""
    return all(labels.get(key) == value for key, value in selector.items())


def untolerated_taints(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> list[Taint]:
    """Taints with effect NoSchedule/NoExecute that no toleration matches (Kubernetes rule).

    A pod with no tolerations tolerates no taint. ``PreferNoSchedule`` never blocks.
    """
    tolerations = tuple(tolerations)
    return [
        taint for taint in taints
        if taint.effect in BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in tolerations)
    ]


def daemonset_eligible(daemonset: DaemonSetSpec, node: NodeSpec) -> bool:
    """Kuberina Phase 0 eligibility (the solver's rule, not the validator's).

    Every nodeSelector pair matches the node labels, and either the DaemonSet's tolerations
    list is empty (the planner's "tolerates all") or every node taint key is in it. A
    DaemonSet read from Kubernetes manifests follows the Kubernetes rule instead (every blocking
    taint tolerated).
    """
    if not selector_matches(daemonset.node_selector, node.labels):
        return False
    if daemonset.k8s_tolerations is not None:  # Kubernetes-shaped input: the Kubernetes rule
        return not untolerated_taints(node.taints, daemonset.k8s_tolerations)
    if not daemonset.tolerations:
        return True
    keys = set(daemonset.tolerations)
    return all(taint.key in keys for taint in node.taints)
