"""In a real browser: the node page of a live cluster whose production runs under its
controllers' names (a Deployment's ReplicaSet pods, StatefulSet ordinals, a Job and a bare pod)
lists every extra pod once with the reason it maps to no blueprint entry, and the node's
production requests are the blueprint's plus each extra once; a screenshot is kept in
artifacts/browser/."""

from __future__ import annotations

import re
import time

import pytest

from agents.orchestrators.kubernetes.objects import pod_events
from agents.orchestrators.kubernetes.testpods import bare_pod, deployment_pod, job_pod, statefulset_pod
from kalena_engine.resources import CPU
from kalena_web.control.reconciler import Reconciler
from kalena_web.ledger.models import LiveNodeLedger
from tests.web.conftest import PASSWORD
from tests.web.shop_cluster import import_shop

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_node_page_lists_each_extra_once_with_its_reason(live_server, chromium, django_user_model, artifacts,
                                                             tmp_path) -> None:
    now = time.time()
    cluster = import_shop(tmp_path, now_s=now - 600)
    started = now - 3600.0
    reconciler = Reconciler(cluster=cluster)
    for pod in (deployment_pod("shop", "web", "7d9c5b6f4", "h5v7m", "kube-b", cpu="6", started_s=started),
                statefulset_pod("shop", "db", 1, "kube-b", cpu="12", started_s=started),
                job_pod("shop", "report", "28h4k", "kube-b", cpu="2", started_s=started),
                bare_pod("shop", "debug", "kube-b", cpu="1", started_s=started)):
        for event in pod_events("ADDED", pod):
            reconciler.apply(event)
    # kube-b: the blueprint's web-0002 + db-0001 (18 cores), then the Job's pod and the bare pod once
    ledger = LiveNodeLedger.objects.get(node__cluster=cluster, node__name="kube-b")
    assert ledger.prod_request[CPU] == 18000.0 + 2000.0 + 1000.0

    django_user_model.objects.create_user(username="operator", password=PASSWORD)
    page = chromium.new_page(viewport={"width": 1440, "height": 1000})
    try:
        page.goto(f"{live_server.url}/live/shop/nodes/kube-b/")
        page.fill("#id_username", "operator")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/live/shop/nodes/kube-b/$"))
        section = page.locator("#extra-pods")
        assert "(2)" in section.locator("h2").inner_text()
        rows = {r.get_attribute("data-extra"): r.inner_text() for r in section.locator("tr[data-extra]").all()}
        assert set(rows) == {"shop/report-28h4k", "shop/debug"}
        assert "owned by Job/report, a kind the blueprint does not declare" in rows["shop/report-28h4k"]
        assert "a bare pod (no controller) whose name is no blueprint pod" in rows["shop/debug"]
        assert "web-7d9c5b6f4-h5v7m" not in section.inner_text()  # mapped to web-0002: not an extra
        target = artifacts / "live-node-extras.png"
        page.screenshot(path=str(target), full_page=True)
        assert target.stat().st_size > 20_000
    finally:
        page.close()
