"""In a real browser: log in, open a node page, and check that the chart drew every series
with the engine's numbers; a screenshot is kept in artifacts/browser/."""

from __future__ import annotations

import re

import numpy as np
import pytest

from kalena_engine.resources import CPU, RAM
from kalena_web.console.figures import served_cpu
from tests.web.conftest import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SERIES = ["Capacity", "Limits (Σ)", "Requests (Σ)", "Reservations (Σ)", "Usage (Σ)"]

READ_TRACES = """gd => gd._fullData.map(t => {
  const y = Array.from(t.y || []);
  const finite = y.filter(Number.isFinite);
  return {name: t.name, yaxis: t.yaxis, length: y.length, finite: finite.length,
          max: finite.length ? Math.max(...finite) : null, at37: y.length > 37 ? y[37] : null};
})"""


def test_node_chart_draws_non_empty_series(live_server, recorded, chromium, django_user_model, artifacts) -> None:
    django_user_model.objects.create_user(username="operator", password=PASSWORD)
    state = recorded.main.replay.simulator.state
    record = recorded.main.records[37]
    row = int(np.argmax(record.batch_request[:, CPU]))
    node = state.node_names[row]
    page = chromium.new_page(viewport={"width": 1440, "height": 1000})
    try:
        page.goto(f"{live_server.url}/runs/t-main/nodes/{node}/")
        assert "/accounts/login/?next=" in page.url  # anonymous: sent to log in first
        page.fill("#id_username", "operator")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(rf"/runs/t-main/nodes/{node}/$"))
        page.wait_for_selector("body[data-charts=ready]", timeout=30_000)

        drawn = page.eval_on_selector("#node-chart", READ_TRACES)
        by_panel = {(t["name"], t["yaxis"]): t for t in drawn}
        for axis, d, scale in (("y", CPU, 1000.0), ("y2", RAM, 2.0**30)):
            for name in SERIES:
                trace = by_panel[(name, axis)]
                assert trace["length"] == 60 and trace["finite"] == 60, (name, axis)
                assert trace["max"] > 0, (name, axis)
            assert by_panel[("Capacity", axis)]["at37"] == record.capacity[row, d] / scale
            usage = record.prod_usage[row, d] + record.batch_usage[row, d] if d == RAM else \
                served_cpu(record.capacity[row, d], record.prod_usage[row, d], record.batch_usage[row, d])[0]
            assert by_panel[("Usage (Σ)", axis)]["at37"] == pytest.approx(usage / scale, rel=1e-12)
        lines = page.eval_on_selector_all("#node-chart .scatterlayer path.js-line",
                                          "ps => ps.map(p => (p.getAttribute('d') || '').length)")
        assert len(lines) >= 10 and min(lines) > 50  # ten SVG lines really drawn

        target = artifacts / "node-chart.png"
        page.screenshot(path=str(target), full_page=True)
        assert target.stat().st_size > 20_000

        # clicking the chart opens the ledger at that moment
        box = page.locator("#node-chart .nsewdrag").first.bounding_box()
        page.mouse.click(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
        page.wait_for_url(re.compile(r"\?step=\d+#at$"), timeout=10_000)
        step = int(re.search(r"step=(\d+)", page.url).group(1))
        assert 20 <= step <= 40
        assert f"(step {step} of 59" in page.inner_text("#at")
    finally:
        page.close()
