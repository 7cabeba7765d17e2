"""Binding with optimistic concurrency (docs/design.md §9; Omega, Schwarzkopf et al. EuroSys 2013):
a pass decides against a snapshot of the reservation ledger; the bind step accepts a placement
only while its node's ledger version is still the one the pass read. A placement whose node
moved meanwhile (another scheduler bound there, the estimator rewrote the node's slack) is
*stale*: it is not applied and its pods go back to the queue — requeued, never lost.

:class:`SlackLedger` is the reference in-memory ledger (the replay uses it; the control plane
keeps the same two columns — slack and version — per node in its store and applies the same
rule inside a transaction)::

    snapshot = ledger.read()                       # slack copy + versions
    result = schedule_batch(..., snapshot with slack/version from it, ...)
    outcome = ledger.bind(result.bindings)         # version check per node, then debit
    remaining = requeue(result, outcome)           # stale pods are pending again
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena_engine.placement.model import Bindings
from kalena_engine.placement.reasons import StaleBinding


@dataclass(frozen=True, eq=False)
class BindOutcome:
    """Which bindings were applied and which were stale (with the reason per stale row)."""

    accepted: Bindings
    stale: Bindings
    reasons: tuple[StaleBinding, ...] = ()


@dataclass(eq=False)
class SlackLedger:
    """Per-node reservation-ledger slack ``(n, 8)`` with a version ``(n,)`` bumped on every
    write. ``names`` label stale reasons."""

    slack: np.ndarray
    version: np.ndarray
    names: tuple[str, ...] = ()

    @classmethod
    def of(cls, slack: np.ndarray, names: tuple[str, ...] = ()) -> SlackLedger:
        return cls(np.array(slack, dtype=np.float64, copy=True), np.zeros(len(slack), dtype=np.int64), names)

    def read(self) -> tuple[np.ndarray, np.ndarray]:
        """``(slack copy, version copy)`` for a scheduling pass."""
        return self.slack.copy(), self.version.copy()

    def write(self, node: int, slack_row: np.ndarray) -> None:
        """Another writer (the estimator, another binder) sets a node's slack: bumps its version."""
        self.slack[node] = slack_row
        self.version[node] += 1

    def bind(self, bindings: Bindings) -> BindOutcome:
        """Apply every binding whose node version still matches; debit ``count × request``
        and bump each touched node's version once. Stale rows change nothing."""
        if len(bindings) == 0:
            return BindOutcome(bindings, bindings)
        current = self.version[bindings.node]
        fresh = bindings.version == current
        accepted = bindings.take(np.flatnonzero(fresh))
        stale = bindings.take(np.flatnonzero(~fresh))
        debit = accepted.request * accepted.count[:, None]
        np.add.at(self.slack, accepted.node, -debit)
        self.version[np.unique(accepted.node)] += 1
        names = self.names or tuple(str(i) for i in range(len(self.slack)))
        reasons = tuple(StaleBinding(names[int(node)], int(v), int(self.version[node]))
                        for node, v in zip(stale.node.tolist(), stale.version.tolist(), strict=True))
        return BindOutcome(accepted, stale, reasons)


def requeue(remaining: np.ndarray, outcome: BindOutcome) -> np.ndarray:
    """``(k,)`` pods pending after the bind: what the pass left plus every stale binding's
    pods, returned to their entries (nothing is lost)."""
    out = np.array(remaining, dtype=np.int64, copy=True)
    np.add.at(out, outcome.stale.entry, outcome.stale.count)
    return out
