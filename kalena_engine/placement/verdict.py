"""One pod against every node, without placing it: the scheduler extender's filter and
prioritize answers (docs/design.md §14), from the same filters, ledgers and scores as a pass.

For each node the first filter it fails gives its reason (kube-scheduler's ``FailedNodes``
accounting, as why-pending charges nodes); a node passing every rule fails on the reservation
ledger (or the kubelet's admission room, case C11) when the pod does not fit. Feasible nodes get
the pass's score (0–100, :func:`~kalena_engine.placement.scores.total_score`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena_engine.placement import reasons as R
from kalena_engine.placement.explain import _short_reason
from kalena_engine.placement.filters import RULE_FILTERS, NodeCondition, fits, short_dims
from kalena_engine.placement.model import BatchTemplate, ClusterSnapshot, PendingBatch
from kalena_engine.placement.scheduler import _Pass
from kalena_engine.placement.scores import dynamic_part, static_part
from kalena_engine.resources import N_DIMS


@dataclass(frozen=True, eq=False)
class Verdicts:
    """``feasible`` ``(n,)`` bool; ``reasons`` one :class:`~R.Rejection` or ``None`` per node (the
    first that excludes it); ``score`` ``(n,)`` 0–100 on feasible nodes, 0 elsewhere."""

    feasible: np.ndarray
    reasons: tuple[R.Rejection | None, ...]
    score: np.ndarray


def node_verdicts(snapshot: ClusterSnapshot, template: BatchTemplate, request: np.ndarray, policy) -> Verdicts:
    """Judge one pod of ``template`` and ``request`` ``(8,)`` on every node of ``snapshot``.

    Example: two 16-core nodes with 10 and 1 core of slack, a 2-core pod → feasible (True,
    False), the second's reason ``Insufficient(cpu, requested 2000, free 1000)``.
    """
    request = np.asarray(request, dtype=np.float64).reshape(N_DIMS)
    pending = PendingBatch(ids=np.array(["pod"], dtype=object), template=np.zeros(1, dtype=np.int64),
                           templates=(template,), request=request[None, :], count=np.ones(1, dtype=np.int64),
                           priority=np.zeros(1, dtype=np.int64), queued_s=np.zeros(1))
    view = _Pass(snapshot, pending, policy, np.random.default_rng(0), True, None, None)
    n = len(snapshot.nodes)
    reasons: list[R.Rejection | None] = [None] * n
    charged = np.zeros(n, dtype=bool)
    s = snapshot
    rules = [(NodeCondition, ~s.ready), (NodeCondition, ~s.telemetry_fresh), (NodeCondition, ~s.slack_eligible)]
    rules += [(rule, ~rule.mask(view, template)) for rule in RULE_FILTERS[1:]]
    for rule, fails in rules:
        rows = np.flatnonzero(fails & ~charged)
        if len(rows) == 0:
            continue
        charged[rows] = True
        for row, reason in zip(rows.tolist(), rule.explain(view, template, rows), strict=False):
            reasons[row] = reason
    fit = fits(request, view.slack)
    for row in np.flatnonzero(~charged & ~fit).tolist():
        d = int(np.flatnonzero(short_dims(request, view.slack[row]))[0])
        reasons[row] = _short_reason(s, row, d, request, float(view.slack[row, d]))
    feasible = ~charged & fit
    score = np.zeros(n)
    rows = np.flatnonzero(feasible)
    if len(rows):
        score[rows] = (dynamic_part(view.slack[rows], request, s.nodes.capacity[rows], s.has_production[rows],
                                    s.has_batch[rows], view.policy)
                       + static_part(template.images, s.images, s.volatility, view.policy)[rows])
    return Verdicts(feasible=feasible, reasons=tuple(reasons), score=score)
