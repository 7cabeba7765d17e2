"""Production usage for a replay: Bitbrains VM series mapped onto blueprint pods (docs/design.md §11).

Each production pod is driven by one Bitbrains VM (drawn with the replay's seed from the VMs
that cover the window) and, for the ``peak`` mapping, one real production peak-to-request
ratio pair ``ρ = (ρ_cpu, ρ_ram)`` from the Google 2011 SUBMIT-row join.

``peak`` (default) — keep the VM series' shape, scale it so its own 99th percentile over the
replay window equals ``ρ · q``::

    u_d(t) = ρ_d · q_d · s_d(t) / p99(s_d)        d ∈ {cpu, ram}
    u_d(t) = ρ_cpu · q_d · s_d(t) / p99(s_d)      d ∈ {disk_read, disk_write, net_in, net_out}

where ``s`` is usage/provisioned for cpu and ram and the measured throughput for disk and
network. ``raw`` — ``u = q · usage/provisioned`` for cpu and ram, ``u = q · s/max(s)`` for disk
and network. Both: storage and gpu are not measured and read ``u = q``; usage is clipped at
the limit (``L = q`` for Irina) and the clipped share of pod-steps is counted.

Worked example: q_cpu = 2 cores, ρ_cpu = 0.6, a VM whose cpu ratio has p99 0.25 and reads 0.10
now → u = 0.6 · 2 · 0.10 / 0.25 = 0.48 cores.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kalena_engine.resources import CPU, DISK_READ, DISK_WRITE, GPU, NET_IN, NET_OUT, RAM, STORAGE
from kalena_engine.traces.bitbrains import VMSeries, sample_at, usage_ratio_series

MAPPINGS = ("peak", "raw")
#: Column of :func:`usage_ratio_series` feeding each Kalena dimension.
_SERIES_DIMS = (CPU, RAM, DISK_READ, DISK_WRITE, NET_IN, NET_OUT)


@dataclass(frozen=True, eq=False)
class ProductionUsage:
    """Per-step usage for ``p`` production pods over ``s`` steps.

    Attributes:
        step_times_s: ``(s,)`` replay time of each step (s, replay clock).
        vm_of_pod: ``(p,)`` index into ``vm_ids``.
        vm_ids: the Bitbrains VM file stems used.
        scale: ``(p, 8)`` multiplier applied to the VM shape.
        shapes: ``(s, n_vm, 6)`` held VM shape value at each step (see ``_SERIES_DIMS``).
        sample_age_s: ``(s, n_vm)`` age of the held source sample at each step (s).
        rho: ``(p, 2)`` ratio pair drawn per pod (ones for ``raw``).
    """

    mapping: str
    step_times_s: np.ndarray
    vm_of_pod: np.ndarray
    vm_ids: tuple[str, ...]
    scale: np.ndarray
    shapes: np.ndarray
    sample_age_s: np.ndarray
    rho: np.ndarray
    request: np.ndarray
    limit: np.ndarray

    def usage_at(self, step: int) -> np.ndarray:
        """``(p, 8)`` usage at step index ``step``, before clipping at the limit."""
        return self.usage_of_shape(self.shapes[step])

    def usage_of_shape(self, shape: np.ndarray) -> np.ndarray:
        """``(p, 8)`` usage for one step's ``(n_vm, 6)`` VM shape values (e.g. a future maximum
        for an oracle), before clipping at the limit."""
        usage = self.request.copy()  # storage and gpu: not measured, read at the request
        usage[:, _SERIES_DIMS] = self.scale[:, _SERIES_DIMS] * shape[self.vm_of_pod]
        return usage

    def clipped_usage_at(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """``(usage clipped at the limit (p, 8), clipped (p, 8) bool)`` at step ``step``."""
        usage = self.usage_at(step)
        clipped = usage > self.limit
        return np.minimum(usage, self.limit), clipped

    def sample_age_at(self, step: int) -> np.ndarray:
        """``(p,)`` age (s) of each pod's held source sample at step ``step``."""
        return self.sample_age_s[step][self.vm_of_pod]


