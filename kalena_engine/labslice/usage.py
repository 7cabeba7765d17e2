"""Usage series of the slice's production pods and the lab's slack (docs/design.md §11 peak mapping,
time compressed by ``k``).

The series are the replay's own: :func:`kalena_engine.replay.usage.build_production_usage` with
the arguments :func:`kalena_engine.replay.setup.build_replay` gives it for the slice's IR (the
same VMs covering the window, the same seed drawing VMs and peak ratios, the same step, requests
and limits ``L = limit_ratio · q``), so a replay of the slice with that seed drives each pod
with the series its container follows. Per pod and step, in lab units::

    cpu_m[t]      = round(min(u_cpu(t), L_cpu))            (m)
    memory_mib[t] = round(min(u_ram(t), L_ram) / MiB)      (MiB)
    step (wall)   = step_s / k

``u`` is the peak mapping ``ρ · q · s(t) / p99(s)``. Worked example: a pod of q = 16 m with
ρ_cpu = 0.5 on a VM whose cpu ratio has p99 0.2 and reads 0.1 at step t → u = 0.5 · 16 · 0.1 /
0.2 = 4 m; with ``step_s`` 60 and k = 10 the container holds 4 m for 6 s of wall time.

The lab's slack (what batch may use, the load factor's denominator) is, per lab node ``n`` and
step ``t``, what production usage leaves of the node's post-Phase-0 capacity::

    slack_n(t) = max(0, C_n − Σ_{pods p on n} cpu_m_p[t])        (m)
    S = Σ_n Σ_t slack_n(t) · step_s / k                          (m·s of wall time)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kalena_engine.errors import InputError
from kalena_engine.estimator import estimator_limit
from kalena_engine.replay.usage import ProductionUsage, build_production_usage
from kalena_engine.resources import CPU, RAM
from kalena_engine.traces.bitbrains import BitbrainsSet

MIB = 2**20


@dataclass(frozen=True, eq=False)
class SliceUsage:
    """Series of ``p`` pods over ``s`` steps. ``cpu_m`` / ``memory_mib``: ``(p, s)`` int64 in m
    and MiB; ``step_wall_s``: one step of wall time (``step_s / k``); ``vm_ids``: the Bitbrains VM
    driving each pod; ``rho``: ``(p, 2)`` peak ratios drawn; ``clipped_share``: share of pod-steps
    whose usage was clipped at the limit (cpu or ram)."""

    step_s: float
    speed: float
    cpu_m: np.ndarray
    memory_mib: np.ndarray
    vm_ids: tuple[str, ...]
    rho: np.ndarray
    clipped_share: float
    usage_vms: int

    @property
    def step_wall_s(self) -> float:
        return self.step_s / self.speed

    @property
    def wall_s(self) -> float:
        """Wall seconds one pass of the series lasts."""
        return self.cpu_m.shape[1] * self.step_wall_s


def slice_usage(request: np.ndarray, bitbrains: BitbrainsSet, peak_ratios: np.ndarray | None, *, hours: float,
                step_s: float, seed: int, speed: float, usage_offset_s: float = 0.0,
                coverage_tolerance_s: float = 300.0, mapping: str = "peak", limit_ratio: float = 1.0) -> SliceUsage:
    """Series for ``request`` (``(p, 8)``, internal units, the slice IR's production pods in its
    canonical order) over ``hours`` of trace time in steps of ``step_s`` (module doc).

    Raises:
        InputError: ``speed`` or ``step_s`` not positive, or no Bitbrains VM covers the window.
        ValueError: from the mapping (no peak ratios for ``peak``).
    """
    if not speed > 0 or not step_s > 0 or not hours > 0:
        raise InputError(f"speed {speed:g}, step {step_s:g} s, hours {hours:g}", source="lab slice",
                         field="--speed", accepted="positive numbers")
    rng = np.random.default_rng(seed)   # build_replay's generator: its first draws are the usage mapping's
    steps = int(round(hours * 3600.0 / step_s))
    times = np.arange(steps, dtype=np.float64) * step_s
    start = bitbrains.earliest_start_s() + usage_offset_s
    vms = bitbrains.covering(start, start + hours * 3600.0, tolerance_s=coverage_tolerance_s)
    if not vms:
        raise InputError(f"no Bitbrains VM covers {hours:g} hours", source=bitbrains.directory, field="--hours",
                         accepted="a shorter window")
    limit = estimator_limit(np.full_like(request, np.inf), request, limit_ratio)
    usage = build_production_usage(vms, trace_start_s=start, step_times_s=times, request=request, limit=limit,
                                   peak_ratios=peak_ratios, mapping=mapping, rng=rng)
    cpu = np.zeros((len(request), steps))
    ram = np.zeros((len(request), steps))
    clipped = 0
    for t in range(steps):
        u, c = usage.clipped_usage_at(t)
        cpu[:, t], ram[:, t] = u[:, CPU], u[:, RAM]
        clipped += int((c[:, CPU] | c[:, RAM]).sum())
    return SliceUsage(step_s=float(step_s), speed=float(speed), cpu_m=np.rint(cpu).astype(np.int64),
                      memory_mib=np.rint(ram / MIB).astype(np.int64),
                      vm_ids=tuple(usage.vm_ids[v] for v in usage.vm_of_pod.tolist()), rho=usage.rho,
                      clipped_share=clipped / max(1, cpu.size), usage_vms=len(vms))


def template_rows(declaration_of_pod: list[str]) -> list[int]:
    """Per pod, the row of the first pod of its declaration (its replica 0 in canonical order).

    A controller has one pod template, so every replica of a declaration carries the same usage
    annotation: the lab runs each declaration's pods on its replica 0's series. Example:
    ``["a", "a", "b", "a"] → [0, 0, 2, 0]``.
    """
    first: dict[str, int] = {}
    return [first.setdefault(d, i) for i, d in enumerate(declaration_of_pod)]


def by_template(usage: SliceUsage, rows: list[int]) -> SliceUsage:
    """``usage`` with every pod following the series of ``rows[pod]`` (:func:`template_rows`)."""
    return replace(usage, cpu_m=usage.cpu_m[rows], memory_mib=usage.memory_mib[rows],
                   vm_ids=tuple(usage.vm_ids[r] for r in rows), rho=usage.rho[rows])


def replay_by_template(usage: ProductionUsage, rows: list[int]) -> ProductionUsage:
    """A replay's production usage with every pod driven as the lab drives it: by the VM, peak
    ratio and scale of ``rows[pod]`` (replicas of a declaration share requests, so the scale
    row is theirs too). Give it to the replay of the slice so it drives the pods the lab runs."""
    return replace(usage, vm_of_pod=usage.vm_of_pod[rows], rho=usage.rho[rows], scale=usage.scale[rows])


def lab_slack(usage: SliceUsage, pod_nodes: list[int], capacity_m: np.ndarray) -> tuple[np.ndarray, float]:
    """``(slack (n_nodes, s) in m, S in m·s of wall time)`` (module doc).

    ``pod_nodes``: lab node index of each pod; ``capacity_m``: ``(n_nodes,)`` post-Phase-0 cpu.
    Example: one node of C = 200 m with pods using 50 m and 30 m at one step of 6 s wall →
    slack 120 m, S = 720 m·s.
    """
    prod = np.zeros((len(capacity_m), usage.cpu_m.shape[1]))
    np.add.at(prod, np.asarray(pod_nodes, dtype=np.int64), usage.cpu_m)
    slack = np.maximum(0.0, np.asarray(capacity_m, dtype=np.float64)[:, None] - prod)
    return slack, float(slack.sum() * usage.step_wall_s)
