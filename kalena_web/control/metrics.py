"""Prometheus metrics, named per the Prometheus naming guide (base units in the name, ``_total``
counters, ``_timestamp_seconds`` instead of ages).

Two endpoints, so per-pod scraping never multiplies cluster-wide series:

* ``GET /metrics/cluster`` — the cluster's state, read from the database at scrape time (ledgers,
  slack, conditions, evictions, batch, ingest counters, loop health) and the cumulative
  scheduling and loop histograms every process records into :class:`MetricSeries`. Every pod
  answers the same: scrape it once, through the Service.
* ``GET /metrics`` — this process only (prometheus_client's process registry: ``process_*``,
  ``python_*``, the ingest ack latency of the agents this process serves, the logins it refused;
  ``kalena_build_info``): scrape every pod.

With ``KALENA_METRICS_TOKEN`` set, both need ``Authorization: Bearer <token>``. Every metric
served is listed in docs/metrics.md (a test checks that none is missing).
"""

from __future__ import annotations

import hmac
import time
from collections import Counter
from collections.abc import Iterator

from django.conf import settings
from django.db.models import Count, Max, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kalena_web.archive.models import EvictionRecord
from kalena_web.control.models import LoopRun, MetricSeries
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import EstimationRun
from kalena_web.scheduling.models import BatchPod
from kalena_web.telemetry.models import AgentStatus, RefusedConnection, RejectedSamples

#: kinds of :class:`kalena_engine.ledger.BlueprintViolation`, always exported (0 when none)
BLUEPRINT_KINDS = ("missing", "extra", "over_capacity")
#: (name suffix, vector index, divisor to base units): cpu in cores, memory in bytes.
_UNITS = (("cores", 0, 1000.0), ("bytes", 1, 1.0))

#: Histograms recorded into :class:`MetricSeries`: name → (help, upper bounds in seconds).
#: Buckets follow kube-scheduler's (exponential from 1 ms) for the scheduling pair.
HISTOGRAMS: dict[str, tuple[str, tuple[float, ...]]] = {
    "kalena_scheduling_attempt_duration_seconds": (
        "Duration of one scheduling pass (snapshot, decision, ledger binds, orchestrator binds)",
        (0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192, 16.384)),
    "kalena_scheduling_bind_latency_seconds": (
        "Queue to bind: from a batch pod entering the pending queue to its ledger binding",
        (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)),
    "kalena_loop_duration_seconds": (
        "Duration of one run of a control loop, by loop and outcome",
        (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)),
}
#: Counters recorded into :class:`MetricSeries`: name (without ``_total``) → help.
COUNTERS: dict[str, str] = {
    "kalena_scheduling_attempts": "Scheduling attempts of batch pods by result (scheduled, unschedulable, "
                                  "error, stale) — kube-scheduler's scheduler_schedule_attempts_total",
    "kalena_watch_lists": "Lists the Kubernetes watcher made, by resource (the first, then one after every 410 "
                          "Gone or Too large resource version)",
    "kalena_watch_expired": "410 Gone and Too large resource version answers to the Kubernetes watcher (each "
                            "followed by a re-list), by resource",
    "kalena_watch_reconnects": "Watch connections the Kubernetes watcher lost (or streams that ended within a second "
                               "without an event) and retried with backoff, by resource",
    "kalena_watch_malformed_objects": "Objects and watch lines the Kubernetes watcher skipped as malformed (each "
                                      "logged with its name and field), by resource",
    "kalena_hooks_refused": "Calls to the hooks listener (admission webhook, scheduler extender) refused, by "
                            "endpoint (tls: the handshake; mutate, filter, prioritize, bind; other) and reason",
    "kalena_link_refusals": "Agent messages refused for naming what the connection's node may not report on or act "
                            "on (foreign_workload: a workload placed on another node), by cluster, node and reason",
    "kalena_link_superseded": "Live agent links closed because a newer authenticated link for the same node arrived "
                              "(one live link per node; two agents fighting over a node raise it steadily), by "
                              "cluster and node",
    "kalena_reconciler_events": "Watch events the reconciler applied, by kind and outcome (changed, unchanged, "
                                "unknown, rejected: bad input, logged, nothing changed; failed)",
}


