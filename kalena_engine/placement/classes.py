"""Per-pass bookkeeping of the scheduler: counters, equivalence-class state, unit cursors."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena_engine.placement.model import BatchTemplate


@dataclass
class PassStats:
    """Counters of one pass (for benchmarks and the console)."""

    units: int = 0
    runs: int = 0
    classes: int = 0
    prefiltered: int = 0
    rows_scored: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    gang_rollbacks: int = 0


class _Class:
    """Per-pass state of one equivalence class (template × request)."""

    __slots__ = ("template", "request", "static", "feasible", "score", "score_ok", "static_score", "seen", "dynamic")

    def __init__(self, template: BatchTemplate, request: np.ndarray, static: np.ndarray, tolerant_slack: np.ndarray,
                 static_score: np.ndarray, seen: int, dynamic: bool) -> None:
        """``tolerant_slack``: the pass's slack with the admission tolerance added
        (:func:`~kalena_engine.placement.filters.tolerant`), so feasibility is ``fits``."""
        self.template, self.request, self.static, self.dynamic = template, request, static, dynamic
        self.feasible = static & (request <= tolerant_slack).all(axis=-1)
        self.score = np.zeros(len(static))
        self.score_ok = np.zeros(len(static), dtype=bool)
        self.static_score = static_score
        self.seen = seen


class _Entries:
    """The entries of one decision unit (queue order) and a cursor past the exhausted ones."""

    __slots__ = ("rows", "pos")

    def __init__(self, rows: list[int]) -> None:
        self.rows, self.pos = rows, 0
