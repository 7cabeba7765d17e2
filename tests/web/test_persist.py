"""Persisting a replay: what the engine computed is what the archive and the pages hold, all or
nothing, under a name that is checked first."""

from __future__ import annotations

import numpy as np
import pytest
from django.db.models import Sum

from kalena_engine.replay import ReplayConfig, build_replay
from kalena_engine.resources import CPU, RAM
from kalena_web.archive import selectors
from kalena_web.archive.errors import RunExists, RunNameInvalid, RunNotFound
from kalena_web.archive.models import BatchEvent, BatchPlacement, NodeSeries, Run, TaskOutcome, WorkloadSeries
from kalena_web.archive.services import run_delete, run_persist
from kalena_web.console.formatting import cores, gib
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.ledger.models import NodeLedger
from tests.web.conftest import MAIN_STEPS, persist, slice_inputs
from kalena_web.console.figures import served_cpu
from tests.web.helpers import cells, figure, traces

pytestmark = pytest.mark.django_db


def _busiest_node(record, rows) -> int:
    """The node row with the most batch cpu requested at this step (a node with a story)."""
    return int(np.argmax(record.batch_request[:, CPU]))


def test_round_trip_engine_equals_node_page_for_one_node_and_one_time(console, recorded) -> None:
    step = 37
    record = recorded.main.records[step]
    state = recorded.main.replay.simulator.state
    row = _busiest_node(record, state)
    name = state.node_names[row]
    page = console.get(f"/runs/t-main/nodes/{name}/?step={step}").content.decode()

    # the chart carries the engine's exact numbers at that step (cpu in cores, ram in GiB)
    fig = figure(page, "fig-node")
    for axis, d, scale in (("y", CPU, 1000.0), ("y2", RAM, 2.0**30)):
        shown = traces(fig, axis)
        expected = {
            "Capacity": record.capacity[row, d],
            "Limits (Σ)": record.prod_limit[row, d] + record.batch_limit[row, d],
            "Requests (Σ)": record.prod_request[row, d] + record.batch_request[row, d],
            "Reservations (Σ)": record.prod_reservation[row, d] + record.batch_reservation[row, d],
            "Usage (Σ)": record.prod_usage[row, d] + record.batch_usage[row, d] if d == RAM else
            served_cpu(record.capacity[row, d], record.prod_usage[row, d], record.batch_usage[row, d])[0],
        }
        for label, value in expected.items():
            assert shown[label]["y"][step] == value / scale, (axis, label)

    # the ledger table at that moment says the same, formatted in cores and GiB
    for label, prod, batch in (("Requests", record.prod_request, record.batch_request),
                               ("Reservations", record.prod_reservation, record.batch_reservation),
                               ("Usage", record.prod_usage, record.batch_usage)):
        row_cells = cells(page, "data-row", label)
        assert row_cells[2].startswith(cores(prod[row, CPU] + batch[row, CPU]) + " ")
        assert f"production {cores(prod[row, CPU])} + batch {cores(batch[row, CPU])}" in row_cells[2]
        assert row_cells[3].startswith(gib(prod[row, RAM] + batch[row, RAM]) + " ")
    slack = record.capacity[row] - record.prod_reservation[row] - record.batch_reservation[row]
    assert cells(page, "data-row", "Slack")[2:] == [cores(slack[CPU]), gib(slack[RAM])]

    # each production pod's row shows its own reservation and usage at that step
    pods = np.flatnonzero(state.production.node == row)
    assert len(pods) > 0
    for p in pods:
        pod_cells = cells(page, "data-pod", state.production.ids[p])
        assert pod_cells[3:5] == [cores(record.pod_reservation[p, CPU]), cores(record.pod_usage[p, CPU])]
        assert pod_cells[7:9] == [gib(record.pod_reservation[p, RAM]), gib(record.pod_usage[p, RAM])]


@pytest.mark.parametrize("step", MAIN_STEPS)
def test_batch_running_on_each_node_adds_up_to_the_engines_aggregates(recorded, step) -> None:
    """Placements rebuilt from events + the estimator give back the engine's per-node batch
    request and reservation on every node, at chunk boundaries too."""
    record = recorded.main.records[step]
    run = Run.objects.get(name="t-main")
    nodes = list(Node.objects.filter(cluster=run.cluster).order_by("row"))
    for node in nodes:
        batch = selectors.node_batch_at(run=run, node=node, step=step)
        request = sum((b.request for b in batch), np.zeros(2))
        reservation = sum((b.reservation for b in batch), np.zeros(2))
        np.testing.assert_allclose(request, record.batch_request[node.row, [CPU, RAM]], rtol=1e-9, atol=1e-6)
        np.testing.assert_allclose(reservation, record.batch_reservation[node.row, [CPU, RAM]], rtol=1e-9, atol=1e-6)


