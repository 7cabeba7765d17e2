"""Console pages as an operator sees them: login required, the expected figures (derived from
the engine and the replay summary), sorting, and clear errors for bad input."""

from __future__ import annotations

import re

import numpy as np
import pytest
from django.urls import reverse

from kalena_engine.resources import CPU, RAM
from kalena_web.archive.models import BatchEvent, Run, TaskOutcome
from kalena_web.console.formatting import clock, cores, gib, integer, pct, quantity
from kalena_web.ledger.models import NodeLedger
from tests.web.helpers import cells, figure, row_order, text, traces

pytestmark = pytest.mark.django_db

PAGES = [
    "/", "/runs/", "/runs/t-main/", "/runs/t-main/?sort=-slack_ram", "/runs/t-main/nodes/std-000/",
    "/runs/t-main/batch/", "/compare/?runs=t-main&runs=t-small",
]


def _evicted_task(run_name: str = "t-main") -> TaskOutcome:
    return (TaskOutcome.objects.filter(run__name=run_name, evicted__gt=0).select_related("workload")
            .order_by("workload__row").first())


@pytest.mark.parametrize("url", PAGES + ["/runs/t-main/batch/some/task/"])
def test_anonymous_users_are_sent_to_the_login_page(client, recorded, url) -> None:
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login") + "?next=")


def test_login_then_logout(client, operator) -> None:
    from tests.web.conftest import PASSWORD

    bad = client.post(reverse("login"), {"username": "operator", "password": "wrong"})
    assert bad.status_code == 200 and "did not match" in bad.content.decode()
    good = client.post(reverse("login"), {"username": "operator", "password": PASSWORD})
    assert good.status_code == 302 and good["Location"] == reverse("console:runs")
    assert client.get("/runs/").status_code == 200
    assert client.post(reverse("logout")).status_code == 302
    assert client.get("/runs/").status_code == 302


def test_runs_list_shows_every_run_with_its_headline(console, recorded) -> None:
    page = console.get("/runs/").content.decode()
    for captured, name in ((recorded.main, "t-main"), (recorded.small, "t-small")):
        assert f'value="{name}"' in page
        assert pct(captured.summary["reclaimed_fraction_cpu"]) in page
        assert integer(captured.summary["batch_submitted"]) in page


def test_overview_shows_metrics_6_to_8_from_the_summary(console, recorded) -> None:
    page = console.get("/runs/t-main/").content.decode()
    summary = recorded.main.summary
    section = text(page[page.index('id="proposal-metrics"'):page.index('id="nodes-table"')])
    acc = summary["reservation_accuracy"]
    assert f"cpu {acc['cpu']['overestimation_area']:.3f} · ram {acc['ram']['overestimation_area']:.3f}" in section
    reserve = summary["pareto_reserve_yield"]
    assert f"cpu {reserve['cpu']['cluster']:.1%} · ram {reserve['ram']['cluster']:.1%}" in section
    assert f"over {summary['batch_forward_progress']['completed_instances']:,} completed batch instances" in section
    # the charts: the r/q and u/q CDFs as the summary holds them, the hourly yield
    accuracy = traces(figure(page, "fig-accuracy"))
    name = next(n for n in accuracy if n.startswith("cpu: reservation / request"))
    assert list(accuracy[name]["x"]) == acc["cpu"]["reservation_over_request"]["ratio"]
    assert list(accuracy[name]["y"]) == acc["cpu"]["reservation_over_request"]["cdf"]
    reserve_traces = traces(figure(page, "fig-reserve"))
    assert any(n.startswith("cpu (day: ") for n in reserve_traces)


