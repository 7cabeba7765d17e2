"""Policy as versioned data through the console (PostgreSQL): permissions, the draft with
per-field errors (nothing saved), pre-flight, save, history and rollback, import/export,
calibration import and the audit log."""

from __future__ import annotations

import html
import json

import pytest
import yaml
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile

from kalena_web.ledger.estimation import live_policy
from kalena_web.policy.models import AuditEntry, CalibrationImport, PolicyVersion
from kalena_web.policy.selectors import current_policy
from tests.web.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def _user(django_user_model, name: str, role: str | None):
    user = django_user_model.objects.create_user(username=name, password=PASSWORD)
    if role:
        user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def tuner(client, django_user_model):
    client.force_login(_user(django_user_model, "olga", "operator"))
    return client


def _form(client, cluster: str) -> dict[str, str]:
    """The policy page's form fields as the browser would post them."""
    page = client.get(f"/policy/{cluster}/")
    assert page.status_code == 200
    fields = {f.name: f.value for section in page.context["sections"].values() for f in section}
    fields["namespaces"] = page.context["namespaces"]
    return fields


def test_anonymous_is_sent_to_log_in_and_the_api_answers_401(client, live) -> None:
    page = client.get("/policy/home/")
    assert page.status_code == 302 and page["Location"].startswith("/accounts/login/?next=/policy/home/")
    assert client.get("/api/audit").status_code == 401
    assert client.get("/api/clusters/home/policy").status_code == 401


def test_viewer_reads_but_cannot_tune(client, django_user_model, live) -> None:
    client.force_login(_user(django_user_model, "vera", "viewer"))
    fields = _form(client, "home")
    assert fields["estimator.margin_ratio"] == "1.15"
    fields["estimator.margin_ratio"] = "1.3"
    refused = client.post("/policy/home/", {**fields, "action": "save"})
    assert refused.status_code == 403 and b"operator or approver role" in refused.content
    assert client.post("/policy/home/rollback/1").status_code == 403
    assert not PolicyVersion.objects.exists() and not AuditEntry.objects.exists()


def test_tune_a_margin_through_the_preflight_and_save(tuner, live) -> None:
    fields = _form(tuner, "home")
    fields["estimator.margin_ratio"] = "1.3"
    fields["namespaces"] = "team-a: 4"
    pre = tuner.post("/policy/home/", {**fields, "action": "preflight"})
    assert pre.status_code == 200
    preflight = pre.context["preflight"]
    assert [n.node for n in preflight.nodes] == ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]
    assert b'id="save"' in pre.content and b"Save as version 1" in pre.content
    assert not PolicyVersion.objects.exists()  # a pre-flight stores nothing

    saved = tuner.post("/policy/home/", {**fields, "action": "save", "note": "more margin"})
    assert saved.status_code == 302 and saved["Location"] == "/policy/home/history/?saved=1"
    current = current_policy(cluster_id=live.id)
    assert current.version == 1 and current.policy.estimator.margin_ratio == 1.3
    assert current.policy.placement.namespace_batch_caps == (("team-a", 4),)
    # the estimation loop reads the cluster's version
    assert live_policy([live.nodes.first().id]).estimator.margin_ratio == 1.3
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.actor_kind, entry.action, entry.cluster_name) == ("olga", "user", "policy.change", "home")
    assert entry.before == {"version": 0, "estimator.margin_ratio": 1.15, "namespaces.team-a": None}
    assert entry.after == {"version": 1, "estimator.margin_ratio": 1.3, "namespaces.team-a": 4}
    history = tuner.get("/policy/home/history/?saved=1")
    assert history.status_code == 200
    assert history.context["entries"][0]["diff"] == [("estimator.margin_ratio", 1.15, 1.3), ("namespaces.team-a", None, 4)]


def test_the_preflight_warns_when_saving_would_start_every_usage_history_afresh(tuner, live) -> None:
    """Another μ keeps each workload's stored peak history; a predictor that cannot read it
    (``percentile`` alone after the shipped ``auto``) starts it afresh, and the pre-flight says so
    before anything is saved."""
    fields = _form(tuner, "home")
    fields["estimator.margin_ratio"] = "1.3"
    kept = tuner.post("/policy/home/", {**fields, "action": "preflight"})
    assert kept.status_code == 200 and not kept.context["preflight"].history_restarts
    assert b'id="pf-history-restarts"' not in kept.content
    carried = json.loads(kept.context["carried"])
    carried["estimator"]["predictor"] = "percentile"  # what proposing a calibration point carries
    lost = tuner.post("/policy/home/", {**fields, "carried": json.dumps(carried), "action": "preflight"})
    assert lost.status_code == 200 and lost.context["preflight"].history_restarts
    assert b'id="pf-history-restarts"' in lost.content and b"starts every workload's usage history afresh" in lost.content
    assert not PolicyVersion.objects.exists()


