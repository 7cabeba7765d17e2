"""The only place live ledger rows become engine types (estimation, DESIGN §5–§6).

Rows → :class:`LiveWorkloads`: the workloads placed on a set of nodes, with their estimator
state as a :class:`kalena_engine.estimator.Reservations` and per-workload request, limit,
start and pinning; and stored samples → ``(m,)`` / ``(m, 8)`` arrays for
:func:`kalena_engine.estimator.apply_samples`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kalena_engine.estimator import Reservations, estimator_limit
from kalena_engine.resources import N_DIMS

RECLAIM = "kalena.naughtian.io/reclaim"
#: Per-workload startup grace (DESIGN §5: g has a per-workload override), seconds ≥ 0.
STARTUP_GRACE = "kalena.naughtian.io/startup-grace-s"


def grace_override_s(labels: dict | None) -> float:
    """The workload's startup-grace override in seconds, NaN when it has none (or a value that is
    not a finite number ≥ 0 — the policy's grace then applies)."""
    raw = (labels or {}).get(STARTUP_GRACE)
    try:
        value = float(str(raw).strip()) if raw is not None else np.nan
    except ValueError:
        return np.nan
    return value if np.isfinite(value) and value >= 0 else np.nan

#: Columns :func:`live_workloads` reads, in order (a ``values_list`` over Workload).
WORKLOAD_COLUMNS = ("id", "node_id", "kind", "request", "limit", "labels", "start_s", "reservation__value",
                    "reservation__updated_s", "reservation__last_sample_s", "reservation__last_usage")


@dataclass(frozen=True, eq=False)
class LiveWorkloads:
    """``n`` live workloads (production and bound batch) of some nodes.

    Attributes:
        ids, node_ids: ``(n,)`` int64 workload and node ids.
        batch: ``(n,)`` bool, batch tier (else production).
        request, limit: ``(n, 8)``; ``limit`` is L for the estimator (declared, else
            ``limit_ratio × q``, DESIGN §5).
        start_s: ``(n,)`` start (s); ``-inf`` when running since before Kalena saw it (no grace).
        reclaim_disabled: ``(n,)`` bool (``kalena.naughtian.io/reclaim: disabled``).
        state: the estimator state; ``last_sample_s`` is ``-inf`` for never-sampled workloads.
        last_usage: ``(n, 8)`` the newest sample's usage (0 where never measured).
        grace_override_s: ``(n,)`` per-workload startup grace (:data:`STARTUP_GRACE`), NaN = the policy's.
    """

    ids: np.ndarray
    node_ids: np.ndarray
    batch: np.ndarray
    request: np.ndarray
    limit: np.ndarray
    start_s: np.ndarray
    reclaim_disabled: np.ndarray
    state: Reservations
    last_usage: np.ndarray
    grace_override_s: np.ndarray | None = None

    def grace_s(self, policy_grace_s: float) -> np.ndarray:
        """``(n,)`` startup grace per workload: its override, else the policy's ``g``."""
        if self.grace_override_s is None:
            return np.full(len(self), policy_grace_s)
        return np.where(np.isnan(self.grace_override_s), policy_grace_s, self.grace_override_s)

    def __len__(self) -> int:
        return len(self.ids)


def _vectors(values: Sequence, n: int, fill: float = 0.0) -> np.ndarray:
    out = np.full((n, N_DIMS), fill, dtype=np.float64)
    for i, v in enumerate(values):
        if v is not None:
            out[i] = v
    return out


def live_workloads(rows: Sequence[tuple], *, limit_ratio: float) -> LiveWorkloads:
    """Rows of :data:`WORKLOAD_COLUMNS` → :class:`LiveWorkloads`."""
    n = len(rows)
    cols = list(zip(*rows)) if rows else [()] * len(WORKLOAD_COLUMNS)
    request = _vectors(cols[3], n)
    declared = _vectors(cols[4], n, fill=np.inf)
    limit = estimator_limit(declared, request, limit_ratio)
    start = np.array([-np.inf if s is None else float(s) for s in cols[6]], dtype=np.float64)
    last = np.array([-np.inf if s is None else float(s) for s in cols[9]], dtype=np.float64)
    state = Reservations(value=_vectors(cols[7], n), updated_s=np.array(cols[8], dtype=np.float64).reshape(n),
                         last_sample_s=last)
    return LiveWorkloads(
        ids=np.array(cols[0], dtype=np.int64).reshape(n), node_ids=np.array(cols[1], dtype=np.int64).reshape(n),
        batch=np.array([k == "batch" for k in cols[2]], dtype=bool).reshape(n), request=request, limit=limit,
        start_s=start,
        reclaim_disabled=np.array([str((lab or {}).get(RECLAIM, "")).lower() == "disabled" for lab in cols[5]],
                                  dtype=bool).reshape(n),
        state=state, last_usage=np.nan_to_num(_vectors(cols[10], n), nan=0.0, posinf=0.0),
        grace_override_s=np.array([grace_override_s(lab) for lab in cols[5]], dtype=np.float64).reshape(n),
    )


@dataclass(frozen=True, eq=False)
class SampleArrays:
    """``m`` stored samples: ``ids``, ``workload_ids``, ``node_ids`` ``(m,)``; ``ts`` ``(m,)``
    seconds; ``usage`` ``(m, 8)`` internal units, NaN where not measured."""

    ids: np.ndarray
    workload_ids: np.ndarray
    node_ids: np.ndarray
    ts: np.ndarray
    usage: np.ndarray


def sample_arrays(rows: Sequence[tuple]) -> SampleArrays:
    """Rows ``(id, workload_id, node_id, ts, 8 usage columns)`` → :class:`SampleArrays`."""
    m = len(rows)
    if m == 0:
        empty = np.zeros(0, dtype=np.int64)
        return SampleArrays(empty, empty, empty, np.zeros(0), np.zeros((0, N_DIMS)))
    arr = np.array(rows, dtype=np.float64)  # None → nan
    return SampleArrays(ids=arr[:, 0].astype(np.int64), workload_ids=arr[:, 1].astype(np.int64),
                        node_ids=arr[:, 2].astype(np.int64), ts=arr[:, 3], usage=arr[:, 4:4 + N_DIMS])


def estimator_inputs(live: LiveWorkloads, samples: SampleArrays) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Match samples to rows of ``live``: ``(sample index kept, row of each, unmeasured (k, 8))``.

    A sample is kept when its workload is live on the node that sent it and it was taken at or
    after the workload's start (a batch pod requeued and bound elsewhere starts afresh).
    ``unmeasured`` marks the dimensions each kept sample did not measure (NULL): for that update
    r holds at the request, as the agent does.
    """
    if len(live) == 0 or len(samples.ids) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros((0, N_DIMS), dtype=bool)
    order = np.argsort(live.ids)
    rows = order[np.clip(np.searchsorted(live.ids, samples.workload_ids, sorter=order), 0, len(live) - 1)]
    known = ((live.ids[rows] == samples.workload_ids) & (live.node_ids[rows] == samples.node_ids)
             & (samples.ts >= live.start_s[rows]))
    kept = np.flatnonzero(known)
    return kept, rows[kept], np.isnan(samples.usage[kept])
