"""Console defects a new operator hit: the audit filter listing an action once per entry, the
first saved policy that could not be rolled back to the engine defaults, rollback and re-plan
decisions acting without asking, and drift recommending a re-plan from a handful of pods
without saying how many it saw (no banner, no metric)."""

from __future__ import annotations

import html
import re

import pytest
from django.contrib.auth.models import Group, User

from kalena_engine.policy import Policy
from kalena_web.policy.models import AuditEntry, PolicyVersion
from kalena_web.policy.selectors import current_policy
from kalena_web.policy.services import audit_record
from kalena_web.replan.models import ReplanRecommendation
from kalena_web.replan.tasks import drift
from tests.web.replan.test_drift_export import NOW, fill_rollups

pytestmark = pytest.mark.django_db


@pytest.fixture
def tuner(client, live):
    user = User.objects.create_user("olga", password="x" * 12)
    user.groups.add(Group.objects.get(name="approver"))
    client.force_login(user)
    return client


def _forms(page: str) -> list[str]:
    return re.findall(r"<form method=\"post\"[^>]*>", page, flags=re.S)


def test_the_audit_filter_lists_each_action_once(tuner) -> None:
    for i in range(14):
        audit_record(actor_kind="user", actor="abe", action="batch.submit", cluster_name="home", target=f"b/{i}")
    audit_record(actor_kind="user", actor="abe", action="policy.change", cluster_name="home")
    page = tuner.get("/audit/").content.decode()
    options = re.findall(r"<option value=\"([^\"]*)\"", page)
    assert options.count("batch.submit") == 1 and options.count("policy.change") == 1
    assert len(options) == len(set(options))


def test_the_first_saved_policy_rolls_back_to_the_engine_defaults(tuner, live) -> None:
    page = tuner.get("/policy/home/history/").content.decode()
    assert "runs on the engine defaults" in page and 'id="rollback-0"' not in page  # nothing to roll back yet
    assert tuner.post("/policy/home/rollback/0").status_code == 404
    page = tuner.get("/policy/home/")
    fields = {f.name: f.value for section in page.context["sections"].values() for f in section}
    fields["namespaces"] = page.context["namespaces"]
    fields["estimator.margin_ratio"] = "1.5"
    assert tuner.post("/policy/home/", {**fields, "action": "save"}).status_code == 302
    assert current_policy(cluster_id=live.id).policy.estimator.margin_ratio == 1.5

    history = tuner.get("/policy/home/history/").content.decode()
    assert 'id="rollback-0"' in history
    back = tuner.post("/policy/home/rollback/0")
    assert back.status_code == 302
    now = current_policy(cluster_id=live.id)
    assert now.version == 2 and now.policy == Policy()
    assert PolicyVersion.objects.get(cluster=live, version=2).source == "rollback to the engine defaults"
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == ["policy.change",
                                                                                       "policy.rollback"]
    exported = tuner.get("/policy/home/export?version=0")
    assert exported.status_code == 200 and b"margin_ratio: 1.15" in exported.content


def test_rollback_and_replan_decisions_ask_first(tuner, live) -> None:
    page = tuner.get("/policy/home/")
    fields = {f.name: f.value for section in page.context["sections"].values() for f in section}
    fields["namespaces"] = page.context["namespaces"]
    for margin in ("1.3", "1.5"):
        fields["estimator.margin_ratio"] = margin
        assert tuner.post("/policy/home/", {**fields, "action": "save"}).status_code == 302
    forms = _forms(tuner.get("/policy/home/history/").content.decode())
    rollbacks = [f for f in forms if "/rollback/" in f]
    assert len(rollbacks) == 2  # to version 1 and to the defaults
    assert all("return confirm(" in f for f in rollbacks)
    ReplanRecommendation.objects.create(cluster=live, created_s=1.0, window_s=60.0, threshold=0.25,
                                        drift={"cpu": 0.3, "ram": 0.1}, report={}, workloads_yaml="")
    decide = [f for f in _forms(tuner.get("/live/home/replan/").content.decode()) if "/decision" in f]
    assert len(decide) == 1 and "return confirm(" in html.unescape(decide[0])


def _metric(text: str, name: str, **labels) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    for line in text.splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_drift_from_a_few_pods_recommends_nothing_and_says_how_many_were_seen(tuner, live) -> None:
    fill_rollups(live, 0.4)  # every production pod's steady reservation at 40 % of its request: D = 0.6
    from kalena_web.archive.models import UsageRollup
    from kalena_web.inventory.models import Workload

    production = list(Workload.objects.filter(cluster=live, kind=Workload.PRODUCTION).order_by("name"))
    assert len(production) == 10
    UsageRollup.objects.filter(workload__in=production[1:]).delete()  # only one pod was seen
    drift(now_s=NOW)
    assert not ReplanRecommendation.objects.exists()
    page = tuner.get("/live/home/replan/").content.decode()
    assert "1 of 10" in page and "10.0 %" in page and "KALENA_DRIFT_MIN_COVERAGE" in page
    assert 'id="replan-banner"' not in page
    metrics = tuner.get("/metrics/cluster").content.decode()
    assert _metric(metrics, "kalena_drift_ratio", cluster="home", dimension="cpu") == pytest.approx(0.6)
    assert _metric(metrics, "kalena_drift_coverage_ratio", cluster="home") == pytest.approx(0.1)
    assert _metric(metrics, "kalena_replan_recommendations_open", cluster="home") == 0.0


