"""Live-cluster console pages: what an operator reads, login, bad names, fixed query counts."""

from __future__ import annotations

import numpy as np
import pytest
from django.contrib.auth.models import Permission, User
from django.test.utils import CaptureQueriesContext
from django.db import connection

from kalena_engine.policy import Policy
from kalena_engine.resources import GIB
from kalena_web.archive.live import node_snapshot_rollup
from kalena_web.archive.models import EvictionRecord
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.replan.models import ReplanRecommendation
from kalena_web.scheduling.services import batch_submit, scheduling_pass

PAGES = ["/live/", "/live/home/", "/live/home/nodes/thinkcentre-beta/", "/live/home/pending/",
         "/live/home/evictions/", "/live/home/replan/",
         # the lists' search, filters, sort and paging (issue 16) keep the count fixed too
         "/live/home/?q=think&telemetry=fresh&sort=-slack_ram", "/live/home/batch/",
         "/live/home/batch/?state=bound&q=batch&sort=-priority", "/live/home/pending/?q=batch&sort=-priority",
         "/live/home/evictions/?condition=memory_pressure&sort=node", "/live/home/agents/?q=beta&agent=all",
         "/tokens/"]


@pytest.fixture
def operator(client, live):
    client.force_login(User.objects.create_user("op", password="x" * 12))
    return client


def populate(live) -> None:
    for i in range(3):
        batch_submit(cluster=live, name=f"batch/ok-{i}", owner="ok", request={"cpu": 500.0, "ram": GIB}, now_s=1000.0)
    batch_submit(cluster=live, name="batch/huge-0", owner="huge", request={"cpu": 500.0, "ram": 16 * GIB}, now_s=1000.0)  # a whole node: pending beside production
    scheduling_pass(cluster=live, orchestrator=orchestrator_for(live), policy=Policy(), now_s=1001.0,
                    rng=np.random.default_rng(0))
    node_snapshot_rollup(cluster=live, now_s=1002.0)
    node = live.nodes.get(name="thinkcentre-beta")
    EvictionRecord.objects.create(cluster=live, node=node, workload_name="batch/old-0", time_s=990.0, cause="priority",
                                  dimension="ram", detail={"dimension": "ram", "working_set": 15.2 * GIB,
                                                           "capacity": 15.75 * GIB, "ledger_before": 16.5 * GIB,
                                                           "ledger_after": 15.5 * GIB, "acute": False},
                                  source_key="p1")


@pytest.mark.parametrize("url", PAGES)
def test_anonymous_users_are_sent_to_login(client, live, url) -> None:
    response = client.get(url)
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_pages_render_what_the_ledgers_hold(operator, live) -> None:
    populate(live)
    page = operator.get("/live/home/").content.decode()
    assert "thinkcentre-beta" in page and "1 pending" in page
    LiveNodeLedger.objects.filter(node__name="thinkcentre-gamma").update(stale=True)
    page = operator.get("/live/home/").content.decode()
    assert "telemetry stale" in page
    node = operator.get("/live/home/nodes/thinkcentre-gamma/").content.decode()
    assert "every reservation reads max(r, request)" in node  # why the stale node takes no batch
    beta = operator.get("/live/home/nodes/thinkcentre-beta/").content.decode()
    assert "smart-home/home-assistant-0" in beta and 'data-live-node="' in beta
    assert "ram pressure" in beta and "15.2 GiB" in beta  # the why-evicted record with its numbers
    pending = operator.get("/live/home/pending/").content.decode()
    assert "batch/huge-0" in pending and "<strong>not enough memory slack</strong>" in pending
    detail = operator.get("/live/home/batch/batch/huge-0/").content.decode()
    assert "Binding constraint: <strong>not enough memory slack</strong>" in detail and "Lowering the request by" in detail
    assert "GiB of memory" in detail and "short by" in detail  # examples read as sentences


def test_unknown_names_are_404(operator, live) -> None:
    assert operator.get("/live/nope/").status_code == 404
    assert operator.get("/live/home/nodes/nope/").status_code == 404
    assert operator.get("/live/home/batch/batch/nope/").status_code == 404


@pytest.mark.parametrize("url", PAGES[1:])
def test_query_count_does_not_grow_with_the_cluster(operator, live, url) -> None:
    populate(live)
    with CaptureQueriesContext(connection) as small:
        assert operator.get(url).status_code == 200
    for i in range(20):
        batch_submit(cluster=live, name=f"batch/more-{i}", owner=f"o{i}", request={"cpu": 100.0, "ram": GIB},
                     now_s=1003.0)
    scheduling_pass(cluster=live, orchestrator=orchestrator_for(live), policy=Policy(), now_s=1004.0,
                    rng=np.random.default_rng(0))
    with CaptureQueriesContext(connection) as big:
        assert operator.get(url).status_code == 200
    assert len(big) == len(small)


