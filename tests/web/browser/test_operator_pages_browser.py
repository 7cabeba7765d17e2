"""In a real browser, the pages an operator reads after the console fixes: the re-plan banner on
every page while a recommendation is open (with how many pods drift was computed from), approve
asking first, the submit form showing every error with what was typed, why pending in words and
a rollback to the engine defaults. Screenshots are kept in artifacts/browser/."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from django.contrib.auth.models import Group, Permission

from kalena_engine.policy import Policy
from kalena_engine.resources import GIB
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.policy.selectors import current_policy
from kalena_web.replan.models import ReplanRecommendation
from kalena_web.scheduling.services import batch_submit, scheduling_pass
from tests.web.conftest import PASSWORD
from tests.web.live_cluster import import_homelab
from tests.web.replan.test_drift_export import NOW, fill_rollups

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_banner_confirmations_form_errors_and_why_pending(live_server, chromium, django_user_model, artifacts,
                                                          kuberina_dir, tmp_path) -> None:
    from kalena_web.replan.tasks import drift

    now = time.time()
    cluster = import_homelab(kuberina_dir, tmp_path, now_s=NOW - 7200)
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=now)
    fill_rollups(cluster, 0.4)
    drift(now_s=NOW)
    (rec,) = ReplanRecommendation.objects.filter(cluster=cluster)
    batch_submit(cluster=cluster, name="batch/huge-0", owner="huge", request={"cpu": 500.0, "ram": 16 * GIB}, now_s=now)
    scheduling_pass(cluster=cluster, orchestrator=orchestrator_for(cluster), policy=Policy(), now_s=now + 1,
                    rng=np.random.default_rng(0))
    group, _ = Group.objects.get_or_create(name="approver")
    group.permissions.add(*Permission.objects.filter(codename__in=["operate_batch", "approve_replan", "tune_policy"]))
    django_user_model.objects.create_user(username="ada", password=PASSWORD).groups.add(group)
    page = chromium.new_page(viewport={"width": 1440, "height": 1000})
    try:
        page.goto(f"{live_server.url}/live/home/replan/")
        page.fill("#id_username", "ada")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/live/home/replan/$"))
        assert "10 of 10 production pods" in page.inner_text("#drift-coverage")
        assert "from 10 of 10 production pods" in page.inner_text(f"#rec-{rec.id}")
        page.screenshot(path=str(artifacts / "replan.png"), full_page=True)
        asked: list[str] = []
        page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
        page.click(f"#rec-{rec.id} button[value=approve]")
        assert asked and asked[0].startswith("Approve this re-plan recommendation for home?")
        rec.refresh_from_db()
        assert rec.state == ReplanRecommendation.OPEN  # dismissed: nothing decided

        page.goto(f"{live_server.url}/live/home/batch/")
        banner = page.inner_text("#replan-banner")
        assert "Re-plan recommended for home" in banner and "from 10 of 10 production pods" in banner
        page.once("dialog", lambda d: d.accept())
        page.fill("#submit-batch input[name=name]", "Bad Name")
        page.fill("#submit-batch input[name=request_cpu]", "lots")
        page.fill("#submit-batch input[name=request_ram]", "16 apples")
        page.fill("#submit-batch input[name=priority]", "high")
        page.click("#submit-batch button[type=submit]")
        page.wait_for_selector("#submit-errors")
        for field in ("name", "request_cpu", "request_ram", "priority"):
            assert page.locator(f"#error-{field}").is_visible(), field
        assert page.input_value("#submit-batch input[name=request_ram]") == "16 apples"
        assert "<input>" not in page.inner_text("#submit-batch")
        page.screenshot(path=str(artifacts / "batch-submit-errors.png"), full_page=True)

        page.goto(f"{live_server.url}/live/home/batch/batch/huge-0/")
        why = page.inner_text("#why-pending")
        assert "Binding constraint: not enough memory slack" in why and "_" not in why.split("Examples")[0]
        page.screenshot(path=str(artifacts / "why-pending.png"), full_page=True)

        page.goto(f"{live_server.url}/policy/home/history/")
        assert page.locator("#rollback-0").count() == 0  # nothing saved: nothing to roll back to
        page.screenshot(path=str(artifacts / "policy-history-defaults.png"), full_page=True)
        page.goto(f"{live_server.url}/audit/")
        options = page.eval_on_selector_all("#audit-filters select[name=action] option", "os => os.map(o => o.value)")
        assert len(options) == len(set(options))
        page.screenshot(path=str(artifacts / "audit.png"), full_page=True)
        assert current_policy(cluster_id=cluster.id).version == 0
    finally:
        page.close()
