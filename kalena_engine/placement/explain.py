"""Why pending (docs/design.md §9): a structured record for every batch entry a pass left unplaced.

Computed from the state at the end of the pass (slack with every placement of the pass
debited). For each node the first rule filter it fails is charged (kube-scheduler's
"0/n nodes are available" accounting); a node that passes every rule is charged each
dimension it lacks, or once its own admission's reason (``kubelet_allocatable``, ``releasing``)
however many dimensions that refuses. Then, over the nodes that pass every rule:

* **shortfall** per dimension: the smallest ``q_d − S_d`` among nodes short on ``d``, the node
  where it occurs and how many nodes are short on ``d``;
* **reduction**: the smallest change of the request that fits at least one node — the node
  minimising ``max_d (q_d − S_d)⁺ / q_d`` (ties: smaller sum, then lower row), its per-dimension
  shortfall as the reduction, and the number of nodes the reduced request would then fit;
* **binding** constraint: the dimension with the largest relative shortfall on that node; when
  no node passes the rules, the rule that excluded the most nodes (ties: filter order); ``gang``
  when the pod itself fits but its gang did not; ``no_nodes`` for an empty cluster.

Case C2: one node with 70 GiB, 30 × 32 GiB → after 2 placements S = 6 GiB; the record for the
28 left names ``ram``, 1 node, shortfall 32 − 6 = 26 GiB, reduction 26 GiB fitting 1 node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from kalena_engine.placement import reasons as R
from kalena_engine.placement.filters import RULE_FILTERS, NodeCondition, fits, short_dims
from kalena_engine.resources import DIM_INDEX, DIMS, IR_TO_INTERNAL, IR_UNITS


def _ir(dim: str, value: float) -> float:
    return round(float(value) / IR_TO_INTERNAL[DIM_INDEX[dim]], 6)


def _ir_block(values: Mapping[str, float]) -> dict[str, float]:
    return {d: _ir(d, v) for d, v in values.items()}


@dataclass(frozen=True)
class Shortfall:
    """Smallest shortfall on ``dim`` (internal units) among rule-passing nodes, where, and
    how many rule-passing nodes are short on ``dim``."""

    dim: str
    amount: float
    node: str
    nodes: int

    def to_dict(self) -> dict[str, object]:
        return {"dim": self.dim, "unit": IR_UNITS[DIM_INDEX[self.dim]], "amount": _ir(self.dim, self.amount),
                "node": self.node, "nodes": self.nodes}


@dataclass(frozen=True)
class Reduction:
    """Lower the request by ``by`` (per dimension, internal units) and it fits ``fits_nodes``
    nodes, ``node`` among them."""

    by: Mapping[str, float]
    node: str
    fits_nodes: int

    def to_dict(self) -> dict[str, object]:
        return {"by": _ir_block(self.by), "node": self.node, "fits_nodes": self.fits_nodes}


@dataclass(frozen=True)
class WhyPending:
    """Why ``pending`` pods of entry ``entry`` (caller id ``workload``) were not placed.

    Attributes:
        binding: the binding constraint, a dimension name (``"ram"``) or a rule kind
            (:data:`kalena_engine.placement.reasons.RULE_KINDS`, ``gang``, ``no_nodes``).
        nodes_total: nodes in the cluster.
        excluded: nodes each reason excluded (rules: first failing rule per node; dimensions:
            every short dimension of a rule-passing node).
        shortfall: per short dimension, the smallest shortfall (:class:`Shortfall`).
        reduction: the smallest request reduction that fits one node, or ``None`` when no node
            passes the rules.
        rejections: typed examples per reason (at most ``max_examples_per_reason`` each).
        gang: the gang failure, when the entry's gang could not be placed whole.
        request: per-pod request, internal units, non-zero dimensions.
    """

    entry: int
    workload: str
    owner: str
    namespace: str
    pending: int
    priority: int
    time_s: float
    request: Mapping[str, float]
    binding: str
    nodes_total: int
    excluded: Mapping[str, int]
    shortfall: tuple[Shortfall, ...]
    reduction: Reduction | None
    rejections: tuple[R.Rejection, ...]
    gang: R.GangIncomplete | None = None

    def shortfall_of(self, dim: str) -> Shortfall | None:
        return next((s for s in self.shortfall if s.dim == dim), None)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready record; quantities in Kuberina IR units (``units`` names them)."""
        return {
            "entry": self.entry, "workload": self.workload, "owner": self.owner, "namespace": self.namespace,
            "pending": self.pending, "priority": self.priority, "time_s": self.time_s,
            "request": _ir_block(self.request), "binding": self.binding, "nodes_total": self.nodes_total,
            "excluded": dict(self.excluded), "shortfall": [s.to_dict() for s in self.shortfall],
            "reduction": None if self.reduction is None else self.reduction.to_dict(),
            "rejections": [r.to_dict() for r in self.rejections],
            "gang": None if self.gang is None else self.gang.to_dict(),
            "units": dict(zip(DIMS, IR_UNITS, strict=True)),
        }


