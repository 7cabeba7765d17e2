"""In a real browser (Debian's Chromium): log in, tune a margin through the pre-flight and save,
see the change in the audit log and in an agent's reported policy version, roll back, import a
calibration file and propose its knee; a refused field is shown by name. Screenshots are kept
in artifacts/browser/ (policy-*.png)."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
import re
import time

import pytest
from django.contrib.auth.models import Group, Permission

from kalena_web.policy.models import AuditEntry, PolicyVersion
from kalena_web.policy.selectors import current_policy
from kalena_web.telemetry.services import agent_token_create
from tests.web.conftest import PASSWORD
from tests.web.live_cluster import import_homelab
from tests.web.telemetry.conftest import Agent, agent_app, hello, record, run, samples  # noqa: F401 - fixture

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CALIBRATION = {
    "apiVersion": "kalena.naughtian.io/v1", "kind": "Policy",
    "metadata": {"name": "sweep", "cluster": "home", "source": "calibration A/B/A/B", "calibration": {
        "sweep": {"margin_ratio": [1.05, 1.1, 1.2, 1.3, 1.5]},
        # the asymmetric rule swept at the shipped half-life, and the shipped predictor (`auto`) at the
        # margin the operator sets below: that point is the current policy's
        "points": [{"predictor": v, "margin_ratio": m, "half_life_s": 1200.0, "reclaimed_fraction_cpu": r,
                    "reclaimed_fraction_ram": r * 0.6, "batch_evictions_per_100_pod_hours": e,
                    "production_contention_core_hours": e / 4}
                   for v, m, r, e in (("asymmetric", 1.05, 0.34, 12.0), ("asymmetric", 1.1, 0.31, 6.5),
                                      ("asymmetric", 1.2, 0.27, 2.1), ("asymmetric", 1.3, 0.22, 1.4),
                                      ("asymmetric", 1.5, 0.14, 1.1), ("auto", 1.3, 0.25, 1.2))],
        "knee": {"margin_ratio": 1.2, "half_life_s": 1200.0}}},
}


def _report_version(app, token: str, node: str) -> int:
    """The agent side of the link: hello, take the policy message, report applying it."""
    async def go():
        agent = Agent(app, token)
        assert await agent.connect()
        await agent.send({**hello(node), "policy_version": None})
        policy = await agent.until("policy")
        await agent.send({**samples(node, 1, [record("database/postgres-0", time.time() - 1)]),
                          "policy_version": policy["version"]})
        await agent.until("ack")
        await agent.close()
        return policy["version"]
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API holds this thread's event loop
        return pool.submit(lambda: run(go())).result(timeout=60)


def test_tune_preflight_save_audit_agent_rollback_calibration(live_server, chromium, django_user_model, artifacts,
                                                             kuberina_dir, tmp_path, agent_app) -> None:
    cluster = import_homelab(kuberina_dir, tmp_path, now_s=time.time() - 600)
    group, _ = Group.objects.get_or_create(name="operator")
    group.permissions.add(Permission.objects.get(codename="tune_policy"))
    django_user_model.objects.create_user(username="olga", password=PASSWORD).groups.add(group)
    beta = cluster.nodes.get(name="thinkcentre-beta")
    token = agent_token_create(node=beta)[0]
    page = chromium.new_page(viewport={"width": 1440, "height": 1100})
    try:
        page.goto(f"{live_server.url}/policy/home/")
        assert "/accounts/login/?next=" in page.url
        page.fill("#id_username", "olga")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/policy/home/$"))

        # a refused field: named, with the accepted range, nothing saved
        page.fill("#f-estimator\\.margin_ratio", "0.8")
        page.click("#run-preflight")
        page.wait_for_selector("#field-errors")
        assert "estimator.margin_ratio: 0.8 is out of range (accepted: a number in [1, 10])" in \
            page.inner_text("#error-estimator\\.margin_ratio")
        page.screenshot(path=str(artifacts / "policy-refused.png"), full_page=True)
        assert not PolicyVersion.objects.exists()

        # tune through the pre-flight, then save; of three pending pods the scheduler's node
        # selector filter keeps one pending (no node carries disk=nvme)
        from kalena_web.ledger.models import LiveNodeLedger
        from kalena_web.scheduling.services import batch_submit
        LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=time.time())
        for i, constraints in enumerate(({}, {}, {"node_selector": {"disk": "nvme"}})):
            batch_submit(cluster=cluster, name=f"team-a/job-{i}", owner=f"team-a/job-{i}", now_s=time.time(),
                         request={"cpu": 0.25, "ram": 0.25}, constraints=constraints)
        page.fill("#f-estimator\\.margin_ratio", "1.3")
        page.click("#run-preflight")
        page.wait_for_selector("#preflight")
        page.wait_for_selector("body[data-charts=ready]", timeout=30_000)
        assert page.locator("#pf-slack-table tbody tr").count() == 3
        assert page.inner_text("#pf-unplaced") == "node selector or node affinity does not match: 1"
        assert page.inner_text("#pf-chart-caption") == "Chart: All 3 nodes, by name."
        bars = page.eval_on_selector("#preflight-chart", "gd => gd._fullData.map(t => [t.name, t.x.length])")
        assert ["settled", 3] in bars and ["now", 3] in bars
        page.screenshot(path=str(artifacts / "policy-preflight.png"), full_page=True)
        page.fill("input[name=note]", "more margin after the incident")
        page.click("#save")
        page.wait_for_url(re.compile(r"/policy/home/history/\?saved=1$"))
        assert "estimator.margin_ratio" in page.inner_text("#v1")
        assert current_policy(cluster_id=cluster.id).policy.estimator.margin_ratio == 1.3

        # the agent is behind until it reports applying version 1
        page.goto(f"{live_server.url}/policy/home/")
        assert _report_version(agent_app, token, beta.name) == 1
        page.reload()
        assert "All 1 agent(s) apply version 1" in page.inner_text("#agents-policy")

        # the audit log shows who changed what
        page.goto(f"{live_server.url}/audit/?action=policy")
        row = page.inner_text("#audit-table tbody tr:first-child")
        assert "olga" in row and "policy.change" in row and "1.3" in row and "1.15" in row
        page.screenshot(path=str(artifacts / "policy-audit.png"), full_page=True)

        # import a calibration file, propose its knee, pre-flight, save
        path = tmp_path / "calibration.json"
        path.write_text(json.dumps(CALIBRATION))
        page.goto(f"{live_server.url}/policy/home/calibration/")
        assert "No calibration imported for home" in page.inner_text("#no-calibration")
        page.set_input_files("input[name=file]", str(path))
        page.click("#import-calibration")
        page.wait_for_selector("#calibration-chart")
        page.wait_for_selector("body[data-charts=ready]", timeout=30_000)
        traces = page.eval_on_selector("#calibration-chart", "gd => gd._fullData.map(t => t.name)")
        assert "×1 knee (μ 1.2 · h 1200 s)" in traces and "×1 current policy (auto · μ 1.3 · h 1200 s)" in traces
        page.screenshot(path=str(artifacts / "policy-calibration.png"), full_page=True)
        page.click("#propose")
        page.wait_for_selector("#preflight")
        assert page.input_value("#f-estimator\\.margin_ratio") == "1.2"
        page.click("#save")
        page.wait_for_url(re.compile(r"/policy/home/history/\?saved=2$"))

        # roll back to version 1: the page asks first; dismissed, nothing happens; accepted, a new version 3
        asked: list[str] = []
        page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
        page.click("#rollback-1")
        assert asked == ["Roll home back to policy version 1? The live loops use it from their next pass."]
        assert current_policy(cluster_id=cluster.id).version == 2
        page.once("dialog", lambda d: d.accept())
        page.click("#rollback-1")
        page.wait_for_url(re.compile(r"/policy/home/history/\?saved=3$"))
        page.screenshot(path=str(artifacts / "policy-history.png"), full_page=True)
        assert current_policy(cluster_id=cluster.id).version == 3
        assert current_policy(cluster_id=cluster.id).policy.estimator.margin_ratio == 1.3
        assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == [
            "token.create", *["batch.submit"] * 3, "policy.change", "calibration.import", "policy.change",
            "policy.rollback"]
        for name in ("refused", "preflight", "audit", "calibration", "history"):
            assert (artifacts / f"policy-{name}.png").stat().st_size > 20_000
    finally:
        page.close()


def _sweep_file() -> dict:
    """A calibration of two predictors at ×1 and ×4, with the shipped setting and the tolerance
    (the shape ``kalena evaluate calibrate --out`` writes)."""
    rows = []
    for load, scale in ((1.0, 1.0), (4.0, 2.1)):
        for predictor, settings in (
                ("asymmetric", ((1.15, 600.0, 0.135, 0.72, 17.6), (1.3, 1200.0, 0.132, 0.13, 6.8),
                                (1.45, 2400.0, 0.128, 0.05, 2.0), (1.0, 300.0, 0.138, 1.49, 85.9))),
                ("nsigma", ((1.0, 1200.0, 0.131, 0.04, 1.1), (1.15, 1200.0, 0.118, 0.03, 0.4))),
                ("auto", ((1.3, 1200.0, 0.126, 0.35, 9.0),))):
            for mu, h, x, e, c in settings:
                rows.append({"predictor": predictor, "load_factor": load, "margin_ratio": mu, "half_life_s": h,
                             "reclaimed_fraction_cpu": x * scale, "reclaimed_fraction_ram": x * scale / 4,
                             "batch_evictions_per_100_pod_hours": e * (1.2 if load == 4 else 1.0),
                             "production_contention_core_hours": c * scale, "production_cpu_core_hours": 56_900.0})
    return {"apiVersion": "kalena.naughtian.io/v1", "kind": "Policy",
            "metadata": {"name": "sweep", "cluster": "home", "source": "calibration", "calibration": {
                "sweep": {"margin_ratio": [1.0, 1.15, 1.3, 1.45], "half_life_s": [300.0, 600.0, 1200.0, 2400.0],
                          "predictor": ["asymmetric", "nsigma", "auto"]},
                "points": rows, "knee": {"margin_ratio": 1.3, "half_life_s": 1200.0},
                "shipped": {"predictor": "nsigma", "margin_ratio": 1.0, "half_life_s": 1200.0, "qualified": 1},
                "tolerance": {"max_evictions_per_100_pod_hours": 0.1, "max_contention_share": 0.0001}}}}


def test_the_calibration_frontier_in_a_browser(live_server, chromium, django_user_model, artifacts, kuberina_dir,
                                               tmp_path) -> None:
    """The safety curve as a frontier: per load a line through the non-dominated settings sorted
    by evictions, dominated settings apart, the shipped setting and the tolerance line marked;
    beside it the same points by production contention with the contention tolerance dashed and
    the points over it ringed; a
    point proposed from the table opens its pre-flight with its predictor. Screenshot:
    artifacts/browser/policy-calibration-frontier.png."""
    import_homelab(kuberina_dir, tmp_path, now_s=time.time() - 600)
    group, _ = Group.objects.get_or_create(name="operator")
    group.permissions.add(Permission.objects.get(codename="tune_policy"))
    django_user_model.objects.create_user(username="olga", password=PASSWORD).groups.add(group)
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(_sweep_file()))
    page = chromium.new_page(viewport={"width": 1440, "height": 1100})
    page.set_default_timeout(120_000)  # a shared machine's live server can take long to answer
    try:
        page.goto(f"{live_server.url}/policy/home/calibration/")
        page.fill("#id_username", "olga")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(re.compile(r"/policy/home/calibration/$"))
        page.set_input_files("input[name=file]", str(path))
        page.click("#import-calibration")
        page.wait_for_selector("#calibration-chart")
        page.wait_for_selector("body[data-charts=ready]", timeout=30_000)
        traces = page.eval_on_selector("#calibration-chart", "gd => gd._fullData.map(t => [t.name, Array.from(t.x)])")
        named = dict(traces)
        assert named["×1 frontier"] == sorted(named["×1 frontier"])
        assert len(named["×1 frontier"]) + len(named["×1 dominated"]) == 7
        assert "×1 shipped (nsigma · μ 1 · h 1200 s)" in named and "×4 shipped (nsigma · μ 1 · h 1200 s)" in named
        assert page.eval_on_selector("#calibration-chart", "gd => gd._fullLayout.shapes.map(s => [s.xref, s.x0])") == [
            ["x", 0.1], ["x2", 0.01]]   # the eviction tolerance; the contention tolerance, 0.01 % of production cpu
        assert page.eval_on_selector("#calibration-chart", "gd => gd._fullLayout.xaxis2.title.text") == \
            "production contention, % of production cpu core-hours"
        # drawn: the contention panel's dashed line and its label, and a legend entry for the points over it
        assert page.locator("#calibration-chart .annotation-text", has_text="of production cpu core-hours").count() == 1
        assert page.locator("#calibration-chart .legendtext", has_text="over the contention tolerance").count() == 1
        ringed = [x for name, x in traces if name == "over the contention tolerance (> 0.01 %)"]
        assert len(ringed) == 1 and len(ringed[0]) == 8   # asymmetric μ 1, 1.15, 1.3 and auto, at ×1 and ×4
        assert page.inner_text("#shipped-setting") == "nsigma, μ 1.0, h 1200.0 s"
        page.screenshot(path=str(artifacts / "policy-calibration-frontier.png"), full_page=True)
        page.click("tr[data-point] >> text=propose")  # the first row: ×1's frontier point with the fewest evictions
        page.wait_for_selector("#preflight")
        carried = json.loads(page.input_value("input[name=carried]"))
        assert carried["estimator"]["predictor"] == "nsigma"
        assert page.input_value("#f-estimator\\.margin_ratio") == "1.15"   # nsigma μ 1.15: 0.03 evictions
        assert (artifacts / "policy-calibration-frontier.png").stat().st_size > 20_000
    finally:
        page.close()