class ClusterCollector:
    """The cluster-wide series of ``/metrics/cluster``, read from the database on every collect."""

    def __init__(self, now_s: float | None = None) -> None:
        self.now_s = now_s

    def collect(self) -> Iterator:
        yield from self.nodes()
        yield from self.workloads()
        yield from self.loops()
        yield from self.telemetry()
        yield from self.drift()
        yield from self.recorded()

    def nodes(self) -> Iterator:
        now = self.now_s if self.now_s is not None else time.time()
        labels = ["cluster", "node"]
        gauges = {}
        for name, help_ in (("capacity", "Post-Phase-0 capacity C_n"),
                            ("requests", "Σ requests of production and batch on the node"),
                            ("reservations", "Σ reservations (the reservation ledger)"),
                            ("usage", "Σ usage reported by the node's agent"),
                            ("slack", "Slack C_n − Σ reservations (negative: the ledger is overcommitted)")):
            for unit, _, _ in _UNITS:
                gauges[name, unit] = GaugeMetricFamily(f"kalena_node_{name}_{unit}", f"{help_}, in {unit}",
                                                       labels=labels)
        stale = GaugeMetricFamily("kalena_node_telemetry_stale", "1 when the node's freshest sample is older than "
                                  "T_stale (its reservations read max(r, q) and it takes no batch)", labels=labels)
        ineligible = GaugeMetricFamily("kalena_node_slack_ineligible", "1 while escalation keeps the node off batch",
                                       labels=labels)
        last = GaugeMetricFamily("kalena_node_last_sample_timestamp_seconds",
                                 "Unix time of the node's freshest sample (absent before the first)", labels=labels)
        batch_usage = {unit: GaugeMetricFamily(f"kalena_node_batch_usage_{unit}", f"Σ usage of the node's batch pods, in "
                                               f"{unit} (absent until the agent has reported it)", labels=labels)
                       for unit, _, _ in _UNITS}
        throttled = GaugeMetricFamily("kalena_node_batch_throttled_seconds_per_second",
                                      "The node's batch pods' CFS throttled time per second of wall time, summed over "
                                      "the pods (absent while no batch pod has reported it)", labels=labels)
        blueprint = GaugeMetricFamily("kalena_node_blueprint_violations", "Blueprint check of the last estimation "
                                      "pass (docs/design.md §6): ways removing all batch would not leave the blueprint's "
                                      "production set within capacity on the node (0 = holds; any other value is a bug)",
                                      labels=[*labels, "kind"])
        nodes = Node.objects.filter(cluster__kind=Cluster.LIVE).select_related("cluster", "live_ledger", "condition")
        for node in nodes:
            led, key = node.live_ledger, [node.cluster.name, node.name]
            kinds = Counter(v.get("kind", "unknown") for v in led.blueprint_violations or [])
            for kind in BLUEPRINT_KINDS:
                blueprint.add_metric([*key, kind], float(kinds.pop(kind, 0)))
            for kind, n in kinds.items():
                blueprint.add_metric([*key, kind], float(n))
            for unit, i, div in _UNITS:
                cap = led.capacity[i]
                req = led.prod_request[i] + led.batch_request[i]
                res = led.prod_reservation[i] + led.batch_reservation[i]
                for name, value in (("capacity", cap), ("requests", req), ("reservations", res),
                                    ("usage", led.usage[i]), ("slack", cap - res)):
                    gauges[name, unit].add_metric(key, value / div)
            if led.batch_usage is not None:
                for unit, i, div in _UNITS:
                    batch_usage[unit].add_metric(key, led.batch_usage[i] / div)
            if led.batch_throttled_mcpu is not None:
                throttled.add_metric(key, led.batch_throttled_mcpu / 1000.0)
            stale.add_metric(key, 1.0 if led.stale else 0.0)
            ineligible.add_metric(key, 1.0 if node.condition.slack_ineligible_until_s > now else 0.0)
            if led.last_sample_s is not None:
                last.add_metric(key, led.last_sample_s)
        yield from gauges.values()
        yield from batch_usage.values()
        yield from (throttled, stale, ineligible, last, blueprint)

    def workloads(self) -> Iterator:
        evictions = CounterMetricFamily("kalena_evictions", "Evictions by cause (why-evicted records)",
                                        labels=["cluster", "node", "cause"])
        for cluster, node, cause, n in (EvictionRecord.objects.values_list("cluster__name", "node__name", "cause")
                                        .annotate(n=Count("id"))):
            evictions.add_metric([cluster, node, cause], n)
        yield evictions
        batch = GaugeMetricFamily("kalena_batch_pods", "Batch pods by state", labels=["cluster", "state"])
        for cluster, state, n in BatchPod.objects.values_list("cluster__name", "state").annotate(n=Count("id")):
            batch.add_metric([cluster, state], n)
        yield batch

    def loops(self) -> Iterator:
        runs = GaugeMetricFamily("kalena_loop_last_run_timestamp_seconds",
                                 "Unix time each loop last started, by outcome (done, skipped, failed)",
                                 labels=["loop", "outcome"])
        success = GaugeMetricFamily("kalena_loop_last_success_timestamp_seconds",
                                    "Unix time each loop last finished a run successfully", labels=["loop"])
        for loop, outcome, started in LoopRun.objects.values_list("loop", "outcome").annotate(last=Max("started_s")):
            runs.add_metric([loop, outcome], started)
        for loop, finished in (LoopRun.objects.filter(outcome="done").values_list("loop")
                               .annotate(last=Max("finished_s"))):
            success.add_metric([loop], finished)
        yield from (runs, success)

    def telemetry(self) -> Iterator:
        """Ingest: accepted and rejected samples, refused connections, estimation lag."""
        accepted = CounterMetricFamily("kalena_accepted_samples", "Samples stored from each node's agent",
                                       labels=["cluster", "node"])
        for cluster, node, n in AgentStatus.objects.values_list("node__cluster__name", "node__name", "accepted_samples"):
            accepted.add_metric([cluster, node], n)
        rejected = CounterMetricFamily("kalena_rejected_samples", "Samples refused, per node and reason",
                                       labels=["cluster", "node", "reason"])
        for cluster, node, reason, n in RejectedSamples.objects.values_list("node__cluster__name", "node__name",
                                                                            "reason", "samples"):
            rejected.add_metric([cluster, node, reason], n)
        refused = CounterMetricFamily("kalena_refused_connections", "Agent connections refused, per reason",
                                      labels=["reason"])
        for reason, n in RefusedConnection.objects.values_list("reason").annotate(n=Sum("count")):
            refused.add_metric([reason], n or 0)
        lag = GaugeMetricFamily("kalena_estimation_lag_seconds", "Send-to-ledger lag of the oldest sample in each "
                                "shard's latest estimation run", labels=["shard"])
        latest = EstimationRun.objects.values("shard").annotate(last=Max("id")).values_list("last", flat=True)
        for shard, max_lag in EstimationRun.objects.filter(id__in=list(latest)).values_list("shard", "max_lag_s"):
            if max_lag is not None:
                lag.add_metric([str(shard)], max_lag)
        yield from (accepted, rejected, refused, lag)

    def drift(self) -> Iterator:
        """The drift loop's last pass per cluster (:class:`~kalena_web.replan.models.DriftCheck`)
        and the open re-plan recommendations."""
        from kalena_web.replan.models import DriftCheck, ReplanRecommendation

        ratio = GaugeMetricFamily("kalena_drift_ratio", "Drift D = Σ|q − r̃| / Σ q (0–1) of the drift loop's last "
                                  "pass, by dimension (absent before the first steady sample)",
                                  labels=["cluster", "dimension"])
        coverage = GaugeMetricFamily("kalena_drift_coverage_ratio", "Production pods with steady samples in the "
                                     "drift window ÷ the blueprint's production pods (0–1)", labels=["cluster"])
        threshold = GaugeMetricFamily("kalena_drift_threshold_ratio", "Drift above which a re-plan is recommended "
                                      "(KALENA_DRIFT_THRESHOLD)", labels=["cluster"])
        minimum = GaugeMetricFamily("kalena_drift_min_coverage_ratio", "Coverage a recommendation needs "
                                    "(KALENA_DRIFT_MIN_COVERAGE)", labels=["cluster"])
        least = float(getattr(settings, "KALENA_DRIFT_MIN_COVERAGE", 0.5))
        for name, values, seen, pods, limit in DriftCheck.objects.values_list(
                "cluster__name", "drift", "observed_pods", "production_pods", "threshold"):
            for dim, value in sorted((values or {}).items()):
                if value is not None:
                    ratio.add_metric([name, dim], float(value))
            coverage.add_metric([name], seen / pods if pods else 0.0)
            threshold.add_metric([name], float(limit))
            minimum.add_metric([name], least)
        open_ = GaugeMetricFamily("kalena_replan_recommendations_open", "Re-plan recommendations waiting for a "
                                  "decision", labels=["cluster"])
        counts = dict(ReplanRecommendation.objects.filter(state=ReplanRecommendation.OPEN)
                      .values_list("cluster__name").annotate(n=Count("id")))
        for name in Cluster.objects.filter(kind=Cluster.LIVE).values_list("name", flat=True):
            open_.add_metric([name], float(counts.get(name, 0)))
        yield from (ratio, coverage, threshold, minimum, open_)

    def recorded(self) -> Iterator:
        """The histograms and counters of :data:`HISTOGRAMS` and :data:`COUNTERS`."""
        rows: dict[str, list[MetricSeries]] = {}
        for row in MetricSeries.objects.order_by("key"):
            rows.setdefault(row.name, []).append(row)
        for name, (help_, bounds) in HISTOGRAMS.items():
            label_names = sorted({k for r in rows.get(name, []) for k in r.labels})
            family = HistogramMetricFamily(name, help_, labels=label_names)
            for r in rows.get(name, []):
                cumulative, acc = [], 0
                for bound, n in zip([*map(_le, bounds), "+Inf"], r.buckets, strict=False):
                    acc += n
                    cumulative.append((bound, acc))
                family.add_metric([r.labels.get(k, "") for k in label_names], cumulative, sum_value=r.total)
            yield family
        for name, help_ in COUNTERS.items():
            label_names = sorted({k for r in rows.get(name, []) for k in r.labels})
            family = CounterMetricFamily(name, help_, labels=label_names)
            for r in rows.get(name, []):
                family.add_metric([r.labels.get(k, "") for k in label_names], r.count)
            yield family