def test_archive_counts_match_the_replay_summary(recorded) -> None:
    run = Run.objects.get(name="t-main")
    summary = recorded.main.summary
    assert run.summary["batch_submitted"] == summary["batch_submitted"] > 0
    by_kind = dict(BatchEvent.objects.filter(run=run).values_list("kind").annotate(n=Sum("count")))
    assert by_kind["submitted"] == summary["batch_submitted"]
    assert by_kind["placed"] == summary["batch_placed"]
    assert by_kind["completed"] == summary["batch_completed"]
    assert by_kind.get("evicted", 0) == summary["batch_evicted"] > 0
    totals = TaskOutcome.objects.filter(run=run).aggregate(s=Sum("submitted"), c=Sum("completed"), e=Sum("evicted"),
                                                           r=Sum("running_at_end"), p=Sum("pending_at_end"))
    assert (totals["s"], totals["c"], totals["e"]) == (summary["batch_submitted"], summary["batch_completed"],
                                                      summary["batch_evicted"])
    state = recorded.main.replay.simulator.state
    assert totals["r"] == int(state.groups.count.sum()) and totals["p"] == int(state.pending.sum())
    # batch pods of one task are stored as groups, never one row per pod
    assert BatchPlacement.objects.filter(run=run).count() < summary["batch_placed"] / 5
    assert NodeLedger.objects.filter(run=run).aggregate(e=Sum("batch_evicted"))["e"] == summary["batch_evicted"]
    assert NodeSeries.objects.filter(run=run).count() == 186 * 3  # 60 steps in chunks of 25
    assert WorkloadSeries.objects.filter(run=run).count() == 2714 * 3


def test_two_runs_coexist_with_their_own_inventory(recorded) -> None:
    main, small = Run.objects.get(name="t-main"), Run.objects.get(name="t-small")
    assert main.cluster_id != small.cluster_id
    assert Node.objects.filter(cluster=main.cluster).count() == 186
    assert Node.objects.filter(cluster=small.cluster).count() == 12
    assert small.summary["nodes"] == 12 and main.summary["nodes"] == 186


def _counts() -> dict[str, int]:
    return {m.__name__: m.objects.count() for m in (Run, Cluster, Node, Workload, BatchEvent, BatchPlacement,
                                                    NodeSeries, WorkloadSeries, TaskOutcome, NodeLedger)}


def test_a_failure_mid_write_leaves_no_partial_run(recorded, replay_inputs, monkeypatch) -> None:
    from kalena_web.archive.recorder import RunRecorder

    before = _counts()
    flush = RunRecorder._flush
    calls = {"n": 0}

    def failing_flush(self):
        calls["n"] += 1
        if calls["n"] == 2:  # the first chunk is already written when this fails
            raise OSError("disk full (injected)")
        flush(self)

    monkeypatch.setattr(RunRecorder, "_flush", failing_flush)
    with pytest.raises(OSError, match="injected"):
        persist(name="t-broken", inputs=slice_inputs(replay_inputs, 12), config=ReplayConfig(hours=1.0), chunk_steps=20)
    assert calls["n"] == 2
    assert not Run.objects.filter(name="t-broken").exists()
    assert _counts() == before


@pytest.mark.parametrize("name", ["", "has space", "../etc", "-leading-dash", "x" * 65, "naïve"])
def test_bad_run_names_are_refused_before_anything_runs(replay_inputs, name) -> None:
    before = _counts()
    config = ReplayConfig(hours=0.1)
    with pytest.raises(RunNameInvalid, match="letters, digits"):
        run_persist(name=name, replay=build_replay(replay_inputs, config), inputs=replay_inputs, config=config,
                    cluster_name="c", sources={})
    assert _counts() == before


def test_an_existing_name_is_refused_unless_replace(recorded, replay_inputs) -> None:
    small = slice_inputs(replay_inputs, 6)
    config = ReplayConfig(hours=0.2)
    before = _counts()
    with pytest.raises(RunExists, match="--replace"):
        run_persist(name="t-small", replay=build_replay(small, config), inputs=small, config=config,
                    cluster_name="c", sources={})
    assert _counts() == before
    old = Run.objects.get(name="t-small")
    new = run_persist(name="t-small", replay=build_replay(small, config), inputs=small, config=config,
                      cluster_name="c", sources={}, replace=True)
    assert new.id != old.id and new.summary["nodes"] == 6
    assert not Cluster.objects.filter(id=old.cluster_id).exists()
    assert not BatchEvent.objects.filter(run_id=old.id).exists()
    run_delete(name="t-small")
    assert not Run.objects.filter(name="t-small").exists()
    assert not Node.objects.filter(cluster_id=new.cluster_id).exists()
    with pytest.raises(RunNotFound):
        run_delete(name="t-small")
