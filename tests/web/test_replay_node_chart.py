"""The replay's node chart never draws the impossible: cpu is compressible, so when production
and batch together want more than a node has, the chart shows what the node served (never above
capacity) and the batch demand it throttled as its own series."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.resources import CPU, RAM
from kalena_web.console.figures import served_cpu
from tests.web.helpers import figure, traces

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("capacity", "prod", "batch", "served", "throttled"), [
    (61.75, 50.0, 15.89, 61.75, 4.14),  # 50 + min(15.89, 11.75): 4.14 of batch waits
    (61.75, 20.0, 10.0, 30.0, 0.0),     # room for both: served = demand
    (8.0, 9.0, 2.0, 8.0, 2.0),          # production alone over capacity: batch gets nothing
])
def test_served_cpu_gives_production_first_and_batch_what_is_left(capacity, prod, batch, served, throttled) -> None:
    got_served, got_throttled = served_cpu(np.array(capacity), np.array(prod), np.array(batch))
    assert float(got_served) == pytest.approx(served) and float(got_throttled) == pytest.approx(throttled)


def test_cpu_usage_on_the_node_chart_never_exceeds_capacity(console, recorded) -> None:
    state = recorded.main.replay.simulator.state
    over = [(step, row) for step, r in recorded.main.records.items()
            for row in np.flatnonzero(r.prod_usage[:, CPU] + r.batch_usage[:, CPU] > r.capacity[:, CPU])]
    assert over, "the recorded run has a node whose cpu demand exceeds its capacity"
    step, row = over[0]
    record = recorded.main.records[step]
    page = console.get(f"/runs/t-main/nodes/{state.node_names[row]}/?step={step}").content.decode()
    cpu = traces(figure(page, "fig-node"), "y")
    capacity, usage, throttled = (np.asarray(cpu[k]["y"]) for k in ("Capacity", "Usage (Σ)", "Batch throttled"))
    assert np.all(usage <= capacity + 1e-9)  # every step, not only the captured one
    demand = (record.prod_usage[row, CPU] + record.batch_usage[row, CPU]) / 1000.0
    assert usage[step] == pytest.approx(record.capacity[row, CPU] / 1000.0)
    assert usage[step] + throttled[step] == pytest.approx(demand)  # served + throttled = what was wanted
    assert throttled[step] > 0
    ram = traces(figure(page, "fig-node"), "y2")
    assert "Batch throttled" not in ram  # memory is not compressible
    assert ram["Usage (Σ)"]["y"][step] == (record.prod_usage[row, RAM] + record.batch_usage[row, RAM]) / 2.0**30
    assert "never above" in page


def test_the_node_pages_figures_never_show_cpu_usage_above_capacity(console, recorded) -> None:
    """The chart's neighbours say what it says: the "All usage · mean / peak" figure and the
    ledger table's Usage row give the cpu the node served (the demo's std-005 read a peak of
    61.83 cores on a 61.75-core node), with the throttled batch demand named beside it."""
    import re

    from kalena_web.console.formatting import cores

    state = recorded.main.replay.simulator.state
    over = [(step, row) for step, r in recorded.main.records.items()
            for row in np.flatnonzero(r.prod_usage[:, CPU] + r.batch_usage[:, CPU] > r.capacity[:, CPU])]
    step, row = over[0]
    record = recorded.main.records[step]
    page = console.get(f"/runs/t-main/nodes/{state.node_names[row]}/?step={step}").content.decode()
    capacity = record.capacity[row, CPU]
    peak = re.search(r"All usage · mean / peak</span><strong class=\"value\">[^/]+/ ([0-9.,]+) cores", page)
    assert peak and float(peak.group(1).replace(",", "")) <= capacity / 1000.0
    usage = re.search(r'data-row="Usage">.*?<strong data-dim="cpu">([^<]+)</strong><span class="split">([^<]+)</span>',
                      page, re.S)
    assert usage and usage.group(1) == cores(capacity)  # served: all of it
    assert "throttled" in usage.group(2)