def _le(bound: float) -> str:
    return repr(float(bound))


class BuildInfoCollector:
    """``kalena_build_info{version}`` (value 1) for this process."""

    def collect(self) -> Iterator:
        from agents import __version__

        info = InfoMetricFamily("kalena_build", "Kalena's version in this process")
        info.add_metric([], {"version": __version__})
        yield info


def _authorised(request: HttpRequest) -> bool:
    token = getattr(settings, "KALENA_METRICS_TOKEN", "")
    if not token:
        return True
    sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return hmac.compare_digest(sent.encode(), token.encode())


def _exposition(registry) -> HttpResponse:
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def cluster_metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics/cluster`` (see module doc)."""
    if not _authorised(request):
        return HttpResponse("missing or wrong bearer token\n", status=401, content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ClusterCollector())
    return _exposition(registry)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics``: this process's own metrics (see module doc)."""
    if not _authorised(request):
        return HttpResponse("missing or wrong bearer token\n", status=401, content_type="text/plain")
    from kalena_web.console.login import login_refusals
    from kalena_web.telemetry.metrics import ingest_metrics

    ingest_metrics()  # this process's ingest series exist (empty) before the first agent connects
    login_refusals()  # … and its refused-login count before the first refusal
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BuildInfoCollector())
    return HttpResponse(generate_latest(REGISTRY) + generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
