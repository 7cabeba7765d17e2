"""The agent endpoint stores what is good and refuses what is not, sample by sample: every
rejection reason, with a good sample beside the bad one in the same batch (the good one is
stored, the bad one only counted); whole messages refused with a clear error; actions and gaps
recorded; samples stored with their units."""

from __future__ import annotations

import copy
import time

import pytest
from django.test import override_settings

from kalena_web.telemetry.models import (
    AgentStatus, IngestBatch, MitigationEvent, NodeSample, RejectedSamples, Sample,
)
from tests.web.telemetry.conftest import Agent, hello, record, run, samples

NODE = "thinkcentre-beta"
GOOD = "database/postgres-0"


def converse(app, token: str, *messages: dict | str, replies: int | None = None) -> list[dict]:
    """hello, then ``messages``; returns the server's frames (one per message unless ``replies``)."""
    async def go() -> list[dict]:
        agent = Agent(app, token)
        assert await agent.connect()
        await agent.send(hello(NODE))
        out = []
        for message in messages:
            await agent.send(message)
        for _ in range(len(messages) if replies is None else replies):
            out.append(await agent.receive())
        await agent.close()
        return out

    return run(go())


def bad(mutate) -> list[dict]:
    now = time.time()
    good = record(GOOD, now - 1)
    other = record("monitoring/grafana-0", now - 1)
    mutate(other, now)
    return [good, other]


def _set(path: str, value):
    def mutate(rec: dict, now: float) -> None:
        target = rec
        keys = path.split(".")
        for key in keys[:-1]:
            target = target[key]
        if value is KeyError:
            del target[keys[-1]]
        else:
            target[keys[-1]] = value(now) if callable(value) else value
    return mutate


CASES = [
    pytest.param(_set("usage", KeyError), "schema", "samples[1].usage: expected a usage vector", id="schema: usage missing"),
    pytest.param(_set("ts", "yesterday"), "schema", "samples[1].ts", id="schema: ts not a number"),
    pytest.param(_set("usage", {"cpu_cores": 0.1, "ram_gib": 1.0}), "unit", "cpu_cores", id="unit: cores not mcpu"),
    pytest.param(_set("usage.cpu_mcpu", float("nan")), "not_finite", "usage.cpu_mcpu: nan", id="NaN"),
    pytest.param(_set("usage.ram_bytes", float("inf")), "not_finite", "usage.ram_bytes: inf", id="infinity"),
    pytest.param(_set("usage.net_in_bps", -5.0), "negative", "usage.net_in_bps: -5.0", id="negative"),
    pytest.param(_set("usage.ram_bytes", 16 * 2**30 * 1024.0), "out_of_range", "wrong unit?", id="KiB read as bytes"),
    pytest.param(_set("psi.memory.some.avg10", 250.0), "out_of_range", "accepted: 0–100 %", id="PSI over 100 %"),
    pytest.param(_set("ts", lambda now: now + 3600), "future", "ahead of the server clock", id="future"),
    pytest.param(_set("ts", lambda now: now - 30 * 86400), "too_old", "s old", id="too old"),
    pytest.param(_set("workload", "default/not-here"), "unknown_workload", "'default/not-here' is not a live workload",
                 id="unknown workload"),
    pytest.param(lambda r, now: r.update(workload="kube-system/node-exporter-x", name="node-exporter-x",
                                         tier="daemonset"), "daemonset", "Phase-0 ballast", id="daemonset"),
]


@pytest.mark.parametrize(("mutate", "reason", "detail"), CASES)
def test_a_bad_sample_is_refused_and_counted_and_the_good_one_beside_it_is_stored(
        agent_app, beta, beta_token, mutate, reason, detail) -> None:
    import json

    message = samples(NODE, 1, bad(mutate))
    text = json.dumps(message)  # NaN/Infinity are written as the literals some JSON producers emit
    (ack,) = converse(agent_app, beta_token, text)
    assert ack == {"type": "ack", "v": 1, "batch_id": f"{NODE}:1", "accepted": 1, "rejected": {reason: 1},
                   "duplicate": False}
    stored = Sample.objects.get()
    assert stored.workload.name == GOOD and stored.node_id == beta.id
    counted = RejectedSamples.objects.get(node=beta)
    assert (counted.reason, counted.samples, counted.messages) == (reason, 1, 0)
    assert detail in counted.last_detail
    assert AgentStatus.objects.get(node=beta).accepted_samples == 1


