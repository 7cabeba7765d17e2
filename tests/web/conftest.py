"""Console fixtures: real replays of the Irina blueprint persisted once per test session.

``recorded`` persists, into the test database (SQLite in memory by default, PostgreSQL when
``DATABASE_URL`` points at one), a 1-hour replay of the full cluster at twice the batch load
under the asymmetric rule at μ 1.15, h 600 s (``tests/worked.py``; so that it evicts: the shipped
default evicts nothing in that hour) ("t-main", in 25-step
chunks so reads cross chunk boundaries) and a half-hour replay of a 12-node slice of the same
blueprint ("t-small"), and keeps copies of what the engine computed at chosen steps so tests
compare pages against the engine, never against hard-coded numbers.
"""

from __future__ import annotations

import dataclasses
from argparse import Namespace
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from kalena_engine.kuberina import Blueprint
from kalena_engine.replay import ReplayConfig, StepRecord, build_replay
from kalena_web.cli.inputs import DEFAULTS, load_inputs
from tests.web.live_cluster import live  # noqa: F401 - the live cluster fixture for control-plane tests
from tests.web.webhook_server import kalena_webhook  # noqa: F401 - `kalena serve --tls-port`, once a session
from tests.worked import WORKED_POLICY

MAIN_STEPS = (0, 24, 25, 37, 59)   # captured steps of t-main: start, around a chunk boundary, end
PASSWORD = "correct horse battery staple"


@dataclass
class Captured:
    """Copies of the engine's :class:`StepRecord` arrays at the captured steps."""

    records: dict[int, StepRecord] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)
    replay: object = None
    slack_sum: np.ndarray | None = None  # Σ over steps of C − Σ r per node, (n, 8)
    steps: int = 0


@pytest.fixture(scope="session")
def replay_inputs(data_dir: Path):
    args = Namespace(**{k: str(data_dir / v) for k, v in DEFAULTS.items()}, batch_format="auto",
                     machine_ram_gib=None, machine_cores=None)
    return load_inputs(args, progress=False)


def slice_inputs(inputs, n_nodes: int):
    """The same inputs restricted to the first ``n_nodes`` nodes and the pods the blueprint put
    there (a smaller real cluster: for tests that sizes do not change query counts)."""
    nodes = inputs.infra.nodes[:n_nodes]
    names = {n.name for n in nodes}
    assignment = {pod: node for pod, node in inputs.blueprint.assignment.items() if node in names}
    kept = {p.id for p in inputs.workloads.pods if p.id in assignment}
    pods = tuple(dataclasses.replace(p, affinity=tuple(t for t in p.affinity if t in kept),
                                     anti_affinity=tuple(t for t in p.anti_affinity if t in kept))
                 for p in inputs.workloads.pods if p.id in kept)
    return dataclasses.replace(
        inputs,
        infra=dataclasses.replace(inputs.infra, nodes=nodes),
        workloads=dataclasses.replace(inputs.workloads, pods=pods, groups=(), unresolved=()),
        blueprint=Blueprint(source=inputs.blueprint.source, assignment=assignment, metadata=inputs.blueprint.metadata),
    )


def _copy(record: StepRecord) -> StepRecord:
    arrays = {f.name: np.array(getattr(record, f.name), copy=True) for f in dataclasses.fields(record)
              if isinstance(getattr(record, f.name), np.ndarray)}
    return dataclasses.replace(record, **arrays)


def persist(*, name: str, inputs, config: ReplayConfig, steps=(), chunk_steps: int = 25) -> Captured:
    """Build, run and persist a replay, capturing the engine's records at ``steps``."""
    from kalena_web.archive.services import run_persist

    captured = Captured()
    replay = build_replay(inputs, config)

    def execute(on_step):
        def observe(record):
            if record.step in steps:
                captured.records[record.step] = _copy(record)
            slack = record.capacity - record.prod_reservation - record.batch_reservation
            captured.slack_sum = slack if captured.slack_sum is None else captured.slack_sum + slack
            captured.steps += 1
            on_step(record)
        return replay.run(observe)

    run = run_persist(name=name, replay=replay, inputs=inputs, config=config, cluster_name="irina-186-3d",
                      sources={"infra": inputs.infra.source}, execute=execute, chunk_steps=chunk_steps)
    captured.summary = run.summary
    captured.replay = replay
    return captured


@dataclass
class Recorded:
    main: Captured
    small: Captured


@pytest.fixture(scope="session")
def recorded(django_db_setup, django_db_blocker, replay_inputs) -> Recorded:
    with django_db_blocker.unblock():
        main = persist(name="t-main", inputs=replay_inputs, config=ReplayConfig(hours=1.0, load_factor=2.0, policy=WORKED_POLICY),
                       steps=MAIN_STEPS)
        small = persist(name="t-small", inputs=slice_inputs(replay_inputs, 12), config=ReplayConfig(hours=0.5))
    return Recorded(main=main, small=small)


@pytest.fixture
def operator(db, django_user_model):
    return django_user_model.objects.create_user(username="operator", password=PASSWORD)


@pytest.fixture
def console(client, operator, recorded):
    """A logged-in test client over the recorded runs."""
    client.force_login(operator)
    return client


def pytest_collection_modifyitems(config, items):
    """Browser tests last: they use the live server, whose transactional cleanup empties the
    database, including the runs ``recorded`` persisted once for the session."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)
