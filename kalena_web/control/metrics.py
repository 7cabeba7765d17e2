"""Prometheus metrics (``GET /metrics``): ledgers, slack, conditions, the blueprint check,
evictions, batch, ingest (accepted and rejected samples, refused connections, estimation lag)
and loop health of every live cluster, read from the database at scrape time (so every
Kalena process answers the same, whichever worker changed what).

With ``KALENA_METRICS_TOKEN`` set, a scrape must send ``Authorization: Bearer <token>``.
Quantities are in base units (cores for cpu, bytes for memory) as Prometheus prefers.
"""

from __future__ import annotations

import hmac
import time
from collections import Counter
from collections.abc import Iterator

from django.conf import settings
from django.db.models import Count, Max, Sum
from django.http import HttpRequest, HttpResponse
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kalena_web.archive.models import EvictionRecord
from kalena_web.control.models import LoopRun
from kalena_web.inventory.models import Cluster, Node
from kalena_web.ledger.models import EstimationRun
from kalena_web.scheduling.models import BatchPod
from kalena_web.telemetry.models import AgentStatus, RefusedConnection, RejectedSamples

#: kinds of :class:`kalena_engine.ledger.BlueprintViolation`, always exported (0 when none)
BLUEPRINT_KINDS = ("missing", "extra", "over_capacity")
#: (metric dimension label, vector index, divisor to base units)
_DIMS = (("cpu", 0, 1000.0), ("memory", 1, 1.0))


class KalenaCollector:
    """Reads the live state on every collect (no cached values between scrapes)."""

    def __init__(self, now_s: float | None = None) -> None:
        self.now_s = now_s

    def collect(self) -> Iterator:
        now = self.now_s if self.now_s is not None else time.time()
        labels = ["cluster", "node", "resource"]
        gauges = {name: GaugeMetricFamily(f"kalena_node_{name}", help_, labels=labels) for name, help_ in (
            ("capacity", "Post-Phase-0 capacity C_n (cores or bytes)"),
            ("requests", "Σ requests of production and batch on the node"),
            ("reservations", "Σ reservations (the reservation ledger)"),
            ("usage", "Σ usage reported by the node's agent"),
            ("slack", "Slack C_n − Σ reservations (negative: the ledger is overcommitted)"),
        )}
        stale = GaugeMetricFamily("kalena_node_telemetry_stale", "1 when the node's freshest sample is older than "
                                  "T_stale (its reservations read max(r, q) and it takes no batch)", labels=labels[:2])
        ineligible = GaugeMetricFamily("kalena_node_slack_ineligible", "1 while escalation keeps the node off batch",
                                       labels=labels[:2])
        lag = GaugeMetricFamily("kalena_node_ingest_lag_seconds", "Seconds since the node's freshest sample",
                                labels=labels[:2])
        blueprint = GaugeMetricFamily("kalena_node_blueprint_violations", "Blueprint check of the last estimation "
                                      "pass (DESIGN §6): ways removing all batch would not leave the blueprint's "
                                      "production set within capacity on the node (0 = holds; any other value is a bug)",
                                      labels=[*labels[:2], "kind"])
        nodes = Node.objects.filter(cluster__kind=Cluster.LIVE).select_related("cluster", "live_ledger", "condition")
        for node in nodes:
            led, key = node.live_ledger, [node.cluster.name, node.name]
            for dim, i, div in _DIMS:
                cap = led.capacity[i]
                req = led.prod_request[i] + led.batch_request[i]
                res = led.prod_reservation[i] + led.batch_reservation[i]
                for name, value in (("capacity", cap), ("requests", req), ("reservations", res),
                                    ("usage", led.usage[i]), ("slack", cap - res)):
                    gauges[name].add_metric([*key, dim], value / div)
            stale.add_metric(key, 1.0 if led.stale else 0.0)
            ineligible.add_metric(key, 1.0 if node.condition.slack_ineligible_until_s > now else 0.0)
            if led.last_sample_s is not None:
                lag.add_metric(key, max(0.0, now - led.last_sample_s))
            kinds = Counter(v.get("kind", "unknown") for v in led.blueprint_violations or [])
            for kind in BLUEPRINT_KINDS:
                blueprint.add_metric([*key, kind], float(kinds.pop(kind, 0)))
            for kind, n in kinds.items():
                blueprint.add_metric([*key, kind], float(n))
        yield from gauges.values()
        yield from (stale, ineligible, lag, blueprint)
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
        loops = GaugeMetricFamily("kalena_loop_last_run_age_seconds", "Seconds since each loop last ran",
                                  labels=["loop", "outcome"])
        for loop, outcome, last in LoopRun.objects.values_list("loop", "outcome").annotate(last=Max("started_s")):
            loops.add_metric([loop, outcome], max(0.0, now - last))
        yield loops
        yield from self.telemetry()

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


def metrics_view(request: HttpRequest) -> HttpResponse:
    """``GET /metrics`` in the Prometheus text format (see module doc)."""
    token = getattr(settings, "KALENA_METRICS_TOKEN", "")
    if token:
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(sent.encode(), token.encode()):
            return HttpResponse("missing or wrong bearer token\n", status=401, content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KalenaCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
