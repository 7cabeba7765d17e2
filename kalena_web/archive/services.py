"""Archive writes (keyword-only arguments, ``<entity>_<action>``): persist a replay as a named
run, all or nothing; delete a run."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable
from datetime import datetime

from django.db import IntegrityError, transaction

from kalena_engine.replay import Replay, ReplayConfig, ReplayInputs, StepRecord
from kalena_web.archive.errors import RunExists, RunNameInvalid, RunNotFound
from kalena_web.archive.models import (
    RUN_NAME_PATTERN, BatchEvent, BatchPlacement, ClusterSeries, NodeSeries, Run, TaskOutcome, WorkloadSeries,
)
from kalena_web.archive.recorder import RunRecorder, plain
from kalena_web.inventory.services import cluster_create_from_replay
from kalena_web.ledger.models import NodeLedger

#: Steps per archived chunk: 6 h at 60 s steps (bounded memory, few rows per node page).
DEFAULT_CHUNK_STEPS = 360

Execute = Callable[[Callable[[StepRecord], None]], dict]


def run_name_validate(name: str) -> str:
    """The name, if it can name a run: 1–64 of letters, digits, ``.``, ``_``, ``-``, starting
    with a letter or digit (it appears in URLs and shell commands).

    Raises:
        RunNameInvalid: naming the value and the accepted form.
    """
    if not isinstance(name, str) or not re.fullmatch(RUN_NAME_PATTERN, name):
        raise RunNameInvalid(
            f"run name {name!r} is not accepted: use 1–64 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit (e.g. irina-24h-seed0)")
    return name


def run_default_name(*, cluster_name: str, config: ReplayConfig, now: datetime) -> str:
    """``<cluster>-<hours>h-seed<seed>-<YYYYmmdd-HHMMSS>``, e.g. ``irina-186-3d-24h-seed0-20250101-120000``."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", cluster_name).strip("-._") or "run"
    name = f"{base[:30]}-{config.hours:g}h-seed{config.seed}-{now:%Y%m%d-%H%M%S}"
    return run_name_validate(name[:64])


def run_persist(*, name: str, replay: Replay, inputs: ReplayInputs, config: ReplayConfig, cluster_name: str,
                sources: dict[str, str], execute: Execute | None = None, replace: bool = False,
                chunk_steps: int = DEFAULT_CHUNK_STEPS) -> Run:
    """Run ``replay`` and persist everything it produced as run ``name``, in one transaction.

    Args:
        replay: a built, not yet run, replay; ``inputs`` and ``config`` are what built it.
        cluster_name: the cluster's name (e.g. the infrastructure folder, ``irina-186-3d``).
        sources: input kind → file, recorded with the cluster.
        execute: runs the replay given the step observer and returns the summary (the CLI
            passes its own, with progress bar and timing fields); default ``replay.run``.
        replace: overwrite an existing run of that name (in the same transaction).
        chunk_steps: steps per archived series chunk.

    Returns:
        The saved :class:`Run` with its summary.

    Raises:
        RunNameInvalid, RunExists: before anything runs. Anything raised while simulating or
            writing (including :class:`RecordingInconsistent`) rolls the whole run back: no
            partial run is ever visible.
    """
    run_name_validate(name)
    if chunk_steps < 1:
        raise ValueError(f"chunk_steps must be ≥ 1, got {chunk_steps}")
    if not replace and Run.objects.filter(name=name).exists():
        raise RunExists(f"a run named {name!r} already exists; choose another --run-name or pass --replace")
    started = time.perf_counter()
    try:
        with transaction.atomic():
            if replace:
                for old in Run.objects.filter(name=name).select_for_update():
                    _delete(old)
            inventory = cluster_create_from_replay(name=cluster_name, sources=sources, inputs=inputs, replay=replay)
            run = Run.objects.create(
                name=name, cluster=inventory.cluster, config=plain({**dataclasses.asdict(config), "sources": sources}),
                start_s=float(replay.simulator.clock.start_s), step_s=config.step_s, steps=config.steps,
                chunk_steps=chunk_steps,
            )
            recorder = RunRecorder(run=run, inventory=inventory, state=replay.simulator.state,
                                   eligible=replay.simulator.eligible)
            summary = (execute or replay.run)(recorder.on_step)
            recorder.finish(summary=summary, persist_seconds=round(time.perf_counter() - started, 3),
                            why_pending=[r.to_dict() for r in replay.why_pending()])
    except IntegrityError as exc:
        if Run.objects.filter(name=name).exists():
            raise RunExists(f"a run named {name!r} was persisted meanwhile; nothing was written") from exc
        raise
    run.written = dict(recorder.written)
    return run


def run_delete(*, name: str) -> None:
    """Delete run ``name`` and everything it recorded (its cluster included), atomically.

    Raises:
        RunNotFound: no run has that name.
    """
    with transaction.atomic():
        run = Run.objects.filter(name=name).select_for_update().first()
        if run is None:
            raise RunNotFound(f"no run named {name!r}")
        _delete(run)


def _delete(run: Run) -> None:
    # Dependents first: none of these has dependents of its own, so each is one fast DELETE.
    for model in (BatchEvent, BatchPlacement, TaskOutcome, NodeSeries, WorkloadSeries, ClusterSeries, NodeLedger):
        model.objects.filter(run=run).delete()
    cluster = run.cluster
    run.delete()
    cluster.delete()
