"""Batch placement filters (docs/design.md §9): small named plugins, each a vectorised ``(n,)`` pass
mask over nodes and the typed reasons for the nodes it rejects.

Filter order (why-pending charges each node to the first filter it fails, kube-scheduler
style; resources come last and charge every short dimension):

==========================  =======  ==================================================
filter                      kind(s)  rejects a node when
==========================  =======  ==================================================
:class:`NodeCondition`      node_not_ready, telemetry_stale, slack_ineligible
:class:`CooldownFilter`     cooldown  the owner had batch evicted there < cooldown_s ago
:class:`NodeSelectorFilter` node_selector  a nodeSelector pair or the required node
                                     affinity does not match
:class:`TaintFilter`        taint    a NoSchedule/NoExecute taint is not tolerated
:class:`ProductionAntiAffinityFilter`  production_anti_affinity  a resident production
                                     pod's required term (labelSelector or Kuberina name
                                     list) matches the batch pod in that topology domain
:class:`BatchAntiAffinityFilter`  batch_anti_affinity  the pod's own term matches a resident,
                                     or a resident batch pod's term matches the pod
:class:`SpreadFilter`       topology_spread  ``count(domain) + 1 − min count > maxSkew``
                                     counting batch pods only
:class:`NamespaceCapFilter` namespace_cap  the namespace runs its cap of batch pods
:class:`ReservationFit`     cpu, ram, …  ``q_d > S_d`` on some dimension (GPU slack is
                                     ``C − Σ q``: GPU never comes from slack)
==========================  =======  ==================================================

A filter reads the pass through :class:`PassView`: the snapshot, policy, the working slack
(in-flight placements already debited) and the batch placed so far in the pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from kalena_engine.ledger import LEDGER_RTOL
from kalena_engine.placement import reasons as R
from kalena_engine.placement.model import BatchTemplate, ClusterSnapshot
from kalena_engine.placement.policy import PlacementPolicy
from kalena_engine.placement.selectors import HOSTNAME
from kalena_engine.resources import DIMS

_HUGE = np.iinfo(np.int64).max // 4


class PassView(Protocol):
    """What filters read from a scheduling pass."""

    snapshot: ClusterSnapshot
    policy: PlacementPolicy
    cooldown_s: float
    slack: np.ndarray  # (n, 8) working slack

    def placed_rows(self) -> tuple[Sequence[BatchTemplate], np.ndarray, np.ndarray]:
        """Templates, node rows and counts of the batch placed so far in this pass."""

    def namespace_running(self, namespace: str) -> int:
        """Batch pods running in ``namespace`` including this pass's placements."""


def tolerant(slack: np.ndarray) -> np.ndarray:
    """``slack`` with the admission tolerance added: ``S + LEDGER_RTOL · |S| + 1e-9`` (same
    shape), the bound :func:`fits` compares a request with — kept per pass by the scheduler so
    repeated checks against unchanged rows skip recomputing it."""
    return slack + LEDGER_RTOL * np.abs(slack) + 1e-9


def fits(request: np.ndarray, slack: np.ndarray) -> np.ndarray:
    """``(m,)`` bool: ``q_d ≤ S_d`` on every dimension (reservation ledger admission,
    docs/design.md §6), with :data:`LEDGER_RTOL` relative tolerance for float sums."""
    return (request <= tolerant(slack)).all(axis=-1)


def short_dims(request: np.ndarray, slack: np.ndarray) -> np.ndarray:
    """``(…, 8)`` bool: dimensions where ``request`` does not fit ``slack`` (same tolerance as
    :func:`fits`)."""
    return request > slack + LEDGER_RTOL * np.abs(slack) + 1e-9