@pytest.mark.parametrize("field, value, says", [
    ("estimator.margin_ratio", "0.9", "0.9 is out of range (accepted: a number in [1, 10])"),
    ("estimator.half_life_s", "10min", "'10min' is not a number: the field is in seconds"),
    ("eviction.cfs_period_us", "100000.5", "100000.5 is not a whole number"),
    ("eviction.evict_threshold_ratio", "", "a value is required (accepted: a number in (0, 1])"),
])
def test_bad_field_is_refused_by_name_and_nothing_changes(tuner, live, field, value, says) -> None:
    fields = _form(tuner, "home")
    fields["estimator.grace_s"] = "-5"           # a second bad field is reported too
    fields[field] = value
    for action in ("preflight", "save"):
        page = tuner.post("/policy/home/", {**fields, "action": action})
        assert page.status_code == 400
        assert says in page.context["errors"][field]
        assert page.context["errors"]["estimator.grace_s"] == "-5.0 is out of range (accepted: a number in [0, ∞))"
        assert f'id="error-{field}"'.encode() in page.content
        assert page.context["preflight"] is None
    assert not PolicyVersion.objects.exists() and not AuditEntry.objects.exists()


def test_cross_field_rule_names_acute_ratio(tuner, live) -> None:
    fields = _form(tuner, "home")
    fields["eviction.acute_ratio"] = "0.9"
    page = tuner.post("/policy/home/", {**fields, "action": "save"})
    assert page.status_code == 400
    assert "below evict_threshold_ratio" in page.context["errors"]["eviction.acute_ratio"]
    assert not PolicyVersion.objects.exists()


def test_rollback_is_a_new_version_and_export_imports_back(tuner, live) -> None:
    for margin in ("1.3", "1.5"):
        fields = _form(tuner, "home")
        fields["estimator.margin_ratio"] = margin
        assert tuner.post("/policy/home/", {**fields, "action": "save"}).status_code == 302
    back = tuner.post("/policy/home/rollback/1")
    assert back.status_code == 302
    assert current_policy(cluster_id=live.id).version == 3
    assert current_policy(cluster_id=live.id).policy.estimator.margin_ratio == 1.3
    assert list(AuditEntry.objects.order_by("id").values_list("action", flat=True)) == [
        "policy.change", "policy.change", "policy.rollback"]
    assert tuner.post("/policy/home/rollback/9").status_code == 404

    exported = tuner.get("/policy/home/export?version=2")
    assert exported.status_code == 200 and "home-policy-v2.yaml" in exported["Content-Disposition"]
    document = yaml.safe_load(exported.content)
    assert document["metadata"]["cluster"] == "home" and document["spec"]["estimator"]["margin_ratio"] == 1.5
    imported = tuner.post("/policy/home/import", {"file": SimpleUploadedFile("v2.yaml", exported.content)})
    assert imported.status_code == 200 and imported.context["preflight"] is not None
    assert {f.name: f.value for s in imported.context["sections"].values() for f in s}["estimator.margin_ratio"] == "1.5"
    assert PolicyVersion.objects.count() == 3  # an import is a draft until saved


@pytest.mark.parametrize("document, says", [
    ({"apiVersion": "kalena.naughtian.io/v1", "kind": "Policy", "spec": {"estimator": {"margin": 1.2}}},
     "spec.estimator.margin: unknown key 'margin' (accepted: margin_ratio, half_life_s"),
    ({"apiVersion": "kalena.naughtian.io/v2", "kind": "Policy"}, "is not an apiVersion Kalena reads"),
    ({"apiVersion": "kalena.naughtian.io/v1", "kind": "Policy", "metadata": {"cluster": "prod-eu"}},
     "this file is for cluster 'prod-eu', not 'home'"),
])
def test_bad_files_are_refused_with_the_reason(tuner, live, document, says) -> None:
    upload = json.dumps(document).encode()
    for url in ("/policy/home/import", "/policy/home/calibration/"):
        page = tuner.post(url, {"file": SimpleUploadedFile("bad.json", upload)})
        assert page.status_code == 400
        assert says in html.unescape(page.content.decode())
    assert not PolicyVersion.objects.exists() and not CalibrationImport.objects.exists()
    assert not AuditEntry.objects.exists()