def test_a_lab_runs_overview_shows_the_live_day_beside_the_replay(console, recorded) -> None:
    """`kalena lab run` persists its replay with the live figures in ``summary["lab_run"]``: the
    run's overview shows them beside the replay's, with the ratio and each gate."""
    from kalena_web.archive.models import Run

    run = Run.objects.get(name="t-main")
    original = dict(run.summary)
    rows = [{"figure": "reclaimed_fraction_cpu", "live": 0.2319, "replay": 0.215, "ratio": 1.079, "in_band": True,
             "gate": True, "explanation": ""},
            {"figure": "batch_evictions_per_100_pod_hours", "live": 28.77, "replay": 54.3, "ratio": 0.53,
             "in_band": False, "gate": False, "explanation": ""},
            {"figure": "batch_evicted", "live": 6, "replay": 9, "ratio": 0.667, "in_band": False, "gate": None,
             "explanation": "evictions are rare events"}]
    run.summary = {**original, "lab_run": {"speed": 10.0, "comparison": {
        "rows": rows, "band": [0.8, 1.25], "gates_passed": False, "gates_failed": ["batch_evictions_per_100_pod_hours"]}}}
    run.save(update_fields=["summary"])
    try:
        page = console.get("/runs/t-main/").content.decode()
    finally:
        run.summary = original
        run.save(update_fields=["summary"])
    table = text(page[page.index('id="lab-day-table"'):page.index("</table>", page.index('id="lab-day-table"'))])
    assert "batch_evictions_per_100_pod_hours 28.77 54.3 0.53 fail" in table
    assert "reclaimed_fraction_cpu 0.2319 0.215 1.079 pass" in table
    assert "batch_evicted 6 9 0.667 evictions are rare events" in table
    assert "within 0.8–1.25" in text(page)
    assert 'id="lab-day"' not in console.get("/runs/t-main/").content.decode()    # a replay alone: no such card


def test_overview_shows_the_summary_headline_chart_and_nodes(console, recorded) -> None:
    page = console.get("/runs/t-main/").content.decode()
    summary = recorded.main.summary
    headline = text(page[page.index('id="headline"'):page.index("Reclaimed capacity in use over time")])
    for expected in (pct(summary["reclaimed_fraction_cpu"]), pct(summary["reclaimed_fraction_ram"]),
                     integer(summary["batch_submitted"]), integer(summary["batch_evicted"]),
                     f"{summary['mean_reclaimed_cores']:,.1f} cores in use on average"):
        assert expected in headline
    assert "Production evictions 0" in headline
    # the chart: reclaimed share at each captured step, from the engine's records
    fig = figure(page, "fig-reclaimed")
    cpu = traces(fig)["CPU reclaimed"]["y"]
    assert len(cpu) == 60
    for step, record in recorded.main.records.items():
        request = record.prod_request[:, CPU] + record.batch_request[:, CPU]
        reclaimed = np.maximum(0.0, request - record.capacity[:, CPU]).sum()
        assert cpu[step] == pytest.approx(reclaimed / request.sum() * 100.0, rel=1e-12)
    # every node is listed, with its mean slack as the engine's records give it
    assert len(row_order(page, "data-node")) == 186
    state = recorded.main.replay.simulator.state
    mean_slack = recorded.main.slack_sum / recorded.main.steps
    for row in (0, 40, 185):
        slack_cell = cells(page, "data-node", state.node_names[row])[5]
        assert slack_cell.startswith(cores(mean_slack[row, CPU]) + " / ")


@pytest.mark.parametrize("sort, field, reverse_", [
    ("slack_cpu", "slack_mean_cpu_mcpu", False), ("-slack_ram", "slack_mean_ram_bytes", True),
    ("headroom_cpu", "headroom_cpu_mcpu", False), ("-usage_cpu", "usage_mean_cpu_ratio", True),
    ("usage_ram", "usage_mean_ram_ratio", False),
])
def test_nodes_table_sorts_by_slack_headroom_and_usage(console, recorded, sort, field, reverse_) -> None:
    page = console.get(f"/runs/t-main/?sort={sort}").content.decode()
    shown = row_order(page, "data-node")
    values = dict(NodeLedger.objects.filter(run__name="t-main").values_list("node__name", field))
    ordered = [values[n] for n in shown]
    assert ordered == sorted(ordered, reverse=reverse_)
    assert len(set(ordered)) > 10  # the order is informative, not all ties


