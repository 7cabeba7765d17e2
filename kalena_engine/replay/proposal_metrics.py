"""The proposal's metrics 6–8 (§6.3) from what a replay records, pure numpy.

* **6 — reservation accuracy.** Over every production pod-step with a positive request, per
  dimension (cpu, ram): the distribution (CDF) of ``r / q`` — the reservation the ledgers read
  over the request — and of ``u / q`` — usage over request. The *over-estimation area* is the
  area between reservation and usage where the reservation is above it, as a share of the
  request area::

      over = Σ_t Σ_p max(0, r_p(t) − u_p(t)) · Δt / Σ_t Σ_p q_p · Δt

  (0 = every reservation is exactly the usage; ``1 − mean(u/q)`` = reserving the request);
  *under* is the same with ``max(0, u − r)`` — usage the reservation did not cover. Example:
  one pod, q = 4 cores, two steps with u = 1, 3 and r = 2, 2 → over = (1 + 0) / 8 = 0.125, under
  = (0 + 1) / 8 = 0.125; r/q = 0.5, 0.5; u/q = 0.25, 0.75.
  The CDFs are histograms of width :data:`RATIO_BIN` on ``[0, RATIO_MAX)`` (above it counted in
  the last point, which is 1).
* **7 — batch forward progress.** Per completed batch instance: completion-time inflation
  (actual ÷ undisturbed run time) and cumulative throttled time ``actual − undisturbed`` run
  seconds (the time compressible cpu cost it; 0 when it never waited), as distributions:
  weighted quantiles at :data:`QUANTILES` and the share of instances slowed at all.
* **8 — Pareto-reserve yield.** Kuberina's reserve on node ``n`` is its headroom
  ``H_n = C_n − Σ q_prod`` (docs/design.md §6). Batch occupies ``min(Σ q_batch, H_n)`` of it at a step.
  Per node over the run: ``Σ_t min(Σ q_batch, H_n) / Σ_t H_n``; the cluster's is the same ratio of
  sums over the batch nodes with positive headroom; an hourly cluster series shows it over the
  day. Example: H = 10 cores, batch requests 4, 12, 0 over three steps → (4 + 10 + 0) / 30 =
  0.467. Batch beyond ``H_n`` runs in reclaimed production requests (``reclaimed_fraction``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kalena_engine.resources import CPU, RAM

#: Histogram bin width and upper end of the r/q and u/q CDFs.
RATIO_BIN = 0.01
RATIO_MAX = 2.0
#: Quantiles (percent) reported for every distribution.
QUANTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99, 99.9, 100)
_DIMS = (("cpu", CPU), ("ram", RAM))
_BINS = int(round(RATIO_MAX / RATIO_BIN))


def _hist(ratio: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """``(bins + 1,)`` weighted counts of ``ratio`` in bins ``(k·w, (k+1)·w]`` of width
    :data:`RATIO_BIN` (0 in the first; a ratio of exactly 1 in the bin ending at 1); the last
    cell holds everything above :data:`RATIO_MAX`."""
    index = np.clip(np.ceil(np.round(np.maximum(ratio, 0.0) / RATIO_BIN, 9)).astype(np.int64) - 1, 0, _BINS)
    return np.bincount(index, weights=weight, minlength=_BINS + 1)


def cdf_points(hist: np.ndarray) -> dict[str, list[float]]:
    """A histogram as CDF points: ``ratio`` (each bin's upper edge; the last point is the open
    end, drawn at :data:`RATIO_MAX`) and ``cdf`` (share ≤ it), trimmed after the CDF reaches 1."""
    total = float(hist.sum())
    if total <= 0:
        return {"ratio": [], "cdf": []}
    cdf = np.cumsum(hist) / total
    edges = np.append(np.arange(1, _BINS + 1) * RATIO_BIN, RATIO_MAX)
    last = int(np.searchsorted(cdf, 1.0 - 1e-12)) + 1
    return {"ratio": [round(float(e), 4) for e in edges[:last]], "cdf": [round(float(c), 6) for c in cdf[:last]]}


def hist_quantiles(hist: np.ndarray) -> dict[str, float]:
    """Quantiles of a ratio histogram (each bin's upper edge, so to within :data:`RATIO_BIN`)."""
    points = cdf_points(hist)
    if not points["cdf"]:
        return {}
    cdf = np.asarray(points["cdf"])
    ratio = np.asarray(points["ratio"])
    return {f"p{q:g}": float(ratio[min(int(np.searchsorted(cdf, q / 100.0 - 1e-12)), len(ratio) - 1)])
            for q in QUANTILES}


def weighted_quantiles(values: np.ndarray, counts: np.ndarray) -> dict[str, float]:
    """``values`` each repeated ``counts`` times: the nearest-rank quantiles at
    :data:`QUANTILES` (the first value whose cumulative count reaches q % of the total). Example:
    values 1.0 × 3, 2.0 × 1 → p50 1.0, p99 2.0. Empty → ``{}``."""
    if len(values) == 0:
        return {}
    order = np.argsort(values, kind="stable")
    v, c = values[order], np.cumsum(counts[order].astype(np.float64))
    return {f"p{q:g}": float(v[min(int(np.searchsorted(c, q / 100.0 * c[-1] * (1 - 1e-12))), len(v) - 1)])
            for q in QUANTILES}


def weighted_cdf(values: np.ndarray, counts: np.ndarray, points: int = 101) -> dict[str, list[float]]:
    """The distribution of ``values`` (weights ``counts``) as ``points`` CDF points: the value at
    each of ``points`` evenly spaced cumulative shares 0 … 1 (nearest rank)."""
    if len(values) == 0:
        return {"value": [], "cdf": []}
    order = np.argsort(values, kind="stable")
    v, c = values[order], np.cumsum(counts[order].astype(np.float64))
    shares = np.linspace(0.0, 1.0, points)
    index = np.minimum(np.searchsorted(c, shares * c[-1] * (1 - 1e-12)), len(v) - 1)
    return {"value": [round(float(x), 6) for x in v[index]], "cdf": [round(float(s), 4) for s in shares]}


@dataclass(eq=False)
class ProposalMetrics:
    """Accumulates metrics 6–8 (module doc) step by step.

    Attributes:
        pod_request: ``(p, 8)`` production requests per pod, in the records' ``pod_*`` order.
        target: ``(n,)`` bool, the nodes batch may use (metric 8 reads only those).
        step_s: the replay step (s).
    """

    pod_request: np.ndarray
    target: np.ndarray
    step_s: float = 60.0
    reservation_hist: np.ndarray = field(default_factory=lambda: np.zeros((2, _BINS + 1)))
    usage_hist: np.ndarray = field(default_factory=lambda: np.zeros((2, _BINS + 1)))
    over: np.ndarray = field(default_factory=lambda: np.zeros(2))
    under: np.ndarray = field(default_factory=lambda: np.zeros(2))
    requested: np.ndarray = field(default_factory=lambda: np.zeros(2))
    headroom: np.ndarray | None = None     # (n, 2) Σ_t max(H_n, 0)
    occupied: np.ndarray | None = None     # (n, 2) Σ_t min(Σ q_batch, H_n)
    hourly: dict[int, list[float]] = field(default_factory=dict)  # hour → [occupied cpu, headroom cpu, ram, ram]
    inflation: list[np.ndarray] = field(default_factory=list)
    throttled: list[np.ndarray] = field(default_factory=list)
    counts: list[np.ndarray] = field(default_factory=list)

    def add(self, *, time_s: float, pod_reservation: np.ndarray, pod_usage: np.ndarray, capacity: np.ndarray,
            prod_request: np.ndarray, batch_request: np.ndarray,
            completed: list[tuple[float, float, int]]) -> None:
        """Fold one step in. ``pod_*``: ``(p, 8)``; ``capacity``, ``prod_request``,
        ``batch_request``: ``(n, 8)`` per node; ``completed``: ``(inflation, throttled_s,
        instances)`` of the groups completed this step."""
        for i, (_, d) in enumerate(_DIMS):
            q = self.pod_request[:, d]
            has = q > 0
            if has.any():
                qq, r, u = q[has], pod_reservation[has, d], pod_usage[has, d]
                self.reservation_hist[i] += _hist(r / qq, np.ones(len(qq)))
                self.usage_hist[i] += _hist(u / qq, np.ones(len(qq)))
                self.over[i] += float(np.maximum(r - u, 0.0).sum()) * self.step_s
                self.under[i] += float(np.maximum(u - r, 0.0).sum()) * self.step_s
                self.requested[i] += float(qq.sum()) * self.step_s
        dims = [CPU, RAM]
        head = np.maximum(capacity[:, dims] - prod_request[:, dims], 0.0)
        head[~self.target] = 0.0
        occ = np.minimum(batch_request[:, dims], head)
        if self.headroom is None:
            self.headroom, self.occupied = np.zeros_like(head), np.zeros_like(head)
        self.headroom += head * self.step_s
        self.occupied += occ * self.step_s
        hour = self.hourly.setdefault(int(time_s // 3600.0), [0.0, 0.0, 0.0, 0.0])
        hour[0] += float(occ[:, 0].sum())
        hour[1] += float(head[:, 0].sum())
        hour[2] += float(occ[:, 1].sum())
        hour[3] += float(head[:, 1].sum())
        if completed:
            done = np.asarray(completed, dtype=np.float64)
            self.inflation.append(done[:, 0])
            self.throttled.append(done[:, 1])
            self.counts.append(done[:, 2])

    def summary(self) -> dict[str, object]:
        """The three metrics as JSON-ready dicts, plus flat headline keys:
        ``overestimation_area_{cpu,ram}``, ``underestimation_area_{cpu,ram}``,
        ``pareto_reserve_yield_{cpu,ram}``, ``throttled_seconds_p50`` / ``_p99``,
        ``completion_inflation_p90``."""
        accuracy: dict[str, object] = {}
        out: dict[str, object] = {}
        for i, (name, _) in enumerate(_DIMS):
            req = self.requested[i]
            over = float(self.over[i] / req) if req > 0 else 0.0
            under = float(self.under[i] / req) if req > 0 else 0.0
            accuracy[name] = {
                "overestimation_area": round(over, 6), "underestimation_area": round(under, 6),
                "reservation_over_request": {"quantiles": hist_quantiles(self.reservation_hist[i]),
                                             **cdf_points(self.reservation_hist[i])},
                "usage_over_request": {"quantiles": hist_quantiles(self.usage_hist[i]),
                                       **cdf_points(self.usage_hist[i])},
            }
            out[f"overestimation_area_{name}"] = round(over, 6)
            out[f"underestimation_area_{name}"] = round(under, 6)
        values = np.concatenate(self.inflation) if self.inflation else np.zeros(0)
        throttled = np.concatenate(self.throttled) if self.throttled else np.zeros(0)
        counts = np.concatenate(self.counts) if self.counts else np.zeros(0)
        instances = float(counts.sum())
        progress = {
            "completed_instances": int(instances),
            "slowed_share": round(float(counts[throttled > 1e-6].sum() / instances), 6) if instances else 0.0,
            "completion_inflation": {"quantiles": weighted_quantiles(values, counts), **weighted_cdf(values, counts)},
            "throttled_seconds": {"quantiles": weighted_quantiles(throttled, counts), **weighted_cdf(throttled, counts)},
            "throttled_seconds_total": round(float((throttled * counts).sum()), 1),
        }
        tq = progress["throttled_seconds"]["quantiles"]
        out["throttled_seconds_p50"] = tq.get("p50", 0.0)
        out["throttled_seconds_p99"] = tq.get("p99", 0.0)
        out["completion_inflation_p90"] = progress["completion_inflation"]["quantiles"].get("p90", 1.0)
        reserve: dict[str, object] = {}
        hours = sorted(self.hourly)
        for i, (name, _) in enumerate(_DIMS):
            if self.headroom is None:
                reserve[name] = {"cluster": 0.0, "nodes": 0, "per_node": {}, "hourly": {"hour": [], "yield": []}}
                out[f"pareto_reserve_yield_{name}"] = 0.0
                continue
            head, occ = self.headroom[:, i], self.occupied[:, i]
            has = head > 0
            cluster = float(occ[has].sum() / head[has].sum()) if has.any() else 0.0
            per_node = occ[has] / head[has]
            reserve[name] = {
                "cluster": round(cluster, 6), "nodes": int(has.sum()),
                "per_node": weighted_quantiles(per_node, np.ones(len(per_node))),
                "per_node_mean": round(float(per_node.mean()), 6) if len(per_node) else 0.0,
                "hourly": {"hour": hours, "yield": [round(self.hourly[h][2 * i] / self.hourly[h][2 * i + 1], 6)
                                                    if self.hourly[h][2 * i + 1] > 0 else 0.0 for h in hours]},
            }
            out[f"pareto_reserve_yield_{name}"] = round(cluster, 6)
        out["reservation_accuracy"] = accuracy
        out["batch_forward_progress"] = progress
        out["pareto_reserve_yield"] = reserve
        return out
