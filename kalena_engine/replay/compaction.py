"""Cluster compaction (Borg §5.1; docs/design.md §11; proposal §6.2): the smallest cluster that still
fits the workload, with reclamation on (the ``kalena`` rule) and off (``none``: production
reserves its request).

One *trial* (one seed) orders the nodes at random: the blueprint's active nodes in a seeded
permutation, then the nodes the blueprint left empty, then seeded copies of the
infrastructure's nodes (so a cluster may also grow). A cluster of ``m`` nodes is the first
``m`` of that order; shrinking it removes nodes at random. Each candidate cluster is repacked
from scratch:

* production by **first-fit decreasing** (:func:`first_fit_decreasing`) honouring
  nodeSelectors, taints and post-Phase-0 capacity on every dimension — *not Kuberina's
  solver*, so its node counts are not comparable with Kuberina's 152 active Irina nodes; the
  blueprint itself when no node is removed (``m`` ≥ the active nodes: the extra nodes start
  empty);
* then batch by the replay (Kalena's scheduler, mitigation and compressible cpu) over the
  window, on every node of the candidate cluster.

A cluster **fits** when every production pod is placed and at most ``allowance`` (0.2 %, the
proposal's §6.2 allowance after Borg) of the window's batch demand is unserved at its end::

    demand   = Σ_tasks submitted_instances · duration · q_cpu          (core-hours)
    unserved = Σ_tasks pending_instances   · duration · q_cpu          (queued, never running)

Worked example: 10,000 core-hours submitted, 15 still queued at the end → 0.15 % ≤ 0.2 % → fits.

The smallest fitting ``m`` is searched for (:func:`smallest_fitting`; fit is treated as
monotone in ``m``, every probe is reported): a production-only bisection with FFD (no replay)
gives a floor, the reclamation-on arm starts from the blueprint's active nodes, the off arm
from the on arm's answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from kalena_engine.kuberina import Blueprint, Infrastructure, Workloads, phase0_capacity
from kalena_engine.kuberina.matching import selector_matches, untolerated_taints
from kalena_engine.kuberina.model import NodeSpec
from kalena_engine.kuberina.verify import verify_blueprint
from kalena_engine.replay.setup import ReplayConfig, ReplayInputs, build_replay
from kalena_engine.resources import CPU
from kalena_engine.traces.batch import BatchTasks, select_window

#: Unserved share of batch core-hours a fitting cluster may leave (proposal §6.2, Borg 0.2 %).
ALLOWANCE = 0.002
#: The two arms: reservation rule of each.
ARMS = (("on", "kalena"), ("off", "none"))
CLONE_MARK = "~copy"


def peak_window_start_s(batch: BatchTasks, day_start_s: float, hours: float) -> float:
    """Start (s after ``day_start_s``, on a whole hour) of the ``hours``-long window within the
    day ``[day_start_s, day_start_s + 24 h)`` that receives the most batch cpu demand
    (Σ instances · duration · q_cpu of the tasks arriving in it) — the daily peak.

    Raises:
        ValueError: ``hours`` not in (0, 24].
    """
    if not 0 < hours <= 24:
        raise ValueError(f"a compaction window of {hours:g} h must lie within one day (0 < hours ≤ 24)")
    day = select_window(batch, day_start_s, day_start_s + 86_400.0)
    demand = day.request[:, CPU] * day.instances * day.duration_s
    hour = np.clip(((day.arrival_s - day_start_s) // 3600).astype(np.int64), 0, 23)
    per_hour = np.bincount(hour, weights=demand, minlength=24)
    width = max(1, int(math.ceil(hours)))
    starts = range(0, 24 - width + 1)
    best = max(starts, key=lambda h: (per_hour[h:h + width].sum(), -h))
    return float(best * 3600)


def first_fit_decreasing(infra: Infrastructure, workloads: Workloads, capacity: np.ndarray) -> np.ndarray:
    """Production placed by first-fit decreasing: pods by decreasing dominant share of the
    mean node capacity (ties: pod order), each onto the first node (in ``infra`` order) whose
    labels match its nodeSelector, whose NoSchedule/NoExecute taints it tolerates and whose
    remaining capacity (``capacity`` ``(n, 8)``, post-Phase-0) holds its request on every
    dimension. Affinity, anti-affinity and spread (soft in the IR) are not considered.

    Returns:
        ``(n_pods,)`` int node row per pod, −1 for a pod no node could take.
    """
    n = len(infra.nodes)
    requests = workloads.requests
    node_of_pod = np.full(len(workloads.pods), -1, dtype=np.int64)
    if n == 0 or not len(requests):
        return node_of_pod
    finite = np.isfinite(capacity)
    counted = finite.sum(axis=0)
    scale = np.where(finite, capacity, 0.0).sum(axis=0) / np.maximum(counted, 1)
    scale = np.where((counted > 0) & (scale > 0), scale, 1.0)
    share = (requests / scale).max(axis=1)
    order = np.lexsort((np.arange(len(requests)), -share))
    free = capacity.astype(np.float64).copy()
    eligible_of: dict[tuple, np.ndarray] = {}
    for i in order.tolist():
        pod = workloads.pods[i]
        key = (tuple(sorted(pod.node_selector.items())), pod.tolerations)
        eligible = eligible_of.get(key)
        if eligible is None:
            eligible = np.array([selector_matches(pod.node_selector, node.labels)
                                 and not untolerated_taints(node.taints, pod.tolerations) for node in infra.nodes])
            eligible_of[key] = eligible
        fits = eligible & np.all(free >= requests[i] - 1e-9, axis=1)
        rows = np.flatnonzero(fits)
        if len(rows):
            node_of_pod[i] = rows[0]
            free[rows[0]] -= requests[i]
    return node_of_pod


@dataclass(frozen=True, eq=False)
class NodeOrder:
    """One trial's node order (module doc): ``nodes`` — the blueprint's active nodes in a
    seeded permutation, then the empty ones, then copies; ``active`` of them are active."""

    nodes: tuple[NodeSpec, ...]
    active: int


def node_order(infra: Infrastructure, active_rows: np.ndarray, seed: int, *, copies: int) -> NodeOrder:
    """The node order of trial ``seed`` with ``copies`` copies of nodes drawn uniformly (with
    replacement) from the infrastructure at the end, named ``<name>~copy<k>``."""
    rng = np.random.default_rng((seed, 14))
    active_rows = np.asarray(active_rows, dtype=np.int64)
    empty = np.setdiff1d(np.arange(len(infra.nodes)), active_rows)
    order = [infra.nodes[i] for i in rng.permutation(active_rows).tolist()]
    order += [infra.nodes[i] for i in rng.permutation(empty).tolist()]
    for k, i in enumerate(rng.integers(0, len(infra.nodes), size=copies).tolist()):
        node = infra.nodes[i]
        order.append(NodeSpec(name=f"{node.name}{CLONE_MARK}{k}", zone=node.zone, rack=node.rack,
                              labels=node.labels, taints=node.taints, allocatable=node.allocatable))
    return NodeOrder(nodes=tuple(order), active=len(active_rows))


def cluster_inputs(inputs: ReplayInputs, order: NodeOrder, m: int) -> ReplayInputs | None:
    """The inputs of the ``m``-node candidate cluster (the first ``m`` of ``order``),
    production repacked (module doc); ``None`` when FFD leaves a production pod unplaced.

    Raises:
        ValueError: ``m`` < 1 or more than ``order`` holds.
    """
    if not 1 <= m <= len(order.nodes):
        raise ValueError(f"a cluster of {m} nodes is outside 1 … {len(order.nodes)}")
    infra = Infrastructure(source=inputs.infra.source, nodes=order.nodes[:m], daemonsets=inputs.infra.daemonsets,
                           api_version=inputs.infra.api_version)
    if m >= order.active:
        return replace(inputs, infra=infra)  # nothing removed: the blueprint itself
    blueprint = ffd_blueprint(infra, inputs.workloads)
    if len(blueprint.assignment) < len(inputs.workloads.pods):
        return None
    return replace(inputs, infra=infra, blueprint=blueprint)


def ffd_blueprint(infra: Infrastructure, workloads: Workloads, capacity: np.ndarray | None = None) -> Blueprint:
    """A blueprint by :func:`first_fit_decreasing` against ``capacity`` (default post-Phase-0);
    a pod no node takes is left out of the solution (the replay then reports it unassigned)."""
    rows = first_fit_decreasing(infra, workloads, phase0_capacity(infra) if capacity is None else capacity)
    assignment = {pod.id: infra.nodes[r].name for pod, r in zip(workloads.pods, rows.tolist(), strict=True) if r >= 0}
    return Blueprint(source=f"first-fit decreasing onto {len(infra.nodes)} nodes", assignment=assignment,
                     metadata={"solver": "first-fit decreasing"})


def production_fits(inputs: ReplayInputs, order: NodeOrder, m: int) -> bool:
    """True when production alone fits the ``m``-node cluster (FFD; the blueprint at ``m`` ≥ active)."""
    return cluster_inputs(inputs, order, m) is not None


@dataclass(frozen=True)
class Probe:
    """One candidate cluster tried: its size, arm, verdict and why."""

    arm: str
    nodes: int
    fits: bool
    production_fits: bool
    unserved_fraction: float | None
    batch_demand_core_hours: float | None
    reclaimed_fraction_cpu: float | None = None

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


def try_cluster(inputs: ReplayInputs, order: NodeOrder, m: int, config: ReplayConfig, *, arm: str,
                allowance: float = ALLOWANCE) -> Probe:
    """Repack the ``m``-node cluster and replay it under ``config`` (its rule decides the arm)."""
    candidate = cluster_inputs(inputs, order, m)
    if candidate is None:
        return Probe(arm, m, False, False, None, None)
    replay = build_replay(candidate, replace(config, node_set="all"))
    summary = replay.run()
    st = replay.simulator.state
    work = st.tasks.duration_s * st.tasks.request[:, CPU] / 1000.0 / 3600.0  # core-hours per instance
    demand = float((st.submitted * work).sum())
    unserved = float((st.pending * work).sum())
    fraction = unserved / demand if demand > 0 else 0.0
    return Probe(arm, m, fraction <= allowance, True, round(fraction, 6), round(demand, 3),
                 float(summary["reclaimed_fraction_cpu"]))


def _bisect(fits: Callable[[int], bool], lo: int, hi: int) -> int:
    """Smallest m in (lo, hi] with ``fits(m)``, given ``fits(hi)`` (plain bisection)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return hi