def _rule_masks(view, template) -> list[tuple[str, object, np.ndarray]]:
    """``(kind, filter, fails (n,) bool)`` in filter order; the node condition splits in three."""
    s = view.snapshot
    out = [(R.NODE_NOT_READY, NodeCondition, ~s.ready), (R.TELEMETRY_STALE, NodeCondition, ~s.telemetry_fresh),
           (R.SLACK_INELIGIBLE, NodeCondition, ~s.slack_eligible)]
    for rule in RULE_FILTERS[1:]:
        out.append((rule.kinds[0], rule, ~rule.mask(view, template)))
    return out


def _short_kinds(snap, rows: np.ndarray, d: int) -> dict[str, np.ndarray]:
    """Nodes ``rows`` (snapshot rows) short on ``d``, grouped by the reason :func:`_short_reason`
    gives each: ``{kind: rows}``."""
    if snap.kubelet is None:
        return {DIMS[d]: rows}
    kubelet = snap.kubelet.room[rows, d] < snap.slack[rows, d]
    releasing = np.isin(rows, np.array([r for r, held in snap.kubelet.releasing.items() if held], dtype=np.int64))
    groups = {DIMS[d]: rows[~kubelet], R.RELEASING: rows[kubelet & releasing],
              R.KUBELET_ALLOCATABLE: rows[kubelet & ~releasing]}
    return {k: v for k, v in groups.items() if len(v)}


def _short_reason(snap, row: int, d: int, request: np.ndarray, free: float) -> R.Rejection:
    """Why ``row`` lacks ``free`` < ``request[d]``: :class:`~R.KubeletAdmission` when the node's
    admission room is below the reservation ledger's slack there (so it is what refuses),
    else :class:`~R.Insufficient`."""
    name = snap.nodes.names[row]
    if snap.kubelet is None or not snap.kubelet.room[row, d] < snap.slack[row, d]:
        return R.Insufficient(name, DIMS[d], float(request[d]), free)
    held = snap.kubelet.releasing.get(row, ())
    return R.KubeletAdmission(name, DIMS[d], float(request[d]), free, releasing=tuple(pod for pod, _ in held),
                              releasing_amount=float(sum(q[d] for _, q in held)))


