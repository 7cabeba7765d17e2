"""The live node chart: usage split into production (from zero) and batch stacked on it up to
the node's Σ usage, for cpu and ram, and the batch pods' cpu throttling as its own series — from
the node's minute rows as the archive loop writes them. Rows written before batch usage and
throttling were recorded are gaps, not errors."""

from __future__ import annotations

import time

import numpy as np
import pytest
from django.contrib.auth.models import User

from tests.web.helpers import figure, traces
from tests.web.live_cluster import fill_node_archive

pytestmark = pytest.mark.django_db

CPU_TRACES = ["Capacity", "Limits (Σ)", "Requests (Σ)", "Reservations (Σ)", "Usage (Σ)", "Production usage"]


def y(trace: dict) -> np.ndarray:
    return np.array(trace["y"], dtype=np.float64)  # null → NaN


def test_the_live_node_chart_stacks_batch_on_production_and_draws_batch_throttled(client, live) -> None:
    written = fill_node_archive(live, "thinkcentre-beta", now_s=time.time(), minutes=30, old=3)
    client.force_login(User.objects.create_user("op", password="x" * 12))
    page = client.get("/live/home/nodes/thinkcentre-beta/").content.decode()
    fig = figure(page, "fig-live")
    cpu, ram, waiting = traces(fig, "y"), traces(fig, "y2"), traces(fig, "y3")
    assert list(cpu) == CPU_TRACES and list(ram) == CPU_TRACES     # memory is not throttled
    # batch throttled is seconds of waiting per second, not cores: its own axis beside the cpu panel
    assert list(waiting) == ["Batch throttled"] and fig["layout"]["yaxis3"]["overlaying"] == "y"
    assert "s/s" in fig["layout"]["yaxis3"]["title"]["text"]
    for panel, dim in ((cpu, "cores"), (ram, "gib")):
        capacity, usage, prod = y(panel["Capacity"]), y(panel["Usage (Σ)"]), y(panel["Production usage"])
        np.testing.assert_allclose(usage, written[f"usage_{dim}"])             # the top line: Σ usage
        np.testing.assert_allclose(prod, written[f"prod_{dim}"])               # NaN where not recorded
        assert np.all(usage <= capacity)                                       # as the input is
        assert np.all(prod[3:] <= usage[3:]) and np.all(prod[3:] > 0)          # batch is the band above
        assert np.isnan(prod[:3]).all()                                        # old rows: a gap
    throttled = y(waiting["Batch throttled"])
    np.testing.assert_allclose(throttled, written["throttled_cores"])
    assert np.isnan(throttled[:3]).all() and np.nanmax(throttled) > 0
    assert cpu["Usage (Σ)"]["fill"] == cpu["Production usage"]["fill"] == "tozeroy"


def test_a_history_without_the_split_draws_gaps() -> None:
    """A history from before the split (no batch usage, no throttling) still draws every trace."""
    import json

    from kalena_web.console.live_figures import live_node_figure

    history = {"times_s": np.array([1_700_000_000.0, 1_700_000_060.0])}
    history.update({k: np.full((2, 8), 1000.0) for k in ("capacity", "limit", "request", "reservation", "usage")})
    data = json.loads(live_node_figure(history))["data"]
    assert len(data) == 13
    by_name = {(t["name"], t["yaxis"]): t["y"] for t in data}
    assert by_name[("Usage (Σ)", "y")] == [1.0, 1.0]
    assert by_name[("Production usage", "y")] == by_name[("Batch throttled", "y3")] == [None, None]