def held_shapes(vms: tuple[VMSeries, ...], times: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each VM's shape value held at each of ``times`` (trace time, s): ``(t, n_vm, 6)`` values
    (zeros before a VM's first sample) and ``(t, n_vm)`` ages of the held sample (s; ``inf``
    before the first)."""
    shapes = np.zeros((len(times), len(vms), 6))
    ages = np.zeros((len(times), len(vms)))
    for v, vm in enumerate(vms):
        index = sample_at(vm, times)
        series = usage_ratio_series(vm)
        have = index >= 0
        shapes[have, v] = series[index[have]]
        ages[:, v] = np.where(have, times - vm.timestamp_s[np.maximum(index, 0)], np.inf)
    return shapes, ages


def build_production_usage(
    vms: tuple[VMSeries, ...], *, trace_start_s: float, step_times_s: np.ndarray,
    request: np.ndarray, limit: np.ndarray, peak_ratios: np.ndarray | None,
    mapping: str, rng: np.random.Generator,
) -> ProductionUsage:
    """Assign VMs and ratios to pods and precompute the held VM shapes at every step.

    Args:
        vms: VM series that cover the window (``BitbrainsSet.covering``); at least one.
        trace_start_s: Bitbrains time that replay time 0 maps to (s).
        step_times_s: ``(s,)`` replay times of the steps.
        request, limit: ``(p, 8)`` production requests and limits.
        peak_ratios: ``(m, 2)`` Google production ratios [cpu, ram] (required for ``peak``).
        mapping: ``peak`` or ``raw``.
        rng: the replay's random generator (VM and ratio draws).

    Raises:
        ValueError: unknown mapping, no VMs, or ``peak`` without ratios.
    """
    if mapping not in MAPPINGS:
        raise ValueError(f"usage mapping {mapping!r} is not one of {', '.join(MAPPINGS)}")
    if not vms:
        raise ValueError("no Bitbrains VM covers the replay window")
    n_pods = request.shape[0]
    shapes, ages = held_shapes(vms, trace_start_s + np.asarray(step_times_s, dtype=np.float64))
    vm_of_pod = rng.integers(0, len(vms), size=n_pods)
    if mapping == "peak":
        if peak_ratios is None or len(peak_ratios) == 0:
            raise ValueError("the peak mapping needs Google 2011 production peak ratios")
        rho = peak_ratios[rng.integers(0, len(peak_ratios), size=n_pods)]
        reference = np.percentile(shapes, 99, axis=0)  # (n_vm, 6): p99 over the window
        per_dim_rho = np.column_stack([rho[:, 0], rho[:, 1]] + [rho[:, 0]] * 4)
    else:
        rho = np.ones((n_pods, 2))
        reference = shapes.max(axis=0)
        reference[:, :2] = 1.0  # cpu, ram: usage/provisioned is already the fraction of q
        per_dim_rho = np.ones((n_pods, 6))
    ref = reference[vm_of_pod]  # (p, 6)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(ref > 0, per_dim_rho / ref, 0.0)
    scale = np.ones((n_pods, 8))
    scale[:, _SERIES_DIMS] = request[:, _SERIES_DIMS] * factor
    scale[:, [GPU, STORAGE]] = 1.0
    return ProductionUsage(
        mapping=mapping, step_times_s=np.asarray(step_times_s, dtype=np.float64),
        vm_of_pod=vm_of_pod, vm_ids=tuple(vm.vm_id for vm in vms), scale=scale,
        shapes=shapes, sample_age_s=ages, rho=rho, request=request, limit=limit,
    )


def with_memory_series(usage: ProductionUsage, series: tuple[tuple[str, np.ndarray, np.ndarray], ...], *,
                       series_start_s: float, rng: np.random.Generator) -> ProductionUsage:
    """Production memory from real per-container utilisation series instead of the VM's ram
    column: each VM draws one series (with ``rng``), held between samples, and pods driven by
    that VM use ``u_ram(t) = q_ram · util(t)`` (utilisation is a fraction of the container's
    memory, read as a fraction of the request). ``series_start_s`` is the series time replay
    time 0 maps to. Every series must cover the window (the caller picks them).

    Raises:
        ValueError: no series.
    """
    if not series:
        raise ValueError("no memory-utilisation series covers the replay window")
    times = series_start_s + usage.step_times_s
    shapes = usage.shapes.copy()
    pick = rng.integers(0, len(series), size=shapes.shape[1])
    for v, c in enumerate(pick.tolist()):
        _, t, values = series[c]
        index = np.clip(np.searchsorted(t, times, side="right") - 1, 0, len(t) - 1)
        shapes[:, v, 1] = values[index]  # column 1 of _SERIES_DIMS is ram
    scale = usage.scale.copy()
    scale[:, RAM] = usage.request[:, RAM]
    return replace(usage, shapes=shapes, scale=scale)