def instance_room(request: np.ndarray, slack: np.ndarray) -> np.ndarray:
    """``(m,)`` int: identical pods of ``request`` ``(8,)`` that fit in each row of ``slack``.

    ``room = min_{d: q_d > 0} ⌊S_d / q_d⌋`` (with the ledger tolerance). Example: q = 2 cores,
    S_cpu = (5, 1, 8) cores → (2, 0, 4). A zero request fits without bound (a large sentinel).
    """
    slack = np.atleast_2d(slack)
    need = request > 0
    if not need.any():
        return np.full(slack.shape[0], _HUGE, dtype=np.int64)
    tolerant = slack[:, need] * (1 + LEDGER_RTOL) + 1e-9
    with np.errstate(invalid="ignore"):
        room = np.floor(np.min(tolerant / request[need], axis=1))
    room[np.isnan(room)] = 0.0  # then ±inf clip to the bounds, as nan_to_num(posinf=_HUGE, neginf=0) would
    return np.clip(room, 0, _HUGE).astype(np.int64)


class NodeCondition:
    """Node ready, telemetry fresh (case C1: a stale node takes no new batch), slack-eligible."""

    name = "node_condition"
    kinds = (R.NODE_NOT_READY, R.TELEMETRY_STALE, R.SLACK_INELIGIBLE)

    @classmethod
    def mask(cls, view: PassView, template: BatchTemplate) -> np.ndarray:
        s = view.snapshot
        return s.ready & s.telemetry_fresh & s.slack_eligible

    @classmethod
    def explain(cls, view: PassView, template: BatchTemplate, rows: np.ndarray) -> list[R.Rejection]:
        s = view.snapshot
        names = s.nodes.names
        out: list[R.Rejection] = []
        for row in rows:
            if not s.ready[row]:
                out.append(R.NodeNotReady(names[row]))
            elif not s.telemetry_fresh[row]:
                out.append(R.TelemetryStale(names[row]))
            else:
                out.append(R.SlackIneligible(names[row]))
        return out


class CooldownFilter:
    """Eviction cooldown per (workload group, node): closed to ``owner`` until
    ``evicted_s + cooldown_s`` (policy ``eviction.cooldown_s``, 600 s)."""

    name = "cooldown"
    kinds = (R.COOLDOWN,)

    @classmethod
    def _recent(cls, view: PassView, owner: str) -> tuple[np.ndarray, np.ndarray]:
        ev = view.snapshot.evictions
        if len(ev.node) == 0:
            return ev.node, ev.time_s
        hit = (ev.owner == owner) & (ev.time_s > view.snapshot.now_s - view.cooldown_s)
        return ev.node[hit], ev.time_s[hit]

    @classmethod
    def mask(cls, view: PassView, template: BatchTemplate) -> np.ndarray:
        out = np.ones(len(view.snapshot.nodes), dtype=bool)
        nodes, _ = cls._recent(view, template.owner)
        out[nodes] = False
        return out

    @classmethod
    def explain(cls, view: PassView, template: BatchTemplate, rows: np.ndarray) -> list[R.Rejection]:
        nodes, times = cls._recent(view, template.owner)
        last = {}
        for node, t in zip(nodes.tolist(), times.tolist(), strict=True):
            last[node] = max(t, last.get(node, -np.inf))
        names = view.snapshot.nodes.names
        return [R.Cooldown(names[r], template.owner, last[r], last[r] + view.cooldown_s) for r in rows]


class NodeSelectorFilter:
    """Every nodeSelector ``key: value`` pair must be a node label (docs/design.md §3), and a required
    node affinity must match (any of its terms) — kube-scheduler's NodeAffinity plugin reads
    both, and the kubelet refuses a pod on a node that matches neither."""

    name = "node_selector"
    kinds = (R.NODE_SELECTOR,)

    @classmethod
    def mask(cls, view: PassView, template: BatchTemplate) -> np.ndarray:
        nodes = view.snapshot.nodes
        return nodes.selector_mask(template.node_selector) & nodes.affinity_mask(template.node_affinity)

    @classmethod
    def explain(cls, view: PassView, template: BatchTemplate, rows: np.ndarray) -> list[R.Rejection]:
        nodes = view.snapshot.nodes
        out: list[R.Rejection] = []
        for row in rows:
            labels = nodes.labels[row]
            miss = next(((k, v) for k, v in template.node_selector.items() if labels.get(k) != v), None)
            if miss is not None:
                out.append(R.SelectorMismatch(nodes.names[row], miss[0], miss[1], labels.get(miss[0])))
            else:
                out.append(R.NodeAffinityMismatch(nodes.names[row], "; ".join(str(t) for t in template.node_affinity)))
        return out


