"""Each page issues a fixed number of SQL queries, whatever the size of the run, node or task
(guards against N+1 queries). Sizes come from the real data: the 186-node run against a
12-node slice, the most crowded node against the emptiest, a task with many events against
one with few."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.models import Count
from django.test.utils import CaptureQueriesContext

from kalena_web.archive.models import BatchEvent, TaskOutcome
from kalena_web.ledger.models import NodeLedger

pytestmark = pytest.mark.django_db

#: Upper bounds per page (session and user lookups included).
# each budget includes the one query of the open re-plan banner every logged-in page renders
MAX_QUERIES = {"runs": 4, "overview": 9, "node": 9, "task": 8, "batch": 6, "compare": 5}


def _queries(client, url: str) -> int:
    client.get(url)  # warm any per-process caches (content types, etc.)
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200, url
    return len(captured)


def test_overview_query_count_does_not_grow_with_nodes(console, recorded) -> None:
    big, small = _queries(console, "/runs/t-main/"), _queries(console, "/runs/t-small/")
    assert big == small <= MAX_QUERIES["overview"]
    assert _queries(console, "/runs/t-main/?sort=-usage_ram") == big


def test_node_page_query_count_does_not_grow_with_workloads(console, recorded) -> None:
    ledgers = NodeLedger.objects.filter(run__name="t-main").select_related("node")
    crowded = ledgers.order_by("-pods", "-batch_placed").first()
    empty = ledgers.order_by("pods", "batch_placed").first()
    assert crowded.pods >= 20 and empty.pods == 0
    counts = {_queries(console, f"/runs/t-main/nodes/{n.node.name}/") for n in (crowded, empty)}
    small = NodeLedger.objects.filter(run__name="t-small").select_related("node").order_by("pods").first()
    counts.add(_queries(console, f"/runs/t-small/nodes/{small.node.name}/"))
    assert len(counts) == 1 and counts.pop() <= MAX_QUERIES["node"]


def test_task_page_query_count_does_not_grow_with_events(console, recorded) -> None:
    per_task = (BatchEvent.objects.filter(run__name="t-main").values("workload__name")
                .annotate(n=Count("id")).order_by("n"))
    few, many = per_task.first(), per_task.last()
    assert many["n"] > 10 * few["n"]
    counts = {_queries(console, f"/runs/t-main/batch/{t['workload__name']}/") for t in (few, many)}
    assert len(counts) == 1 and counts.pop() <= MAX_QUERIES["task"]


def test_list_pages_query_counts_are_fixed(console, recorded) -> None:
    assert TaskOutcome.objects.filter(run__name="t-main").count() > 100  # more than one page
    batch = {_queries(console, u) for u in ("/runs/t-main/batch/", "/runs/t-main/batch/?page=2",
                                            "/runs/t-small/batch/?show=unfinished")}
    assert len(batch) == 1 and batch.pop() <= MAX_QUERIES["batch"]
    assert _queries(console, "/runs/") <= MAX_QUERIES["runs"]
    assert _queries(console, "/compare/?runs=t-main&runs=t-small") <= MAX_QUERIES["compare"]


def test_django_assert_max_num_queries_on_the_node_page(console, recorded, django_assert_max_num_queries) -> None:
    console.get("/runs/t-main/nodes/std-010/")
    with django_assert_max_num_queries(MAX_QUERIES["node"]):
        console.get("/runs/t-main/nodes/std-010/?at=00:30")