CALIBRATION = {
    "apiVersion": "kalena.naughtian.io/v1", "kind": "Policy",
    "metadata": {"name": "sweep", "cluster": "home", "source": "kalena evaluate", "calibration": {
        "sweep": {"margin_ratio": [1.05, 1.15, 1.3]},
        "points": [{"predictor": v, "margin_ratio": m, "half_life_s": 1200.0, "reclaimed_fraction_cpu": r,
                    "reclaimed_fraction_ram": r / 2, "batch_evictions_per_100_pod_hours": e,
                    "production_contention_core_hours": c}
                   for v, m, r, e, c in (("asymmetric", 1.05, 0.3, 9.0, 2.0), ("asymmetric", 1.15, 0.25, 3.0, 0.5),
                                         ("asymmetric", 1.3, 0.15, 1.0, 0.1),
                                         ("auto:margin_ratio=1.15:half_life_s=1200", 1.15, 0.27, 0.9, 0.2))],
        "knee": {"margin_ratio": 1.3, "half_life_s": 1200.0}}},
}


def test_calibration_page_shows_the_curve_and_proposes_the_knee(tuner, live) -> None:
    empty = tuner.get("/policy/home/calibration/")
    assert empty.status_code == 200 and b"No calibration imported for home" in empty.content
    assert tuner.post("/policy/home/calibration/", {
        "file": SimpleUploadedFile("cal.json", json.dumps(CALIBRATION).encode())}).status_code == 302
    page = tuner.get("/policy/home/calibration/")
    figure = json.loads(page.context["figure"])
    names = [t["name"] for t in figure["data"]]
    # the labels name the load factor and the setting (the file may hold several loads and predictors)
    # the current policy is the shipped default: the `auto` point, whose label pins μ and h, not the
    # asymmetric rule at the same μ and h
    assert "×1 knee (μ 1.3 · h 1200 s)" in names
    [current] = [t for t in figure["data"] if t["name"].startswith("×1 current policy")]
    assert current["y"][0] == pytest.approx(27.0)
    row = CalibrationImport.objects.get()
    proposed = tuner.get(f"/policy/home/?calibration={row.id}")
    assert proposed.status_code == 200 and proposed.context["preflight"] is not None
    values = {f.name: f.value for s in proposed.context["sections"].values() for f in s}
    assert values["estimator.margin_ratio"] == "1.3"
    assert AuditEntry.objects.get().action == "calibration.import"


SWEEP = {
    "apiVersion": "kalena.naughtian.io/v1", "kind": "Policy",
    "metadata": {"name": "sweep", "cluster": "home", "source": "calibration", "calibration": {
        "sweep": {"margin_ratio": [1.0, 1.3], "half_life_s": [1200.0], "predictor": ["asymmetric", "nsigma"]},
        "points": [{"predictor": pr, "load_factor": load, "margin_ratio": m, "half_life_s": 1200.0,
                    "reclaimed_fraction_cpu": r, "reclaimed_fraction_ram": r / 2, "batch_evictions_per_100_pod_hours": e,
                    "production_contention_core_hours": c, "production_cpu_core_hours": 1000.0}
                   for pr, load, m, r, e, c in (
                       ("asymmetric", 1, 1.0, 0.14, 0.9, 2.0), ("asymmetric", 1, 1.3, 0.135, 0.3, 0.5),
                       ("nsigma", 1, 1.0, 0.13, 0.05, 0.05), ("nsigma", 1, 1.3, 0.11, 0.08, 0.0),  # the last: dominated
                       ("asymmetric", 4, 1.0, 0.30, 1.5, 4.0), ("asymmetric", 4, 1.3, 0.27, 0.5, 1.0),
                       ("nsigma", 4, 1.0, 0.29, 0.09, 0.08), ("nsigma", 4, 1.3, 0.25, 0.07, 0.0))],
        "knee": {"margin_ratio": 1.3, "half_life_s": 1200.0},
        "shipped": {"predictor": "nsigma", "margin_ratio": 1.0, "half_life_s": 1200.0, "qualified": 1},
        "tolerance": {"max_evictions_per_100_pod_hours": 0.1, "max_contention_share": 0.0001}}},
}


