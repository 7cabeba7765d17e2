"""What the agent knows about the workloads on its node and what it measured.

A :class:`Workload` comes from discovery (workloads file, Docker, kubelet); a
:class:`UsageSample` from a collector. Vectors are ``(8,)`` float64 in internal units
(:mod:`kalena_engine.resources`); an unmeasured usage dimension is ``NaN``; an undeclared limit
is ``+inf``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from agents.collectors.psi import PsiStats
from kalena_engine.estimator import estimator_limit

KIND_PROCESS = "process"
KIND_DOCKER = "docker"
KIND_KUBERNETES = "kubernetes"
KINDS = (KIND_PROCESS, KIND_DOCKER, KIND_KUBERNETES)


@dataclass(frozen=True, eq=False)
class Workload:
    """One workload on the node (a pod, a container or a process group in one cgroup).

    Attributes:
        id: stable identity reported to the control plane — ``namespace/pod`` (Kubernetes), the
            64-hex container id (Docker), or the id given in the workloads file.
        name: display name.
        kind: ``process`` | ``docker`` | ``kubernetes`` — how the enforcer evicts it.
        tier: ``service`` | ``batch`` | ``daemonset`` (docs/design.md §4).
        priority: batch eviction order (``kalena.naughtian.io/priority``), ≥ 0.
        request: ``(8,)`` requests, internal units (0 where not declared).
        limit: ``(8,)`` declared limits, internal units (+inf where not declared).
        start_s: Unix time the workload started (s).
        grace_s: termination grace period (s) — Kubernetes ``terminationGracePeriodSeconds``.
        cgroup: path relative to each hierarchy's root, e.g. ``kubepods/burstable/pod<uid>``.
        slack_cpu, slack_memory: ``kalena.naughtian.io/slack-cpu|slack-memory`` allowed.
        reclaim_disabled: ``kalena.naughtian.io/reclaim: disabled`` (reservation pinned).
        startup_grace_s: ``kalena.naughtian.io/startup-grace-s`` — this workload's startup grace
            g (s) in place of the policy's; None when it sets none (docs/design.md §5).
        terminating: the orchestrator is already deleting it (credited, never chosen again).
        runtime_ref: what the enforcer addresses: container id, ``namespace/pod``, or ``""``.
        source: discovery source, for messages (``file:/etc/…``, ``docker``, ``kubelet``).
    """

    id: str
    name: str
    kind: str
    tier: str
    priority: int
    request: np.ndarray
    limit: np.ndarray
    start_s: float
    grace_s: float
    cgroup: str
    slack_cpu: bool = True
    slack_memory: bool = False
    reclaim_disabled: bool = False
    startup_grace_s: float | None = None
    terminating: bool = False
    runtime_ref: str = ""
    source: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)

    def limit_or_request(self, limit_ratio: float = 1.0) -> np.ndarray:
        """``L`` (docs/design.md §5, §7) of this workload: :func:`kalena_engine.estimator.estimator_limit`
        (the declared limit, else ``limit_ratio × q``)."""
        return estimator_limit(self.limit, self.request, limit_ratio)


@dataclass(frozen=True)
class CpuThrottling:
    """Cumulative CFS bandwidth counters (``cpu.stat``): periods, throttled periods, throttled µs."""

    nr_periods: int
    nr_throttled: int
    throttled_time_us: float


@dataclass(frozen=True, eq=False)
class UsageSample:
    """One measurement of one workload.

    Attributes:
        workload_id: :attr:`Workload.id`.
        ts_s: Unix time the measurement refers to (s). For remote sources (cAdvisor, kubelet)
            this is the source's own timestamp, so a stalled source produces old samples.
        usage: ``(8,)`` internal units; ``NaN`` where not measured (storage, GPU, network in
            a shared namespace, cpu on the very first reading).
        memory_usage_bytes: raw memory usage including page cache (``NaN`` if unknown).
        cpu_throttling: cumulative CFS counters, or ``None``.
        psi: ``{"cpu"|"memory"|"io": PsiStats}`` for the workload's cgroup where available.
        cpu_wait_ratio: cpu time its tasks spent runnable but waiting, per second of wall time
            (from ``/proc/<pid>/task/*/schedstat``), measured for groups whose PSI files the agent
            must not read (an armed trigger); ``None`` elsewhere.
    """

    workload_id: str
    ts_s: float
    usage: np.ndarray
    memory_usage_bytes: float = math.nan
    cpu_throttling: CpuThrottling | None = None
    psi: Mapping[str, PsiStats] = field(default_factory=dict)
    cpu_wait_ratio: float | None = None

    def measured(self) -> np.ndarray:
        """``(8,)`` bool, which dimensions carry a measurement."""
        return ~np.isnan(self.usage)


@dataclass(frozen=True)
class NodeReading:
    """Node-level pressure inputs (s): working set on the node's workload cgroup (bytes) and
    system PSI per resource."""

    ts_s: float
    working_set_bytes: float
    psi: Mapping[str, PsiStats] = field(default_factory=dict)
