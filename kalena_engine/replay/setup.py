"""Assemble a replay from loaded inputs: blueprint → production set, Bitbrains → usage,
batch trace → task table, then run it and summarise (docs/design.md §11)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.errors import BlueprintRefused, InputError, TraceError
from kalena_engine.estimator import estimator_limit, initial_reservations
from kalena_engine.kuberina import Blueprint, Infrastructure, Workloads, phase0_capacity, verify_blueprint
from kalena_engine.kuberina.verify import Verification
from kalena_engine.placement import NodeTable, ProductionPods, WhyPending
from kalena_engine.policy import Policy
from kalena_engine.replay.rules import RULES, RuleContext, make_rule
from kalena_engine.replay.scheduling import ReplayScheduler
from kalena_engine.replay.simulator import SimClock, Simulator, StepRecord
from kalena_engine.replay.state import BatchGroups, ClusterState, Production, TaskTable
from kalena_engine.replay.summary import SummaryAccumulator
from kalena_engine.replay.usage import ProductionUsage, build_production_usage, held_shapes, with_memory_series
from kalena_engine.traces.batch import BatchTasks, scale_load, select_window
from kalena_engine.traces.bitbrains import BitbrainsSet
from kalena_engine.traces.genai import MemoryUtil

NODE_SETS = ("active", "all")


@dataclass(frozen=True)
class ReplayConfig:
    """How to replay. Times in seconds; ``hours`` of simulated time in ``step_s`` steps.

    Attributes:
        usage_mapping: ``peak`` (default) or ``raw`` (docs/design.md §11).
        batch_offset_s: trace time that replay time 0 maps to for batch arrivals (86,400 s).
        usage_offset_s: time after the usage source's earliest start that replay time 0 maps
            to (0 s; ``kalena evaluate compaction`` moves both offsets to its window).
        load_factor: multiplies batch instance counts (stochastic rounding; 1.0).
        node_set: ``active`` — the blueprint's active nodes take batch — or ``all``.
        batch_usage_ratio: batch usage as a fraction of request (the trace has no usage; 1.0).
        usage_interval_s: the usage source's sampling interval, for T_stale (Bitbrains: 300 s).
        coverage_tolerance_s: a VM covers the window if its samples start/end within this.
        reservation_rule: what production reservations the ledgers read — one of
            :data:`~kalena_engine.replay.rules.RULES` (``kalena``: the estimator).
        warm_s: usage history before the window fed to production's estimator (0 s: none, the
            replay starts from nothing). The usage series' own samples of the ``warm_s`` before
            time 0, one per ``usage_interval_s``, as a live cluster's estimator holds the days
            before any window; needs ``usage_offset_s ≥ warm_s``. Only the estimator is warmed
            (the baselines' rules start as they do cold).
    """

    hours: float = 24.0
    step_s: float = 60.0
    seed: int = 0
    usage_mapping: str = "peak"
    batch_offset_s: float = 86_400.0
    usage_offset_s: float = 0.0
    load_factor: float = 1.0
    node_set: str = "active"
    batch_usage_ratio: float = 1.0
    usage_interval_s: float = 300.0
    coverage_tolerance_s: float = 300.0
    policy: Policy = field(default_factory=Policy)
    reservation_rule: str = "kalena"
    warm_s: float = 0.0

    def __post_init__(self) -> None:
        if not (0 < self.hours < math.inf and 0 < self.step_s < math.inf):
            raise ValueError(f"hours ({self.hours}) and step ({self.step_s} s) must be positive and finite")
        if self.hours * 3600.0 < self.step_s:
            raise ValueError(f"{self.hours} h is shorter than one step of {self.step_s:g} s")
        if self.node_set not in NODE_SETS:
            raise ValueError(f"node set {self.node_set!r} is not one of {', '.join(NODE_SETS)}")
        if not 0 <= self.usage_offset_s < math.inf:
            raise ValueError(f"usage offset {self.usage_offset_s} s must be ≥ 0 and finite")
        if not 0 <= self.warm_s <= self.usage_offset_s:
            raise ValueError(f"warm-up {self.warm_s:g} s must be ≥ 0 and at most the usage offset "
                             f"({self.usage_offset_s:g} s): the history fed lies before the window, inside the series")
        if self.load_factor <= 0:
            raise ValueError(f"load factor {self.load_factor} must be positive")
        if self.batch_usage_ratio < 0:
            raise ValueError(f"batch usage ratio {self.batch_usage_ratio} must be ≥ 0")
        if self.reservation_rule not in RULES:
            raise ValueError(f"reservation rule {self.reservation_rule!r} is not one of {', '.join(RULES)}")

    @property
    def steps(self) -> int:
        return int(round(self.hours * 3600.0 / self.step_s))


@dataclass(frozen=True, eq=False)
class ReplayInputs:
    """Everything a replay reads, already loaded (the CLI does the file I/O)."""

    infra: Infrastructure
    workloads: Workloads
    blueprint: Blueprint
    bitbrains: BitbrainsSet
    batch: BatchTasks
    peak_ratios: np.ndarray | None = None
    anomalies: dict[str, int] = field(default_factory=dict)
    memory_util: MemoryUtil | None = None  # production memory from real series where they cover the window


@dataclass(eq=False)
class Replay:
    """A ready-to-run replay: the simulator, its accumulator and the static facts."""

    simulator: Simulator
    accumulator: SummaryAccumulator
    verification: Verification
    facts: dict[str, object]

    def run(self, on_step: Callable[[StepRecord], None] | None = None) -> dict[str, object]:
        """Run to the end; ``on_step`` sees every step after the accumulator. Returns the summary."""
        def observe(record: StepRecord) -> None:
            self.accumulator.add(record)
            if on_step is not None:
                on_step(record)
        self.simulator.run(observe)
        return self.summary()

    def summary(self) -> dict[str, object]:
        """Static facts plus the time-averaged figures so far."""
        return {**self.facts, **self.accumulator.summary()}

    def why_pending(self) -> tuple[WhyPending, ...]:
        """Why-pending records of the latest scheduling pass (``workload`` is the batch task
        id); empty when nothing was pending. ``to_dict()`` gives the JSON form to store."""
        last = self.simulator.scheduler.last_pass
        return () if last is None else last.why_pending()


def build_replay(inputs: ReplayInputs, config: ReplayConfig) -> Replay:
    """Build the production set, usage model, task table and simulator.

    Raises:
        BlueprintRefused: the blueprint overloads a node's request ledger (the blueprint state
            itself would be broken) — nothing is simulated.
        InputError: no Bitbrains VM covers the window.
        TraceError: the batch trace has arrivals but none inside the window (every one precedes
            ``batch_offset_s`` or follows the window's end) — names the trace's time range.
        ValueError: bad config.
    """
    rng = np.random.default_rng(config.seed)
    capacity = phase0_capacity(inputs.infra)
    verification = verify_blueprint(inputs.infra, inputs.workloads, inputs.blueprint, capacity)
    hard = verification.hard_counts
    if hard.get("over_capacity"):
        raise BlueprintRefused(
            f"{hard['over_capacity']} node/dimension pairs over capacity in the request ledger",
            source=inputs.blueprint.source, field="solution",
            accepted="a blueprint whose request ledger fits post-Phase-0 capacity",
        )
    placed = np.flatnonzero(verification.node_of_pod >= 0)
    pods = [inputs.workloads.pods[i] for i in placed]
    request = inputs.workloads.requests[placed]
    limit = estimator_limit(np.full_like(request, np.inf), request, config.policy.estimator.limit_ratio)  # IR: no limits
    production = Production(ids=tuple(p.id for p in pods), node=verification.node_of_pod[placed],
                            request=request, limit=limit)
    clock = SimClock(0.0, config.step_s, config.steps)
    window_end_s = config.hours * 3600.0
    start = inputs.bitbrains.earliest_start_s() + config.usage_offset_s
    vms = inputs.bitbrains.covering(start, start + window_end_s, tolerance_s=config.coverage_tolerance_s)
    if not vms:
        ends = [float(vm.timestamp_s[-1]) for vm in inputs.bitbrains.series
                if len(vm) and vm.timestamp_s[0] <= start + config.coverage_tolerance_s]
        longest_h = (max(ends) - start) / 3600.0 if ends else 0.0
        raise InputError(f"no Bitbrains VM covers {config.hours:g} hours"
                         + (f" from {config.usage_offset_s / 3600:g} h" if config.usage_offset_s else ""),
                         source=inputs.bitbrains.directory,
                         field="hours", accepted=f"at most {longest_h:.1f} hours (the longest VM series from the "
                                                 "trace's start)")
    usage = build_production_usage(
        vms, trace_start_s=start, step_times_s=clock.times(), request=request, limit=limit,
        peak_ratios=inputs.peak_ratios, mapping=config.usage_mapping, rng=rng,
    )
    memory_source = "bitbrains"
    if inputs.memory_util is not None and config.warm_s:
        memory_source = "bitbrains (the memory-utilisation series cannot hold a warm-up and the window)"
    elif inputs.memory_util is not None:
        m_start = inputs.memory_util.earliest_s() + config.usage_offset_s
        fitting = inputs.memory_util.covering(m_start, m_start + window_end_s, config.coverage_tolerance_s)
        if fitting:  # "where it fits": the series span ≈ 22.8 h; longer windows keep Bitbrains memory
            usage = with_memory_series(usage, fitting, series_start_s=m_start, rng=np.random.default_rng((config.seed, 26)))
            memory_source = f"alibaba-genai-2026 ({len(fitting)} series)"
    tasks = _task_table(inputs.batch, config, rng)
    n_nodes = len(inputs.infra.nodes)
    active = np.zeros(n_nodes, dtype=bool)
    active[verification.active_nodes] = True
    eligible = active if config.node_set == "active" else np.ones(n_nodes, dtype=bool)
    state = ClusterState(
        capacity=capacity, node_names=tuple(n.name for n in inputs.infra.nodes),
        production=production,
        prod_reservations=initial_reservations(request, np.zeros(len(pods))),
        tasks=tasks, pending=np.zeros(len(tasks), dtype=np.int64), groups=BatchGroups(),
        submitted=np.zeros(len(tasks), dtype=np.int64), completed=np.zeros(len(tasks), dtype=np.int64),
    )
    stale_ttl_s = config.policy.estimator.stale_ttl_s(config.usage_interval_s)
    scheduler = ReplayScheduler(
        nodes=NodeTable.from_infrastructure(inputs.infra, capacity),
        production=ProductionPods(ids=production.ids, node=production.node,
                                  namespaces=tuple(p.namespace for p in pods), labels=tuple(p.labels for p in pods),
                                  terms=((),) * len(pods), names=tuple(p.anti_affinity for p in pods)),
        tasks=tasks, policy=config.policy, rng=np.random.default_rng((config.seed, 4)),
    )
    rule = make_rule(config.reservation_rule, RuleContext(
        production=production, usage=usage, allocatable=inputs.infra.allocatable, capacity=capacity,
        step_s=config.step_s))
    simulator = Simulator(state=state, usage=usage, clock=clock, policy=config.policy,
                          eligible=eligible, stale_ttl_s=stale_ttl_s, scheduler=scheduler, rule=rule)
    warm_samples = _warm_start(simulator, vms, usage, trace_start_s=start, config=config, stale_ttl_s=stale_ttl_s)
    facts: dict[str, object] = {
        "nodes": n_nodes,
        "active_nodes": int(active.sum()),
        "batch_nodes": int(eligible.sum()),
        "node_set": config.node_set,
        "production_pods": len(pods),
        "blueprint_violations": len(verification.hard),
        "blueprint_violations_by_kind": hard,
        "blueprint_soft_violations": len(verification.soft),
        "blueprint_soft_violations_by_kind": verification.soft_counts,
        "reservation_rule": config.reservation_rule,
        "usage_mapping": config.usage_mapping,
        "usage_vms": len(vms),
        "production_memory_source": memory_source,
        "batch_tasks": len(tasks),
        "load_factor": config.load_factor,
        "seed": config.seed,
        "step_s": config.step_s,
        "steps": config.steps,
        "sim_seconds": config.steps * config.step_s,
        "stale_ttl_s": stale_ttl_s,
        "warm_s": config.warm_s,
        "warm_samples": warm_samples,
        "data_anomalies": dict(sorted(inputs.anomalies.items())),
    }
    return Replay(simulator=simulator, accumulator=SummaryAccumulator(target=eligible, production_pods=len(pods),
                                                                      step_s=config.step_s,
                                                                      pod_request=state.production.request),
                  verification=verification, facts=facts)


def _warm_start(simulator: Simulator, vms: tuple, usage: ProductionUsage, *, trace_start_s: float,
                config: ReplayConfig, stale_ttl_s: float) -> int:
    """Feed production's estimator the ``config.warm_s`` of usage before the window, one sample
    per ``usage_interval_s`` (``Simulator.warm``), through the same mapping as the window (each pod's
    VM, scale and limit). Returns the pod-samples fed (0 without a warm-up)."""
    if not config.warm_s:
        return 0
    count = int(config.warm_s // config.usage_interval_s)
    times = -config.usage_interval_s * np.arange(count, 0, -1, dtype=np.float64)
    shapes, ages = held_shapes(vms, trace_start_s + times)
    limit = simulator.state.production.limit
    fed = np.stack([np.minimum(usage.usage_of_shape(shape), limit) for shape in shapes])
    fresh = ages[:, usage.vm_of_pod] <= stale_ttl_s
    simulator.warm(times, fed, fresh)
    return int(fresh.sum())


def _task_table(batch: BatchTasks, config: ReplayConfig, rng: np.random.Generator) -> TaskTable:
    end_s = config.batch_offset_s + config.hours * 3600.0
    window = select_window(batch, config.batch_offset_s, end_s)
    if len(batch) and not len(window):
        first, last = float(batch.arrival_s.min()), float(batch.arrival_s.max())
        side = "precedes" if last < config.batch_offset_s else "falls after"
        raise TraceError(
            f"every batch arrival of the trace ({len(batch):,} tasks, arriving {first:,.0f}–{last:,.0f} s) {side} "
            f"the replay window {config.batch_offset_s:,.0f}–{end_s:,.0f} s, so the replay would have no batch",
            source=batch.source, field="offset",
            accepted=f"an --offset within the trace's arrivals, {first:,.0f}–{last:,.0f} s "
                     f"(window length {config.hours * 3600.0:,.0f} s)")
    if config.load_factor != 1.0:
        window = scale_load(window, config.load_factor, rng)
    order = np.argsort(window.arrival_s, kind="stable")
    request = window.request[order]
    return TaskTable(
        task_id=window.task_id[order], job_id=window.job_id[order],
        instances=window.instances[order].astype(np.int64),
        arrival_s=window.arrival_s[order] - config.batch_offset_s,
        duration_s=window.duration_s[order].astype(np.float64),
        request=request, limit=estimator_limit(np.full_like(request, np.inf), request,
                                               config.policy.estimator.limit_ratio),
        usage=request * config.batch_usage_ratio, priority=window.priority[order].astype(np.int64),
    )
