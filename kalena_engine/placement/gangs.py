"""Gangs (docs/design.md §9): all-or-nothing within one pass.

A gang's entries are placed inside a transaction: every debit records the node's slack row
before it, and a gang that ends below ``min_member`` pods is rolled back — rows restored
exactly, bindings and counts withdrawn — so a gang that cannot fit takes nothing and leaves no
partial debit for the rest of the queue to trip over. Restored nodes are logged as touched, so
every class state refreshes them. A colocated gang (IR v1 ``colocate``) tries nodes from the
first member's best score down until one holds at least ``min_member`` pods.

Gangs come from :attr:`PendingBatch.gangs` (Kuberina inline ``gang`` and IR v1 ``groups``,
see :mod:`~kalena_engine.placement.kuberina_batch`) and from templates carrying the
``kalena.naughtian.io/min-member`` annotation (one gang per template per pass).
"""

from __future__ import annotations

import numpy as np

from kalena_engine.placement.filters import fits, tolerant
from kalena_engine.placement.model import Gang


class GangTransactions:
    """Gang handling of a scheduling pass (mixed into the pass; uses its state)."""

    def _gangs(self) -> tuple[np.ndarray, list[Gang]]:
        """Gang row per entry: explicit gangs, then one implicit gang per template carrying a
        ``min-member`` annotation."""
        p = self.pending
        gangs = list(p.gangs)
        gang_of = np.asarray(p.gang, dtype=np.int64).copy()
        for t in np.unique(p.template).tolist():
            template = p.templates[t]
            if template.min_member is None:
                continue
            rows = (np.asarray(p.template) == t) & (gang_of < 0)
            if rows.any():
                gang_of[rows] = len(gangs)
                gangs.append(Gang(name=template.owner, min_member=template.min_member))
        return gang_of, gangs

    def _mark(self) -> tuple[int, int, int]:
        return len(self.b_entry), len(self.p_tpl), len(self._undo or ())

    def _rollback(self, mark: tuple[int, int, int]) -> None:
        n_bind, n_placed, n_undo = mark
        assert self._undo is not None
        for node, row, had_batch in reversed(self._undo[n_undo:]):
            self.slack[node] = row
            self.tol[node] = tolerant(row)
            self.has_batch[node] = had_batch
            self.log.append(node)
        del self._undo[n_undo:]
        for e, c in zip(self.b_entry[n_bind:], self.b_count[n_bind:], strict=True):
            self.remaining[e] += c
        del self.b_entry[n_bind:], self.b_node[n_bind:], self.b_count[n_bind:]
        del self.p_tpl[n_placed:], self.p_node[n_placed:], self.p_count[n_placed:]
        self._ns_running.clear()
        self._best = None

    def _gang(self, gang: Gang, entries: list[int]) -> None:
        """All-or-nothing: at least ``min_member`` pods of the gang's entries, or none."""
        want = int(self.remaining[entries].sum())
        class_of = self.class_of
        self._undo = []
        mark = self._mark()
        total = 0
        if want >= gang.min_member:
            if gang.colocate:
                total = self._colocated(gang, entries, class_of)
            else:
                for e in entries:
                    total += self._unit([e], int(class_of[e]))
        if total < gang.min_member:
            self._rollback(mark)
            self.stats.gang_rollbacks += 1
            for e in entries:
                self.gang_failures[e] = (gang.name, total, gang.min_member)
            total = 0
        self._undo = None
        self._notify(want, total)

    def _colocated(self, gang: Gang, entries: list[int], class_of: np.ndarray) -> int:
        p = self.pending
        first = entries[0]
        template = p.templates[p.template[first]]
        mask = self._static_mask(template) & fits(p.request[first], self.slack)
        rows = np.flatnonzero(mask)
        if len(rows) == 0:
            return 0
        scores = self._score_rows(p.request[first], self._static_part(template), rows)
        for node in rows[np.lexsort((rows, -scores))]:
            mark = self._mark()
            total = sum(self._unit([e], int(class_of[e]), only=int(node)) for e in entries)
            if total >= gang.min_member:
                return total
            self._rollback(mark)
        return 0