def test_only_approvers_decide_recommendations(operator, live) -> None:
    rec = ReplanRecommendation.objects.create(cluster=live, created_s=1.0, window_s=86400, threshold=0.25,
                                              drift={"cpu": 0.5, "ram": 0.4}, workloads_yaml="namespaces: {}\n")
    url = f"/live/home/replan/{rec.id}/decision"
    assert "Approving needs the approver role" in operator.get("/live/home/replan/").content.decode()
    assert operator.post(url, {"decision": "approve"}).status_code == 403
    user = User.objects.get(username="op")
    user.user_permissions.add(Permission.objects.get(codename="approve_replan"))
    operator.force_login(User.objects.get(username="op"))
    assert operator.post(url, {"decision": "maybe"}).status_code == 400
    assert operator.post(url, {"decision": "reject", "note": "not now"}).status_code == 302
    rec.refresh_from_db()
    assert rec.state == "rejected" and rec.note == "not now"
    assert operator.post(url, {"decision": "approve"}).status_code == 409


def test_the_pending_list_names_excluding_reasons_and_dimensions_in_words(operator, live) -> None:
    """The list's "Nodes excluded" and "Smallest shortfall" columns read as the pod's own page
    does: ``2: the node's published batch allocatable is not raised yet``, ``memory 0.0049 GiB``,
    not the engine's kinds (``kubelet_allocatable 2``, ``ram``)."""
    from kalena_web.scheduling.models import WhyPending

    populate(live)
    why = WhyPending.objects.get(pod__workload__name="batch/huge-0")
    why.record = {**why.record, "excluded": {"kubelet_allocatable": 2, "telemetry_stale": 1},
                  "shortfall": [{"dim": "ram", "amount": 0.0049, "unit": "GiB", "node": "thinkcentre-beta", "nodes": 1}]}
    why.save(update_fields=["record"])
    page = operator.get("/live/home/pending/").content.decode()
    row = page[page.index('data-pod="batch/huge-0"'):]
    row = row[:row.index("</tr>")]
    assert "2: the node&#x27;s published batch allocatable is not raised yet" in row
    assert "1: telemetry stale" in row and "memory 0.0049 GiB on thinkcentre-beta" in row
    assert "kubelet_allocatable" not in row and "telemetry_stale" not in row and ">ram " not in row


def test_the_live_node_page_shows_batch_throttled_with_the_numbers(operator, live) -> None:
    """The agent's cpu actions on batch are on the node's page: in the demo's lab the agents wrote
    2,755 quotas in 5 minutes and no Live page said a pod was throttled."""
    from kalena_web.telemetry.models import IngestBatch, MitigationEvent

    populate(live)
    node = live.nodes.get(name="thinkcentre-beta")
    beta = operator.get("/live/home/nodes/thinkcentre-beta/").content.decode()
    assert "No throttle action: the agent has not cut batch's cpu" in beta
    for i, (action, reason, numbers) in enumerate([
            ("throttle", "cpu_budget", {"quota_us": 15_000, "period_us": 100_000, "share_mcpu": 150, "budget_mcpu": 200,
                                        "capacity_mcpu": 390, "service_claim_mcpu": 190}),
            ("cpu_weight", "cpu_contention", {"weight": 1, "contended_services": ["smart-home/home-assistant-0"]}),
            # the anti-starvation floor (12 pods × 0.1 core) above what production leaves: no "share of 1.2 of 0.29"
            ("throttle", "cpu_budget", {"quota_us": 10_000, "period_us": 100_000, "share_mcpu": 100,
                                        "budget_mcpu": 1200, "capacity_mcpu": 290, "service_claim_mcpu": 250})]):
        batch = IngestBatch.objects.create(node=node, batch_id=f"t:{i}", kind=IngestBatch.ACTION, shard=0, ts=1000.0 + i,
                                           received_s=1000.0 + i, stored_s=1000.0 + i)
        MitigationEvent.objects.create(batch=batch, node=node, ts=1000.0 + i, action=action, reason=reason,
                                       workload_name="batch/ok-0", tier="batch", trigger_source="psi-trigger",
                                       numbers=numbers, result_ok=True)
    beta = operator.get("/live/home/nodes/thinkcentre-beta/").content.decode()
    section = beta[beta.index('id="throttles"'):beta.index("Evictions on this node")]
    assert "batch/ok-0" in section and "No throttling" not in section
    assert ("cpu quota set to 0.15 cores: its share of the 0.2 cores batch may use while production claims "
            "0.19 of the node&#x27;s 0.39") in section
    assert "cpu weight lowered to 1 while production (smart-home/home-assistant-0) waits for cpu" in section
    assert ("cpu quota set to 0.1 cores: the floor each batch pod keeps (1.2 cores in all, more than the 0.04 "
            "production leaves of the node&#x27;s 0.29); production is kept ahead by cpu weight") in section
    assert "share of the 1.2 cores" not in section
    # newest first
    assert section.index("the floor each") < section.index('data-action="cpu_weight"') < section.index("its share of")
