"""Time compression of a lab day (docs/design.md §15): at ``k``× every trace clock *and* every time
constant of the policy, the agents' sampling intervals and the pods' termination grace are
divided by ``k``, floored where the machine cannot go lower. Pure: a :class:`Policy` and ``k``
in, a scaled :class:`Policy` and one row per constant out.

For each constant ``c`` (seconds on the trace's clock)::

    wall      = max(floor, c / k)          # what the lab applies, seconds of wall time
    simulated = wall · k                   # what it amounts to on the trace's clock (= c unless floored)

The replay of the same slice runs on the simulated clock with every constant at its
``simulated`` value (:func:`simulated_policy`), so lab and replay apply the same policy, floors
included. Worked example at ``k = 20``: half-life 600 s → 30 s of wall time (simulated 600 s);
the agents' sampling interval 10 s → 0.5 s, floored at 1 s (simulated 20 s); the PSI trigger
window stays 2 s (simulated 40 s).

Floors (seconds of wall time, :data:`FLOORS`): the agents' loops (sampling, mitigation,
discovery) 1 s — the kubelet double syncs every second, and a small machine running the whole
lab cannot report faster; the PSI trigger window 2 s — the kernel refuses an unprivileged
window that is not a multiple of 2 s; the staleness floor 10 s — a sample crosses the agent's
link, the console's ingest and an estimation pass before it counts, so a shorter TTL marks
healthy nodes stale; a termination grace 1 s (whole seconds, Kubernetes' unit); every other
policy time constant 2 s (one PSI window: nothing acts faster than the pressure signal). The
predictor's bucket is rounded down to a divisor of an hour (:class:`EstimatorPolicy` requires
it) and its window to at least two buckets; ``periodic_days`` counts whole days of history and is
not a clock (the periodic member never has three compressed days of history in a lab day, so it
never serves there; it is reported, not scaled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kalena_engine.errors import InputError
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU, RAM

#: Floors in seconds of wall time (module doc). Keys are the constant's ``section.key`` or an
#: agent or pod setting; ``*`` is every other policy time constant.
FLOORS: dict[str, float] = {
    "*": 2.0,
    "estimator.stale_min_s": 10.0,
    "agent.sampling_interval_s": 1.0,
    "agent.mitigation_interval_s": 1.0,
    "agent.discovery_interval_s": 1.0,
    "agent.psi_window_s": 2.0,
    "pod.termination_grace_s": 1.0,
}

#: The policy's time constants, ``(section, key)``: every field that is a duration.
POLICY_CLOCKS: tuple[tuple[str, str], ...] = (
    ("estimator", "half_life_s"), ("estimator", "grace_s"), ("estimator", "stale_min_s"),
    ("estimator", "bucket_s"), ("estimator", "window_s"), ("estimator", "min_history_s"),
    ("estimator", "cost_half_life_s"), ("estimator", "cost_horizon_s"),
    ("eviction", "min_run_time_s"), ("eviction", "starvation_window_s"), ("eviction", "cooldown_s"),
    ("placement", "volatility_half_life_s"),
    ("escalation", "not_converged_s"), ("escalation", "window_s"), ("escalation", "cooldown_s"),
)

#: The agents' own clocks as deployed (``deploy/agent/daemonset.yaml`` leaves them at the agent's
#: defaults, agents/config.py) and Kubernetes' default termination grace.
AGENT_CLOCKS: dict[str, float] = {
    "sampling_interval_s": 10.0, "mitigation_interval_s": 1.0, "discovery_interval_s": 5.0, "psi_window_s": 2.0,
}
DEFAULT_GRACE_S = 30.0


@dataclass(frozen=True)
class ScaledClock:
    """One constant: ``name`` (``section.key``), ``trace_s`` as given, ``divided_s`` = trace / k,
    ``wall_s`` applied in the lab, ``floor_s`` and whether it bound, ``simulated_s`` = wall · k."""

    name: str
    trace_s: float
    divided_s: float
    wall_s: float
    floor_s: float
    floored: bool
    simulated_s: float
    note: str = ""

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "trace_s": self.trace_s, "divided_s": self.divided_s, "wall_s": self.wall_s,
                "floor_s": self.floor_s, "floored": self.floored, "simulated_s": self.simulated_s, "note": self.note}


@dataclass(frozen=True, eq=False)
class Compression:
    """The lab's compression: ``speed`` k, the scaled ``policy`` (wall clock), the ``clocks``
    (every policy constant, then the agents' and the pods'), and the agents' flags to apply."""

    speed: float
    policy: Policy
    clocks: tuple[ScaledClock, ...]

    def clock(self, name: str) -> ScaledClock:
        """The row of ``name`` (``estimator.grace_s``, ``agent.sampling_interval_s`` …).

        Raises:
            KeyError: no such constant.
        """
        for row in self.clocks:
            if row.name == name:
                return row
        raise KeyError(name)

    def agent_flags(self) -> tuple[str, ...]:
        """The agents' command-line flags at their wall values, e.g. ``--sampling-interval-s=1``."""
        return tuple(f"--{row.name.split('.', 1)[1].replace('_', '-')}={row.wall_s:g}"
                     for row in self.clocks if row.name.startswith("agent."))

    @property
    def grace_s(self) -> int:
        """Pods' termination grace (whole seconds of wall time)."""
        return int(self.clock("pod.termination_grace_s").wall_s)

    def to_dict(self) -> dict[str, object]:
        return {"speed": self.speed, "clocks": [row.to_dict() for row in self.clocks],
                "floored": [row.name for row in self.clocks if row.floored]}