def test_the_calibration_page_draws_the_frontier_and_moves_along_it(tuner, live) -> None:
    assert tuner.post("/policy/home/calibration/", {
        "file": SimpleUploadedFile("sweep.json", json.dumps(SWEEP).encode())}).status_code == 302
    page = tuner.get("/policy/home/calibration/")
    figure = json.loads(page.context["figure"])
    traces = {t["name"]: t for t in figure["data"]}
    # ×1: the frontier runs through the non-dominated settings sorted by evictions; nsigma μ 1.3 lies apart
    front = traces["×1 frontier"]
    assert list(front["x"]) == sorted(front["x"]) == [0.05, 0.3, 0.9]
    assert list(traces["×1 dominated"]["x"]) == [0.08]
    assert "×1 shipped (nsigma · μ 1 · h 1200 s)" in traces and "×4 shipped (nsigma · μ 1 · h 1200 s)" in traces
    # the eviction tolerance is a vertical line at 0.1 on the left panel (the contention one: the next test)
    assert [(shape["xref"], shape["x0"]) for shape in figure["layout"]["shapes"]][0] == ("x", 0.1)
    text = page.content.decode()
    assert 'id="shipped-setting">nsigma, μ 1.0, h 1200.0 s' in text
    rows = page.context["points"]
    assert [r["on_frontier"] for r in rows if r["load_factor"] == 1] == [True, True, True, False]
    # moving along the curve: propose the asymmetric μ 1.3 point at ×1 — its predictor comes with it
    index = next(r["index"] for r in rows if r["load_factor"] == 1 and r["point"].predictor == "asymmetric"
                 and r["point"].margin_ratio == 1.3)
    proposed = tuner.get(f"/policy/home/?calibration={CalibrationImport.objects.get().id}&point={index}")
    assert proposed.status_code == 200 and proposed.context["preflight"] is not None
    values = {f.name: f.value for s in proposed.context["sections"].values() for f in s}
    assert values["estimator.margin_ratio"] == "1.3" and values["estimator.half_life_s"] == "1200"
    assert json.loads(proposed.context["carried"])["estimator"]["predictor"] == "asymmetric"
    # the default proposal is the shipped setting, predictor included
    shipped = tuner.get(f"/policy/home/?calibration={CalibrationImport.objects.get().id}")
    assert json.loads(shipped.context["carried"])["estimator"]["predictor"] == "nsigma"
    assert {f.name: f.value for s in shipped.context["sections"].values() for f in s}["estimator.margin_ratio"] == "1"
    bad = tuner.get(f"/policy/home/?calibration={CalibrationImport.objects.get().id}&point=99")
    assert bad.status_code == 400 and "is not one of the calibration" in bad.content.decode() and "8 points (0–7)" in bad.content.decode()


