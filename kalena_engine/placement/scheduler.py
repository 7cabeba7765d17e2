"""The batch scheduler: one pass places pending batch into reservation-ledger slack (docs/design.md §9).

This is the one code path the control plane's scheduling loop and the replay share::

    result = schedule_batch(snapshot, pending, policy, rng=rng)      # decide (pure)
    outcome = ledger.bind(result.bindings)                            # optimistic concurrency
    remaining = requeue(result.remaining, outcome)                    # stale bindings go back
    records = result.why_pending()                                    # for every unplaced entry

A pass walks the queue (priority high → low, then ``queued_s``, then row). For each entry it
keeps the nodes that pass every filter (:mod:`~kalena_engine.placement.filters`), scores them
(:mod:`~kalena_engine.placement.scores`) and places on the best one (ties → lowest node row);
each placement debits the pass's working slack at once (in-flight placements, case C2).

Scale techniques (the ``naive=True`` path runs the same filter and score kernels without them):

* **Equivalence classes** — consecutive entries of one template and request form one class;
  its static filter mask (node condition, selector, taints, production anti-affinity) is
  computed once per rule signature per pass, its feasibility and scores are kept per class and
  refreshed only on the nodes touched since (a node touch log). The class's identical pods are
  placed by :func:`~kalena_engine.placement.greedy.greedy_runs` — exactly the choices placing
  them one by one would make (every score is node-local), without a decision per pod; the
  resulting runs are bound and debited in numpy.
* **Score cache keyed on quantised slack** (:mod:`~kalena_engine.placement.cache`).
* **Sampling** — kube-scheduler's percentage of nodes to score: scan nodes in a random
  permutation (drawn from the pass's ``rng``) from a rotating start, stop after
  :meth:`PlacementPolicy.feasible_nodes_to_find` feasible nodes per pod of the run (a run of
  ``m`` identical pods may score what ``m`` scheduling cycles would), score only those; a
  window takes its share of the run and the scan moves on. At 100 % every feasible node is
  scored, identical to no sampling.
* **Gangs** place all-or-nothing inside a transaction that restores every debit on failure.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from kalena_engine.placement.cache import ScoreCache
from kalena_engine.placement.classes import PassStats, _Class, _Entries

#: Above this many runs a unit's bindings are made in numpy (:meth:`_Pass._attribute_runs`).
_VECTOR_RUNS = 8
from kalena_engine.placement.gangs import GangTransactions
from kalena_engine.placement.greedy import greedy_runs
from kalena_engine.placement.filters import (
    DYNAMIC_RULES, RULE_FILTERS, BatchAntiAffinityFilter, CooldownFilter, NamespaceCapFilter,
    NodeSelectorFilter, ProductionAntiAffinityFilter, SpreadFilter, TaintFilter, fits, instance_room, tolerant,
)
from kalena_engine.placement.model import BatchTemplate, Bindings, ClusterSnapshot, PendingBatch
from kalena_engine.placement.scores import dynamic_part, quantise, static_part

if TYPE_CHECKING:  # kalena_engine.policy imports this package's policy module
    from kalena_engine.policy import Policy

#: Observer of decisions: ``(pods decided, pods placed)`` after each decision step.
Observer = Callable[[int, int], None]
_MAX_CLASSES = 512
#: A namespace's room when no cap applies (``np.iinfo`` built once, not per unit).
_NO_CAP = int(np.iinfo(np.int64).max)


class _Pass(GangTransactions):
    """The working state of one pass; also the :class:`~kalena_engine.placement.filters.PassView`
    filters read and, once finished, what why-pending is computed from."""

    def __init__(self, snapshot: ClusterSnapshot, pending: PendingBatch, policy: Policy, rng: np.random.Generator,
                 naive: bool, cache: ScoreCache | None, observer: Observer | None) -> None:
        self.snapshot, self.pending = snapshot, pending
        self.policy = policy.placement
        self.cooldown_s = policy.eviction.cooldown_s
        self.naive, self.cache, self.observer = naive, cache, observer
        n = len(snapshot.nodes)
        self.n = n
        self.capacity = snapshot.nodes.capacity
        self.slack = np.array(snapshot.slack, dtype=np.float64, copy=True)
        if snapshot.kubelet is not None:  # the node's own admission re-checks (case C11)
            self.slack = np.minimum(self.slack, snapshot.kubelet.room)
        self.tol = tolerant(self.slack)  # kept equal to tolerant(self.slack) row by row as slack changes
        self.has_batch = np.array(snapshot.has_batch, dtype=bool, copy=True)
        self.remaining = np.asarray(pending.count, dtype=np.int64).copy()
        self.cond = snapshot.ready & snapshot.telemetry_fresh & snapshot.slack_eligible
        self.cond_rows = np.flatnonzero(self.cond)
        self._best: np.ndarray | None = None
        self._best_tol: np.ndarray | None = None
        self.log: list[int] = []
        self.b_entry: list[int] = []
        self.b_node: list[int] = []
        self.b_count: list[int] = []
        self.p_tpl: list[BatchTemplate] = []
        self.p_node: list[int] = []
        self.p_count: list[int] = []
        self.caps_on = bool(self.policy.namespace_batch_caps) or self.policy.default_namespace_batch_cap is not None
        self._ns_running: dict[str, int] = {}
        self._static: dict[tuple, np.ndarray] = {}
        self._static_score: dict[tuple, np.ndarray] = {}
        self._dynamic: dict[int, bool] = {}
        self._classes: OrderedDict[int, _Class] = OrderedDict()
        self._undo: list[tuple[int, np.ndarray, bool]] | None = None
        self.gang_failures: dict[int, tuple[str, int, int]] = {}
        self.stats = PassStats()
        self.k_find = self.policy.feasible_nodes_to_find(n)
        self.sample = (not naive) and self.k_find < n
        self.perm = rng.permutation(n) if self.sample else None
        self.start = 0
        used = [pending.templates[t] for t in np.unique(pending.template).tolist()]
        used += [snapshot.batch.templates[t] for t in np.unique(snapshot.batch.template).tolist()]
        self.term_templates = [t for t in used if t.anti_affinity]
        if cache is not None:
            cache.bind(self.capacity, self.policy)
            self._hits0, self._misses0 = cache.hits, cache.misses

    # -- PassView ------------------------------------------------------------------------------

    def placed_rows(self) -> tuple[list[BatchTemplate], np.ndarray, np.ndarray]:
        return self.p_tpl, np.array(self.p_node, dtype=np.int64), np.array(self.p_count, dtype=np.int64)

    def namespace_running(self, namespace: str) -> int:
        if namespace not in self._ns_running:
            self._ns_running[namespace] = self.snapshot.batch.running_in(namespace) + sum(
                c for t, c in zip(self.p_tpl, self.p_count, strict=True) if t.namespace == namespace)
        return self._ns_running[namespace]

    # -- the pass ------------------------------------------------------------------------------

    def run(self) -> None:
        pending = self.pending
        order = np.lexsort((np.arange(len(pending)), pending.queued_s, -np.asarray(pending.priority)))
        order = order[self.remaining[order] > 0]
        gang_of, gangs = self._gangs()
        class_of = self.class_of = self._class_ids()
        if not self.naive:
            order = self._drop_unplaceable(order, gang_of)
        done: set[int] = set()
        request = self.pending.request
        i = 0
        while i < len(order):
            e = int(order[i])
            g = int(gang_of[e])
            if g >= 0:
                if g not in done:
                    done.add(g)
                    self._gang(gangs[g], order[gang_of[order] == g].tolist())
                i += 1
                continue
            if not self.naive and not self._may_fit(request[e]):
                i = self._skip_hopeless(order, i, gang_of)
                continue
            j = i + 1
            if not self.naive:
                while j < len(order) and gang_of[order[j]] < 0 and class_of[order[j]] == class_of[e]:
                    j += 1
            self._unit(order[i:j].tolist(), int(class_of[e]))
            i = j
        self._classes.clear()
        if self.cache is not None:
            self.stats.cache_hits = self.cache.hits - self._hits0
            self.stats.cache_misses = self.cache.misses - self._misses0

    def _class_ids(self) -> np.ndarray:
        """``(k,)`` equivalence class per entry: equal template and request ⇔ equal id.
        Column codes combined in mixed radix (1-D uniques only: cheap for many entries)."""
        p = self.pending
        key = np.zeros(len(p), dtype=np.int64)
        columns = [np.asarray(p.template)] + [p.request[:, d] for d in range(p.request.shape[1])]
        for column in columns:
            codes, inverse = np.unique(column, return_inverse=True)
            if len(codes) > 1:
                if (int(key.max(initial=0)) + 1) * len(codes) > 2**62:
                    key = np.unique(key, return_inverse=True)[1].reshape(-1).astype(np.int64)
                key = key * len(codes) + inverse.reshape(-1)
        return key

    def _drop_unplaceable(self, order: np.ndarray, gang_of: np.ndarray) -> np.ndarray:
        """``order`` without the non-gang entries whose request fits none of the nodes their
        template's static filters (node selector, taints, production anti-affinity) admit
        among the nodes in condition, at the start of the pass (vectorised over distinct
        requests × those nodes). Slack only falls during a pass and the other filters only
        remove nodes, so these entries could not have been placed in it; nothing they would
        have touched (scan start, score cache) changes, so the pass decides exactly as without
        this step — a long queue of pods that fit nowhere costs one array comparison, not a
        unit each. Counted as prefiltered, like :meth:`_skip_hopeless`."""
        loose = gang_of[order] < 0
        if len(self.cond_rows) == 0 or not loose.any():
            return order
        p = self.pending
        rows = order[loose]
        signatures: dict[tuple, list[int]] = {}
        for i, t in enumerate(p.template[rows].tolist()):
            signatures.setdefault(p.templates[t].rule_signature, []).append(i)
        keep = np.zeros(len(rows), dtype=bool)
        for key, members in signatures.items():
            mask = self._static.get(key)  # the same cache _static_mask fills
            if mask is None:
                template = p.templates[int(p.template[rows[members[0]]])]
                mask = self.cond.copy()
                for rule in (NodeSelectorFilter, TaintFilter, ProductionAntiAffinityFilter):
                    mask &= rule.mask(self, template)
                self._static[key] = mask
            slack = self.slack[mask]
            if len(slack) == 0:
                continue
            idx = np.asarray(members)
            # one request per equivalence class (equal class ⇒ equal request)
            _, first, inverse = np.unique(self.class_of[rows[idx]], return_index=True, return_inverse=True)
            requests = p.request[rows[idx[first]]]
            placeable = np.zeros(len(requests), dtype=bool)
            chunk = max(1, 4_000_000 // (8 * len(slack)))  # bounded memory: ≤ 4 M comparisons at once
            for start in range(0, len(requests), chunk):
                part = requests[start:start + chunk]
                placeable[start:start + chunk] = fits(part[:, None, :], slack[None, :, :]).any(axis=1)
            keep[idx] = placeable[inverse.reshape(-1)]
        drop = np.zeros(len(order), dtype=bool)
        drop[np.flatnonzero(loose)] = ~keep
        if drop.any():
            dropped = order[drop]
            self.stats.units += len(dropped)
            self.stats.prefiltered += len(dropped)
            self._notify(int(self.remaining[dropped].sum()), 0)
        return order[~drop]

    def _skip_hopeless(self, order: np.ndarray, i: int, gang_of: np.ndarray) -> int:
        """From queue position ``i`` (which cannot fit the slack upper bound), skip every
        following non-gang entry that cannot either, in one vectorised step; returns the
        position of the next entry to consider. The bound only falls during a pass, so a
        skipped entry could not have been placed later in it."""
        rest = order[i:]
        hopeless = gang_of[rest] < 0
        if self._best is not None:  # None: no node in condition at all
            hopeless &= ~(self.pending.request[rest] <= self._best_tol).all(axis=-1)
        stop = np.flatnonzero(~hopeless)
        end = int(stop[0]) if len(stop) else len(rest)
        skipped = rest[:end]
        self.stats.units += end
        self.stats.prefiltered += end
        self._notify(int(self.remaining[skipped].sum()), 0)
        return i + end

    def _notify(self, decided: int, placed: int) -> None:
        if self.observer is not None and self._undo is None and decided:
            self.observer(decided, placed)

    # -- filters -------------------------------------------------------------------------------

    def _may_fit(self, request: np.ndarray) -> bool:
        """Necessary condition: the request fits the per-dimension maximum slack over nodes
        in condition (an upper bound, so never wrong; it spares a scan for hopeless pods)."""
        if len(self.cond_rows) == 0:
            return False
        if self._best is None:
            self._best = self.slack[self.cond_rows].max(axis=0)
            self._best_tol = tolerant(self._best)
        return bool((request <= self._best_tol).all())

    def _static_mask(self, template: BatchTemplate) -> np.ndarray:
        key = template.rule_signature
        mask = self._static.get(key)
        if mask is None:
            mask = self.cond.copy()
            for rule in (NodeSelectorFilter, TaintFilter, ProductionAntiAffinityFilter):
                mask &= rule.mask(self, template)
            self._static[key] = mask
        if len(self.snapshot.evictions.node):
            mask = mask & CooldownFilter.mask(self, template)
        return mask

    def _is_dynamic(self, template: BatchTemplate) -> bool:
        key = id(template)
        if key not in self._dynamic:
            matched = any(term.matches(template.labels, template.namespace)
                          for other in self.term_templates for term in other.anti_affinity)
            self._dynamic[key] = template.dynamic or matched
        return self._dynamic[key]

    def _dynamic_mask(self, template: BatchTemplate) -> np.ndarray:
        mask = BatchAntiAffinityFilter.mask(self, template)
        if template.spread:
            mask &= SpreadFilter.mask(self, template)
        return mask

    def _ns_room(self, template: BatchTemplate) -> int:
        return NamespaceCapFilter.room(self, template) if self.caps_on else _NO_CAP

    def _static_part(self, template: BatchTemplate) -> np.ndarray:
        key = template.images
        part = None if self.naive else self._static_score.get(key)
        if part is None:
            part = static_part(template.images, self.snapshot.images, self.snapshot.volatility, self.policy)
            if not self.naive:
                self._static_score[key] = part
        return part

    # -- classes and scores --------------------------------------------------------------------

    def _class(self, cid: int, template: BatchTemplate, request: np.ndarray) -> _Class:
        cls = self._classes.get(cid)
        if cls is None:
            cls = _Class(template, request, self._static_mask(template), self.tol, self._static_part(template),
                         len(self.log), self._is_dynamic(template))
            self._classes[cid] = cls
            self.stats.classes += 1
            if len(self._classes) > _MAX_CLASSES:
                self._classes.popitem(last=False)
            return cls
        self._classes.move_to_end(cid)
        if cls.seen < len(self.log):
            dirty = np.unique(np.array(self.log[cls.seen:], dtype=np.int64))
            cls.feasible[dirty] = cls.static[dirty] & (request <= self.tol[dirty]).all(axis=-1)
            cls.score_ok[dirty] = False
            cls.seen = len(self.log)
        return cls

    def _score_rows(self, request: np.ndarray, static_score: np.ndarray, rows: np.ndarray) -> np.ndarray:
        self.stats.rows_scored += len(rows)
        slack = self.slack[rows]
        balance = None
        if self.cache is not None:
            balance = self.cache.balance(request, rows, quantise(slack, self.policy.slack_buckets), self.capacity)
        dyn = dynamic_part(slack, request, self.capacity[rows], self.snapshot.has_production[rows],
                           self.has_batch[rows], self.policy, balance=balance)
        return dyn + static_score[rows]

    def _candidates(self, feasible: np.ndarray, k_find: int) -> tuple[np.ndarray, int]:
        """``(rows to score ascending, feasible nodes)``: all feasible rows, or (sampling) the
        first ``k_find`` in the permuted scan from the rotating start, which then moves past
        the nodes scanned (kube-scheduler ``nextStartNodeIndex``)."""
        if not self.sample:
            rows = np.flatnonzero(feasible)
            return rows, len(rows)
        pos = np.flatnonzero(feasible[self.perm])
        if len(pos) == 0:
            return pos, 0
        if len(pos) <= k_find:  # the whole cluster scanned: the start stays (kube: + n mod n)
            return np.sort(self.perm[pos]), len(pos)
        split = int(np.searchsorted(pos, self.start))
        ordered = np.concatenate((pos[split:], pos[:split]))
        take = ordered[:k_find]
        scanned = (int(take[-1]) - self.start) % self.n + 1
        self.start = (self.start + scanned) % self.n
        return np.sort(self.perm[take]), len(pos)

    def _sequence_values(self, cls: _Class, nodes: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Scores of ``cls`` on each of ``nodes`` after ``k`` more of its pods, for
        ``k = start … start + length − 1``, node after node (one vectorised evaluation)."""
        total = int(length.sum())
        if total == 0:
            return np.zeros(0)
        reps = np.repeat(nodes, length)
        offsets = np.repeat(np.cumsum(length) - length, length)
        ks = (np.arange(total) - offsets + np.repeat(start, length)).astype(np.float64)
        slack_k = self.slack[reps] - ks[:, None] * cls.request
        dyn = dynamic_part(slack_k, cls.request, self.capacity[reps], self.snapshot.has_production[reps],
                           np.ones(total, dtype=bool), self.policy)
        return dyn + cls.static_score[reps]

    # -- placing -------------------------------------------------------------------------------

    def _place(self, entries: _Entries, template: BatchTemplate, request: np.ndarray, node: int, count: int) -> None:
        """Debit ``count`` pods on ``node`` and bind them to the unit's entries in order."""
        self._attribute(entries, node, count)
        self._debit(template, request, node, count)

    def _attribute(self, entries: _Entries, node: int, count: int) -> None:
        """Bindings for ``count`` pods on ``node``, taken from the entries in queue order."""
        left = count
        while left > 0 and entries.pos < len(entries.rows):
            e = entries.rows[entries.pos]
            have = int(self.remaining[e])
            take = min(left, have)
            if take > 0:
                self.remaining[e] = have - take
                self.b_entry.append(e)
                self.b_node.append(node)
                self.b_count.append(take)
                left -= take
            if take == have:
                entries.pos += 1

    def _attribute_runs(self, entries: _Entries, run_node: np.ndarray, run_count: np.ndarray) -> None:
        """:meth:`_attribute` of every run ``(run_node[i], run_count[i])`` in order, in numpy: the
        runs' pods and the entries' remaining pods are two cumulative sequences; each segment
        between consecutive break points of their union is one binding (entry, node, pods) — the
        same bindings in the same order as the per-run loop (entries with nothing left make none)."""
        rows = np.asarray(entries.rows[entries.pos:], dtype=np.int64)
        have = self.remaining[rows]
        run_end = np.cumsum(run_count)
        entry_end = np.cumsum(have)
        total = min(int(run_end[-1]), int(entry_end[-1]) if len(entry_end) else 0)
        cuts = np.union1d(run_end, entry_end)
        cuts = cuts[(cuts > 0) & (cuts <= total)]
        starts = np.concatenate(([0], cuts[:-1]))
        which_run = np.searchsorted(run_end, starts, side="right")
        which_entry = np.searchsorted(entry_end, starts, side="right")
        take = cuts - starts
        entry = rows[which_entry]
        self.b_entry.extend(entry.tolist())
        self.b_node.extend(run_node[which_run].tolist())
        self.b_count.extend(take.tolist())
        np.subtract.at(self.remaining, entry, take)
        done = np.flatnonzero((entry_end <= total) & (have > 0))
        if len(done):  # past the last entry used up (the loop stops at one still holding pods)
            entries.pos += int(done[-1]) + 1

    def _debit(self, template: BatchTemplate, request: np.ndarray, node: int, count: int) -> None:
        """In-flight placements debit the working slack at once (case C2)."""
        old = self.slack[node].copy()
        if self._undo is not None:
            self._undo.append((node, old, bool(self.has_batch[node])))
        self.slack[node] -= count * request
        self.tol[node] = tolerant(self.slack[node])
        self.has_batch[node] = True
        self.log.append(node)
        if self._best is not None and np.any(old >= self._best):
            self._best = None
        self.p_tpl.append(template)
        self.p_node.append(node)
        self.p_count.append(count)
        if self.caps_on:
            self._ns_running[template.namespace] = self.namespace_running(template.namespace) + count
        self.stats.runs += 1

    def _debit_runs(self, template: BatchTemplate, request: np.ndarray, nodes: np.ndarray, counts: np.ndarray) -> None:
        """:meth:`_debit` of ``counts[i]`` pods on each of the distinct ``nodes`` in order, in numpy
        (the same slack, log and placed rows); inside a gang transaction or with namespace caps,
        one :meth:`_debit` per node."""
        if self._undo is not None or self.caps_on or len(nodes) < 2:
            for node, count in zip(nodes.tolist(), counts.tolist(), strict=True):
                self._debit(template, request, node, count)
            return
        old = self.slack[nodes]
        self.slack[nodes] = old - counts[:, None] * request
        self.tol[nodes] = tolerant(self.slack[nodes])
        self.has_batch[nodes] = True
        listed = nodes.tolist()
        self.log.extend(listed)
        if self._best is not None and bool(np.any(old >= self._best)):
            self._best = None
        self.p_tpl.extend([template] * len(listed))
        self.p_node.extend(listed)
        self.p_count.extend(counts.tolist())
        self.stats.runs += len(listed)

    def _unit(self, rows: list[int], cid: int, only: int | None = None) -> int:
        """Place the pods of entries ``rows`` (one class, queue order); ``only`` restricts to
        one node (colocated gangs). Returns the pods placed."""
        p = self.pending
        template = p.templates[p.template[rows[0]]]
        request = p.request[rows[0]]
        want = int(self.remaining[rows].sum())
        entries = _Entries(rows)
        self.stats.units += 1
        if want == 0:
            return 0
        if not self._may_fit(request):
            self.stats.prefiltered += 1
            self._notify(want, 0)
            return 0
        if self.naive:
            return self._naive_unit(entries, template, request, want, only)
        if cid not in self._classes and not (request <= self.tol[self.cond_rows]).all(axis=-1).any():
            # No node in condition fits it now, so its class (a subset of those nodes) would have
            # no feasible node: the unit places nothing, as below, without building the class (a
            # class not kept is built afresh when next needed, with the same feasibility and scores).
            self.stats.classes += 1
            self._notify(want, 0)
            return 0
        cls = self._class(cid, template, request)
        placed = 0
        unit_want = want
        while want > 0:
            room_ns = self._ns_room(template)
            if room_ns <= 0:
                break
            feasible = cls.feasible & self._dynamic_mask(template) if cls.dynamic else cls.feasible
            if only is not None:
                feasible = feasible & (np.arange(self.n) == only)
            # Sampling budget: each pod's scheduling cycle may score k_find nodes, so a run of
            # `want` identical pods may score want × k_find (then the window takes its share).
            cand, n_feasible = self._candidates(feasible, self.k_find * want)
            if len(cand) == 0:
                break
            budget = min(want, room_ns)
            if len(cand) < n_feasible:  # sampled: this window's share of the unit, as the
                # rotating scan would give it one pod at a time
                budget = min(budget, -(-unit_want * len(cand) // n_feasible))
            need = cand[~cls.score_ok[cand]]
            if len(need):
                cls.score[need] = self._score_rows(request, cls.static_score, need)
                cls.score_ok[need] = True
            if cls.dynamic:  # one pod: placing it changes other nodes' feasibility
                run_node = cand[[int(np.argmax(cls.score[cand]))]]
                run_count = np.ones(1, dtype=np.int64)
            else:
                rooms = np.maximum(np.minimum(instance_room(request, self.slack[cand]), budget), 1)
                run_node, run_count = greedy_runs(
                    cand, cls.score[cand], rooms, budget,
                    lambda nodes, start, length, c=cls: self._sequence_values(c, nodes, start, length))
            if len(run_node) > _VECTOR_RUNS:
                self._attribute_runs(entries, run_node, run_count)
            else:
                for node, count in zip(run_node.tolist(), run_count.tolist(), strict=True):
                    self._attribute(entries, node, count)  # bindings in choice order, as one pod at a time
            # pods per node, nodes in the order they were first chosen
            touched, first, inverse = np.unique(run_node, return_index=True, return_inverse=True)
            pods = np.bincount(inverse.reshape(-1), weights=run_count, minlength=len(touched)).astype(np.int64)
            chosen = np.argsort(first, kind="stable")
            touched, pods = touched[chosen], pods[chosen]
            self._debit_runs(template, request, touched, pods)
            cls.feasible[touched] = cls.static[touched] & (request <= self.tol[touched]).all(axis=-1)
            cls.score_ok[touched] = False
            cls.seen = len(self.log)
            got = int(pods.sum())
            want -= got
            placed += got
            self._notify(got, got)
            if not (self.sample or cls.dynamic) or got == 0:
                break
        self._notify(want, 0)
        return placed

    def _naive_unit(self, entries: _Entries, template: BatchTemplate, request: np.ndarray, want: int,
                    only: int | None) -> int:
        """One pod at a time, every filter and score over every node (the baseline)."""
        placed = 0
        for _ in range(want):
            if self._ns_room(template) <= 0 or not self._may_fit(request):
                self._notify(1, 0)
                continue
            mask = self.cond.copy()
            for rule in RULE_FILTERS[1:]:
                if rule in DYNAMIC_RULES and rule is not NamespaceCapFilter and not self._is_dynamic(template):
                    continue
                mask &= rule.mask(self, template)
            if only is not None:
                mask &= np.arange(self.n) == only
            rows = np.flatnonzero(mask & fits(request, self.slack))
            if len(rows) == 0:
                self._notify(1, 0)
                continue
            self.stats.rows_scored += len(rows)
            scores = dynamic_part(self.slack[rows], request, self.capacity[rows], self.snapshot.has_production[rows],
                                  self.has_batch[rows], self.policy) + self._static_part(template)[rows]
            node = int(rows[int(np.argmax(scores))])
            self._place(entries, template, request, node, 1)
            placed += 1
            self._notify(1, 1)
        return placed

@dataclass(frozen=True, eq=False)
class PassResult:
    """What one pass decided.

    Attributes:
        bindings: placements to bind (``count`` pods of ``entry`` on ``node`` at ``version``).
        remaining: ``(k,)`` pods of each entry still pending after the pass.
        stats: counters.
    """

    bindings: Bindings
    remaining: np.ndarray
    stats: PassStats
    _pass: _Pass = field(repr=False)

    @property
    def placed(self) -> int:
        return int(self.bindings.count.sum())

    @property
    def pending(self) -> int:
        return int(self.remaining.sum())

    @cached_property
    def _records(self) -> tuple:
        from kalena_engine.placement.explain import explain_pass
        return explain_pass(self._pass)

    def why_pending(self) -> tuple:
        """One :class:`~kalena_engine.placement.explain.WhyPending` per entry with pods left,
        computed from the state at the end of the pass (lazily, once)."""
        return self._records


def schedule_batch(snapshot: ClusterSnapshot, pending: PendingBatch, policy: Policy, *, rng: np.random.Generator,
                   naive: bool = False, cache: ScoreCache | bool = True, observer: Observer | None = None) -> PassResult:
    """Place ``pending`` batch into ``snapshot``'s slack; the caller binds the result.

    Args:
        snapshot: the cluster as this pass reads it (slack, node conditions, residents).
        pending: entries of identical pending pods.
        policy: engine policy (``policy.placement``, ``policy.eviction.cooldown_s``).
        rng: randomness for node sampling (deterministic for a seed).
        naive: the baseline — one pod at a time, every filter and score over all nodes, no
            equivalence classes, cache or sampling (same kernels).
        cache: ``True`` a fresh score cache for this pass, ``False`` none, or a
            :class:`ScoreCache` kept across passes by the caller.
        observer: called with ``(pods decided, pods placed)`` after each decision step (the
            benchmark times decisions with it; the engine reads no clock).

    Returns:
        :class:`PassResult`; nothing in ``snapshot`` or ``pending`` is modified.
    """
    if cache is True:
        cache = ScoreCache()
    elif cache is False or naive:
        cache = None
    work = _Pass(snapshot, pending, policy, rng, naive, cache, observer)
    work.run()
    bindings = Bindings(
        entry=np.array(work.b_entry, dtype=np.int64), node=np.array(work.b_node, dtype=np.int64),
        count=np.array(work.b_count, dtype=np.int64),
        version=np.asarray(snapshot.version, dtype=np.int64)[np.array(work.b_node, dtype=np.int64)],
        request=pending.request[np.array(work.b_entry, dtype=np.int64)].reshape(-1, pending.request.shape[1]),
    )
    return PassResult(bindings=bindings, remaining=work.remaining, stats=work.stats, _pass=work)
