"""``manage.py console_timings``: server time and SQL queries of each console page for a run.

Renders every page through Django's test client as a logged-in user (no network, no browser:
pure server time, from the request entering the middleware to the response), several times
each, and prints the median and the worst with the number of queries. A measurement, not a
test: budgets are reported, never asserted.
"""

from __future__ import annotations

import statistics
import time

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from kalena_web.archive import selectors
from kalena_web.archive.errors import NotFound
from kalena_web.archive.models import BatchEvent, TaskOutcome
from kalena_web.ledger.models import NodeLedger

BUDGET_MS = 300.0


class Command(BaseCommand):
    help = "Print each console page's server time and SQL query count for a persisted run."

    def add_arguments(self, parser) -> None:
        parser.add_argument("run", nargs="?", help="run name (default: the newest run)")
        parser.add_argument("--repeat", type=int, default=5, help="renders per page (default 5)")

    def handle(self, *args, **options) -> None:
        names = selectors.run_names()
        name = options["run"] or (names[0] if names else None)
        if name is None:
            raise CommandError("no run is persisted; record one with `kalena replay --persist`")
        try:
            run = selectors.run_get(name=name)
        except NotFound as exc:
            raise CommandError(str(exc)) from exc
        pages = self._pages(run)
        user, _ = get_user_model().objects.get_or_create(username="console-timings")
        client = Client(HTTP_HOST=(settings.ALLOWED_HOSTS or ["127.0.0.1"])[0])
        client.force_login(user)
        self.stdout.write(f"run {run.name}: {run.summary.get('nodes')} nodes, {run.steps} steps, "
                          f"{BatchEvent.objects.filter(run=run).count():,} events "
                          f"({connection.vendor}); {options['repeat']} renders per page after one warm-up")
        self.stdout.write(f"{'page':<58} {'median ms':>10} {'max ms':>8} {'queries':>8} {'KiB':>7}")
        for label, url in pages:
            client.get(url)  # warm-up: template compilation, imports
            times, queries, size = [], 0, 0
            for _ in range(options["repeat"]):
                with CaptureQueriesContext(connection) as captured:
                    started = time.perf_counter()
                    response = client.get(url)
                    times.append((time.perf_counter() - started) * 1000.0)
                if response.status_code != 200:
                    raise CommandError(f"{url} answered {response.status_code}")
                queries, size = len(captured), len(response.content)
            flag = "" if max(times) < BUDGET_MS else f"  over {BUDGET_MS:.0f} ms"
            self.stdout.write(f"{label:<58} {statistics.median(times):>10.1f} {max(times):>8.1f} {queries:>8} "
                              f"{size / 1024:>7.0f}{flag}")

    def _pages(self, run) -> list[tuple[str, str]]:
        ledgers = NodeLedger.objects.filter(run=run).select_related("node")
        busiest = ledgers.order_by("-pods", "node__row").first()
        evicted = ledgers.order_by("-batch_evicted", "node__row").first()
        task = (TaskOutcome.objects.filter(run=run).select_related("workload")
                .order_by("-eviction_events", "-placed").first())
        overview = reverse("console:overview", args=[run.name])
        pages = [("runs list", reverse("console:runs")), ("overview", overview),
                 ("overview sorted by cpu slack", overview + "?sort=-slack_cpu")]
        if busiest:
            pages.append((f"node {busiest.node.name} ({busiest.pods} pods)",
                          reverse("console:node", args=[run.name, busiest.node.name])))
        if evicted and evicted.pk != getattr(busiest, "pk", None):
            pages.append((f"node {evicted.node.name} ({evicted.batch_evicted} evicted)",
                          reverse("console:node", args=[run.name, evicted.node.name])))
        if task:
            pages.append((f"batch task {task.workload.name}", reverse("console:task", args=[run.name, task.workload.name])))
        pages.append(("batch tasks list", reverse("console:batch", args=[run.name])))
        return pages
