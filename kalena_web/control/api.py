"""Control REST API: a live cluster's nodes with their ledgers and conditions, and escalations."""

from __future__ import annotations

import time

from django.http import HttpRequest
from ninja import Router, Schema
from ninja.errors import HttpError

from kalena_engine.resources import to_ir_block
from kalena_web.control import selectors
from kalena_web.control.models import Escalation

router = Router(tags=["control"])


class NodeOut(Schema):
    name: str
    telemetry_stale: bool
    last_sample_s: float | None
    slack_ineligible: bool
    ineligible_until_s: float
    ineligible_reason: str
    pressure_since_s: float | None
    ledger_version: int
    capacity: dict
    requests: dict
    reservations: dict
    usage: dict
    slack: dict
    headroom: dict
    reclaimed: dict
    batch_pods: int


@router.get("/clusters/{cluster}/nodes", response=list[NodeOut],
            summary="Nodes with their ledgers (IR units) and why they take no batch, if they don't")
def nodes(request: HttpRequest, cluster: str):
    try:
        c = selectors.live_cluster_get(name=cluster)
    except selectors.NotFound as exc:
        raise HttpError(404, str(exc)) from None
    now = time.time()
    return [NodeOut(name=v.node.name, telemetry_stale=v.stale, last_sample_s=v.last_sample_s,
                    slack_ineligible=v.ineligible_until_s > now, ineligible_until_s=v.ineligible_until_s,
                    ineligible_reason=v.ineligible_reason if v.ineligible_until_s > now else "",
                    pressure_since_s=v.pressure_since_s, ledger_version=v.version,
                    capacity=to_ir_block(v.capacity), requests=to_ir_block(v.request),
                    reservations=to_ir_block(v.reservation), usage=to_ir_block(v.usage), slack=to_ir_block(v.slack),
                    headroom=to_ir_block(v.headroom), reclaimed=to_ir_block(v.reclaimed), batch_pods=v.batch_pods)
            for v in selectors.node_views(cluster=c)]


class EscalationOut(Schema):
    node: str
    time_s: float
    reason: str
    detail: str
    drained: list[str]
    until_s: float


@router.get("/clusters/{cluster}/escalations", response=list[EscalationOut])
def escalations(request: HttpRequest, cluster: str, limit: int = 100):
    try:
        c = selectors.live_cluster_get(name=cluster)
    except selectors.NotFound as exc:
        raise HttpError(404, str(exc)) from None
    if not 1 <= limit <= 1000:
        raise HttpError(400, f"limit {limit} is outside 1–1000")
    rows = Escalation.objects.filter(node__cluster=c).select_related("node")[:limit]
    return [EscalationOut(node=e.node.name, time_s=e.time_s, reason=e.reason, detail=e.detail, drained=e.drained,
                          until_s=e.until_s) for e in rows]
