"""The replay of a lab day: the same slice, the same production series, the same sampled batch
and the same scaled policy, on the simulated (trace) clock — Kalena's Fauxmaster for the live day
(docs/design.md §11, §15). Pure: the slice's files parsed by the caller, a :class:`ReplayInputs` and
:class:`ReplayConfig` out.

What the lab ran, and how the replay holds it:

* **Nodes and production**: the slice's own IR (``ir/infra.yaml`` — the lab's nodes less the
  agent's pod, ``ir/workloads.yaml``, ``ir/blueprint.yaml``), so the replay's nodes, capacities
  and production requests are the lab's.
* **Usage**: the replay's peak mapping over that IR with the slice's seed, window and step — the
  series the slice rendered — then every pod driven by its declaration's replica 0
  (:func:`kalena_engine.labslice.usage.replay_by_template`), as the one pod template drives the
  lab's replicas.
* **Batch**: each arrival of ``batch-schedule.json`` is one task of ``pods`` instances with the
  pod's request (``cpu_m`` m, ``memory_mib`` MiB), arriving at ``offset + at_s · k`` and running
  ``duration_s · k`` (the lab's wall duration, floored at its minimum, on the simulated clock).
  The sample is already at its load factor: the replay's ``load_factor`` is 1. Gangs are
  replayed as ordinary tasks (the replay's task table has no gang), the only difference.
* **Policy**: :func:`kalena_engine.labslice.compression.simulated_policy` — the scaled policy
  with every constant × k (the trace value, or the floor × k where a floor bound).

Worked example: at k = 20 an arrival ``{"at_s": 12.5, "pods": 3, "cpu_m": 31, "memory_mib": 12,
"duration_s": 10.0}`` is a task of 3 instances of 31 mcpu / 12 MiB arriving 250 s into the replay
and running 200 s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from kalena_engine.errors import InputError
from kalena_engine.kuberina import Blueprint, Infrastructure, Workloads
from kalena_engine.labslice.usage import replay_by_template, template_rows
from kalena_engine.policy import Policy
from kalena_engine.replay.setup import Replay, ReplayConfig, ReplayInputs, build_replay
from kalena_engine.replay.usage import ProductionUsage
from kalena_engine.resources import CPU, N_DIMS, RAM
from kalena_engine.traces.batch import BatchTasks
from kalena_engine.traces.bitbrains import BitbrainsSet

MIB = 2**20
_ARRIVAL_KEYS = ("at_s", "name", "pods", "cpu_m", "memory_mib", "duration_s")


def schedule_tasks(arrivals: Sequence[Mapping[str, Any]], *, speed: float, batch_offset_s: float,
                   source: str = "batch-schedule.json") -> BatchTasks:
    """The lab's batch schedule as the replay's task table, on the trace's clock (module doc).

    Raises:
        InputError: an arrival lacks a key or holds a non-positive pod count, request or
            duration (names the arrival and the key); ``speed`` not positive.
    """
    if not speed > 0:
        raise InputError(f"{speed!r}", source=source, field="speed", accepted="a positive number")
    for i, a in enumerate(arrivals):
        missing = [k for k in _ARRIVAL_KEYS if k not in a]
        if missing:
            raise InputError(f"arrival {i} has no {', '.join(missing)}", source=source, field=f"arrivals[{i}]",
                             accepted=f"each arrival with {', '.join(_ARRIVAL_KEYS)}")
        for key in ("pods", "cpu_m", "memory_mib", "duration_s"):
            if not float(a[key]) > 0:
                raise InputError(f"{key} = {a[key]!r}", source=source, field=f"arrivals[{i}].{key}",
                                 accepted="a positive number")
    k = len(arrivals)
    request = np.zeros((k, N_DIMS))
    request[:, CPU] = [float(a["cpu_m"]) for a in arrivals]
    request[:, RAM] = [float(a["memory_mib"]) * MIB for a in arrivals]
    names = np.array([str(a["name"]) for a in arrivals], dtype=str)
    return BatchTasks(source=source, task_id=names, job_id=names.copy(),
                      instances=np.array([int(a["pods"]) for a in arrivals], dtype=np.int64),
                      arrival_s=batch_offset_s + np.array([float(a["at_s"]) for a in arrivals]) * speed,
                      duration_s=np.array([float(a["duration_s"]) for a in arrivals]) * speed,
                      request=request, priority=np.zeros(k, dtype=np.int64), anomalies={})


def slice_replay_inputs(*, infra: Infrastructure, workloads: Workloads, blueprint: Blueprint, bitbrains: BitbrainsSet,
                        peak_ratios: np.ndarray | None, arrivals: Sequence[Mapping[str, Any]],
                        slice_config: Mapping[str, Any], policy: Policy) -> tuple[ReplayInputs, ReplayConfig]:
    """The replay's inputs and config for a rendered slice (module doc).

    ``slice_config``: the slice's ``summary.json`` ``config`` (speed, seed, hours, step_s,
    usage_offset_s, batch_offset_s, limit_ratio). ``policy``: the simulated-clock policy.

    Raises:
        InputError: a key missing from ``slice_config`` or a bad arrival.
    """
    missing = [k for k in ("speed", "seed", "hours", "step_s", "usage_offset_s", "batch_offset_s")
               if k not in slice_config]
    if missing:
        raise InputError(f"the slice's config has no {', '.join(missing)}", source="summary.json", field="config",
                         accepted="a slice rendered by `kalena lab slice` / `kalena lab up`")
    speed = float(slice_config["speed"])
    tasks = schedule_tasks(arrivals, speed=speed, batch_offset_s=float(slice_config["batch_offset_s"]))
    policy = replace(policy, estimator=replace(policy.estimator,
                                               limit_ratio=float(slice_config.get("limit_ratio", 1.0))))
    config = ReplayConfig(hours=float(slice_config["hours"]), step_s=float(slice_config["step_s"]),
                          seed=int(slice_config["seed"]), usage_offset_s=float(slice_config["usage_offset_s"]),
                          batch_offset_s=float(slice_config["batch_offset_s"]), load_factor=1.0, policy=policy)
    inputs = ReplayInputs(infra=infra, workloads=workloads, blueprint=blueprint, bitbrains=bitbrains, batch=tasks,
                          peak_ratios=peak_ratios)
    return inputs, config


def build_slice_replay(inputs: ReplayInputs, config: ReplayConfig, *,
                       offsets: Callable[[tuple[str, ...]], np.ndarray] | None = None) -> Replay:
    """:func:`build_replay`, then every production pod driven as the lab drives it (its
    declaration's replica 0's series, :func:`replay_by_template`), each started ``offsets(ids)``
    steps into its series when given (:func:`with_phases`, :func:`series_offsets`)."""
    replay = build_replay(inputs, config)
    ids = set(replay.simulator.state.production.ids)
    placed = [p for p in inputs.workloads.pods if p.id in ids]
    rows = template_rows([f"{p.namespace}/{p.declaration}" for p in placed])
    replay.simulator.usage = replay_by_template(replay.simulator.usage, rows)
    if offsets is not None:
        replay.simulator.usage = with_phases(replay.simulator.usage, offsets(replay.simulator.state.production.ids))
    return replay


def with_phases(usage: ProductionUsage, offsets: np.ndarray) -> ProductionUsage:
    """``usage`` with pod ``p``'s series started ``offsets[p]`` steps in (wrapping round, as the
    burner repeats its series): the lab's production containers start during ``up``, before the
    day's step 0, so at the day's step ``s`` a container is at step ``(s + offset) mod steps`` of
    its series. Each pod gets its own column of held shapes. Example: a pod whose container
    started 3 steps before the play is at series step 3 at the day's step 0.

    Raises:
        InputError: ``offsets`` is not one integer per pod.
    """
    offsets = np.asarray(offsets)
    p = len(usage.vm_of_pod)
    if offsets.shape != (p,) or not np.issubdtype(offsets.dtype, np.integer):
        raise InputError(f"offsets of shape {offsets.shape} ({offsets.dtype})", source="lab run", field="offsets",
                         accepted=f"({p},) integers, one per production pod")
    steps = usage.shapes.shape[0]
    rows = (np.arange(steps)[:, None] + offsets[None, :]) % steps          # (s, p)
    shapes = usage.shapes[rows, usage.vm_of_pod[None, :]]                  # (s, p, 6)
    ages = usage.sample_age_s[rows, usage.vm_of_pod[None, :]]              # (s, p)
    return replace(usage, shapes=shapes, sample_age_s=ages, vm_of_pod=np.arange(p),
                   vm_ids=tuple(usage.vm_ids[v] for v in usage.vm_of_pod.tolist()))


def series_offsets(production_ids: Sequence[str], declaration_of: Mapping[str, tuple[str, str]],
                   node_of: Mapping[str, str], started_s: Mapping[tuple[str, str, str], list[float]], *,
                   day_start_s: float, step_wall_s: float, steps: int) -> np.ndarray:
    """Per production pod, how many steps into its series its container was at the day's start.

    ``declaration_of[pod]`` = ``(namespace, declaration)``, ``node_of[pod]`` its lab node;
    ``started_s[(namespace, declaration, node)]``: the start times (Unix s) of the live
    containers of that declaration on that node — replicas of one template on one node are
    interchangeable, so they pair with the slice's pods in order. A pod with no live start
    gets 0. Example: a container started 13 s before the day at 1 s steps → 13.
    """
    taken: dict[tuple[str, str, str], int] = {}
    out = np.zeros(len(production_ids), dtype=np.int64)
    for i, pod in enumerate(production_ids):
        key = (*declaration_of[pod], node_of[pod])
        j = taken.get(key, 0)
        starts = sorted(started_s.get(key, []))
        if j < len(starts):
            out[i] = int(max(0.0, day_start_s - starts[j]) // step_wall_s) % steps
        taken[key] = j + 1
    return out


def burner_held_mib(value_mib: np.ndarray, limit_bytes: np.ndarray, overhead_mib: float) -> np.ndarray:
    """The memory figure (MiB) the lab's burner holds for a figure ``value_mib``: rounded to
    whole MiB as the slice renders it, and at most the container's limit (whole MiB) less
    ``overhead_mib`` (the burner's own pages, so a pod at its limit in the trace is not OOM-killed),
    never below 0. Shapes broadcast. Example: 95.6 MiB under a 96 MiB limit with 3 MiB overhead →
    min(96, 93) = 93 MiB; 40.2 MiB → 40 MiB."""
    cap = np.maximum(0.0, np.floor(np.asarray(limit_bytes, dtype=np.float64) / MIB) - overhead_mib)
    return np.minimum(np.round(np.asarray(value_mib, dtype=np.float64)), cap)


@dataclass(frozen=True, eq=False)
class BurnerHeldUsage(ProductionUsage):
    """Production usage as the lab's burner holds it: every memory figure
    :func:`burner_held_mib` of the trace's, plus ``own_bytes`` — the pages the burner and the
    container's init hold themselves, which the pod's cgroup counts beside the figure (measured
    on a day: :func:`agents.lab.runfigures.burner_own_bytes`). cpu is unchanged. ``clipped``
    still flags the trace above the limit (the burner itself never exceeds it)."""

    overhead_mib: float = 0.0
    own_bytes: float = 0.0

    def clipped_usage_at(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        usage = self.usage_at(step)
        clipped = usage > self.limit
        held = np.minimum(usage, self.limit)
        ram = burner_held_mib(held[:, RAM] / MIB, self.limit[:, RAM], self.overhead_mib) * MIB + self.own_bytes
        held[:, RAM] = np.minimum(ram, self.limit[:, RAM])
        return held, clipped


def hold_like_burner(replay: Replay, *, overhead_mib: float, own_bytes: float) -> None:
    """Make ``replay`` hold memory as the lab's burner does (docs/lab.md, *How the replay holds
    memory*): production through :class:`BurnerHeldUsage`, and each batch task's working set
    ``min(request, ⌊L⌋ − overhead) + own`` MiB (a batch pod holds its request, the lab's ``work``
    figure), at most its limit. ``own_bytes`` 0 with ``overhead_mib`` 0 leaves the replay as built
    except for the whole-MiB rounding. Mutates ``replay``'s simulator.

    Example: a batch task of 40 MiB request and limit, overhead 3 MiB, own pages 0.7 MiB → held at
    37.7 MiB where the replay held 40 MiB; a production pod whose trace reads 20.4 MiB under a
    64 MiB limit → 20.7 MiB."""
    sim = replay.simulator
    usage = sim.usage
    sim.usage = BurnerHeldUsage(**{f.name: getattr(usage, f.name) for f in fields(ProductionUsage)},
                                overhead_mib=float(overhead_mib), own_bytes=float(own_bytes))
    tasks = sim.state.tasks
    held = burner_held_mib(tasks.usage[:, RAM] / MIB, tasks.limit[:, RAM], overhead_mib) * MIB + own_bytes
    tasks.usage[:, RAM] = np.minimum(held, tasks.limit[:, RAM])
