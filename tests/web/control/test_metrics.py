"""Prometheus /metrics: live ledgers, conditions, batch and evictions, token-guarded when set."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from kalena_web.archive.models import EvictionRecord
from kalena_web.ledger.models import LiveNodeLedger


def samples(response) -> dict[tuple, float]:
    out = {}
    for family in text_string_to_metric_families(response.content.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_expose_ledgers_stale_nodes_and_evictions(client, live, settings) -> None:
    node = live.nodes.get(name="thinkcentre-beta")
    LiveNodeLedger.objects.filter(node=node).update(stale=True)
    EvictionRecord.objects.create(cluster=live, node=node, workload_name="batch/x", time_s=1.0, cause="priority",
                                  source_key="m1")
    got = samples(client.get("/metrics/cluster"))
    key = (("cluster", "home"), ("node", "thinkcentre-beta"))
    assert got[("kalena_node_capacity_cores", key)] == 3.55
    # batch usage and throttling appear once the agent reported them (absent before: no invented 0)
    assert ("kalena_node_batch_throttled_seconds_per_second", key) not in got
    LiveNodeLedger.objects.filter(node=node).update(batch_throttled_mcpu=500.0,
                                                    batch_usage=[250.0, 2 * 2**30, 0, 0, 0, 0, 0, 0])
    got = samples(client.get("/metrics/cluster"))
    assert got[("kalena_node_batch_throttled_seconds_per_second", key)] == 0.5
    assert got[("kalena_node_batch_usage_cores", key)] == 0.25 and got[("kalena_node_batch_usage_bytes", key)] == 2 * 2**30
    assert got[("kalena_node_telemetry_stale", key[:2])] == 1.0
    assert got[("kalena_node_telemetry_stale", (("cluster", "home"), ("node", "thinkcentre-alpha")))] == 0.0
    assert got[("kalena_evictions_total", (("cause", "priority"), ("cluster", "home"), ("node", "thinkcentre-beta")))] == 1
    from kalena_web.telemetry.models import RejectedSamples

    RejectedSamples.objects.create(node=node, reason="nan_or_inf", samples=3, messages=1, first_s=1.0, last_s=2.0)
    got = samples(client.get("/metrics/cluster"))
    assert got[("kalena_rejected_samples_total", (("cluster", "home"), ("node", "thinkcentre-beta"),
                                                  ("reason", "nan_or_inf")))] == 3
    settings.KALENA_METRICS_TOKEN = "s3cret"
    assert client.get("/metrics/cluster").status_code == 401
    assert client.get("/metrics/cluster", HTTP_AUTHORIZATION="Bearer s3cret").status_code == 200
