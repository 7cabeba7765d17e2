"""Batch of the lab's slice: tasks of a real batch trace sampled to a stated load factor over the
lab's slack, time compressed by ``k`` (docs/design.md §11 demand, §15).

1. **Window.** The trace's tasks arriving in ``[offset, offset + hours · 3600)`` (trace s).
2. **Scale.** An instance keeps its share of a node: cpu × ``s_cpu`` (m), memory × ``s_ram``
   (MiB) — the factors that map the blueprint node onto the lab node, so batch and production
   stand in the lab as they stand in the replay of the full cluster. Its wall duration is
   ``max(min_wall_s, duration / k)``; its arrival ``(arrival − offset) / k``.
3. **Bundle.** The lab starts real containers, so instances of one task travel ``g`` to a pod
   (cpu and memory ``g`` times an instance's, rounded to whole m and MiB, at most
   ``max_pod_cpu_m`` / ``max_pod_memory_mib``); ``g`` is the smallest bundle that keeps the
   expected number of pods within ``max_pods``. A task's ``n`` instances are ``round(n / g)``
   identical pods (at least one).
4. **Sample.** The demand target is ``T = f · S`` (``f`` the load factor, ``S`` the lab's cpu
   slack in m·s of wall time, :func:`kalena_engine.labslice.usage.lab_slack`). When the window's
   demand is below ``T`` its tasks are repeated ``⌈T / D⌉`` times. Candidate pods are taken in an
   order drawn from the seed, each kept when it still fits under ``T``, until the demand reaches
   ``T`` (within 0.5 %) or the candidates are spent; demand of a pod = cpu_m × wall duration.
5. **Shape.** A task with two or more pods is a gang (all-or-nothing, ``min-member`` = its pods)
   with probability ``gang_share``, else a Job of that parallelism; a task with one pod is a bare
   pod with probability ``bare_share``, else a Job.

Measured load factor = Σ pods · cpu_m · duration_s / S. Worked example: one task of 371
instances of 1 core for 28 s, s_cpu = 1/256, k = 10, ``min_wall_s`` 5 → an instance is
3.906 m for 5 s (28 / 10 = 2.8 s, floored). S = 10,000 m·s and f = 0.5 → T = 5,000 m·s; with
``max_pods`` 33 the bundle is g = 8 (g = 6 would give 62 pods × 5,000 / 7,130 ≈ 43.5 expected,
g = 8 46 × 5,000 / 7,130 ≈ 32.3): 46 candidate pods of round(8 × 3.906) = 31 m, 155 m·s each;
32 of them fit under T (4,960 m·s) → measured load factor 0.496.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.errors import InputError, TraceError
from kalena_engine.resources import CPU, RAM
from kalena_engine.traces.batch import BatchTasks, select_window

MIB = 2**20
JOB, GANG, BARE_POD = "Job", "Gang", "Pod"
_BUNDLES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096)


@dataclass(frozen=True)
class BatchGroup:
    """One arrival: ``pods`` identical batch pods of one task, rendered as ``kind`` (:data:`JOB`,
    :data:`GANG` or :data:`BARE_POD`). ``cpu_m`` / ``memory_mib`` / ``duration_s`` per pod (wall
    s); ``arrival_s`` wall seconds after the lab's start; ``instances`` trace instances per pod."""

    name: str
    kind: str
    task_id: str
    job_id: str
    arrival_s: float
    pods: int
    cpu_m: int
    memory_mib: int
    duration_s: float
    instances: int
    trace_duration_s: float
    trace_arrival_s: float


@dataclass(frozen=True, eq=False)
class BatchSample:
    """The sampled batch (module doc) and what it measured."""

    groups: tuple[BatchGroup, ...]
    load_factor: float
    slack_m_s: float
    target_m_s: float
    demand_m_s: float
    bundle: int
    copies: int
    window_tasks: int
    window_instances: int
    floored_tasks: int
    anomalies: dict[str, int] = field(default_factory=dict)

    @property
    def measured_load_factor(self) -> float:
        """Σ pods · cpu_m · duration_s / S."""
        return self.demand_m_s / self.slack_m_s if self.slack_m_s > 0 else 0.0

    @property
    def pods(self) -> int:
        return sum(g.pods for g in self.groups)


