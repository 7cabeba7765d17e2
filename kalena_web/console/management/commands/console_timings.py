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
        parser.add_argument("--live", metavar="CLUSTER", help="also time the live pages of this live cluster")
        parser.add_argument("--make-live", type=int, metavar="N", default=0,
                            help="first import a live cluster 'timings-N' of N nodes (the Irina blueprint "
                                 "replicated) with 3 batch pods and 1 eviction per node, unless it exists; "
                                 "implies --live timings-N")

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
        live = options["live"]
        if options["make_live"]:
            live = _make_live(options["make_live"])
        if live:
            pages += _live_pages(live)
        user, _ = get_user_model().objects.get_or_create(username="console-timings")
        client = Client(HTTP_HOST=(settings.ALLOWED_HOSTS or ["127.0.0.1"])[0])
        client.force_login(user)
        self.stdout.write(f"run {run.name}: {run.summary.get('nodes')} nodes, {run.steps} steps, "
                          f"{BatchEvent.objects.filter(run=run).count():,} events "
                          f"({connection.vendor}); {options['repeat']} renders per page after one warm-up")
        if live:
            from kalena_web.inventory.models import Cluster

            c = Cluster.objects.get(kind=Cluster.LIVE, name=live)
            self.stdout.write(f"live cluster {live}: {c.nodes.count()} nodes, {c.batch_pods.count():,} batch pods, "
                              f"{c.eviction_records.count():,} evictions")
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
        pages.append(("batch tasks searched, evicted, by evictions",
                      reverse("console:batch", args=[run.name]) + "?q=j_&show=evicted&sort=-evicted"))
        pages.append(("overview nodes searched", overview + "?q=std-0&nodes=active&sort=-evicted"))
        return pages


def _make_live(n_nodes: int) -> str:
    """A live cluster ``timings-N``: Irina's infrastructure, workloads and blueprint replicated to
    ``n_nodes`` (as ``kalena bench ingest`` builds it), every node fresh, 3 batch pods per node
    (one pending, one bound, one completed) and one eviction record per node."""
    from kalena_engine.kuberina import load_blueprint, load_infrastructure, load_workloads
    from kalena_web.archive.models import EvictionRecord
    from kalena_web.cli.bench_cluster import replicate
    from kalena_web.cli.inputs import DEFAULTS
    from kalena_web.cli.paths import data_path
    from kalena_web.control.services import live_cluster_import
    from kalena_web.inventory.models import Cluster, Node, Workload
    from kalena_web.ledger.models import LiveNodeLedger
    from kalena_web.scheduling.models import BatchPod

    name = f"timings-{n_nodes}"
    if Cluster.objects.filter(kind=Cluster.LIVE, name=name).exists():
        return name
    now = time.time()
    workloads = load_workloads(data_path(DEFAULTS["workloads"]))
    infra, workloads, blueprint = replicate(load_infrastructure(data_path(DEFAULTS["infra"])), workloads,
                                            load_blueprint(data_path(DEFAULTS["blueprint"]), workloads), n_nodes)
    cluster = live_cluster_import(name=name, infra=infra, workloads=workloads, blueprint=blueprint, now_s=now).cluster
    LiveNodeLedger.objects.filter(node__cluster=cluster).update(stale=False, last_sample_s=now)
    nodes = list(Node.objects.filter(cluster=cluster).order_by("row"))
    request = [250.0, 2.0**30] + [0.0] * 6
    pods, evictions = [], []
    for i, node in enumerate(nodes):
        for k, state in enumerate((BatchPod.PENDING, BatchPod.BOUND, BatchPod.COMPLETED)):
            w = Workload.objects.create(cluster=cluster, kind=Workload.BATCH, row=3 * i + k, name=f"batch/t-{i}-{k}",
                                        namespace="batch", owner=f"job-{i % 40}", tier="batch", priority=k,
                                        instances=1, request=request, limit=request,
                                        node=node if state == BatchPod.BOUND else None)
            pods.append(BatchPod(cluster=cluster, workload=w, state=state, submitted_s=now - 600 + i,
                                 queued_s=now - 600 + i, bound_s=None if state == BatchPod.PENDING else now - 300,
                                 ended_s=now - 60 if state == BatchPod.COMPLETED else None,
                                 ran_on=node.name if state == BatchPod.COMPLETED else ""))
        evictions.append(EvictionRecord(cluster=cluster, node=node, workload_name=f"batch/e-{i}", time_s=now - i,
                                        cause="priority", dimension="ram", priority=1, source_key=f"{name}-{i}",
                                        detail={"dimension": "ram", "capacity": 2.0**35, "working_set": 2.0**35}))
    BatchPod.objects.bulk_create(pods, batch_size=2000)
    EvictionRecord.objects.bulk_create(evictions, batch_size=2000)
    return name


def _live_pages(name: str) -> list[tuple[str, str]]:
    from kalena_web.inventory.models import Cluster, Node

    c = Cluster.objects.get(kind=Cluster.LIVE, name=name)
    node = Node.objects.filter(cluster=c).order_by("row").first()
    pod = c.batch_pods.select_related("workload").order_by("id").first()
    pages = [("live clusters", reverse("console:live")),
             (f"live cluster {name} (nodes list)", reverse("console:live_cluster", args=[name])),
             ("live nodes searched + sorted by ram slack", reverse("console:live_cluster", args=[name])
              + "?q=std&telemetry=fresh&sort=-slack_ram&page=2"),
             ("live batch pods", reverse("console:live_batch", args=[name])),
             ("live batch pods: completed, by node", reverse("console:live_batch", args=[name])
              + "?state=completed&sort=node&page=3"),
             ("live batch pods searched", reverse("console:live_batch", args=[name]) + "?q=t-1"),
             ("pending", reverse("console:live_pending", args=[name])),
             ("evictions", reverse("console:live_evictions", args=[name])),
             ("evictions filtered", reverse("console:live_evictions", args=[name]) + "?condition=memory_pressure&q=e-1"),
             ("agents", reverse("telemetry:agents", args=[name])),
             ("agents searched", reverse("telemetry:agents", args=[name]) + "?q=c2&sort=-last_sample"),
             ("re-plan", reverse("console:live_replan", args=[name])),
             ("API tokens", reverse("console:api_tokens"))]
    if node:
        pages.append((f"live node {node.name}", reverse("console:live_node", args=[name, node.name])))
    if pod:
        pages.append((f"live batch pod {pod.workload.name}", reverse("console:live_batch_pod", args=[name, pod.workload.name])))
    return pages