def test_time_going_backwards_is_refused_per_workload(agent_app, beta, beta_token) -> None:
    now = time.time()
    first = samples(NODE, 1, [record(GOOD, now - 10), record(GOOD, now - 5)])          # two, in order: both kept
    second = samples(NODE, 2, [record(GOOD, now - 5), record(GOOD, now - 7), record("monitoring/grafana-0", now - 7)])
    acks = converse(agent_app, beta_token, first, second)
    assert [a["accepted"] for a in acks] == [2, 1] and acks[1]["rejected"] == {"time_backwards": 2}
    assert sorted(Sample.objects.values_list("ts", flat=True)) == pytest.approx(sorted([now - 10, now - 5, now - 7]))


@override_settings(KALENA_INGEST_MAX_BATCH_SAMPLES=2)
def test_an_oversize_batch_keeps_the_first_samples_and_refuses_the_rest(agent_app, beta, beta_token) -> None:
    now = time.time()
    (ack,) = converse(agent_app, beta_token, samples(NODE, 1, [record(GOOD, now - 3), record(GOOD, now - 2),
                                                               record(GOOD, now - 1)]))
    assert ack["accepted"] == 2 and ack["rejected"] == {"oversize_batch": 1}
    assert Sample.objects.count() == 2


@pytest.mark.parametrize(("message", "reason", "acked"), [
    pytest.param("{not json", "bad_json", False, id="not JSON"),
    pytest.param({"type": "samples", "v": 1, "node": NODE, "ts": 1.0, "samples": []}, "schema", False,
                 id="no batch_id"),
    pytest.param({"type": "samples", "v": 2, "batch_id": f"{NODE}:9", "node": NODE, "ts": 1.0, "samples": []},
                 "schema", True, id="unsupported version"),
    pytest.param({"type": "telemetry", "v": 1, "batch_id": f"{NODE}:9", "node": NODE, "ts": 1.0}, "unknown_type",
                 True, id="unknown type"),
    pytest.param({"type": "samples", "v": 1, "batch_id": "thinkcentre-alpha:9", "node": "thinkcentre-alpha",
                  "ts": 1.0, "samples": [record(GOOD, 1.0)]}, "node_mismatch", True, id="message for another node"),
])
def test_a_malformed_message_changes_nothing_and_says_what_and_where(agent_app, beta, beta_token, message, reason,
                                                                     acked) -> None:
    frames = converse(agent_app, beta_token, message, replies=2 if acked else 1)
    assert frames[0]["type"] == "error" and frames[0]["message"].startswith(reason)
    if acked:  # a usable batch_id: acknowledged once (the agent drops it) and remembered if resent
        assert frames[1]["type"] == "ack" and frames[1]["accepted"] == 0
        assert IngestBatch.objects.get().estimation_run == 0
    else:
        assert not IngestBatch.objects.exists()
    assert not Sample.objects.exists()
    counted = RejectedSamples.objects.get(node=beta)
    assert (counted.reason, counted.messages) == (reason, 1)


