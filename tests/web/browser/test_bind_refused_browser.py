"""A batch pod the node's engine could not run, as an operator sees it in the console: the
pending list wraps the engine's long error inside its card, and the pod's page says the pod was
bound and refused — not that a rule excluded every node."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PASSWORD = "refused-pod-pw-2026"


def test_a_refused_pod_reads_as_refused_and_its_error_wraps(live, live_server, chromium, django_user_model,
                                                            artifacts) -> None:
    from kalena_engine.policy import Policy
    from kalena_web.scheduling.services import scheduling_pass
    from tests.web.scheduling.test_scheduling_pass import UnpullableOrchestrator, submit

    submit(live, "batch/nope-0", cpu=0.5, image="kalena/nope:1")
    orch = UnpullableOrchestrator(node_names=["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"])
    orch.tried = []
    scheduling_pass(cluster=live, orchestrator=orch, policy=Policy(), now_s=time.time(), rng=np.random.default_rng(0))
    node = orch.tried[0]
    django_user_model.objects.create_user(username="operator", password=PASSWORD)
    page = chromium.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(f"{live_server.url}/live/home/pending/")
        page.fill("#id_username", "operator")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_selector("tr[data-pod='batch/nope-0']")
        row = page.locator("tr[data-pod='batch/nope-0']")
        assert "no such host" in row.inner_text() and node in row.inner_text()
        card, table = (page.locator(s).first.bounding_box() for s in (".card", "table.data"))
        assert table["x"] + table["width"] <= card["x"] + card["width"] + 1, (table, card)   # wrapped, not overflowing
        page.screenshot(path=str(artifacts / "live-pending-refused.png"), full_page=True)

        page.goto(f"{live_server.url}/live/home/batch/batch/nope-0/")
        why = page.locator("#why-pending").inner_text()
        assert "the node's engine could not run it" in why and f"{node} refused to run it" in why
        assert "Next attempt at" in why and "a rule excluded every node" not in why
        page.screenshot(path=str(artifacts / "live-pod-refused.png"), full_page=True)
    finally:
        page.close()
