"""The only place live ledger rows become engine types (estimation, docs/design.md §5–§6).

Rows → :class:`LiveWorkloads`: the workloads placed on a set of nodes, with their estimator
state as a :class:`kalena_engine.estimator.Reservations` and per-workload request, limit,
start and pinning; and stored samples → ``(m,)`` / ``(m, 8)`` arrays for
:func:`kalena_engine.estimator.apply_samples`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from kalena_engine import predictors
from kalena_engine.estimator import Reservations, estimator_limit
from kalena_engine.overrides import WorkloadOverrides, workload_overrides
from kalena_engine.policy import EstimatorPolicy
from kalena_engine.resources import CPU, N_DIMS

#: A text column of one JSON vector per row (``null`` element = +inf, a NULL row = none).
_NULL_ROW = "[" + ",".join(["null"] * N_DIMS) + "]"


@dataclass(frozen=True)
class WorkloadColumns:
    """Workload rows as read (:func:`kalena_web.ledger.estimation_io.load_workloads`), one tuple per
    column: ``ids``, ``node_ids``, ``kinds``; vectors as JSON text (``request``, ``limit``,
    ``value``, ``last_usage``); ``start_s``, ``updated_s``, ``last_sample_s`` (None = never);
    ``names``, ``priorities``; ``overrides``: each override key (:data:`kalena_engine.overrides.KEYS`)
    → its column of raw values (None where the workload does not set it)."""

    ids: tuple
    node_ids: tuple
    kinds: tuple
    request: tuple
    limit: tuple
    start_s: tuple
    value: tuple
    updated_s: tuple
    last_sample_s: tuple
    last_usage: tuple
    names: tuple
    priorities: tuple
    overrides: Mapping[str, tuple]

    @classmethod
    def empty(cls) -> WorkloadColumns:
        return cls(*([()] * 12), overrides={})

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True, eq=False)
class LiveWorkloads:
    """``n`` live workloads (production and bound batch) of some nodes.

    Attributes:
        ids, node_ids: ``(n,)`` int64 workload and node ids.
        batch: ``(n,)`` bool, batch tier (else production).
        request, limit: ``(n, 8)``; ``limit`` is L for the estimator (declared, else
            ``limit_ratio × q``, docs/design.md §5).
        start_s: ``(n,)`` start (s); ``-inf`` when running since before Kalena saw it (no grace).
        reclaim_disabled: ``(n,)`` bool (``kalena.naughtian.io/reclaim: disabled``).
        state: the estimator state; ``last_sample_s`` is ``-inf`` for never-sampled workloads.
        last_usage: ``(n, 8)`` the newest sample's usage (0 where never measured).
        grace_override_s: ``(n,)`` per-workload startup grace (``kalena.naughtian.io/startup-grace-s``),
            NaN = the policy's.
        declared_limit: ``(n, 8)`` the declared limits (+inf where none), or None.
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
    declared_limit: np.ndarray | None = None

    def grace_s(self, policy_grace_s: float) -> np.ndarray:
        """``(n,)`` startup grace per workload: its override, else the policy's ``g``."""
        if self.grace_override_s is None:
            return np.full(len(self), policy_grace_s)
        return np.where(np.isnan(self.grace_override_s), policy_grace_s, self.grace_override_s)

    def __len__(self) -> int:
        return len(self.ids)


def vector_matrix(texts: Sequence[str | bytes | None], fill: float = 0.0) -> np.ndarray:
    """``(n, 8)`` from ``n`` JSON vectors in one parse: a ``null`` element is +inf
    (:class:`~kalena_web.inventory.fields.ResourceVectorField`), a NULL row reads ``fill``."""
    n = len(texts)
    if n == 0:
        return np.zeros((0, N_DIMS))
    missing = [i for i, t in enumerate(texts) if t is None]
    texts = [_NULL_ROW if t is None else t for t in texts] if missing else texts
    if not isinstance(texts[0], str):
        texts = [t.decode() for t in texts]
    joined = ",".join(texts)
    out = np.array(orjson.loads(f"[{joined}]"), dtype=np.float64).reshape(n, N_DIMS)
    out[np.isnan(out)] = np.inf
    out[missing] = fill
    return out


def _times(values: Sequence, n: int) -> np.ndarray:
    """``(n,)`` seconds, None → −inf."""
    out = np.array(values, dtype=np.float64).reshape(n)  # None → nan
    out[np.isnan(out)] = -np.inf
    return out