def test_samples_are_stored_in_internal_units_with_throttling_psi_and_the_node_reading(
        agent_app, beta, beta_token) -> None:
    now = time.time()
    rec = record(GOOD, now - 1, cpu_mcpu=250.0, ram_bytes=3 * 2**30)
    node_sample = {"ts": now - 1, "working_set_bytes": 9 * 2**30,
                   "psi": {"memory": {"some": {"avg10": 30.0, "avg60": 0, "avg300": 0, "total_us": 5},
                                      "full": {"avg10": 4.0, "avg60": 0, "avg300": 0, "total_us": 1}}}}
    (ack,) = converse(agent_app, beta_token, samples(NODE, 1, [rec], node_sample=node_sample))
    assert ack["accepted"] == 1
    s = Sample.objects.get()
    assert (s.cpu_mcpu, s.ram_bytes, s.gpu_devices, s.storage_bytes) == (250.0, 3 * 2**30, None, None)
    assert (s.memory_usage_bytes, s.cpu_nr_periods, s.cpu_nr_throttled, s.cpu_throttled_time_us) == \
        (4.5 * 2**30, 10, 2, 1500.0)
    assert (s.psi_cpu_some_avg10, s.psi_cpu_full_avg10, s.psi_memory_some_avg10, s.psi_memory_full_avg10) == \
        (1.5, None, 0.5, 0.25)
    n = NodeSample.objects.get()
    assert (n.working_set_bytes, n.psi_memory_some_avg10, n.psi_memory_full_avg10) == (9 * 2**30, 30.0, 4.0)
    batch = IngestBatch.objects.get()
    assert (batch.kind, batch.samples, batch.estimation_run is not None) == ("samples", 1, True)


def test_actions_are_recorded_with_reason_numbers_and_workload_and_gaps_are_counted(
        agent_app, beta, beta_token) -> None:
    now = time.time()
    action = {"type": "action", "v": 1, "batch_id": f"{NODE}:5", "node": NODE, "ts": now, "action": "evict",
              "reason": "priority", "workload": {"id": "smart-home/zigbee2mqtt-0", "name": "zigbee2mqtt-0",
                                                 "kind": "kubernetes", "tier": "batch", "priority": 0},
              "trigger": {"source": "psi-trigger", "resource": "memory", "scope": "node"},
              "numbers": {"dimension": "ram", "capacity": 1.0e10, "ledger_before": 1.1e10, "ledger_after": 9e9},
              "result": {"ok": True, "error": None, "writes": [], "latency_ms": 1.5, "dry_run": False}}
    gap = {"type": "gap", "v": 1, "batch_id": f"{NODE}:6", "node": NODE, "ts": now, "dropped_batches": 3,
           "dropped_samples": 600, "first_dropped": f"{NODE}:2", "last_dropped": f"{NODE}:4"}
    nan_action = copy.deepcopy(action)
    nan_action["batch_id"], nan_action["numbers"]["ledger_after"] = f"{NODE}:7", float("nan")
    import json

    frames = converse(agent_app, beta_token, action, gap, json.dumps(nan_action), replies=5)
    acks = [f for f in frames if f["type"] == "ack"]
    assert [a["batch_id"] for a in acks] == [f"{NODE}:5", f"{NODE}:6", f"{NODE}:7"]
    event = MitigationEvent.objects.get()
    assert (event.action, event.reason, event.workload.name, event.trigger_source, event.result_ok) == \
        ("evict", "priority", "smart-home/zigbee2mqtt-0", "psi-trigger", True)
    assert event.numbers["ledger_before"] == 1.1e10
    reasons = dict(RejectedSamples.objects.filter(node=beta).values_list("reason", "samples"))
    assert reasons == {"agent_dropped": 600, "not_finite": 0}


def test_each_acknowledged_frame_is_timed_in_this_processs_metrics(agent_app, beta, beta_token, client) -> None:
    from prometheus_client import REGISTRY

    from kalena_web.telemetry.metrics import ingest_metrics

    ingest_metrics()
    before_count = REGISTRY.get_sample_value("kalena_ingest_ack_latency_seconds_count") or 0.0
    before_acked = REGISTRY.get_sample_value("kalena_ingest_frames_total", {"outcome": "acked"}) or 0.0
    now = time.time()
    replies = converse(agent_app, beta_token, samples(NODE, 1, [record(GOOD, now - 1)]),
                       samples(NODE, 2, [record(GOOD, now)]))
    assert [r["type"] for r in replies] == ["ack", "ack"]
    assert REGISTRY.get_sample_value("kalena_ingest_ack_latency_seconds_count") == before_count + 2
    assert REGISTRY.get_sample_value("kalena_ingest_frames_total", {"outcome": "acked"}) == before_acked + 2
    served = client.get("/metrics").content.decode()             # the per-process endpoint serves them
    assert "kalena_ingest_ack_latency_seconds_bucket" in served
