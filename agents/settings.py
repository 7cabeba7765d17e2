"""Settings of the mitigation loop (built by :mod:`agents.config` from flags and environment)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kalena_engine.policy import Policy

PRESSURE_SOURCES = ("auto", "psi-trigger", "eventfd", "poll")


@dataclass(frozen=True, eq=False)
class LoopSettings:
    """What the mitigation loop needs to know about its node and how to react.

    Attributes:
        node_name: reported to the control plane.
        capacity: ``(8,)`` post-Phase-0 capacity C_n, internal units (+inf = unconstrained).
        reserved_memory_bytes: memory set aside for the system (``--reserved``): the node
            reading may hold that much beyond the workloads before it counts in the ledger.
        policy: engine policy (docs/design.md §5, §7 defaults); replaced at run time by ``policy`` messages.
        sampling_interval_s: how often a ``samples`` batch is reported; T_stale = max(60 s, 3 ×).
        mitigation_interval_s: the periodic tick (collect, decide, enforce), 1 s by default.
        discovery_interval_s: how often Docker/kubelet are asked for their workloads.
        acute_grace_s: grace under acute memory pressure (the grace is cut to at most this).
        pressure_source: ``auto`` (triggers where the kernel accepts them, else polling),
            ``psi-trigger``, ``eventfd`` or ``poll``.
        psi_window_s: trigger window (multiple of 2 s unless the agent has CAP_SYS_RESOURCE).
        psi_cpu_threshold_ms, psi_memory_threshold_ms: stall time within the window that fires.
        cpu_poll_avg10_pct: polling fallback: a service whose cpu PSI ``some`` avg10 — or stall over
            the last tick, in percent — reaches this is contended.
        contention_clear_ratio: a contended service is released only while its cpu stall over a
            tick is below this share of the tick …
        contention_busy_ratio: … and its cpu usage is below this share of its claim ``max(r, q)``.
        cpu_poll: run the cpu polling fallback beside the triggers (the benchmark turns it off to
            measure the trigger path alone).
        quota_hysteresis_ratio: a batch quota is rewritten when it rises by more than this share,
            or reaches the workload's limit (any decrease is written at once).
        max_psi_triggers: per-workload cpu triggers (beyond this, those services are polled).
        enforce_memory_caps: write batch memory caps (docs/design.md §7).
    """

    node_name: str
    capacity: np.ndarray
    reserved_memory_bytes: float = 0.0
    policy: Policy = field(default_factory=Policy)
    sampling_interval_s: float = 10.0
    mitigation_interval_s: float = 1.0
    discovery_interval_s: float = 5.0
    acute_grace_s: float = 2.0
    pressure_source: str = "auto"
    psi_window_s: float = 2.0
    psi_cpu_threshold_ms: float = 150.0
    psi_memory_threshold_ms: float = 150.0
    cpu_poll_avg10_pct: float = 10.0
    contention_clear_ratio: float = 0.02
    contention_busy_ratio: float = 0.5
    cpu_poll: bool = True
    quota_hysteresis_ratio: float = 0.02
    max_psi_triggers: int = 256
    enforce_memory_caps: bool = True

    @property
    def stale_ttl_s(self) -> float:
        """T_stale = max(60 s, 3 × sampling interval) (docs/design.md §5)."""
        return self.policy.estimator.stale_ttl_s(self.sampling_interval_s)