def smallest_fitting(unserved: Callable[[int], float], start: int, limit: int, floor: int,
                     allowance: float = ALLOWANCE) -> int | None:
    """Smallest cluster size ``m`` in ``[floor, limit]`` with ``unserved(m) ≤ allowance``
    (``unserved`` returns the unserved fraction, +inf when production does not fit), assuming
    it falls as ``m`` grows; ``None`` when ``limit`` does not fit.

    Bracketing from ``start``: a failing size ``m`` with unserved share ``f`` grows to
    ``m + max(⌈m/8⌉, ⌈2·f·m⌉)``; a fitting ``start`` shrinks by the same rule down to ``floor``.
    Inside the bracket, regula falsi on the unserved share (the chord's crossing of the
    allowance) while the fitting end still leaves some work unserved, alternating with a
    bisection step whenever the interval did not halve; bisection otherwise. Deterministic.
    """
    start = min(max(start, floor), limit)
    f = unserved(start)
    if f <= allowance:
        hi, f_hi = start, f
        lo, f_lo = hi, f
        while lo > floor and f_lo <= allowance:
            hi, f_hi = lo, f_lo
            lo = max(floor, lo - max(1, math.ceil(lo / 8)))
            f_lo = unserved(lo)
        if f_lo <= allowance:
            return lo  # the floor itself fits
    else:
        lo, f_lo = start, f
        while True:
            if lo >= limit:
                return None
            grow = max(math.ceil(lo / 8), math.ceil(2.0 * min(f_lo, 1.0) * lo)) if math.isfinite(f_lo) else math.ceil(lo / 8)
            hi = min(limit, lo + max(1, grow))
            f_hi = unserved(hi)
            if f_hi <= allowance:
                break
            lo, f_lo = hi, f_hi
    bisect_next = False
    while hi - lo > 1:
        width = hi - lo
        if bisect_next or not math.isfinite(f_lo) or f_lo <= f_hi or f_hi <= 0:
            mid = (lo + hi) // 2
        else:
            mid = lo + round((f_lo - allowance) / (f_lo - f_hi) * width)
            mid = min(hi - 1, max(lo + 1, mid))
        f = unserved(mid)
        if f <= allowance:
            hi, f_hi = mid, f
        else:
            lo, f_lo = mid, f
        bisect_next = (hi - lo) * 2 > width and not bisect_next
    return hi