def test_node_page_lists_its_evictions_with_the_numbers(console, recorded) -> None:
    event = BatchEvent.objects.filter(run__name="t-main", kind="evicted").select_related("node", "workload").first()
    page = console.get(f"/runs/t-main/nodes/{event.node.name}/").content.decode()
    table = text(page[page.index('id="evictions-table"'):])
    d = event.detail
    assert f"{d['dimension']} pressure: working set {quantity(d['dimension'], d['working_set'])}" in table
    assert f"Σ reservations {quantity(d['dimension'], d['ledger_before'])} > capacity" in table
    assert event.workload.name in table and clock(event.time_s) in table


def test_node_page_defaults_to_its_tightest_moment_and_accepts_a_clock_time(console, recorded) -> None:
    record = recorded.main.records[37]
    page = console.get("/runs/t-main/nodes/std-000/?at=00:37").content.decode()
    assert "At 00:37" in text(page) and "(step 37 of 59" in text(page)
    assert cells(page, "data-row", "Capacity")[2:] == [cores(record.capacity[0, CPU]), gib(record.capacity[0, RAM])]
    default = console.get("/runs/t-main/nodes/std-000/").content.decode()
    assert "the tightest moment" in default


def test_batch_task_page_tells_its_lifecycle(console, recorded) -> None:
    outcome = _evicted_task()
    task = outcome.workload
    state = recorded.main.replay.simulator.state
    row = task.row
    page = console.get(f"/runs/t-main/batch/{task.name}/").content.decode()
    boxes = text(page[page.index('id="outcome"'):page.index("Pods running and pending")])
    assert f"Submitted {integer(state.submitted[row])}" in boxes
    assert f"Completed {integer(state.completed[row])}" in boxes
    assert f"Evicted {integer(outcome.evicted)}" in boxes
    lifecycle = text(page[page.index('id="lifecycle"'):])
    events = list(BatchEvent.objects.filter(workload=task).select_related("node").order_by("time_s", "id"))
    assert lifecycle.count(" placed ") == sum(e.kind == "placed" for e in events)
    for e in events:
        if e.kind == "evicted":
            assert f"working set {quantity(e.detail['dimension'], e.detail['working_set'])}" in lifecycle
            assert f"brought Σ reservations to {quantity(e.detail['dimension'], e.detail['ledger_after'])}" in lifecycle
        if e.node is not None:
            assert f'href="/runs/t-main/nodes/{e.node.name}/?step={e.step}#at"' in page
    fig = figure(page, "fig-task")
    running = traces(fig)["running"]["y"]
    assert running.max() > 0 and running[-1] == state.groups.count[state.groups.task == row].sum()


def test_batch_list_filters_evicted_tasks(console, recorded) -> None:
    page = console.get("/runs/t-main/batch/?show=evicted").content.decode()
    expected = TaskOutcome.objects.filter(run__name="t-main", evicted__gt=0).count()
    assert f"Batch tasks ({expected})" in text(page)
    assert len(re.findall(r'<a href="/runs/t-main/batch/[^"]+/">', page)) == expected


def test_compare_shows_two_runs_side_by_side(console, recorded) -> None:
    page = console.get("/compare/?runs=t-main&runs=t-small").content.decode()
    table = text(page[page.index('id="compare-table"'):])
    for captured in (recorded.main, recorded.small):
        assert pct(captured.summary["reclaimed_fraction_cpu"]) in table
        assert integer(captured.summary["batch_submitted"]) in table
    names = [t["name"] for t in figure(page, "fig-compare")["data"]]
    assert names == ["t-main · cpu", "t-main · ram", "t-small · cpu", "t-small · ram"]