def test_drift_with_coverage_recommends_with_a_banner_on_every_page(tuner, live) -> None:
    fill_rollups(live, 0.4)
    drift(now_s=NOW)
    (rec,) = ReplanRecommendation.objects.filter(cluster=live)
    assert rec.report["coverage"] == {"observed_pods": 10, "production_pods": 10, "ratio": 1.0, "min_ratio": 0.5}
    assert all(n["pods_seen"] == n["pods"] for n in rec.top_nodes)
    page = tuner.get("/live/home/replan/").content.decode()
    assert "from <strong>10 of 10</strong> production pods" in page
    for url in ("/live/", "/live/home/", "/audit/", "/policy/home/"):
        banner = re.search(r'<div class="banner warn" id="replan-banner".*?</div>', tuner.get(url).content.decode(), re.S)
        assert banner and "Re-plan recommended for home" in banner.group(0) and "60.0 %" in banner.group(0), url
    metrics = tuner.get("/metrics/cluster").content.decode()
    assert _metric(metrics, "kalena_replan_recommendations_open", cluster="home") == 1.0
    rec.state = ReplanRecommendation.REJECTED
    rec.save()
    assert 'id="replan-banner"' not in tuner.get("/live/").content.decode()


# --- why pending, in words and with the digits a shortfall needs -----------------------------

from kalena_web.console.why import reason_text, reduction_text, rejection_lines  # noqa: E402


def test_a_shortfall_below_display_precision_shows_the_precise_free_amount() -> None:
    [line] = rejection_lines({"rejections": [{"kind": "cpu", "dim": "cpu", "node": "n1", "requested": 0.5,
                                              "free": 0.49978, "shortfall": 0.00022, "unit": "cores"}]})
    # "0.5 free (short by 0.00022)" contradicted itself: 0.5 − 0.5 is not 0.00022
    assert line == "n1: needs 0.5 cores of CPU, has 0.49978 free (short by 0.00022 cores)"
    [line] = rejection_lines({"rejections": [{"kind": "ram", "dim": "ram", "node": "n2", "requested": 2.0,
                                              "free": 1.25, "shortfall": 0.75, "unit": "GiB"}]})
    assert line == "n2: needs 2 GiB of memory, has 1.25 free (short by 0.75 GiB)"


@pytest.mark.parametrize(("record", "words"), [
    ({"kind": "telemetry_stale", "node": "n1"}, "n1: telemetry stale: no fresh sample from the node's agent"),
    ({"kind": "taint", "node": "n1", "key": "gpu", "value": "yes", "effect": "NoSchedule"},
     "n1: taint gpu=yes:NoSchedule not tolerated"),
    ({"kind": "namespace_cap", "node": "", "namespace": "team-a", "running": 3, "cap": 3},
     "the gang: namespace team-a already runs 3 of its 3 batch pods"),
    ({"kind": "node_selector", "node": "n2", "key": "zone", "wanted": "a", "found": None},
     "n2: label zone should be “a”, is absent"),
])
def test_reasons_read_in_words_not_internal_codes(record, words) -> None:
    [line] = rejection_lines({"rejections": [record]})
    assert line == words and "_" not in line.split(": ", 1)[1]


def test_every_engine_reason_kind_has_words() -> None:
    from kalena_engine.placement import reasons as R
    from kalena_engine.resources import DIMS

    kinds = [*R.RULE_KINDS, R.GANG, R.STALE_BINDING, R.RELEASING, R.KUBELET_ALLOCATABLE, R.NO_NODES, *DIMS]
    for kind in kinds:
        assert "_" not in reason_text(kind) and reason_text(kind) != kind, kind


@pytest.mark.parametrize(("fits", "says"), [
    (1, "would let it fit on n7 only — every other node lacks more of at least one dimension."),
    (2, "would let it fit on n7 and 1 other node."),
    (5, "would let it fit on n7 and 4 other nodes."),
])
def test_the_reduction_says_how_many_nodes_it_opens(fits, says) -> None:
    text = reduction_text({"reduction": {"by": {"cpu": 0.25, "ram": 1.5}, "node": "n7", "fits_nodes": fits}})
    assert text.startswith("Lowering the request by 0.25 cores of CPU and 1.5 GiB of memory") and text.endswith(says)


# --- the pre-flight chart says what it samples ------------------------------------------------

def test_the_preflight_chart_says_it_shows_60_of_186_nodes() -> None:
    import json
    from types import SimpleNamespace

    from kalena_web.policy.figures import preflight_chart_caption, preflight_slack_figure

    def node(i: int) -> SimpleNamespace:  # node i's cpu slack moves by i cores between now and settled
        return SimpleNamespace(node=f"n{i:03d}", cpu_now_mcpu=10_000.0, cpu_after_mcpu=10_000.0,
                               cpu_settled_mcpu=10_000.0 + 1000.0 * i, ram_now_bytes=0.0, ram_after_bytes=0.0,
                               ram_settled_bytes=0.0)

    many = SimpleNamespace(nodes=[node(i) for i in range(186)])
    figure = json.loads(preflight_slack_figure(many))
    shown = sorted(set(figure["data"][0]["x"]))
    assert shown == [f"n{i:03d}" for i in range(126, 186)]  # the 60 whose slack moves most
    caption = preflight_chart_caption(many)
    assert caption.startswith("60 of 186 nodes: the 60 whose slack moves most") and "lists all 186" in caption
    assert preflight_chart_caption(SimpleNamespace(nodes=[node(1), node(2), node(3)])) == "All 3 nodes, by name."