def live_workloads(cols: WorkloadColumns, *, limit_ratio: float) -> LiveWorkloads:
    """:class:`WorkloadColumns` → :class:`LiveWorkloads` (columns decoded with numpy; the
    overrides through :func:`kalena_engine.overrides.workload_overrides`, a bad value keeping its
    default, as the agent does)."""
    n = len(cols)
    request = vector_matrix(cols.request, 0.0)
    declared = vector_matrix(cols.limit, np.inf)
    limit = estimator_limit(declared, request, limit_ratio)
    state = Reservations(value=vector_matrix(cols.value, 0.0),
                         updated_s=np.array(cols.updated_s, dtype=np.float64).reshape(n),
                         last_sample_s=_times(cols.last_sample_s, n))
    overrides = [WorkloadOverrides()] * n
    for row in sorted({i for column in cols.overrides.values() for i, v in enumerate(column) if v is not None}):
        overrides[row] = workload_overrides({key: column[row] for key, column in cols.overrides.items()},
                                            source=f"workload {cols.ids[row]}", errors=[])
    return LiveWorkloads(
        ids=np.array(cols.ids, dtype=np.int64).reshape(n), node_ids=np.array(cols.node_ids, dtype=np.int64).reshape(n),
        batch=np.array([k == "batch" for k in cols.kinds], dtype=bool).reshape(n), request=request, limit=limit,
        declared_limit=declared,
        start_s=_times(cols.start_s, n),
        reclaim_disabled=np.array([o.reclaim_disabled for o in overrides], dtype=bool).reshape(n),
        state=state, last_usage=np.nan_to_num(vector_matrix(cols.last_usage, 0.0), nan=0.0, posinf=0.0),
        grace_override_s=np.array([np.nan if o.startup_grace_s is None else o.startup_grace_s for o in overrides],
                                  dtype=np.float64).reshape(n),
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


def throttled_rates(live: LiveWorkloads, rows: Sequence[tuple]) -> np.ndarray:
    """``(n,)`` each live workload's cpu throttling rate, mcpu, over its last two samples; NaN
    where fewer than two were kept.

    ``rows`` are ``(workload_id, node_id, ts, cpu_throttled_time_us)`` by workload then time
    (:func:`kalena_web.ledger.estimation_io.load_throttle_counters`); a sample counts when its
    workload is live on the node that sent it and was taken at or after the workload's start,
    as for the estimator (:func:`estimator_inputs`). ``throttled_time_us`` is the cgroup's
    ``cpu.stat`` counter: the cumulative time its runqueues spent throttled by the CFS quota.
    Its growth per second of wall time, ``Δ throttled_time_us / Δts / 1000``, is kept in
    thousandths of a second per second (the ledger's mcpu scale: 1000 = one runqueue held back the
    whole time; a group throttled through every period on each of k cpus accrues k seconds per
    second). Example: 30 s more over 60 s → 500 (0.5 s/s).

    Limits: it measures waiting, not the cpu the pods would have used — a runqueue counts as
    throttled for the whole wait whatever its tasks' demand (a pod held to a few millicores and
    throttled through every period reads about 1 s/s), so it is not in cores; the rate is an
    average over the sampling interval (a short burst reads smaller); a counter that went down
    (the pod's cgroup was recreated: a restart) gives no rate for that interval: it reads 0,
    never negative.
    """
    out = np.full(len(live), np.nan)
    if len(live) == 0 or len(rows) == 0:
        return out
    arr = np.array(rows, dtype=np.float64).reshape(len(rows), 4)
    wid, node, ts, counter = arr[:, 0].astype(np.int64), arr[:, 1].astype(np.int64), arr[:, 2], arr[:, 3]
    order = np.argsort(live.ids)
    at = order[np.clip(np.searchsorted(live.ids, wid, sorter=order), 0, len(live) - 1)]
    keep = (live.ids[at] == wid) & (live.node_ids[at] == node) & (ts >= live.start_s[at])
    at, ts, counter = at[keep], ts[keep], counter[keep]
    last = np.flatnonzero(np.r_[at[1:] != at[:-1], True]) if len(at) else np.zeros(0, dtype=np.int64)
    last = last[(last > 0) & (at[np.maximum(last - 1, 0)] == at[last])]      # a previous sample of the same row
    dt = ts[last] - ts[last - 1]
    gained = np.maximum(counter[last] - counter[last - 1], 0.0)
    out[at[last]] = np.where(dt > 0, gained / np.where(dt > 0, dt, 1.0) / 1000.0, 0.0)
    return out


def predictor_notes(workloads: Sequence, policy: EstimatorPolicy) -> dict[int, tuple[str, str]]:
    """``{workload id: (member, why)}`` — which peak predictor serves each workload's cpu
    reservation and why (:func:`kalena_engine.predictors.explain`), from the history stored with
    its reservation (workloads with ``reservation`` loaded; those without one are left out)."""
    out: dict[int, tuple[str, str]] = {}
    for w in workloads:
        res = getattr(w, "reservation", None)
        if res is None:
            continue
        history = None
        if policy.predictor != "asymmetric":
            history = predictors.unpack_rows([res.history], np.asarray([res.value], dtype=np.float64), policy)
        out[w.id] = predictors.explain(history, 0, CPU, policy)
    return out