class TaintFilter:
    """A NoSchedule/NoExecute taint must be tolerated (Kubernetes rule; a pod with no
    tolerations tolerates no taint)."""

    name = "taint"
    kinds = (R.TAINT,)

    @classmethod
    def mask(cls, view: PassView, template: BatchTemplate) -> np.ndarray:
        return ~view.snapshot.nodes.untolerated_mask(tuple(template.tolerations))

    @classmethod
    def explain(cls, view: PassView, template: BatchTemplate, rows: np.ndarray) -> list[R.Rejection]:
        nodes = view.snapshot.nodes
        out: list[R.Rejection] = []
        for row in rows:
            taint = next(t for t, m in nodes.blocking_taints if m[row]
                         and not any(tol.tolerates(t) for tol in template.tolerations))
            out.append(R.UntoleratedTaint(nodes.names[row], taint.key, taint.value, taint.effect))
        return out


def _domain_mask(view: PassView, topology_key: str, node_rows: np.ndarray) -> np.ndarray:
    """``(n,)`` bool: nodes sharing a ``topology_key`` domain with any of ``node_rows``."""
    n = len(view.snapshot.nodes)
    out = np.zeros(n, dtype=bool)
    if len(node_rows) == 0:
        return out
    if topology_key == HOSTNAME:
        out[node_rows] = True
        return out
    codes, names = view.snapshot.nodes.domains(topology_key)
    hit = np.zeros(len(names) + 1, dtype=bool)
    hit[codes[node_rows]] = True
    hit[-1] = False  # code −1: a node without the key shares no domain
    return hit[codes]



def _blocker_rejections(blockers, view: PassView, rows: np.ndarray, rejection) -> list[R.Rejection]:
    """One ``rejection(node, pod=, rule=, topology_key=)`` per excluded row, naming the first
    blocker ``(pod, rule, topology_key, excluded mask)`` that excludes it."""
    names = view.snapshot.nodes.names
    out: list[R.Rejection] = []
    for row in rows:
        pod, rule, key, _ = next(b for b in blockers if b[3][row])
        out.append(rejection(names[row], pod=pod, rule=rule, topology_key=key))
    return out

class ProductionAntiAffinityFilter:
    """Production anti-affinity binds batch (docs/design.md §9): a resident production pod's required
    term — a label selector in its topology domain, or a Kuberina name list naming one of the
    template's pods (same node) — that matches the batch pod rejects the node."""

    name = "production_anti_affinity"
    kinds = (R.PRODUCTION_ANTI_AFFINITY,)

    @classmethod
    def _blockers(cls, view: PassView, template: BatchTemplate) -> list[tuple[str, str, str, np.ndarray]]:
        """(pod id, rule, topology key, excluded mask) for each matching resident."""
        prod = view.snapshot.production
        out = []
        for term, rows in prod.term_rows.items():
            if term.matches(template.labels, template.namespace):
                for row in rows:
                    out.append((prod.ids[row], str(term.selector), term.topology_key,
                                _domain_mask(view, term.topology_key, prod.node[row:row + 1])))
        for member in template.member_ids:
            for row in prod.name_rows.get(member, ()):
                out.append((prod.ids[row], f"name {member}", HOSTNAME,
                            _domain_mask(view, HOSTNAME, prod.node[row:row + 1])))
        return out

    @classmethod
    def mask(cls, view: PassView, template: BatchTemplate) -> np.ndarray:
        prod = view.snapshot.production
        out = np.ones(len(view.snapshot.nodes), dtype=bool)
        for term, rows in prod.term_rows.items():
            if term.matches(template.labels, template.namespace):
                out &= ~_domain_mask(view, term.topology_key, prod.node[rows])
        for member in template.member_ids:
            rows = prod.name_rows.get(member)
            if rows is not None:
                out[prod.node[rows]] = False
        return out

    @classmethod
    def explain(cls, view: PassView, template: BatchTemplate, rows: np.ndarray) -> list[R.Rejection]:
        return _blocker_rejections(cls._blockers(view, template), view, rows, R.AntiAffinity)