@pytest.mark.parametrize("url, status, message", [
    ("/runs/nope/", 404, "no run named 'nope'"),
    ("/runs/t-main/nodes/nope/", 404, "run 't-main' has no node named 'nope'"),
    ("/runs/t-main/batch/j_0/nope/", 404, "has no batch task named 'j_0/nope'"),
    ("/runs/t-main/?sort=bogus", 400, "unknown sort 'bogus'; accepted: name, slack_cpu"),
    ("/runs/t-main/nodes/std-000/?step=x", 400, "step='x' is not an integer"),
    ("/runs/t-main/nodes/std-000/?step=60", 400, "step=60 is out of range (accepted: 0–59)"),
    ("/runs/t-main/nodes/std-000/?at=25:00", 400, "outside the run"),
    ("/runs/t-main/nodes/std-000/?at=noon", 400, "accepted: HH:MM"),
    ("/runs/t-main/nodes/std-000/?at=00:10&step=3", 400, "either step or at"),
    ("/runs/t-main/batch/?show=bogus", 400, "show='bogus' is not accepted"),
    ("/runs/t-main/batch/?page=999", 404, "page"),
    ("/compare/?runs=t-main", 400, "compare needs 2 to 4 different runs"),
    ("/compare/?runs=t-main&runs=t-main", 400, "compare needs 2 to 4 different runs"),
    ("/compare/?runs=t-main&runs=ghost", 404, "no run named 'ghost'"),
])
def test_bad_input_gets_a_clear_error_and_changes_nothing(console, url, status, message) -> None:
    runs_before = list(Run.objects.values_list("name", "id"))
    response = console.get(url)
    assert response.status_code == status
    assert message in text(response.content.decode())
    assert list(Run.objects.values_list("name", "id")) == runs_before


def test_pages_refuse_writes(console) -> None:
    assert console.post("/runs/t-main/").status_code == 405


def test_plotly_is_served_from_the_projects_static_files_never_a_cdn(console) -> None:
    page = console.get("/runs/t-main/nodes/std-000/").content.decode()
    scripts = re.findall(r'<script src="([^"]+)"', page)
    assert "/static/vendor/plotly.min.js" in scripts
    assert all(s.startswith("/static/") for s in scripts)
    js = b"".join(console.get("/static/vendor/plotly.min.js").streaming_content)
    assert len(js) > 1_000_000 and b"plotly" in js[:2000].lower()


def test_api_needs_a_login_and_serves_node_series(client, console, recorded) -> None:
    from django.test import Client

    assert Client().get("/api/runs").status_code == 401
    runs = console.get("/api/runs").json()
    assert {"t-main", "t-small"} <= {r["name"] for r in runs}
    data = console.get("/api/runs/t-main/nodes/std-000/series?dimension=ram").json()
    record = recorded.main.records[24]
    assert data["unit"] == "GiB"
    assert data["series"]["prod_usage"][24] == record.prod_usage[0, RAM] / 2**30
    hz = console.get("/api/runs/t-main/nodes/std-000/series?dimension=hz")  # the dimensions are an enum
    assert hz.status_code == 422 and "net_out" in hz.json()["detail"]
    assert console.get("/api/runs/t-main/nodes/ghost/series").status_code == 404
    assert console.get("/livez").json() == {"status": "ok"}
    # A probe addresses the pod by its IP: the probes answer, every other page still refuses the host.
    for probe in ("/livez", "/readyz", "/healthz", "/metrics", "/metrics/cluster"):
        assert console.get(probe, HTTP_HOST="10.244.1.7:8000").status_code == 200, probe
    assert console.get("/runs/", HTTP_HOST="10.244.1.7:8000").status_code == 400


def test_tasks_pending_at_the_end_say_why(console, recorded) -> None:
    from kalena_web.archive.models import TaskOutcome
    from kalena_web.console.why import reason_text

    state = recorded.main.replay.simulator.state
    pending = TaskOutcome.objects.filter(run__name="t-main", pending_at_end__gt=0).select_related("workload")
    assert pending.count() == int((state.pending > 0).sum()) > 0
    records = {r.workload: r.to_dict() for r in recorded.main.replay.why_pending()}
    for outcome in pending:
        assert outcome.why_pending == records[outcome.workload.name]  # exactly the engine's record
    outcome = pending.first()
    page = text(console.get(f"/runs/t-main/batch/{outcome.workload.name}/").content.decode())
    words = reason_text(outcome.why_pending["binding"])
    assert f"Binding constraint: {words}" in page
    listing = text(console.get("/runs/t-main/batch/?show=pending").content.decode())
    assert outcome.workload.name in listing and words in listing
