"""Eviction planning for non-compressible pressure (ram, storage) — docs/design.md §7.

One quantity decides both start and stop: the node's reservation ledger on the pressured
dimension, recomputed from the freshest samples, ``Σ r``.

* Start: a pressure signal fires (working set ≥ ``evict_threshold_ratio · C`` or PSI memory
  ``some`` avg10 ≥ its threshold) **and** ``Σ r > C``. A sample older than ``T_stale`` never
  starts an eviction: a workload whose samples stopped is *held* — it counts at ``max(r, q)``
  (the caller passes the effective reservation) and is never chosen — and the decision rests on
  the fresh workloads; when every sampled workload (or the node reading) is stale, nothing is
  evicted (case C1). See :func:`ledger_freshness`.
* Order: (1) limit-breach override — any non-DaemonSet workload using more than its own limit,
  largest excess first, regardless of tier, priority or age; (2) batch in ascending priority,
  ties youngest first, then largest usage on the pressured dimension; batch younger than
  ``T_min`` is skipped unless the pressure is acute (working set ≥ ``acute_ratio · C`` or PSI
  ``full`` avg10 above its threshold). Service workloads are never chosen in (2).
* Stop: as soon as ``Σ_{remaining} r ≤ C``. A victim is credited from the moment it starts
  terminating, so rows already ``terminating`` do not count and are never chosen again.
* Usage the rows do not count: the node reading (its working set) may hold memory no row's
  reservation covers — the node group's own processes, containers the orchestrator does not
  manage, a DaemonSet reserving less than it uses, a workload not yet discovered.
  That ``unaccounted`` amount (see :func:`unaccounted_usage`) is part of the ledger (never a
  victim), so the ledger and the pressure signal measure the same memory: pressure from it is
  answered by evicting batch, not by ``ledger_holds``.
* Termination: the candidates are finite; the worst case is every batch workload gone, which
  is the blueprint state (``unresolved`` is then set if production alone still exceeds C).

Rows may group ``count`` identical instances (the simulator's grouped batch pods); the planner
takes only as many instances of a row as the stop rule needs.

Worked example (case C4): C = 64 GiB, Σ r = 68 GiB, V (priority 0, r = 5.75) and W
(priority 1, r = 3): V is chosen, 68 − 5.75 = 62.25 ≤ 64, stop — W is never chosen. On the next
loop V is ``terminating`` and credited, so Σ r = 62.25 ≤ 64 and nothing more is planned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kalena_engine.policy import EvictionPolicy
from kalena_engine.resources import DIMS

TIER_SERVICE = "service"
TIER_BATCH = "batch"
TIER_DAEMONSET = "daemonset"


@dataclass(frozen=True, eq=False)
class NodeWorkloads:
    """The workloads on one node, ``k`` rows; vectors are per instance, ``(k, 8)``.

    Attributes:
        reservation: current r (from the freshest samples).
        usage: measured usage (ram: working set).
        limit: L per instance.
        tier: ``(k,)`` str, ``service`` | ``batch`` | ``daemonset``.
        priority: ``(k,)`` int (batch eviction order; ignored for service).
        start_s: ``(k,)`` start time (s).
        terminating: ``(k,)`` bool — already evicted and in its grace period (credited).
        count: ``(k,)`` int instances per row (1 unless grouped).
        held: ``(k,)`` bool or None — rows whose samples are stale: counted, never chosen.
    """

    reservation: np.ndarray
    usage: np.ndarray
    limit: np.ndarray
    tier: np.ndarray
    priority: np.ndarray
    start_s: np.ndarray
    terminating: np.ndarray
    count: np.ndarray
    held: np.ndarray | None = None


@dataclass(frozen=True)
class PressureSignal:
    """What the node's sensors say about one non-compressible dimension.

    Attributes:
        dimension: index into :data:`~kalena_engine.resources.DIMS` (ram or storage).
        working_set: node working set on that dimension (internal units).
        sample_age_s: age of the freshest sample the ledger was computed from.
        psi_some_avg10_pct, psi_full_avg10_pct: PSI memory averages, or None if unavailable.
        unaccounted: usage in ``working_set`` no workload row accounts for (internal units, ≥ 0;
            :func:`unaccounted_usage`): counted in the ledger, never chosen.
    """

    dimension: int
    working_set: float
    sample_age_s: float = 0.0
    psi_some_avg10_pct: float | None = None
    psi_full_avg10_pct: float | None = None
    unaccounted: float = 0.0


def unaccounted_usage(working_set: float, usage: np.ndarray, reservation: np.ndarray, sampled: np.ndarray,
                      terminating: np.ndarray, never_chosen: np.ndarray, reserved: float = 0.0) -> float:
    """Usage in the node reading that the ledger's rows do not already count, on one dimension.

    ``max(0, W − Σ accounted − R)``, a row's accounted memory being:

    * a row never chosen (a DaemonSet, the node's own software): ``min(u, r)`` — what it uses
      above its reservation (one reserving nothing: all of it) is left here, so it still counts;
    * a row that can be chosen: ``u`` — its usage above ``r`` is a limit breach, which the
      override answers by taking that row (and crediting the whole of it), so it is not counted
      a second time here;
    * a row never sampled (in flight, or its sample did not measure this dimension): ``r`` — it
      counts at its request, so its first memory is not counted twice;
    * a terminating row: ``u`` — credited, about to free it; counting it would choose a second
      victim it already covers;

    and ``R`` the memory set aside for the system (``--reserved``: the node's own processes are
    expected up to it).

    Args:
        working_set: ``W``, the node reading (internal units).
        usage: ``(k,)`` measured usage per row (``0`` where not sampled).
        reservation: ``(k,)`` r per row as the ledger reads it.
        sampled: ``(k,)`` bool, the row's sample measured this dimension.
        terminating: ``(k,)`` bool, the row is in its grace period.
        never_chosen: ``(k,)`` bool, the row is never a victim (DaemonSets).
        reserved: ``R`` (internal units, ≥ 0).

    Returns:
        The unaccounted amount (≥ 0).

    Example: W = 2,125 MiB; production u 1,700 r 1,955, batch u 20 r 32, the stack's database
    (a DaemonSet row) u 300 r 0; R = 0 → 2,125 − 1,700 − 20 − 0 = 405 MiB, of which 300 are the
    database's and 105 belong to nothing tracked; with R = 512 MiB → 0.
    """
    u = np.asarray(usage, dtype=np.float64)
    r = np.asarray(reservation, dtype=np.float64)
    s = np.asarray(sampled, dtype=bool)
    t = np.asarray(terminating, dtype=bool)
    never = np.asarray(never_chosen, dtype=bool)
    measured = np.where(never, np.minimum(u, r), u)
    accounted = float(np.sum(np.where(t, u, np.where(s, measured, r))))
    return max(0.0, float(working_set) - accounted - max(0.0, float(reserved)))


@dataclass(frozen=True)
class Victim:
    """One eviction decision, with the numbers that justify it.

    ``reason`` is ``limit_breach`` or ``priority``; ``ledger_before``/``ledger_after`` are
    ``Σ r`` (plus the signal's unaccounted usage) on the pressured dimension around this victim
    (internal units).
    """

    row: int
    count: int
    reason: str
    tier: str
    priority: int
    usage: float
    limit: float
    reservation: float
    ledger_before: float
    ledger_after: float


@dataclass(frozen=True)
class EvictionPlan:
    """Result of :func:`plan_evictions`.

    ``decision`` is one of ``evict`` (victims chosen), ``no_pressure``, ``ledger_holds``
    (pressure but Σ r ≤ C: nothing to evict), ``stale_sample`` (never act on stale data),
    ``no_candidate`` (Σ r > C but nothing evictable).
    """

    dimension: str
    decision: str
    capacity: float
    ledger_before: float
    ledger_after: float
    acute: bool
    victims: tuple[Victim, ...] = ()
    skipped_young: int = 0

    @property
    def unresolved(self) -> bool:
        """True when the ledger still exceeds capacity after the plan."""
        return self.ledger_after > self.capacity


def pressure_fires(signal: PressureSignal, capacity: float, policy: EvictionPolicy) -> tuple[bool, bool]:
    """``(pressure, acute)`` for a signal against capacity ``C`` on its dimension."""
    ratio = signal.working_set / capacity if capacity > 0 else math.inf
    psi_some = signal.psi_some_avg10_pct is not None and signal.psi_some_avg10_pct >= policy.psi_some_avg10_pct
    psi_full = signal.psi_full_avg10_pct is not None and signal.psi_full_avg10_pct > policy.psi_full_avg10_pct
    pressure = ratio >= policy.evict_threshold_ratio or psi_some
    acute = ratio >= policy.acute_ratio or psi_full
    return pressure, acute


@dataclass(frozen=True)
class LedgerFreshness:
    """Result of :func:`ledger_freshness`: ``sample_age_s`` for :class:`PressureSignal` and the
    ``held`` rows (``(k,)`` bool) for :class:`NodeWorkloads`."""

    sample_age_s: float
    held: np.ndarray


def ledger_freshness(node_age_s: float, sample_age_s: np.ndarray, live: np.ndarray,
                     stale_ttl_s: float) -> LedgerFreshness:
    """Which inputs an eviction decision may rest on (docs/design.md §5, §7; case C1).

    A live workload whose last sample is older than ``T_stale`` is held: it counts in the
    ledger at ``max(r, q)`` and is never a victim. The decision's sample age is the oldest of
    the node reading and the *fresh* workloads' samples — so one stale workload does not disarm
    the node — unless every sampled live workload is stale, when it is the oldest of all (the
    node's telemetry is wholly stale and nothing is evicted). A workload never sampled (in
    flight, ``inf``) counts at its request and ages nothing.

    Args:
        node_age_s: age of the node reading (s).
        sample_age_s: ``(k,)`` age of each row's last sample (s; ``inf`` = never sampled).
        live: ``(k,)`` bool, rows not terminating.
        stale_ttl_s: T_stale.

    Example: T_stale = 60 s, node reading 1 s old, ages (2, 3, 90) → held (F, F, T), age 3 s;
    ages (90, 95) → held (T, T), age 95 s (> T_stale: no eviction).
    """
    ages = np.asarray(sample_age_s, dtype=np.float64)
    sampled = np.asarray(live, dtype=bool) & np.isfinite(ages)
    held = sampled & (ages > stale_ttl_s)
    fresh = sampled & ~held
    basis = ages[fresh] if fresh.any() else ages[sampled]
    age = max([float(node_age_s), *basis.tolist()])
    return LedgerFreshness(age, held)


def plan_evictions(workloads: NodeWorkloads, capacity: np.ndarray, signal: PressureSignal, *,
                   now_s: float, stale_ttl_s: float, policy: EvictionPolicy) -> EvictionPlan:
    """Choose victims on one node (see the module doc for the rules and a worked example).

    Args:
        workloads: the node's workloads.
        capacity: ``(8,)`` post-Phase-0 capacity of the node.
        signal: the pressure reading on one non-compressible dimension.
        now_s: current time (s), for the minimum run time.
        stale_ttl_s: T_stale; an older sample never starts an eviction.
        policy: thresholds and T_min.
    """
    d = signal.dimension
    cap = float(capacity[d])
    live = ~workloads.terminating
    r = workloads.reservation[:, d]
    ledger = float(np.sum(r[live] * workloads.count[live])) + max(0.0, float(signal.unaccounted))

    def plan(decision: str, acute: bool = False) -> EvictionPlan:
        return EvictionPlan(DIMS[d], decision, cap, ledger, ledger, acute)

    if signal.sample_age_s > stale_ttl_s:
        return plan("stale_sample")
    pressure, acute = pressure_fires(signal, cap, policy)
    if not pressure:
        return plan("no_pressure", acute)
    if ledger <= cap:
        return plan("ledger_holds", acute)

    victims: list[Victim] = []
    remaining = workloads.count.astype(np.int64).copy()
    running = ledger
    usage = workloads.usage[:, d]
    limit = workloads.limit[:, d]
    tier = workloads.tier

    def take(row: int, reason: str, units: int) -> None:
        nonlocal running
        before = running
        running -= units * float(r[row])
        remaining[row] -= units
        victims.append(Victim(
            row=row, count=units, reason=reason, tier=str(tier[row]),
            priority=int(workloads.priority[row]), usage=float(usage[row]),
            limit=float(limit[row]), reservation=float(r[row]),
            ledger_before=before, ledger_after=running,
        ))

    def units_needed(row: int) -> int:
        per_unit = float(r[row])
        if per_unit <= 0:
            return int(remaining[row])
        return min(int(remaining[row]), max(1, math.ceil((running - cap) / per_unit - 1e-12)))

    held = np.zeros(len(r), dtype=bool) if workloads.held is None else np.asarray(workloads.held, dtype=bool)
    candidate = live & ~held
    breach = candidate & (tier != TIER_DAEMONSET) & (usage > limit)
    for row in np.flatnonzero(breach)[np.argsort(-(usage - limit)[breach], kind="stable")]:
        if running <= cap:
            break
        take(int(row), "limit_breach", units_needed(int(row)))

    skipped_young = 0
    batch = candidate & (tier == TIER_BATCH) & (remaining > 0)
    rows = np.flatnonzero(batch)
    order = np.lexsort((-usage[rows], -workloads.start_s[rows], workloads.priority[rows]))
    for row in rows[order]:
        if running <= cap:
            break
        if not acute and now_s - workloads.start_s[row] < policy.min_run_time_s:
            skipped_young += 1
            continue
        take(int(row), "priority", units_needed(int(row)))

    decision = "evict" if victims else "no_candidate"
    return EvictionPlan(DIMS[d], decision, cap, ledger, running, acute, tuple(victims), skipped_young)
