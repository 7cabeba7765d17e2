"""Escalation in a replay (docs/design.md §8): the bookkeeping the live loop keeps per node
(``NodeCondition.pressure_since_s``, recent eviction times, the slack-ineligible cooldown),
with the live loop's decision, :func:`kalena_engine.escalation.decide_escalation`.

An eviction time is one node-local mitigation round that evicted (docs/design.md §8: a node "that
evicted k times"), however many pods the round took — one spike that needs four small pods
gone is mitigation converging, not a storm; drains by escalation itself do not count. (The
live loop, ``kalena_web.control.escalation``, counts one eviction record per pod.) A node's pressure
episode is working set ≥ ``evict_threshold_ratio · C`` on ram while ``Σ r > C`` there, read
after the step's node-local evictions (what the agent reports next). PSI is not modelled.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kalena_engine.escalation import Escalation, EscalationPolicy, decide_escalation


@dataclass(eq=False)
class ReplayEscalation:
    """Per-node escalation state of a replay over ``n`` nodes."""

    n_nodes: int
    policy: EscalationPolicy
    pressure_since_s: np.ndarray = field(init=False)
    ineligible_until_s: np.ndarray = field(init=False)
    _eviction_node: list[int] = field(default_factory=list)
    _eviction_s: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pressure_since_s = np.full(self.n_nodes, np.nan)
        self.ineligible_until_s = np.full(self.n_nodes, -np.inf)

    def eligible(self, now_s: float) -> np.ndarray:
        """``(n,)`` bool: nodes not in an escalation cooldown at ``now_s``."""
        return self.ineligible_until_s <= now_s

    def record_eviction_round(self, node: int, now_s: float) -> None:
        """Node-local mitigation on ``node`` evicted at ``now_s`` (one round, any pod count)."""
        self._eviction_node.append(int(node))
        self._eviction_s.append(float(now_s))

    def observe(self, now_s: float, in_episode: np.ndarray) -> None:
        """Fold this step's pressure (``(n,)`` bool, pressure with Σ r > C) into the episodes."""
        starting = in_episode & np.isnan(self.pressure_since_s)
        self.pressure_since_s[starting] = now_s
        self.pressure_since_s[~in_episode] = np.nan

    def decide(self, now_s: float, stale: np.ndarray) -> list[tuple[int, Escalation]]:
        """The nodes to escalate now, with the engine's decision for each; their episode is
        cleared and their cooldown set. ``stale``: ``(n,)`` bool, telemetry stale."""
        horizon = now_s - self.policy.window_s
        if self._eviction_s and self._eviction_s[0] < horizon:
            keep = [i for i, t in enumerate(self._eviction_s) if t >= horizon]
            self._eviction_node = [self._eviction_node[i] for i in keep]
            self._eviction_s = [self._eviction_s[i] for i in keep]
        nodes = np.asarray(self._eviction_node, dtype=np.int64)
        times = np.asarray(self._eviction_s)
        candidates = set(np.flatnonzero(~np.isnan(self.pressure_since_s)).tolist()) | set(nodes.tolist())
        out = []
        for node in sorted(candidates):
            since = self.pressure_since_s[node]
            decision = decide_escalation(
                now_s=now_s, pressure_since_s=None if np.isnan(since) else float(since),
                eviction_times_s=times[nodes == node], telemetry_stale=bool(stale[node]),
                ineligible_until_s=float(self.ineligible_until_s[node]), policy=self.policy,
            )
            if decision.escalate:
                self.ineligible_until_s[node] = decision.ineligible_until_s
                self.pressure_since_s[node] = np.nan
                out.append((node, decision))
        return out
