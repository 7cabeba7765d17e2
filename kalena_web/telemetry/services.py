"""Telemetry writes (keyword-only arguments, ``<entity>_<action>``): agent tokens, the agent's
status at hello and disconnect, refused connections.

Tokens: ``kna_`` + 43 URL-safe characters (256 bits from :mod:`secrets`). Only the SHA-256 hex
digest is stored; a high-entropy secret needs no slow hash, and looking a token up by its
digest reveals nothing about other tokens. The plaintext exists once, in the return value of
:func:`agent_token_create`.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from kalena_engine.errors import InputError
from kalena_web.inventory.models import Cluster, Node
from kalena_web.telemetry.models import AgentStatus, AgentToken, RefusedConnection

TOKEN_PREFIX = "kna_"


class TokenError(InputError):
    """A token operation that cannot be done (unknown node or token, already revoked)."""


class TokenNotFound(TokenError):
    """No token with that id."""


class TokenAlreadyRevoked(TokenError):
    """The token was revoked before."""


def token_digest(token: str) -> str:
    """SHA-256 hex digest of a plaintext token (what is stored and looked up)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def agent_token_create(*, node: Node, created_by: Any = None) -> tuple[str, AgentToken]:
    """A new token for ``node`` → ``(plaintext, row)``. Earlier tokens stay valid until revoked
    (so an agent can be rolled over to a new token without a gap).

    Raises:
        TokenError: ``node`` is not in a live cluster.
    """
    if node.cluster.kind != Cluster.LIVE:
        raise TokenError(f"node {node.name!r} belongs to a recorded replay, not a live cluster", field="node",
                         accepted="a node of a live cluster (kalena cluster import)")
    plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
    row = AgentToken.objects.create(node=node, prefix=plaintext[:12], digest=token_digest(plaintext),
                                    created_by=created_by if getattr(created_by, "pk", None) else None)
    from kalena_web.policy.audit import audit

    audit("token.create", cluster_name=node.cluster.name, target=f"agent token {row.id} ({row.prefix}…) of {node.name}")
    return plaintext, row


def agent_token_revoke(*, token_id: int) -> AgentToken:
    """Revoke a token: new connections with it are refused; open ones are closed within a few
    seconds (:class:`kalena_web.telemetry.consumers.TokenWatch`).

    Raises:
        TokenError: no such token, or it is revoked already.
    """
    with transaction.atomic():
        row = AgentToken.objects.select_for_update().select_related("node").filter(id=token_id).first()
        if row is None:
            raise TokenNotFound(f"no agent token with id {token_id}", field="token_id")
        if row.revoked_at is not None:
            raise TokenAlreadyRevoked(f"token {token_id} ({row.prefix}…) of node {row.node.name!r} was revoked at "
                             f"{row.revoked_at:%Y-%m-%d %H:%M:%S} UTC", field="token_id")
        row.revoked_at = timezone.now()
        row.save(update_fields=["revoked_at"])
        from kalena_web.policy.audit import audit

        audit("token.revoke", cluster_name=row.node.cluster.name,
              target=f"agent token {row.id} ({row.prefix}…) of {row.node.name}", before={"revoked": False},
              after={"revoked": True})
    return row


def agent_token_used(*, token_id: int) -> None:
    AgentToken.objects.filter(id=token_id).update(last_used_at=timezone.now())


def agent_hello_record(*, node_id: int, hello: dict[str, Any], peer: str, now_s: float) -> None:
    """Record a (validated) ``hello``: the agent is connected, with its version and interval."""
    fields = dict(connected=True, peer=peer[:100], agent_version=str(hello.get("agent_version", ""))[:40],
                  sampling_interval_s=float(hello["sampling_interval_s"]),
                  cgroup_version=hello.get("cgroup_version") if isinstance(hello.get("cgroup_version"), int)
                  and 0 < hello["cgroup_version"] < 10 else None,
                  signal_sources=hello.get("signal_sources") or {}, last_hello_s=now_s,
                  policy_version=_policy_version(hello))
    with transaction.atomic():
        status, created = AgentStatus.objects.select_for_update().get_or_create(node_id=node_id, defaults=fields)
        if not created:
            for key, value in fields.items():
                setattr(status, key, value)
        status.connections += 1
        status.save()


def _policy_version(message: dict[str, Any]) -> int | None:
    value = message.get("policy_version")
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31 else None


def agent_policy_version_record(*, node_id: int, message: dict[str, Any]) -> int | None:
    """Record the policy version an agent reports applying (``policy_version`` of its
    ``samples``); returns it."""
    version = _policy_version(message)
    AgentStatus.objects.filter(node_id=node_id).update(policy_version=version)
    return version


def agent_disconnect_record(*, node_id: int, now_s: float) -> None:
    AgentStatus.objects.filter(node_id=node_id).update(connected=False, last_disconnect_s=now_s)