def test_the_calibration_page_draws_the_contention_tolerance(tuner, live) -> None:
    """Beside the eviction frontier, a panel of reclaimed cpu against production contention (% of
    production cpu core-hours) with the file's contention tolerance (0.01 %) dashed; the points
    over it ringed on both panels under one legend entry, and their share marked in the table."""
    assert tuner.post("/policy/home/calibration/", {
        "file": SimpleUploadedFile("sweep.json", json.dumps(SWEEP).encode())}).status_code == 302
    page = tuner.get("/policy/home/calibration/")
    figure = json.loads(page.context["figure"])
    layout = figure["layout"]
    assert layout["xaxis2"]["title"]["text"] == "production contention, % of production cpu core-hours"
    assert layout["xaxis2"]["anchor"] == "y"            # the same reclaimed-cpu axis as the frontier
    assert [(s["xref"], s["x0"], s["line"]["dash"]) for s in layout["shapes"]] == [("x", 0.1, "dash"),
                                                                                  ("x2", 0.01, "dash")]
    notes = {a["xref"]: a["text"] for a in layout["annotations"]}
    assert notes["x2"] == "tolerance 0.01 %<br>of production cpu core-hours"
    assert notes["x"] == "tolerance 0.1 evictions / 100 pod-h"
    right = {t["name"]: t for t in figure["data"] if t.get("xaxis") == "x2"}
    # the same points on the right: ×1's frontier by evictions (nsigma μ 1, asymmetric μ 1.3, μ 1) at their shares
    assert right["×1 frontier · contention"]["x"] == pytest.approx([0.005, 0.05, 0.2])
    assert right["×1 shipped (nsigma · μ 1 · h 1200 s) · contention"]["x"] == pytest.approx([0.005])
    # the asymmetric settings break the contention tolerance at both loads: ringed on both panels, one legend entry
    [over] = [t for t in figure["data"] if t["name"] == "over the contention tolerance (> 0.01 %)"]
    assert over.get("xaxis", "x") == "x" and over["x"] == pytest.approx([0.3, 0.9, 1.5, 0.5])
    assert over.get("showlegend", True) is True and over["marker"]["line"]["color"] == "#dc2626"
    assert right["over the contention tolerance (> 0.01 %) · contention"]["x"] == pytest.approx([0.05, 0.2, 0.4, 0.1])
    assert right["over the contention tolerance (> 0.01 %) · contention"]["showlegend"] is False
    rows = page.context["points"]
    assert [(r["point"].predictor, r["over_contention"]) for r in rows if r["load_factor"] == 1] == [
        ("nsigma", False), ("asymmetric", True), ("asymmetric", True), ("nsigma", False)]
    text = page.content.decode()
    assert text.count('title="over the contention tolerance"') == 4
    assert "points over the contention tolerance are ringed in red" in text

    # the file's tolerance, not the engine's: at 0.1 % only the two points above it are ringed
    looser = json.loads(json.dumps(SWEEP))
    looser["metadata"]["calibration"]["tolerance"]["max_contention_share"] = 0.001
    assert tuner.post("/policy/home/calibration/", {
        "file": SimpleUploadedFile("looser.json", json.dumps(looser).encode())}).status_code == 302
    figure = json.loads(tuner.get("/policy/home/calibration/").context["figure"])
    assert [(s["xref"], s["x0"]) for s in figure["layout"]["shapes"]] == [("x", 0.1), ("x2", 0.1)]
    [over] = [t for t in figure["data"] if t["name"] == "over the contention tolerance (> 0.1 %)"]
    assert over["x"] == pytest.approx([0.9, 1.5])


def test_a_calibration_without_tolerance_or_production_hours_draws_the_defaults_it_can(tuner, live) -> None:
    """A file without a tolerance: the engine's default eviction line, said so; without any
    production cpu core-hours there is no contention share: no second panel, nothing ringed."""
    assert tuner.post("/policy/home/calibration/", {
        "file": SimpleUploadedFile("cal.json", json.dumps(CALIBRATION).encode())}).status_code == 302
    page = tuner.get("/policy/home/calibration/")
    figure = json.loads(page.context["figure"])
    assert [(s["xref"], s["x0"]) for s in figure["layout"]["shapes"]] == [("x", 0.1)]
    assert [a["text"] for a in figure["layout"]["annotations"]] == [
        "tolerance 0.1 evictions / 100 pod-h (engine default)"]
    assert "xaxis2" not in figure["layout"] and not any(t.get("xaxis") == "x2" for t in figure["data"])
    assert not any(t["name"].startswith("over the contention tolerance") for t in figure["data"])
    assert "ringed in red" not in page.content.decode()


def test_audit_api_filters(tuner, live) -> None:
    fields = _form(tuner, "home")
    fields["estimator.margin_ratio"] = "1.2"
    tuner.post("/policy/home/", {**fields, "action": "save"})
    listed = tuner.get("/api/audit?action=policy&cluster=home").json()
    assert [(e["actor"], e["action"], e["after"]["estimator.margin_ratio"]) for e in listed["items"]] == [
        ("olga", "policy.change", 1.2)]
    assert tuner.get("/api/audit?action=replan").json()["items"] == []
    bad = tuner.get("/api/audit?since=yesterday")
    assert bad.status_code == 422 and "since" in bad.json()["detail"] and "ISO 8601" in bad.json()["detail"]
    assert tuner.get("/audit/?actor=olga").status_code == 200
    policy = tuner.get("/api/clusters/home/policy").json()
    assert policy["version"] == 1 and policy["document"]["spec"]["estimator"]["margin_ratio"] == 1.2