class BatchAntiAffinityFilter:
    """The batch pod's own required anti-affinity (label terms against every resident pod and
    this pass's placements; a Kuberina name list against pod ids), and the terms of resident
    batch pods that match it (anti-affinity is symmetric in Kubernetes)."""

    name = "batch_anti_affinity"
    kinds = (R.BATCH_ANTI_AFFINITY,)

    @classmethod
    def _blockers(cls, view: PassView, template: BatchTemplate) -> list[tuple[str, str, str, np.ndarray]]:
        snap = view.snapshot
        out = []
        batch = snap.batch
        tpls, nodes, counts = view.placed_rows()
        all_tpls = [*(batch.templates[t] for t in batch.template.tolist()), *tpls]
        all_nodes = np.concatenate([batch.node, nodes]).astype(np.int64)
        for term in template.anti_affinity:
            for labels, ns, rows in snap.production.label_groups:
                if term.matches(labels, ns):
                    out.append((f"production {dict(labels)}", str(term.selector), term.topology_key,
                                _domain_mask(view, term.topology_key, rows)))
            hit = [i for i, t in enumerate(all_tpls) if term.matches(t.labels, t.namespace)]
            if hit:
                out.append((f"batch of {all_tpls[hit[0]].owner}", str(term.selector), term.topology_key,
                            _domain_mask(view, term.topology_key, all_nodes[hit])))
        for name in template.anti_affinity_pods:
            rows = snap.production.rows_of.get(name, [])
            hit = [i for i, t in enumerate(all_tpls) if name in t.member_ids]
            where = np.concatenate([snap.production.node[rows], all_nodes[hit]]).astype(np.int64)
            if len(where):
                out.append((name, f"name {name}", HOSTNAME, _domain_mask(view, HOSTNAME, where)))
        for i, other in enumerate(all_tpls):
            for term in other.anti_affinity:
                if term.matches(template.labels, template.namespace):
                    out.append((f"batch of {other.owner}", str(term.selector), term.topology_key,
                                _domain_mask(view, term.topology_key, all_nodes[i:i + 1])))
        return out

    @classmethod
    def mask(cls, view: PassView, template: BatchTemplate) -> np.ndarray:
        out = np.ones(len(view.snapshot.nodes), dtype=bool)
        for *_, excluded in cls._blockers(view, template):
            out &= ~excluded
        return out

    @classmethod
    def explain(cls, view: PassView, template: BatchTemplate, rows: np.ndarray) -> list[R.Rejection]:
        return _blocker_rejections(cls._blockers(view, template), view, rows, R.BatchAntiAffinity)