def _hour_divisor_at_most(value: float) -> float:
    """The largest divisor of 3,600 s that is ≤ ``value`` (at least 1 s)."""
    best = 1.0
    for d in range(1, 3601):
        if 3600 % d == 0 and d <= value + 1e-9:
            best = float(d)
    return best


def _row(name: str, trace_s: float, speed: float, floor_s: float, *, whole: bool = False,
         note: str = "") -> ScaledClock:
    divided = trace_s / speed
    wall = max(floor_s, math.ceil(divided) if whole else divided)
    return ScaledClock(name=name, trace_s=float(trace_s), divided_s=float(divided), wall_s=float(wall),
                       floor_s=float(floor_s), floored=bool(divided < floor_s), simulated_s=float(wall * speed),
                       note=note)


def compress(policy: Policy, speed: float, *, floors: dict[str, float] | None = None,
             agent_clocks: dict[str, float] | None = None, grace_s: float = DEFAULT_GRACE_S) -> Compression:
    """Divide every time constant of ``policy``, the agents' clocks and the pods' grace by
    ``speed`` (module doc); returns the scaled policy and one row per constant.

    Args:
        policy: the trace-clock policy (the default, or the operator's ``--policy``).
        speed: k > 0.
        floors: overrides of :data:`FLOORS`.
        agent_clocks: the agents' deployed intervals (default :data:`AGENT_CLOCKS`).
        grace_s: pods' termination grace on the trace's clock (30 s).

    Raises:
        InputError: ``speed`` not positive and finite (names ``--speed``).
    """
    if not (math.isfinite(speed) and speed > 0):
        raise InputError(f"{speed!r}", source="time compression", field="--speed", accepted="a positive number")
    table = {**FLOORS, **(floors or {})}
    rows: list[ScaledClock] = []
    sections: dict[str, dict[str, float]] = {}
    for section, key in POLICY_CLOCKS:
        name = f"{section}.{key}"
        value = float(getattr(getattr(policy, section), key))
        row = _row(name, value, speed, table.get(name, table["*"]))
        if name == "estimator.bucket_s":
            wall = _hour_divisor_at_most(row.wall_s)
            row = replace(row, wall_s=wall, simulated_s=wall * speed,
                          note="rounded down to a divisor of an hour")
        sections.setdefault(section, {})[key] = row.wall_s
        rows.append(row)
    est = sections["estimator"]
    if est["window_s"] < 2 * est["bucket_s"]:
        est["window_s"] = 2 * est["bucket_s"]
        i = next(i for i, r in enumerate(rows) if r.name == "estimator.window_s")
        rows[i] = replace(rows[i], wall_s=est["window_s"], simulated_s=est["window_s"] * speed,
                          note="raised to two buckets")
    scaled = replace(policy, estimator=replace(policy.estimator, **sections["estimator"]),
                     eviction=replace(policy.eviction, **sections["eviction"]),
                     placement=replace(policy.placement, **sections["placement"]),
                     escalation=replace(policy.escalation, **sections["escalation"]))
    rows.append(ScaledClock(name="estimator.periodic_days", trace_s=float(policy.estimator.periodic_days),
                            divided_s=float(policy.estimator.periodic_days), wall_s=float(policy.estimator.periodic_days),
                            floor_s=0.0, floored=False, simulated_s=float(policy.estimator.periodic_days),
                            note="whole days of history, not a clock: not scaled"))
    for key, value in (agent_clocks or AGENT_CLOCKS).items():
        name = f"agent.{key}"
        note = "the kernel's unprivileged PSI window: multiples of 2 s only" if key == "psi_window_s" else ""
        rows.append(_row(name, value, speed, table.get(name, table["*"]), note=note))
    rows.append(_row("pod.termination_grace_s", grace_s, speed, table["pod.termination_grace_s"], whole=True,
                     note="whole seconds (terminationGracePeriodSeconds)"))
    return Compression(speed=float(speed), policy=scaled, clocks=tuple(rows))