def compaction_trial(inputs: ReplayInputs, config: ReplayConfig, seed: int, *, max_copies: int = 2_000,
                     allowance: float = ALLOWANCE, on_probe: Callable[[Probe], None] | None = None) -> dict[str, object]:
    """One seed's trial (module doc): ``{"seed", "nodes_needed_on", "nodes_needed_off",
    "production_floor", "active_nodes", "probes": [...]}``; a needed count is ``None`` when
    even ``max_copies`` added nodes do not fit. The on arm starts from the blueprint (the
    active nodes), the off arm from the on arm's answer (:func:`smallest_fitting`).

    ``config`` carries window, step, load and policy; its ``seed`` is replaced by ``seed``
    and its rule by each arm's.
    """
    base = replace(config, seed=seed)
    verification = verify_blueprint(inputs.infra, inputs.workloads, inputs.blueprint, phase0_capacity(inputs.infra))
    order = node_order(inputs.infra, verification.active_nodes, seed, copies=max_copies)
    probes: list[Probe] = []
    cache: dict[tuple[str, int], Probe] = {}

    def unserved(arm: str, rule: str, m: int) -> float:
        if (arm, m) not in cache:
            result = try_cluster(inputs, order, m, replace(base, reservation_rule=rule), arm=arm, allowance=allowance)
            cache[(arm, m)] = result
            probes.append(result)
            if on_probe is not None:
                on_probe(result)
        result = cache[(arm, m)]
        return math.inf if result.unserved_fraction is None else result.unserved_fraction

    floor = _bisect(lambda m: production_fits(inputs, order, m), 0, order.active)
    needed: dict[str, int | None] = {}
    start = order.active
    for arm, rule in ARMS:
        needed[arm] = smallest_fitting(lambda m, a=arm, r=rule: unserved(a, r, m), start, len(order.nodes),
                                       floor, allowance)
        start = needed[arm] or start
    return {"seed": seed, "nodes_needed_on": needed["on"], "nodes_needed_off": needed["off"],
            "production_floor": floor, "active_nodes": order.active, "probes": [p.to_dict() for p in probes]}