@pytest.mark.parametrize("bound, listed", [
    # -22:45 is a valid ISO 8601 offset PostgreSQL cannot take (±15:59): the same instant in UTC
    ("until=0638-07-01T03:04:38-22:45", False),  # 0638-07-02T01:49:38Z: before the entry
    ("since=0638-07-01T03:04:38-22:45", True),
    # the instant is in year 0 in UTC: the first UTC time there is, which selects the same rows
    ("since=0001-01-01T00:00:00%2B05:00", True),
    ("until=0001-01-01T00:00:00%2B05:00", False),
    ("until=9999-12-31T23:59:59-10:00", True),  # year 10000 in UTC: the last UTC time there is
])
def test_audit_bounds_are_instants_whatever_their_offset(tuner, live, bound, listed) -> None:
    fields = _form(tuner, "home")
    fields["estimator.margin_ratio"] = "1.2"
    tuner.post("/policy/home/", {**fields, "action": "save"})
    answer = tuner.get(f"/api/audit?action=policy&{bound}")
    assert answer.status_code == 200, answer.content
    assert bool(answer.json()["items"]) is listed


def test_audit_log_is_append_only(live) -> None:
    from django.db import DatabaseError, transaction

    from kalena_web.policy.services import audit_record

    entry = audit_record(actor_kind="loop", actor="scheduling", action="eviction", target="x")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEntry.objects.filter(id=entry.id).update(actor="someone else")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEntry.objects.filter(id=entry.id).delete()
    assert AuditEntry.objects.get(id=entry.id).actor == "scheduling"


def test_manual_actions_and_approvals_are_audited_with_the_user(client, django_user_model, live) -> None:
    from kalena_web.replan.models import ReplanRecommendation

    user = _user(django_user_model, "abe", "approver")
    client.force_login(user)
    submitted = client.post("/api/clusters/home/batch", json.dumps(
        {"name": "team-a/job-1", "owner": "abe", "request": {"cpu": 0.5, "ram": 1.0}}), content_type="application/json")
    assert submitted.status_code == 201, submitted.content
    assert client.delete("/api/clusters/home/batch/team-a/job-1").status_code == 204
    node = live.nodes.first()
    created = client.post(f"/api/clusters/home/nodes/{node.name}/agent-tokens")
    assert created.status_code in (200, 201), created.content
    rec = ReplanRecommendation.objects.create(cluster=live, created_s=1.0, window_s=60.0, threshold=0.25,
                                              drift={"cpu": 0.3, "ram": 0.1}, report={}, workloads_yaml="")
    assert client.post(f"/live/home/replan/{rec.id}/decision", {"decision": "approve"}).status_code == 302
    rows = list(AuditEntry.objects.order_by("id").values_list("actor_kind", "actor", "action", "target"))
    assert [r[:3] for r in rows] == [("user", "abe", "batch.submit"), ("user", "abe", "batch.delete"),
                                     ("user", "abe", "token.create"), ("user", "abe", "replan.approve")]
    assert rows[0][3] == "team-a/job-1"


def test_preflight_request_makes_as_many_queries_whatever_the_cluster_size(tuner, live, kuberina_dir, tmp_path) -> None:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from kalena_web.ledger.models import LiveNodeLedger
    from kalena_web.policy.preflight_io import QUERIES, preflight_cluster_load
    from kalena_web.scheduling.services import batch_submit
    from tests.web.live_cluster import import_homelab

    big = import_homelab(kuberina_dir, tmp_path, now_s=1000.0, name="big", nodes=12)
    LiveNodeLedger.objects.filter(node__cluster=big).update(stale=False, last_sample_s=1000.0)
    for cluster, pods in ((live, 3), (big, 40)):
        for i in range(pods):
            batch_submit(cluster=cluster, name=f"team-{i % 4}/job-{i}", owner=f"t{i % 3}",
                         request={"cpu": 0.5, "ram": 1.0}, now_s=1000.0)
    counts = {}
    for cluster in (live, big):
        fields = _form(tuner, cluster.name)
        fields["estimator.margin_ratio"] = "1.3"
        with CaptureQueriesContext(connection) as queries:
            page = tuner.post(f"/policy/{cluster.name}/", {**fields, "action": "preflight"})
        assert page.status_code == 200
        preflight = page.context["preflight"]
        counts[cluster.name] = (len(queries.captured_queries), len(preflight.nodes), preflight.pending)
        with CaptureQueriesContext(connection) as reads:
            state = preflight_cluster_load(cluster=cluster, now_s=1000.0, cooldown_s=600.0)
        assert len(reads.captured_queries) == QUERIES
        assert len(state.names) == cluster.workloads.filter(node__isnull=False).count()
    # 3 nodes / 3 pending and 12 nodes / 40 pending: the same number of queries for the whole request
    assert counts["home"][1:] == (3, 3) and counts["big"][1:] == (12, 40)
    assert counts["home"][0] == counts["big"][0], counts