def refused_connection_record(*, reason: str, node_id: int | None, peer: str, detail: str, now_s: float) -> None:
    """Count one refused agent connection (``reason``: ``missing_token``, ``malformed_token``,
    ``unknown_token``, ``revoked_token``, ``node_mismatch``, ``no_hello``, ``bad_hello``; and
    ``superseded``: a live link closed for a newer one of its node, :func:`link_superseded`)."""
    values = dict(last_s=now_s, last_peer=peer[:100], last_detail=detail[:300])
    if not RefusedConnection.objects.filter(node_id=node_id, reason=reason).update(count=F("count") + 1, **values):
        RefusedConnection.objects.create(node_id=node_id, reason=reason, count=1, **values)


def foreign_workload_refused(*, node_id: int, node_name: str, action: str, workload: str, on_node: str,
                             peer: str, client_address: str, token_id: int) -> None:
    """A node's agent named a workload of another node in an ``action`` (refused: docs/design.md §12):
    counted in ``kalena_link_refusals_total{cluster, node, reason="foreign_workload"}`` and
    audited (``link.refused``: who — the node's agent and its token —, from where — the client
    address and the connection's peer —, what it named and where that workload is)."""
    from kalena_web.control.services import metric_increment
    from kalena_web.policy.services import audit_record

    cluster = Node.objects.filter(id=node_id).values_list("cluster__name", flat=True).first() or ""
    metric_increment(name="kalena_link_refusals", labels={"cluster": cluster, "node": node_name,
                                                          "reason": "foreign_workload"})
    audit_record(actor_kind="agent", actor=f"agent of {node_name}", action="link.refused", cluster_name=cluster,
                 target=workload, after={"reason": "foreign_workload", "action": action, "workload_node": on_node,
                                         "client_address": client_address, "peer": peer, "token_id": token_id})


def link_superseded(*, node_id: int, node_name: str, old_peer: str, new_peer: str, client_address: str,
                    token_id: int) -> None:
    """A node's live link was closed because a newer authenticated link for the same node
    arrived (one live link per node: docs/control-plane-ingest.md): counted in
    ``kalena_link_superseded_total{cluster, node}``, among the node's refused connections
    (``superseded``, with the old link's peer: the console's Agents page lists it) and audited
    (``link.superseded``: the node, the old and the new connection's peers, the new one's client
    address and token)."""
    from kalena_web.control.services import metric_increment
    from kalena_web.policy.services import audit_record

    cluster = Node.objects.filter(id=node_id).values_list("cluster__name", flat=True).first() or ""
    metric_increment(name="kalena_link_superseded", labels={"cluster": cluster, "node": node_name})
    refused_connection_record(reason="superseded", node_id=node_id, peer=old_peer, now_s=time.time(),
                              detail=f"superseded by a newer link for node {node_name} from {new_peer}")
    audit_record(actor_kind="agent", actor=f"agent of {node_name}", action="link.superseded", cluster_name=cluster,
                 target=node_name, after={"old_peer": old_peer, "new_peer": new_peer,
                                          "client_address": client_address, "token_id": token_id})


def telemetry_prune(*, before_s: float, max_batches: int = 200_000, chunk: int = 20_000) -> int:
    """Delete raw samples older than ``before_s`` (``stored_s``) that estimation has applied,
    with their node samples and sample batches; returns the batches deleted. Bounded: at most
    ``max_batches`` per call, in transactions of ``chunk``. Action and gap messages (mitigation
    events: why-evicted evidence), pending batches and batches the archive has not yet rolled
    into minute rows (past its cluster's ``samples`` cursor) are kept; so are the rejection
    counters."""
    from django.db import connection

    from kalena_web.archive.models import ArchiveCursor
    from kalena_web.inventory.models import Node
    from kalena_web.ledger.models import EstimationRun
    from kalena_web.telemetry.models import IngestBatch, NodeSample, Sample

    batches, samples, nodes = IngestBatch._meta.db_table, Sample._meta.db_table, NodeSample._meta.db_table
    rolled = (f"id <= COALESCE((SELECT c.position FROM {ArchiveCursor._meta.db_table} c JOIN {Node._meta.db_table} n "
              f"ON n.cluster_id = c.cluster_id WHERE n.id = {batches}.node_id AND c.name = 'samples'), 0)")
    deleted = 0
    while deleted < max_batches:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SELECT id FROM {batches} WHERE stored_s < %s AND kind = 'samples' "
                           f"AND estimation_run IS NOT NULL AND {rolled} ORDER BY stored_s LIMIT %s",
                           [before_s, chunk])
            ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                break
            marks = ", ".join(["%s"] * len(ids))
            for table in (samples, nodes):
                cursor.execute(f"DELETE FROM {table} WHERE batch_id IN ({marks})", ids)
            cursor.execute(f"DELETE FROM {batches} WHERE id IN ({marks})", ids)
        deleted += len(ids)
        if len(ids) < chunk:
            break
    EstimationRun.objects.filter(applied_s__lt=before_s).delete()
    return deleted