def explain_entry(view, entry: int) -> WhyPending:
    """The record of one pending entry against the pass state ``view`` (see module doc)."""
    p = view.pending
    template = p.templates[p.template[entry]]
    request = p.request[entry]
    snap = view.snapshot
    names = snap.nodes.names
    n = len(names)
    limit = view.policy.max_examples_per_reason
    charged = np.zeros(n, dtype=bool)
    excluded: dict[str, int] = {}
    rejections: list[R.Rejection] = []
    rule_counts: list[tuple[int, str]] = []
    for order, (kind, rule, fails) in enumerate(_rule_masks(view, template)):
        rows = np.flatnonzero(fails & ~charged)
        if len(rows) == 0:
            continue
        charged[rows] = True
        excluded[kind] = len(rows)
        rule_counts.append((-len(rows), order, kind))
        rejections.extend(e for e in rule.explain(view, template, rows[:limit]) if e.kind == kind)
    passing = np.flatnonzero(~charged)
    slack = view.slack[passing]
    short = short_dims(request, slack)
    need = np.where(short, request - slack, 0.0)
    shortfalls: list[Shortfall] = []
    admission: dict[str, set[int]] = {}   # releasing / kubelet_allocatable: nodes, whatever dimension
    for d in np.flatnonzero(short.any(axis=0)):
        rows = np.flatnonzero(short[:, d])
        ranked = rows[np.argsort(need[rows, d], kind="stable")]
        best = ranked[0]
        shortfalls.append(Shortfall(DIMS[d], float(need[best, d]), names[passing[best]], len(rows)))
        # a node refused by its own admission (published allocatable), not by Kalena's ledger,
        # is charged to that reason (case C11: "releasing") once, however many dimensions it
        # lacks there; every other short node to each dimension it lacks
        for kind, group in _short_kinds(snap, passing[rows], d).items():
            if kind in DIM_INDEX:
                excluded[kind] = excluded.get(kind, 0) + len(group)
            else:
                admission.setdefault(kind, set()).update(group.tolist())
        rejections.extend(_short_reason(snap, int(passing[r]), d, request, float(slack[r, d])) for r in ranked[:limit])
    for kind, nodes in admission.items():
        excluded[kind] = len(nodes)
    reduction = None
    binding = R.NO_NODES if n == 0 else ""
    if len(passing):
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(need > 0, need / np.where(request > 0, request, 1.0), 0.0)
        pick = int(np.lexsort((np.arange(len(passing)), rel.sum(axis=1), rel.max(axis=1)))[0])
        by = {DIMS[d]: float(need[pick, d]) for d in np.flatnonzero(need[pick] > 0)}
        reduced = request - need[pick]
        reduction = Reduction(by=by, node=names[passing[pick]], fits_nodes=int(fits(reduced, slack).sum()))
        if by:
            d = int(np.argmax(rel[pick]))
            binding = _short_reason(snap, int(passing[pick]), d, request, float(slack[pick, d])).kind
    gang = None
    if entry in view.gang_failures:
        name, placeable, min_member = view.gang_failures[entry]
        gang = R.GangIncomplete("", name, placeable, min_member)
        rejections.insert(0, gang)
        if not binding:
            binding = R.GANG
    if not binding:
        binding = min(rule_counts)[2] if rule_counts else R.NO_NODES
    return WhyPending(
        entry=entry, workload=str(p.ids[entry]), owner=template.owner, namespace=template.namespace,
        pending=int(view.remaining[entry]), priority=int(p.priority[entry]), time_s=float(snap.now_s),
        request={DIMS[d]: float(request[d]) for d in np.flatnonzero(request)}, binding=binding, nodes_total=n,
        excluded=excluded, shortfall=tuple(shortfalls), reduction=reduction, rejections=tuple(rejections), gang=gang,
    )


def explain_pass(view) -> tuple[WhyPending, ...]:
    """Records for every entry with pods left, in queue order; entries of one class share the
    analysis (computed once)."""
    p = view.pending
    left = np.flatnonzero(view.remaining > 0)
    if len(left) == 0:
        return ()
    order = left[np.lexsort((left, p.queued_s[left], -np.asarray(p.priority)[left]))]
    class_of = getattr(view, "class_of", None)
    shared: dict[int, WhyPending] = {}
    out = []
    for e in order.tolist():
        key = int(class_of[e]) if class_of is not None and e not in view.gang_failures else None
        base = shared.get(key) if key is not None else None
        if base is None:
            record = explain_entry(view, e)
            if key is not None:
                shared[key] = record
        else:
            record = WhyPending(**{**base.__dict__, "entry": e, "workload": str(p.ids[e]),
                                   "pending": int(view.remaining[e]), "priority": int(p.priority[e])})
        out.append(record)
    return tuple(out)
