"""Agent join: one node token per node without an operator creating each one
(``POST /agent/v1/join``; docs/security.md, "Agent join").

An agent that has no node token yet presents the cluster's **join secret** once — a secret
shared by every agent of a stack (a Docker secret), never a node's credential — together with
its node's name (the engine ID or node label the watcher registers it under), and receives a
node token of its own (:func:`~kalena_web.telemetry.services.agent_token_create`: stored as a
SHA-256 digest, listed and revoked with ``kalena agent-token``). It keeps that token in its state
directory and uses only it from then on; the join secret is not accepted on the WebSocket.

Request: ``Authorization: Bearer <join secret>``, body ``{"node": "<name>"}``. Answers (JSON
``{"error": reason, "detail": …}`` unless 201):

===  ==================  =====================================================================
201  —                   ``{"token", "token_id", "node", "cluster"}``: the node's new token
400  ``bad_request``     body is not ``{"node": "<name>"}``
401  ``bad_join_secret`` no or wrong join secret: nothing is created
403  ``join_disabled``   no join secret configured (``KALENA_AGENT_JOIN_SECRET[_FILE]`` unset/empty)
404  ``unknown_cluster`` ``KALENA_AGENT_JOIN_CLUSTER`` names no live cluster (or several, none named)
409  ``unknown_node``    the watcher has not registered the node yet (``Retry-After``: try again)
409  ``already_joined``  the node holds an active token: a second agent — or a copy of the join
                         secret — cannot take a joined node's identity; revoke the token
                         (``kalena agent-token revoke ID``) to let the node join again
429  ``rate_limited``    too many refused joins from this client address (``Retry-After``)
===  ==================  =====================================================================

Secrets: ``KALENA_AGENT_JOIN_SECRET_FILE`` (re-read at every join, one secret per line: any of
them is accepted, so a new secret can be added before the old one is removed — rotation without
a gap) or ``KALENA_AGENT_JOIN_SECRET``; compared in constant time (:func:`hmac.compare_digest`).
Rate limit: ``FAILURES`` refused joins from one client address (its /64 for IPv6) within
``WINDOW_S`` refuse that address's joins — right secret or not — until the window has passed
(counted in Django's cache, Redis in production, as login throttling is). Every join and every
refusal is counted in ``RefusedConnection`` / the audit log.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import time
from pathlib import Path

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.http import HttpRequest, JsonResponse

FAILURES = 10
WINDOW_S = 900.0
RETRY_UNKNOWN_NODE_S = 5


class JoinRefused(Exception):
    """A join that is refused: ``status`` (HTTP), ``reason`` (the table in the module doc),
    ``detail`` (what was wrong and what is accepted)."""

    def __init__(self, status: int, reason: str, detail: str, *, retry_after_s: int | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.status, self.reason, self.detail, self.retry_after_s = status, reason, detail, retry_after_s


def join_secrets() -> list[str]:
    """The accepted join secrets (empty: joining is disabled). The file is read at every call.

    Raises:
        JoinRefused: 403 ``join_disabled`` when ``KALENA_AGENT_JOIN_SECRET_FILE`` cannot be read.
    """
    path = os.environ.get("KALENA_AGENT_JOIN_SECRET_FILE", "") or settings.KALENA_AGENT_JOIN_SECRET_FILE
    if path:
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise JoinRefused(403, "join_disabled", f"KALENA_AGENT_JOIN_SECRET_FILE={path}: cannot read it "
                                                    f"({exc.strerror or exc})") from None
    else:
        text = os.environ.get("KALENA_AGENT_JOIN_SECRET", "") or settings.KALENA_AGENT_JOIN_SECRET
    return [line.strip() for line in text.splitlines() if line.strip()]


def _key(address: str) -> str:
    return f"kalena:join-failures:{hashlib.sha256(address.encode()).hexdigest()[:32]}"


def _locked_for_s(address: str, now_s: float) -> float:
    entry = cache.get(_key(address))
    if not entry or entry["count"] < FAILURES:
        return 0.0
    return max(0.0, entry["first_s"] + WINDOW_S - now_s)


def _count_failure(address: str, now_s: float) -> None:
    key = _key(address)
    entry = cache.get(key)
    if not entry or entry["first_s"] + WINDOW_S <= now_s:
        entry = {"count": 0, "first_s": now_s}
    entry["count"] += 1
    cache.set(key, entry, timeout=int(WINDOW_S) + 1)


def agent_join(*, secret: str, node_name: str, client: str, now_s: float) -> tuple[str, object]:
    """Give node ``node_name`` its token for the join ``secret`` presented from ``client`` (an
    address) → ``(plaintext, AgentToken row)`` (module doc).

    Raises:
        JoinRefused: every refusal of the module doc's table; a refused join creates no token and
            changes no node (it is counted: rate limit, ``RefusedConnection``).
    """
    from kalena_web.cli.watch import live_cluster_named
    from kalena_engine.errors import InputError
    from kalena_web.inventory.models import Node
    from kalena_web.telemetry.models import AgentToken
    from kalena_web.telemetry.services import agent_token_create

    wait = _locked_for_s(client, now_s)
    if wait > 0:
        raise JoinRefused(429, "rate_limited", f"{FAILURES} refused joins from {client} within {WINDOW_S:g} s; "
                          f"try again in {math.ceil(wait)} s", retry_after_s=math.ceil(wait))
    accepted = join_secrets()
    if not accepted:
        raise JoinRefused(403, "join_disabled", "no join secret is configured (KALENA_AGENT_JOIN_SECRET_FILE): "
                          "create this node's token with `kalena agent-token create CLUSTER NODE`")
    if not any(hmac.compare_digest(secret.encode(), s.encode()) for s in accepted):
        _count_failure(client, now_s)
        raise JoinRefused(401, "bad_join_secret", "missing or wrong join secret (Authorization: Bearer <the "
                          "stack's join secret>); nothing was created")
    try:
        cluster = live_cluster_named(settings.KALENA_AGENT_JOIN_CLUSTER)
    except InputError as exc:
        raise JoinRefused(404, "unknown_cluster", f"KALENA_AGENT_JOIN_CLUSTER: {exc}") from None
    with transaction.atomic():
        node = Node.objects.select_for_update().filter(cluster=cluster, name=node_name).first()
        if node is None:
            raise JoinRefused(409, "unknown_node", f"live cluster {cluster.name!r} has no node {node_name!r} yet (the "
                              "watcher registers each engine's node; the agent names its node as the watcher does: "
                              "engine ID or node label)", retry_after_s=RETRY_UNKNOWN_NODE_S)
        held = AgentToken.objects.filter(node=node, revoked_at__isnull=True).order_by("id").first()
        if held is not None:
            _count_failure(client, now_s)
            raise JoinRefused(409, "already_joined", f"node {node_name!r} already holds token {held.id} "
                              f"({held.prefix}…): revoke it (`kalena agent-token revoke {held.id}`) to let the node "
                              "join again")
        plaintext, row = agent_token_create(node=node)
    from kalena_web.policy.audit import audit

    audit("token.join", cluster_name=cluster.name, target=f"agent token {row.id} ({row.prefix}…) of {node.name}",
          after={"client_address": client}, actor_kind="agent", actor=f"agent of {node.name}")
    return plaintext, row


def join_view(request: HttpRequest) -> JsonResponse:
    """``POST /agent/v1/join`` (module doc). Answered before the Host check, CSRF and the login,
    as the agent WebSocket is: an agent addresses the console by service name or IP."""
    from kalena_web.console.clients import request_client_address
    from kalena_web.telemetry.services import refused_connection_record

    if request.method != "POST":
        return JsonResponse({"error": "bad_request", "detail": "POST {\"node\": NAME} with the join secret"},
                            status=405)
    client = request_client_address(request)
    header = request.headers.get("Authorization", "")
    secret = header[7:].strip() if header[:7].lower() == "bearer " else ""
    try:
        body = json.loads(request.body or b"null")
    except ValueError:
        body = None
    now_s = time.time()
    try:
        if not isinstance(body, dict) or not isinstance(body.get("node"), str) or not 0 < len(body["node"]) <= 253:
            raise JoinRefused(400, "bad_request", "body: accepted {\"node\": \"<node name, 1-253 characters>\"}")
        plaintext, row = agent_join(secret=secret, node_name=body["node"], client=client, now_s=now_s)
    except JoinRefused as refused:
        refused_connection_record(reason=f"join_{refused.reason}"[:32], node_id=None, peer=client,
                                  detail=refused.detail, now_s=now_s)
        response = JsonResponse({"error": refused.reason, "detail": refused.detail}, status=refused.status)
        if refused.retry_after_s is not None:
            response["Retry-After"] = str(refused.retry_after_s)
        return response
    return JsonResponse({"token": plaintext, "token_id": row.id, "node": row.node.name,
                         "cluster": row.node.cluster.name}, status=201)
