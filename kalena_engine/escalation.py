"""Escalation decisions (docs/design.md §8): when node-local mitigation is not enough.

A node is escalated — its batch drained through the orchestrator and the node marked
slack-ineligible for ``cooldown_s`` — when either

* its local mitigation has not converged within ``T_esc`` (default 30 s): the node has been
  continuously under pressure with ``Σ r > C`` since ``pressure_since_s`` and
  ``now − pressure_since_s > T_esc``; or
* it evicted ``k`` times (default 3) within ``window_s`` (default 300 s).

Stale telemetry never escalates (the same rule as eviction: case C1). Worked example:
evictions at t = 100, 250, 390 with now = 400 → three within [100, 400] → escalate
``eviction_storm``; pressure since t = 360 at now = 400 (40 s > 30 s) → escalate
``not_converged``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class EscalationPolicy:
    """``T_esc``, the eviction-storm rule (k in window) and the slack-ineligible cooldown."""

    not_converged_s: float = 30.0
    evictions: int = 3
    window_s: float = 300.0
    cooldown_s: float = 600.0


@dataclass(frozen=True)
class Escalation:
    """Decision for one node: ``reason`` is ``not_converged`` | ``eviction_storm`` | ``""``."""

    escalate: bool
    reason: str = ""
    detail: str = ""
    ineligible_until_s: float = 0.0


def decide_escalation(*, now_s: float, pressure_since_s: float | None, eviction_times_s: np.ndarray,
                      telemetry_stale: bool, ineligible_until_s: float,
                      policy: EscalationPolicy) -> Escalation:
    """Decide whether to escalate one node (see module doc).

    Args:
        now_s: current time (s).
        pressure_since_s: start of the current unbroken pressure episode with Σ r > C, or None.
        eviction_times_s: times of the node's recent evictions.
        telemetry_stale: the node's freshest sample is older than T_stale.
        ineligible_until_s: end of a running cooldown (a node already escalated is not again).
        policy: thresholds.
    """
    if telemetry_stale:
        return Escalation(False, detail="telemetry stale: no decision from old samples")
    if now_s < ineligible_until_s:
        return Escalation(False, detail="already slack-ineligible")
    until = now_s + policy.cooldown_s
    recent = np.asarray(eviction_times_s, dtype=np.float64)
    recent = recent[(recent >= now_s - policy.window_s) & (recent <= now_s)]
    if len(recent) >= policy.evictions:
        return Escalation(True, "eviction_storm",
                          f"{len(recent)} evictions within {policy.window_s:.0f} s (limit {policy.evictions})", until)
    if pressure_since_s is not None and now_s - pressure_since_s > policy.not_converged_s:
        return Escalation(True, "not_converged",
                          f"pressure with Σr > C for {now_s - pressure_since_s:.0f} s "
                          f"(> T_esc {policy.not_converged_s:.0f} s)", until)
    return Escalation(False)