class SpreadFilter:
    """Hard topology spread for batch, counting batch pods only (kube-scheduler
    PodTopologySpread ``DoNotSchedule``, domains restricted to nodes matching the pod's
    nodeSelector, ``nodeTaintsPolicy: Ignore``): a node passes when
    ``count(domain) + 1 − min_{eligible domains} count ≤ maxSkew``. Example: maxSkew 1,
    zone counts a=2, b=1, c=1 → a rejected (2 + 1 − 1 = 2 > 1), b and c pass."""

    name = "topology_spread"
    kinds = (R.TOPOLOGY_SPREAD,)

    @classmethod
    def _counts(cls, view: PassView, template: BatchTemplate, constraint) -> tuple[np.ndarray, np.ndarray, np.ndarray, tuple[str, ...]]:
        snap = view.snapshot
        codes, names = snap.nodes.domains(constraint.topology_key)
        selector = constraint.selector
        batch = snap.batch
        tpls, nodes, counts = view.placed_rows()
        all_tpls = [*(batch.templates[t] for t in batch.template.tolist()), *tpls]
        all_nodes = np.concatenate([batch.node, nodes]).astype(np.int64)
        all_counts = np.concatenate([batch.count, counts]).astype(np.int64)
        match = np.array([(selector.matches(t.labels) if selector is not None
                           else all(t.labels.get(k) == v for k, v in template.labels.items()))
                          and t.namespace == template.namespace for t in all_tpls], dtype=bool)
        eligible_nodes = (snap.nodes.selector_mask(template.node_selector)  # nodeAffinityPolicy: Honor (default):
                          & snap.nodes.affinity_mask(template.node_affinity) & (codes >= 0))  # other nodes
        match &= eligible_nodes[all_nodes]  # neither make domains nor count their pods
        per_domain = np.zeros(len(names), dtype=np.int64)
        if match.any():
            dom = codes[all_nodes[match]]
            np.add.at(per_domain, dom[dom >= 0], all_counts[match][dom >= 0])
        eligible = np.zeros(len(names), dtype=bool)
        eligible[codes[eligible_nodes]] = True
        return codes, per_domain, eligible, names

    @classmethod
    def mask(cls, view: PassView, template: BatchTemplate) -> np.ndarray:
        out = np.ones(len(view.snapshot.nodes), dtype=bool)
        for constraint in template.spread:
            codes, per_domain, eligible, _ = cls._counts(view, template, constraint)
            if not eligible.any():
                out[:] = False
                continue
            floor = per_domain[eligible].min()
            ok = np.append(per_domain + 1 - floor <= constraint.max_skew, False)
            out &= ok[codes]
        return out

    @classmethod
    def explain(cls, view: PassView, template: BatchTemplate, rows: np.ndarray) -> list[R.Rejection]:
        names = view.snapshot.nodes.names
        out: list[R.Rejection] = []
        for row in rows:
            for constraint in template.spread:
                codes, per_domain, eligible, domains = cls._counts(view, template, constraint)
                floor = int(per_domain[eligible].min()) if eligible.any() else 0
                code = codes[row]
                count = int(per_domain[code]) if code >= 0 else 0
                if code < 0 or count + 1 - floor > constraint.max_skew:
                    out.append(R.SpreadSkew(names[row], constraint.topology_key,
                                            domains[code] if code >= 0 else "", count, floor, constraint.max_skew))
                    break
        return out


class NamespaceCapFilter:
    """Per-namespace running-batch cap (policy): at the cap, every node is rejected."""

    name = "namespace_cap"
    kinds = (R.NAMESPACE_CAP,)

    @classmethod
    def room(cls, view: PassView, template: BatchTemplate) -> int:
        cap = view.policy.batch_cap(template.namespace)
        if cap is None:
            return _HUGE
        return max(0, cap - view.namespace_running(template.namespace))

    @classmethod
    def mask(cls, view: PassView, template: BatchTemplate) -> np.ndarray:
        return np.full(len(view.snapshot.nodes), cls.room(view, template) > 0)

    @classmethod
    def explain(cls, view: PassView, template: BatchTemplate, rows: np.ndarray) -> list[R.Rejection]:
        cap = view.policy.batch_cap(template.namespace) or 0
        running = view.namespace_running(template.namespace)
        names = view.snapshot.nodes.names
        return [R.NamespaceCap(names[r], template.namespace, running, cap) for r in rows]


class ReservationFit:
    """Reservation ledger fits on every dimension: ``q_d ≤ S_d`` with the working slack, in
    which this pass's placements are already debited (case C2)."""

    name = "reservation_fit"
    kinds = DIMS

    @classmethod
    def mask_for(cls, view: PassView, request: np.ndarray) -> np.ndarray:
        return fits(request, view.slack)

    @classmethod
    def explain_for(cls, view: PassView, request: np.ndarray, rows: np.ndarray) -> list[R.Rejection]:
        names = view.snapshot.nodes.names
        out: list[R.Rejection] = []
        for row in rows:
            for d in np.flatnonzero(short_dims(request, view.slack[row])):
                out.append(R.Insufficient(names[row], DIMS[d], float(request[d]), float(view.slack[row, d])))
        return out


#: Rule filters in order; :class:`ReservationFit` always runs last.
RULE_FILTERS = (
    NodeCondition, CooldownFilter, NodeSelectorFilter, TaintFilter,
    ProductionAntiAffinityFilter, BatchAntiAffinityFilter, SpreadFilter, NamespaceCapFilter,
)
#: Rules that depend only on the template and the snapshot (fixed within a pass).
STATIC_RULES = RULE_FILTERS[:5]
#: Rules that change as the pass places batch.
DYNAMIC_RULES = RULE_FILTERS[5:]