def sample_batch(tasks: BatchTasks, *, slack_m_s: float, load_factor: float, speed: float, hours: float,
                 offset_s: float, cpu_scale: float, memory_scale: float, min_wall_s: float, max_pod_cpu_m: int,
                 max_pod_memory_mib: int, max_pods: int, seed: int, gang_share: float = 0.25,
                 bare_share: float = 0.25) -> BatchSample:
    """Sample batch for the slice (module doc). Internal units in ``tasks`` (mcpu, bytes).

    Raises:
        InputError: a load factor, share, minimum or maximum out of range, or no slack.
        TraceError: no task of the trace arrives in the window (names the trace's range).
    """
    for name, value, ok in (("--load-factor", load_factor, load_factor > 0 and math.isfinite(load_factor)),
                            ("--min-wall-s", min_wall_s, min_wall_s > 0), ("--max-batch-pods", max_pods, max_pods >= 1),
                            ("gang share", gang_share, 0 <= gang_share <= 1), ("bare share", bare_share, 0 <= bare_share <= 1)):
        if not ok:
            raise InputError(f"{value!r}", source="lab slice", field=name, accepted="a positive number (shares: 0…1)")
    if slack_m_s <= 0:
        raise InputError("production leaves the lab no slack to load", source="lab slice", field="--load-factor")
    end = offset_s + hours * 3600.0
    window = select_window(tasks, offset_s, end)
    if not len(window):
        first, last = (float(tasks.arrival_s.min()), float(tasks.arrival_s.max())) if len(tasks) else (0.0, 0.0)
        raise TraceError(f"no batch task arrives in {offset_s:,.0f}–{end:,.0f} s (the trace's tasks arrive "
                         f"{first:,.0f}–{last:,.0f} s)", source=tasks.source, field="--batch-offset-s",
                         accepted="an offset inside the trace's arrivals")
    inst_cpu = window.request[:, CPU] * cpu_scale
    inst_mem = window.request[:, RAM] * memory_scale / MIB
    dur = np.maximum(min_wall_s, window.duration_s / speed)
    demand_window = float((window.instances * inst_cpu * dur).sum())
    target = load_factor * slack_m_s
    copies = max(1, math.ceil(target / demand_window)) if demand_window > 0 else 1
    counts = window.instances * copies

    def shape(g: int):
        cap_cpu = np.floor(max_pod_cpu_m / np.maximum(inst_cpu, 1e-9))
        cap_mem = np.floor(max_pod_memory_mib / np.maximum(inst_mem, 1e-9))
        gi = np.maximum(1, np.minimum(np.minimum(g, cap_cpu), cap_mem)).astype(np.int64)
        pods = np.maximum(1, np.rint(counts / gi)).astype(np.int64)
        cpu = np.maximum(1, np.rint(gi * inst_cpu)).astype(np.int64)
        mem = np.maximum(1, np.rint(gi * inst_mem)).astype(np.int64)
        return gi, pods, cpu, mem

    bundle = _BUNDLES[-1]
    for g in _BUNDLES:
        gi, pods, cpu, mem = shape(g)
        total = float((pods * cpu * dur).sum())
        if pods.sum() * min(1.0, target / total) <= max_pods:
            bundle = g
            break
    gi, pods, cpu, mem = shape(bundle)
    rng = np.random.default_rng([seed, 202])
    candidate_task = np.repeat(np.arange(len(window)), pods)
    order = rng.permutation(len(candidate_task))
    demand = (cpu * dur)[candidate_task[order]]
    taken = np.zeros(len(window), dtype=np.int64)
    cum = 0.0
    for k, d in zip(order.tolist(), demand.tolist(), strict=True):
        if cum + d <= target:
            cum += d
            taken[candidate_task[k]] += 1
            if cum >= 0.995 * target:
                break
    kinds = rng.random(len(window))
    groups = []
    used: set[str] = set()
    for i in np.flatnonzero(taken).tolist():
        n = int(taken[i])
        kind = (GANG if kinds[i] < gang_share else JOB) if n >= 2 else (BARE_POD if kinds[i] < bare_share else JOB)
        name = _name(str(window.task_id[i]), used)
        groups.append(BatchGroup(name=name, kind=kind, task_id=str(window.task_id[i]), job_id=str(window.job_id[i]),
                                 arrival_s=float((window.arrival_s[i] - offset_s) / speed), pods=n, cpu_m=int(cpu[i]),
                                 memory_mib=int(mem[i]), duration_s=float(dur[i]), instances=int(gi[i]),
                                 trace_duration_s=float(window.duration_s[i]),
                                 trace_arrival_s=float(window.arrival_s[i])))
    groups.sort(key=lambda g: (g.arrival_s, g.name))
    demand_m_s = float(sum(g.pods * g.cpu_m * g.duration_s for g in groups))
    return BatchSample(groups=tuple(groups), load_factor=float(load_factor), slack_m_s=float(slack_m_s),
                       target_m_s=float(target), demand_m_s=demand_m_s, bundle=bundle, copies=copies,
                       window_tasks=len(window), window_instances=int(window.instances.sum()),
                       floored_tasks=int((window.duration_s / speed < min_wall_s).sum()),
                       anomalies=dict(tasks.anomalies))


def _name(task_id: str, used: set[str]) -> str:
    """A DNS-1123 label ≤ 40 characters from a task id: ``j_3/R6_3`` → ``j-3-r6-3``."""
    base = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")[:36].strip("-") or "task"
    name, n = base, 2
    while name in used:
        name, n = f"{base}-{n}", n + 1
    used.add(name)
    return name