def test_agents_page_marks_an_agent_behind_the_current_version(tuner, live) -> None:
    from kalena_web.telemetry.services import agent_hello_record, agent_policy_version_record

    nodes = list(live.nodes.order_by("row"))
    hello = {"agent_version": "t", "sampling_interval_s": 10.0, "policy_version": None}
    for node in nodes[:2]:
        agent_hello_record(node_id=node.id, hello=hello, peer="127.0.0.1", now_s=1000.0)
    fields = _form(tuner, "home")
    fields["estimator.margin_ratio"] = "1.2"
    tuner.post("/policy/home/", {**fields, "action": "save"})
    agent_policy_version_record(node_id=nodes[0].id, message={"policy_version": 1})
    page = tuner.get("/live/home/agents/").content.decode()
    assert "v1" in page and "none (current v1)" in page
    policy_page = tuner.get("/policy/home/")
    assert [(a.node, a.behind) for a in policy_page.context["behind"]] == [(nodes[1].name, True)]
    assert b"1 of 2</strong> agent(s) report an older version than 1" in policy_page.content


def test_a_policy_file_without_a_sweep_is_shown_as_such_and_its_values_proposed(tuner, live) -> None:
    plain = {"apiVersion": "kalena.naughtian.io/v1", "kind": "Policy", "metadata": {"source": "kalena evaluate"},
             "spec": {"estimator": {"margin_ratio": 1.25, "half_life_s": 900}}}
    assert tuner.post("/policy/home/calibration/", {
        "file": SimpleUploadedFile("evaluate-policy.yaml", yaml.safe_dump(plain).encode())}).status_code == 302
    page = tuner.get("/policy/home/calibration/")
    assert b"This file holds no calibration sweep" in page.content and page.context["figure"] is None
    proposed = tuner.get(f"/policy/home/?calibration={CalibrationImport.objects.get().id}")
    values = {f.name: f.value for s in proposed.context["sections"].values() for f in s}
    assert (values["estimator.margin_ratio"], values["estimator.half_life_s"]) == ("1.25", "900")


def test_both_eviction_thresholds_lowered_together_are_one_valid_draft(tuner, live) -> None:
    """The cross-field rule (acute_ratio ≥ evict_threshold_ratio) is checked on the draft as a
    whole, not each field against the other's default: lowering both in one draft is accepted."""
    fields = _form(tuner, "home")
    fields["eviction.evict_threshold_ratio"] = "0.5"
    fields["eviction.acute_ratio"] = "0.6"
    page = tuner.post("/policy/home/", {**fields, "action": "save"})
    assert page.status_code == 302, page.context and page.context.get("errors")
    saved = current_policy(cluster_id=live.id).policy.eviction
    assert (saved.evict_threshold_ratio, saved.acute_ratio) == (0.5, 0.6)

    # and from there, raising evict_threshold_ratio alone is judged against the draft's acute_ratio
    fields = _form(tuner, "home")
    fields["eviction.evict_threshold_ratio"] = "0.55"
    assert tuner.post("/policy/home/", {**fields, "action": "save"}).status_code == 302
    fields = _form(tuner, "home")
    fields["eviction.evict_threshold_ratio"] = "0.7"
    page = tuner.post("/policy/home/", {**fields, "action": "save"})
    assert page.status_code == 400
    assert "acute_ratio 0.6 is below evict_threshold_ratio 0.7" in page.context["errors"]["eviction.acute_ratio"]
    assert current_policy(cluster_id=live.id).version == 2


def test_a_namespace_capped_twice_is_refused_not_silently_the_last(tuner, live) -> None:
    fields = _form(tuner, "home")
    fields["namespaces"] = "team-a: 3\nteam-b: 1\nteam-a: 4"
    page = tuner.post("/policy/home/", {**fields, "action": "save"})
    assert page.status_code == 400
    assert page.context["errors"]["namespaces"] == "line 3: namespace 'team-a' is capped twice (accepted: one line per namespace)"
    assert not PolicyVersion.objects.exists()
