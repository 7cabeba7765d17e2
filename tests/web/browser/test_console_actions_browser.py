"""In a real browser (Debian's Chromium), as an operator: submit a batch pod from the console
(confirming the dialog), see it running on its node, complete it; search and filter the batch
list and the nodes; create an API token and an agent token, see each once, revoke them.
Screenshots are kept in artifacts/browser/ (console-*.png)."""

from __future__ import annotations

import re
import time

import pytest
from django.contrib.auth.models import Group, Permission

from kalena_web.api.models import ApiToken
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.services import batch_submit
from kalena_web.telemetry.models import AgentToken
from tests.web.conftest import PASSWORD
from tests.web.live_cluster import import_homelab

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _confirming(page, said: list[str]):
    def accept(dialog) -> None:
        said.append(dialog.message)
        dialog.accept()
    page.on("dialog", accept)


def test_operator_submits_completes_searches_and_manages_tokens(live_server, chromium, django_user_model, artifacts,
                                                                kuberina_dir, tmp_path) -> None:
    now = time.time()
    cluster = import_homelab(kuberina_dir, tmp_path, now_s=now - 600)
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=now)
    group, _ = Group.objects.get_or_create(name="operator")  # a transactional flush drops the role groups
    group.permissions.add(*Permission.objects.filter(codename__in=["operate_batch", "manage_agent_tokens"]))
    django_user_model.objects.create_user(username="oscar", password=PASSWORD).groups.add(group)
    page = chromium.new_page(viewport={"width": 1440, "height": 1000})
    said: list[str] = []
    _confirming(page, said)
    try:
        page.goto(f"{live_server.url}/live/home/batch/")
        page.fill("#id_username", "oscar")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/live/home/batch/$"))

        # submit from the form: confirmed, queued, placed at once by the event-driven pass
        page.fill("#submit-batch input[name=name]", "batch/ui-train-0")
        page.fill("#submit-batch input[name=owner]", "ui-train")
        page.fill("#submit-batch input[name=request_cpu]", "0.5")
        page.fill("#submit-batch input[name=request_ram]", "1Gi")
        page.click("#submit-batch button[type=submit]")
        page.wait_for_url(re.compile(r"/live/home/batch/batch/ui-train-0/$"))
        assert said[-1] == "Queue batch pod batch/ui-train-0 on home?"
        assert "batch/ui-train-0 queued" in page.inner_text("main")
        pod = BatchPod.objects.select_related("workload__node").get(workload__name="batch/ui-train-0")
        assert pod.state == BatchPod.BOUND and pod.workload.node is not None
        assert pod.workload.node.name in page.inner_text("main")
        page.screenshot(path=str(artifacts / "console-batch-submitted.png"), full_page=True)

        page.click("#pod-actions button:has-text('Complete')")
        page.wait_for_selector("text=completed: it has left every ledger")
        assert said[-1].startswith("Report batch/ui-train-0 completed?")
        assert BatchPod.objects.get(id=pod.id).state == BatchPod.COMPLETED
        assert page.locator("#pod-actions").count() == 0  # nothing left to do to a completed pod
        page.screenshot(path=str(artifacts / "console-batch-completed.png"), full_page=True)

        # search and filter the list
        for i in range(12):
            batch_submit(cluster=cluster, name=f"batch/{'etl' if i % 3 else 'train'}-{i}", owner="nightly",
                         request={"cpu": 100.0}, priority=i, now_s=now + i)
        page.goto(f"{live_server.url}/live/home/batch/")
        assert page.locator("#batch-pods tbody tr[data-pod]").count() == 13
        page.fill("input[name=q]", "etl")
        page.select_option("select[name=state]", "pending")
        page.select_option("select[name=sort]", "-priority")
        page.click(".listcontrols button[type=submit]")
        page.wait_for_url(re.compile(r"q=etl"))
        shown = page.eval_on_selector_all("#batch-pods tbody tr[data-pod]", "rows => rows.map(r => r.dataset.pod)")
        assert shown == [f"batch/etl-{i}" for i in (11, 10, 8, 7, 5, 4, 2, 1)]
        assert "8 matches" in page.inner_text(".listcontrols")
        page.screenshot(path=str(artifacts / "console-batch-search.png"), full_page=True)
        page.select_option("select[name=state]", "completed")
        page.fill("input[name=q]", "ui-")
        page.click(".listcontrols button[type=submit]")
        page.wait_for_url(re.compile(r"state=completed"))
        row = page.locator("#batch-pods tbody tr[data-pod='batch/ui-train-0']")
        assert pod.workload.node.name in row.inner_text()  # where it ran, after it ended

        page.goto(f"{live_server.url}/live/home/?q=beta")
        assert page.eval_on_selector_all("#live-nodes tbody tr[data-node]", "rows => rows.map(r => r.dataset.node)") \
            == ["thinkcentre-beta"]

        # an API token: created (shown once), listed, revoked
        page.goto(f"{live_server.url}/tokens/")
        page.fill("#create-api-token input[name=name]", "ci-pipeline")
        page.check("#create-api-token input[value=write]")
        page.click("#create-api-token button[type=submit]")
        page.wait_for_selector("#token-plaintext")
        plaintext = page.inner_text("#token-plaintext")
        assert plaintext.startswith("kal_") and said[-1] == "Create API token ci-pipeline?"
        page.screenshot(path=str(artifacts / "console-api-token-created.png"), full_page=True)
        row = ApiToken.objects.get(name="ci-pipeline")
        assert row.scopes == "read write" and plaintext.startswith(row.prefix)
        page.click("text=Done")
        page.click(f"tr[data-token='{row.id}'] button:has-text('Revoke')")
        page.wait_for_selector(f"text=API token {row.id} revoked")
        assert ApiToken.objects.get(id=row.id).revoked_at is not None
        page.screenshot(path=str(artifacts / "console-api-tokens.png"), full_page=True)

        # an agent token for a node: created, then revoked
        page.goto(f"{live_server.url}/live/home/agents/")
        page.select_option("#agent-tokens select[name=node]", "thinkcentre-gamma")
        page.click("#agent-tokens button:has-text('Create token')")
        page.wait_for_selector("#token-plaintext")
        agent = AgentToken.objects.get(node__name="thinkcentre-gamma")
        assert page.inner_text("#token-plaintext").startswith(agent.prefix)
        page.click("text=Done")
        page.wait_for_selector(f"#agent-token-list tr[data-token='{agent.id}']")
        page.click(f"#agent-token-list tr[data-token='{agent.id}'] button:has-text('Revoke')")
        page.wait_for_selector(f"text=agent token {agent.id} of thinkcentre-gamma revoked")
        assert AgentToken.objects.get(id=agent.id).revoked_at is not None
        page.screenshot(path=str(artifacts / "console-agent-tokens.png"), full_page=True)
    finally:
        page.close()
