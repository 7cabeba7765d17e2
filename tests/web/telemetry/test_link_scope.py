"""A node's link token speaks for its own node only: an eviction its agent reports of a pod on
another node — a production pod included — is refused (acknowledged, nothing of it kept: no
mitigation event, no why-evicted record, no eviction in the audit log or in
``kalena_evictions_total``), counted in ``kalena_link_refusals_total`` and audited with who and
from where; its own node's evictions are recorded as before."""

from __future__ import annotations

import time

from prometheus_client.parser import text_string_to_metric_families

from kalena_web.archive.cursors import SETTLE_S
from kalena_web.archive.evictions import evictions_record
from kalena_web.archive.models import EvictionRecord
from kalena_web.inventory.models import Workload
from kalena_web.policy.models import AuditEntry
from kalena_web.telemetry.models import IngestBatch, MitigationEvent, RejectedSamples
from tests.web.telemetry.conftest import Agent, hello, run

NODE = "thinkcentre-beta"
OWN = "smart-home/zigbee2mqtt-0"       # on thinkcentre-beta


def evict(seq: int, workload: str, *, tier: str) -> dict:
    return {"type": "action", "v": 1, "batch_id": f"{NODE}:{seq}", "node": NODE, "ts": time.time(), "action": "evict",
            "reason": "priority", "workload": {"id": workload, "name": workload.rsplit("/", 1)[-1],
                                               "kind": "kubernetes", "tier": tier, "priority": 0},
            "trigger": {"source": "psi-trigger", "resource": "memory", "scope": "node"},
            "numbers": {"dimension": "ram", "capacity": 1.0e10, "ledger_before": 1.1e10, "ledger_after": 9e9},
            "result": {"ok": True, "error": None, "writes": [], "latency_ms": 1.5, "dry_run": False}}


def converse_from(app, token: str, peer: tuple[str, int], *messages: dict) -> list[dict]:
    """hello from ``peer``, then ``messages``; the server's frames until every message is acknowledged."""
    async def go() -> list[dict]:
        agent = Agent(app, token)
        agent.comm.scope["client"] = peer
        assert await agent.connect()
        await agent.send(hello(NODE))
        for message in messages:
            await agent.send(message)
        out: list[dict] = []
        while {m["batch_id"] for m in messages} - {f.get("batch_id") for f in out if f["type"] == "ack"}:
            out.append(await agent.receive())
        await agent.close()
        return out

    return run(go())


def cluster_metrics(client) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(client.get("/metrics/cluster").content.decode()):
        for s in family.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def test_an_eviction_reported_of_a_pod_on_another_node_is_refused_and_nothing_is_recorded(
        agent_app, home, beta, beta_token, client) -> None:
    victim = (Workload.objects.filter(cluster=home, node__isnull=False).exclude(node=beta)
              .select_related("node").order_by("name").first())
    assert victim is not None and victim.node.name != NODE
    frames = converse_from(agent_app, beta_token, ("198.51.100.4", 40222),
                           evict(5, victim.name, tier="service"), evict(6, OWN, tier="batch"))
    acks = {f["batch_id"]: f for f in frames if f["type"] == "ack"}
    assert set(acks) == {f"{NODE}:5", f"{NODE}:6"}            # both acknowledged: the agent does not resend
    (error,) = [f for f in frames if f["type"] == "error"]
    assert "foreign_workload" in error["message"] and victim.name in error["message"]
    assert victim.node.name in error["message"]

    # nothing of the refused report is kept …
    assert list(MitigationEvent.objects.values_list("workload__name", flat=True)) == [OWN]
    assert IngestBatch.objects.get(batch_id=f"{NODE}:5").kind == "action"      # stored as refused, for de-duplication
    assert RejectedSamples.objects.get(node=beta, reason="foreign_workload").messages == 1
    assert evictions_record(cluster=home, now_s=time.time() + SETTLE_S + 60) == 1
    assert list(EvictionRecord.objects.values_list("workload__name", "node__name")) == [(OWN, NODE)]
    assert not EvictionRecord.objects.filter(workload_name__in=[victim.name, victim.name.rsplit("/", 1)[-1]]).exists()
    assert AuditEntry.objects.filter(action="eviction").count() == 1                # its own node's only
    assert not AuditEntry.objects.filter(action="eviction", target__endswith=victim.name.rsplit("/", 1)[-1]).exists()
    metrics = cluster_metrics(client)
    evictions = {labels: v for (name, labels), v in metrics.items() if name == "kalena_evictions_total"}
    assert evictions == {(("cause", "priority"), ("cluster", "home"), ("node", NODE)): 1.0}

    # … and the attempt is counted and audited: who (the node's agent, its token) and from where
    assert metrics["kalena_link_refusals_total", (("cluster", "home"), ("node", NODE),
                                                  ("reason", "foreign_workload"))] == 1.0
    refused = AuditEntry.objects.get(action="link.refused")
    assert (refused.actor_kind, refused.actor, refused.target, refused.cluster_name) == \
        ("agent", f"agent of {NODE}", victim.name, "home")
    assert refused.after["workload_node"] == victim.node.name and refused.after["action"] == "evict"
    assert refused.after["client_address"] == "198.51.100.4" and refused.after["peer"] == "198.51.100.4:40222"


def test_a_forged_report_stored_before_cannot_name_another_nodes_workload_into_a_record(home, beta) -> None:
    """A report already stored without its workload resolved (its victim had left the node's
    inventory) joins by name only a workload on no node or on the reporting node."""
    from kalena_web.telemetry.models import MitigationEvent

    victim = Workload.objects.filter(cluster=home, node__isnull=False).exclude(node=beta).order_by("name").first()
    now = time.time()
    batch = IngestBatch.objects.create(node=beta, batch_id=f"{NODE}:9", kind="action", shard=0, ts=now,
                                       received_s=now, stored_s=now, estimation_run=0)
    MitigationEvent.objects.create(batch=batch, node=beta, ts=now, action="evict", reason="priority", workload=None,
                                   workload_ref=victim.name, workload_name=victim.name, tier="service", priority=0,
                                   trigger_source="psi-trigger", numbers={"dimension": "ram"}, result_ok=True,
                                   result={})
    assert evictions_record(cluster=home, now_s=now + SETTLE_S + 60) == 1
    record = EvictionRecord.objects.get()
    assert record.workload is None and record.node == beta      # the name is kept; no other node's workload joined


def test_an_eviction_of_its_own_pod_cannot_be_recorded_under_another_nodes_pods_name(
        agent_app, home, beta, beta_token, client) -> None:
    """The agent names the workload twice (``id`` and ``name``): an id of its own node's pod with
    the name of a production pod on another node must not put that production pod into the
    why-evicted records or the audit log as evicted."""
    victim = (Workload.objects.filter(cluster=home, node__isnull=False, kind="production").exclude(node=beta)
              .select_related("node").order_by("name").first())
    assert victim is not None and victim.node.name != NODE
    forged = evict(7, OWN, tier="production")
    forged["workload"]["name"] = victim.name
    converse_from(agent_app, beta_token, ("198.51.100.4", 40223), forged)
    evictions_record(cluster=home, now_s=time.time() + SETTLE_S + 60)
    named = set(EvictionRecord.objects.values_list("workload_name", flat=True)) | \
        set(AuditEntry.objects.filter(action="eviction").values_list("target", flat=True))
    assert victim.name not in named, named
    assert not MitigationEvent.objects.filter(workload_name=victim.name).exists()
