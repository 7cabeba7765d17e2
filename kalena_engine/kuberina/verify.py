"""Blueprint verification (docs/design.md §3): hard violations make a blueprint invalid; soft ones
(affinity, anti-affinity, topology spread — name-based and same-node in Kuberina) are reported
separately and never do.

Hard kinds: ``unassigned`` (a pod with no node), ``unknown_pod`` (a solution key matching no
pod), ``node_missing`` (assigned to a node not in the infrastructure), ``selector``
(nodeSelector does not match), ``taint`` (an untolerated NoSchedule/NoExecute taint),
``over_capacity`` (request ledger above post-Phase-0 capacity, one per node and dimension),
``gang`` (fewer than ``min_members`` placed, or a colocated gang split), and for
Kubernetes-shaped input ``pod_affinity`` / ``pod_anti_affinity`` (a required term broken:
Kubernetes makes them hard, unlike the IR's name lists).
Soft kinds: ``affinity`` (an affinity pair on different nodes), ``anti_affinity`` (an
anti-affinity pair on the same node; each unordered pair once), ``spread`` (a declaration whose
placed pods exceed ``maxSkew`` between topology domains).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.kuberina.matching import selector_matches, untolerated_taints
from kalena_engine.kuberina.model import Blueprint, Infrastructure, Workloads
from kalena_engine.resources import DIMS

#: Relative tolerance on the request ledger, so that float sums of IR decimals do not flag.
CAPACITY_RTOL = 1e-9


@dataclass(frozen=True)
class Violation:
    """One finding: ``kind`` (see module doc), the pod or node it concerns, and a detail line."""

    kind: str
    subject: str
    detail: str


@dataclass(frozen=True, eq=False)
class Verification:
    """Result of :func:`verify_blueprint`.

    Attributes:
        node_of_pod: ``(n_pods,)`` int, the node row of each pod, −1 when unplaced.
        hard, soft: every finding, in pod order.
    """

    node_of_pod: np.ndarray
    hard: tuple[Violation, ...] = ()
    soft: tuple[Violation, ...] = ()
    request_ledger: np.ndarray = field(default_factory=lambda: np.zeros((0, 8)))

    @property
    def hard_counts(self) -> dict[str, int]:
        return dict(Counter(v.kind for v in self.hard))

    @property
    def soft_counts(self) -> dict[str, int]:
        return dict(Counter(v.kind for v in self.soft))

    @property
    def active_nodes(self) -> np.ndarray:
        """Sorted node rows hosting at least one production pod."""
        return np.unique(self.node_of_pod[self.node_of_pod >= 0])


def verify_blueprint(infra: Infrastructure, workloads: Workloads, blueprint: Blueprint,
                     capacity: np.ndarray) -> Verification:
    """Check a blueprint against the infrastructure, workloads and Phase 0 ``capacity``
    ``(n_nodes, 8)``; see the module doc for the kinds counted."""
    hard: list[Violation] = []
    soft: list[Violation] = []
    node_of_pod = np.full(len(workloads.pods), -1, dtype=np.int64)
    for key in blueprint.unknown_pods:
        hard.append(Violation("unknown_pod", key, f"solution key {key!r} matches no pod"))
    for i, pod in enumerate(workloads.pods):
        node_name = blueprint.assignment.get(pod.id)
        if node_name is None:
            hard.append(Violation("unassigned", pod.id, "no node in the solution"))
            continue
        row = infra.node_index.get(node_name)
        if row is None:
            hard.append(Violation("node_missing", pod.id, f"node {node_name!r} is not in the infrastructure"))
            continue
        node_of_pod[i] = row
        node = infra.nodes[row]
        if not selector_matches(pod.node_selector, node.labels):
            hard.append(Violation("selector", pod.id, f"nodeSelector {dict(pod.node_selector)} does not match {node.name}"))
        for taint in untolerated_taints(node.taints, pod.tolerations):
            hard.append(Violation("taint", pod.id, f"{node.name} taint {taint.key}:{taint.effect} is not tolerated"))
    ledger = request_ledger(node_of_pod, workloads.requests, len(infra.nodes))
    over = ledger > capacity * (1 + CAPACITY_RTOL) + 1e-9
    for row, dim in zip(*np.nonzero(over), strict=True):
        hard.append(Violation("over_capacity", infra.nodes[row].name,
                              f"{DIMS[dim]} requests {ledger[row, dim]:.6g} > capacity {capacity[row, dim]:.6g}"))
    hard.extend(_gang_violations(workloads, node_of_pod))
    hard.extend(_required_violations(infra, workloads, node_of_pod))
    soft.extend(_pair_violations(workloads, node_of_pod))
    soft.extend(_spread_violations(infra, workloads, node_of_pod))
    return Verification(node_of_pod=node_of_pod, hard=tuple(hard), soft=tuple(soft), request_ledger=ledger)


def request_ledger(node_of_pod: np.ndarray, requests: np.ndarray, n_nodes: int) -> np.ndarray:
    """``Σ_{p on n} q_p`` per node, shape ``(n_nodes, 8)``; unplaced pods (−1) are skipped."""
    ledger = np.zeros((n_nodes, requests.shape[1]))
    placed = node_of_pod >= 0
    np.add.at(ledger, node_of_pod[placed], requests[placed])
    return ledger


def _gang_violations(workloads: Workloads, node_of_pod: np.ndarray) -> list[Violation]:
    out = []
    for group in workloads.groups:
        rows = [int(node_of_pod[workloads.index[m]]) for m in group.members]
        placed = [r for r in rows if r >= 0]
        if len(placed) < group.min_members:
            out.append(Violation("gang", group.name, f"{len(placed)} of min {group.min_members} members placed"))
        elif group.colocate and len(set(placed)) > 1:
            out.append(Violation("gang", group.name, f"colocated gang split over {len(set(placed))} nodes"))
    return out


def _domain(infra: Infrastructure, row: int, topology_key: str) -> str | None:
    node = infra.nodes[row]
    if topology_key == "kubernetes.io/hostname":
        return node.name
    if topology_key in ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone", "zone"):
        return node.zone or node.labels.get(topology_key)
    return node.labels.get(topology_key)


def _required_violations(infra: Infrastructure, workloads: Workloads, node_of_pod: np.ndarray) -> list[Violation]:
    """Kubernetes required pod (anti-)affinity: affinity needs a target in the pod's domain of
    the topology key (or, when no target exists at all, the pod matching its own selector);
    anti-affinity needs none there."""
    out = []
    for i, pod in enumerate(workloads.pods):
        here = int(node_of_pod[i])
        if here < 0:
            continue
        for term in pod.required:
            domain = _domain(infra, here, term.topology_key)
            rows = [int(node_of_pod[workloads.index[t]]) for t in term.targets if t != pod.id]
            there = [r for r in rows if r >= 0 and domain is not None and _domain(infra, r, term.topology_key) == domain]
            if term.kind == "affinity" and not there and not (term.self_match and not rows):
                out.append(Violation("pod_affinity", pod.id, f"no pod matching {term.selector} in its "
                                     f"{term.topology_key} domain {domain!r} ({infra.nodes[here].name})"))
            elif term.kind == "anti_affinity" and there:
                out.append(Violation("pod_anti_affinity", pod.id, f"{len(there)} pod(s) matching {term.selector} in "
                                     f"its {term.topology_key} domain {domain!r}"))
    return out


def _pair_violations(workloads: Workloads, node_of_pod: np.ndarray) -> list[Violation]:
    out = []
    seen: set[tuple[str, str, str]] = set()
    for i, pod in enumerate(workloads.pods):
        here = node_of_pod[i]
        if here < 0:
            continue
        for kind, targets, broken in (("affinity", pod.affinity, lambda a, b: a != b),
                                      ("anti_affinity", pod.anti_affinity, lambda a, b: a == b)):
            for target in targets:
                there = node_of_pod[workloads.index[target]]
                if there < 0:
                    continue
                pair = (kind, *sorted((pod.id, target)))
                if pair in seen or not broken(here, there):
                    continue
                seen.add(pair)
                out.append(Violation(kind, pod.id, f"{kind} with {target}"))
    return out


def _spread_violations(infra: Infrastructure, workloads: Workloads, node_of_pod: np.ndarray) -> list[Violation]:
    by_decl: dict[tuple[str, str], list[int]] = {}
    for i, pod in enumerate(workloads.pods):
        if pod.topology_spread is not None:
            by_decl.setdefault((pod.namespace, pod.declaration), []).append(i)
    out = []
    for (namespace, declaration), rows in by_decl.items():
        first = workloads.pods[rows[0]]
        key = first.topology_spread.topology_key
        domains = {getattr(n, key) for n in infra.nodes if selector_matches(first.node_selector, n.labels)}
        counts = Counter({d: 0 for d in domains})
        for i in rows:
            if node_of_pod[i] >= 0:
                counts[getattr(infra.nodes[node_of_pod[i]], key)] += 1
        if counts:
            skew = max(counts.values()) - min(counts.values())
            if skew > first.topology_spread.max_skew:
                out.append(Violation("spread", f"{namespace}/{declaration}",
                                     f"skew {skew} over {key} > maxSkew {first.topology_spread.max_skew}"))
    return out