def _p90(values: list[int]) -> int:
    """Nearest-rank 90th percentile (the ⌈0.9·k⌉-th smallest of k trials: an integer node count)."""
    ranked = sorted(values)
    return ranked[max(0, math.ceil(0.9 * len(ranked)) - 1)]


def summarise_trials(trials: list[dict[str, object]]) -> dict[str, object]:
    """The figures over the trials: for ``on``, ``off`` and the paired difference
    ``extra_nodes_without_reclamation`` (off − on of the same seed) the nearest-rank p90 and
    the min–max; trials whose off arm never fitted are left out of ``off`` and ``extra`` and
    counted in ``trials_off_unfitted``.

    Raises:
        ValueError: no trial.
    """
    if not trials:
        raise ValueError("no compaction trial to summarise")
    on = [int(t["nodes_needed_on"]) for t in trials if t["nodes_needed_on"] is not None]
    off = [int(t["nodes_needed_off"]) for t in trials if t["nodes_needed_off"] is not None]
    extra = [int(t["nodes_needed_off"]) - int(t["nodes_needed_on"]) for t in trials
             if t["nodes_needed_off"] is not None and t["nodes_needed_on"] is not None]
    out: dict[str, object] = {"seeds": [int(t["seed"]) for t in trials],
                              "trials_on_unfitted": len(trials) - len(on), "trials_off_unfitted": len(trials) - len(off)}
    for key, values in (("nodes_needed_p90_on", on), ("nodes_needed_p90_off", off),
                        ("extra_nodes_without_reclamation_p90", extra)):
        stem = key.replace("_p90", "")
        out[key] = _p90(values) if values else None
        out[f"{stem}_min"] = min(values) if values else None
        out[f"{stem}_max"] = max(values) if values else None
    return out
