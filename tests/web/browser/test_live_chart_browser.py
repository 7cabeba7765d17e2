"""In a real browser: a live node page receives ledger points over its WebSocket and the chart
grows by one point per trace for each — production usage and batch throttled too — with no error
in the browser console.

The page is served by the live server; its socket is answered inside the browser (Playwright's
``route_web_socket``) with the very points :func:`kalena_web.ledger.live.ledger_point` builds,
so the page's own script handles exactly what the estimation loop publishes."""

from __future__ import annotations

import json
import time

import pytest
from django.contrib.auth.models import User

from kalena_web.ledger.live import ledger_point
from kalena_web.ledger.models import LiveNodeLedger
from tests.web.conftest import PASSWORD
from tests.web.live_cluster import fill_node_archive

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LENGTHS = "gd => gd._fullData.map(t => Array.from(t.x || []).length)"
LAST_Y = "gd => gd.data.map(t => { const y = Array.from(t.y || []); return y.length ? y[y.length - 1] : null; })"


def login(page, url: str) -> None:
    page.goto(f"{url}/accounts/login/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_load_state()


def test_live_updates_extend_the_node_chart(live_server, live, chromium, artifacts) -> None:
    User.objects.create_user(username="operator", password=PASSWORD)
    now = time.time()
    # the archive holds 30 minutes of history, the first 3 from before batch usage was recorded
    fill_node_archive(live, "thinkcentre-beta", now_s=now, minutes=30, old=3)
    ledger = LiveNodeLedger.objects.select_related("node").get(node__name="thinkcentre-beta")
    points = []
    for k in range(3):  # three estimation passes after the history, batch usage and its throttling growing
        point = ledger_point(ledger, limits=list(ledger.prod_request))
        point["t"] = now + 10.0 * k
        point["usage"] = [u + 250.0 * (k + 1) if d == 0 else u for d, u in enumerate(point["usage"])]
        point["batch_usage"] = [u + 250.0 * (k + 1) if d == 0 else u for d, u in enumerate(point["batch_usage"])]
        point["batch_throttled"] = 100.0 * (k + 1)
        points.append(point)

    sockets = []  # the page's socket, answered from here once the chart is drawn

    page = chromium.new_page(viewport={"width": 1440, "height": 1100})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        login(page, live_server.url)
        page.route_web_socket("**/ws/nodes/*/", lambda ws: sockets.append(ws))
        page.goto(f"{live_server.url}/live/{live.name}/nodes/thinkcentre-beta/")
        page.wait_for_selector("body[data-charts=ready]", timeout=30_000)
        page.wait_for_function("document.querySelector('[data-live-status]').textContent.includes('receiving')")
        before = page.eval_on_selector("#live-chart", LENGTHS)
        assert before == [30] * 13  # the archive's minutes are drawn, on every trace (module doc of live_figures)
        for p in points:  # as the publisher sends them
            sockets[0].send(json.dumps(p))
        page.wait_for_function("document.querySelector('#live-chart').dataset.livePoints === '3'", timeout=10_000)
        assert errors == []
        lengths = page.eval_on_selector("#live-chart", LENGTHS)
        assert lengths == [n + 3 for n in before]  # every trace grew by the three points
        last = page.eval_on_selector("#live-chart", LAST_Y)
        names = page.eval_on_selector("#live-chart", "gd => gd.data.map(t => t.name)")
        assert names[4:7] == ["Usage (Σ)", "Production usage", "Batch throttled"]
        p = points[-1]
        assert last[4] == pytest.approx(p["usage"][0] / 1000.0)  # cpu usage, cores
        assert last[5] == pytest.approx((p["usage"][0] - p["batch_usage"][0]) / 1000.0)  # production's part
        assert last[6] == pytest.approx(0.3)  # batch throttled, 300 mcpu → cores
        assert last[11] == pytest.approx(p["usage"][1] / 2**30)  # ram usage, GiB
        assert last[12] == pytest.approx((p["usage"][1] - p["batch_usage"][1]) / 2**30)
        assert "live: receiving updates" in page.inner_text("[data-live-status]")
        page.screenshot(path=str(artifacts / "live-node-chart.png"), full_page=True)
    finally:
        page.close()
