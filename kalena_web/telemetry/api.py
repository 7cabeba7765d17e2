"""Telemetry REST API (one ninja ``Router``, authenticated like the rest of ``/api/``; creating and
revoking tokens needs the operator role — permission ``telemetry.manage_agent_tokens``):
agent tokens per node, and the agents of a live cluster with their rejected samples.

* ``GET  /api/clusters/{cluster}/nodes/{node}/agent-tokens`` — the node's tokens (never the secret)
* ``POST /api/clusters/{cluster}/nodes/{node}/agent-tokens`` — a new token; the only response that
  carries the plaintext ``token``
* ``POST /api/agent-tokens/{id}/revoke`` — revoke (open connections with it are closed)
* ``GET  /api/clusters/{cluster}/agents`` — per node: tokens, connection, last sample, stale,
  accepted and rejected samples per reason
* ``GET  /api/clusters/{cluster}/rejections`` — rejected samples per reason, refused connections
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router, Schema, Status
from ninja.errors import HttpError

from kalena_web.api.services import permission_refusal
from kalena_web.api.errors import answers
from kalena_web.api.lists import ListQuery, list_query, page_of, sort_items
from kalena_web.api.params import ClusterName, NodeName, RowId, text
from kalena_web.api.times import iso

from kalena_web.telemetry import selectors
from kalena_web.telemetry.services import TokenError, TokenNotFound, agent_token_create, agent_token_revoke

router = Router(tags=["telemetry"])


class TokenOut(Schema):
    id: int
    node: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None
    last_used_at: datetime | None


class NewTokenOut(TokenOut):
    token: str


class AgentOut(Schema):
    node: str
    tokens_active: int
    tokens_revoked: int
    connected: bool
    agent_version: str
    sampling_interval_s: float | None
    last_sample_s: float | None
    last_sample_at: str | None = None  # ISO 8601 (UTC) of last_sample_s
    stale: bool
    accepted_samples: int
    duplicate_batches: int
    rejected_samples: dict[str, int]


class RejectionOut(Schema):
    reason: str
    samples: int
    messages: int
    last_s: float
    node: str
    detail: str


class RefusalOut(Schema):
    reason: str
    count: int
    last_s: float


class RejectionsOut(Schema):
    cluster: str
    rejected: list[RejectionOut]
    refused_connections: list[RefusalOut]


def _token_out(row) -> dict:
    return dict(id=row.id, node=row.node.name, prefix=row.prefix, created_at=row.created_at,
                revoked_at=row.revoked_at, last_used_at=row.last_used_at)


def _node(cluster: str, node: str):
    try:
        return selectors.live_node_get(cluster=cluster, node=node)
    except selectors.NotFound as exc:
        raise HttpError(404, str(exc)) from None


def _cluster(cluster: str):
    try:
        return selectors.live_cluster_get(cluster=cluster)
    except selectors.NotFound as exc:
        raise HttpError(404, str(exc)) from None


def _operator(request: HttpRequest) -> None:
    if not request.user.has_perm("telemetry.manage_agent_tokens"):
        raise HttpError(403, permission_refusal(request.user, "telemetry.manage_agent_tokens",
                                                "creating or revoking agent tokens needs the operator role "
                                                "(permission telemetry.manage_agent_tokens)"))


@router.get("/clusters/{cluster}/nodes/{node}/agent-tokens", response=answers({200: list[TokenOut]}, 404),
            summary="A node's agent tokens; paginated (X-Total-Count, Link), filtered by state")
def tokens(request: HttpRequest, response: HttpResponse, cluster: ClusterName, node: NodeName, page: Query[ListQuery],
           state: Literal["all", "active", "revoked"] = Query("all", description="all, active or revoked")):
    """``state``: all (default), active or revoked; in creation order."""
    found = _node(cluster, node)
    rows = list(selectors.tokens_list(cluster=found.cluster.name, node=found.name))
    if state != "all":
        rows = [t for t in rows if (t.revoked_at is None) == (state == "active")]
    return [_token_out(t) for t in page_of(rows, page, request, response)]


@router.post("/clusters/{cluster}/nodes/{node}/agent-tokens", response=answers({201: NewTokenOut}, 403, 404),
             summary="A new agent token for a node (the only answer that carries the secret)")
def token_create(request: HttpRequest, cluster: ClusterName, node: NodeName):
    _operator(request)
    plaintext, row = agent_token_create(node=_node(cluster, node), created_by=request.user)
    return Status(201, {**_token_out(row), "token": plaintext})


@router.post("/agent-tokens/{token_id}/revoke", response=answers({200: TokenOut}, 403, 404, 409),
             summary="Revoke an agent token (its open connections are closed)")
def token_revoke(request: HttpRequest, token_id: RowId):
    _operator(request)
    try:
        return _token_out(agent_token_revoke(token_id=token_id))
    except TokenError as exc:
        raise HttpError(404 if isinstance(exc, TokenNotFound) else 409, str(exc)) from None


AGENT_SORTS = {"row": lambda r: r.node.row, "name": lambda r: r.node.name,
               "last_sample": lambda r: r.ledger_last_sample_s,
               "accepted": lambda r: r.status.accepted_samples if r.status else 0,
               "rejected": lambda r: r.rejected_total}
AgentListQuery = list_query("AgentListQuery", tuple(AGENT_SORTS), "row")


@router.get("/clusters/{cluster}/agents", response=answers({200: list[AgentOut]}, 404),
            summary="Each node's agent and telemetry; paginated (X-Total-Count, Link), filtered, sorted")
def agents(request: HttpRequest, response: HttpResponse, cluster: ClusterName,
           page: Query[AgentListQuery],  # type: ignore[valid-type]
           q: str = text(200, "part of the node name"), connected: bool | None = None, stale: bool | None = None):
    """``q``: part of the node name; ``connected``, ``stale``: true or false. ``sort``: row
    (default), name, last_sample, accepted, rejected."""
    rows = selectors.cluster_agents(cluster=_cluster(cluster))
    if q:
        rows = [r for r in rows if q.lower() in r.node.name.lower()]
    if connected is not None:
        rows = [r for r in rows if bool(r.status and r.status.connected) == connected]
    if stale is not None:
        rows = [r for r in rows if r.stale == stale]
    rows = sort_items(rows, page, AGENT_SORTS, "row")
    return [AgentOut(node=r.node.name, tokens_active=r.tokens_active, tokens_revoked=r.tokens_revoked,
                     connected=bool(r.status and r.status.connected),
                     agent_version=r.status.agent_version if r.status else "",
                     sampling_interval_s=r.status.sampling_interval_s if r.status else None,
                     last_sample_s=r.ledger_last_sample_s, last_sample_at=iso(r.ledger_last_sample_s), stale=r.stale,
                     accepted_samples=r.status.accepted_samples if r.status else 0,
                     duplicate_batches=r.status.duplicate_batches if r.status else 0,
                     rejected_samples=r.rejected) for r in page_of(rows, page, request, response)]


@router.get("/clusters/{cluster}/rejections", response=answers({200: RejectionsOut}, 404),
            summary="Rejected samples per reason and refused agent connections")
def rejections(request: HttpRequest, cluster: ClusterName):
    found = _cluster(cluster)
    return RejectionsOut(cluster=found.name, rejected=selectors.cluster_rejections(cluster=found),
                         refused_connections=selectors.cluster_refusals(cluster=found))