def simulated_policy(compression: Compression) -> Policy:
    """The scaled policy on the simulated clock: every constant at its ``simulated_s`` (the
    trace value where no floor bound, ``floor · k`` where one did) — what the replay of the
    same slice applies."""
    return policy_on_clock(compression.policy, [row.to_dict() for row in compression.clocks])


def policy_on_clock(policy: Policy, clocks: list[dict], *, which: str = "simulated_s") -> Policy:
    """``policy`` with each constant of ``clocks`` (:meth:`ScaledClock.to_dict` rows, e.g. read
    back from ``compression.json``) set to its ``which`` value (``simulated_s`` or ``wall_s``).

    Raises:
        InputError: a row names a section or key the policy does not have.
    """
    sections: dict[str, dict[str, float]] = {}
    for row in clocks:
        section, key = str(row["name"]).split(".", 1)
        if section in ("estimator", "eviction", "placement", "escalation") and key != "periodic_days":
            if not hasattr(getattr(policy, section), key):
                raise InputError(f"no policy constant {row['name']}", source="compression.json", field="clocks",
                                 accepted="rows made by kalena_engine.labslice.compression.compress")
            sections.setdefault(section, {})[key] = float(row[which])
    return replace(policy, **{s: replace(getattr(policy, s), **v) for s, v in sections.items()})


def format_clocks(compression: Compression) -> str:
    """One line per constant: trace value, ÷ k, applied wall value, floor (and whether it bound),
    simulated value."""
    k = compression.speed
    lines = [f"time compression k = {k:g}: every constant ÷ {k:g}, floored (wall s; simulated = wall × {k:g})",
             f"  {'constant':34} {'trace s':>9} {'÷ k':>9} {'wall s':>8} {'floor':>6} {'simulated s':>12}"]
    for r in compression.clocks:
        flag = "*" if r.floored else " "
        lines.append(f"  {r.name:34} {r.trace_s:9g} {r.divided_s:9.3g} {r.wall_s:8g} {r.floor_s:5g}{flag} "
                     f"{r.simulated_s:12g}" + (f"  ({r.note})" if r.note else ""))
    lines.append("  * the floor bound: the lab applies the floor, which amounts to the simulated value shown")
    return "\n".join(lines)


def scale_sizes(policy: Policy, *, cpu_scale: float, memory_scale: float) -> Policy:
    """``policy`` on the lab's scaled nodes: the placement's slack buckets on cpu and memory
    (``placement.slack_buckets``, which also set the published batch capacity's raise step,
    docs/design.md §14) times the slice's node scale, as the nodes themselves are. A 128 MiB step
    on a 378 MiB lab node would hold the published batch-memory up to a third of the node below
    the ledger's room, which the replay (placing by the ledger) never does.

    Example: the default 50 m / 128 MiB buckets and a slice of 64-core / 256 GiB nodes scaled to
    300 m / 384 MiB (cpu × 0.0046875, memory × 0.00146484375) → 0.234 m / 0.1875 MiB.

    Raises:
        InputError: a scale that is not a positive finite number.
    """
    for name, value in (("cpu_scale", cpu_scale), ("memory_scale", memory_scale)):
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise InputError(f"{value!r} is not a scale factor", source="slice summary", field=f"scale.{name}",
                             accepted="a positive number")
    buckets = list(policy.placement.slack_buckets)
    buckets[CPU] *= float(cpu_scale)
    buckets[RAM] *= float(memory_scale)
    return replace(policy, placement=replace(policy.placement, slack_buckets=tuple(buckets)))
