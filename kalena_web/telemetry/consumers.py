"""The agent WebSocket endpoint ``agent/v1/ws`` (protocol: :mod:`agents.link.protocol`).

Connect: the ``Authorization: Bearer <token>`` header must name a valid, unrevoked token of a
live node — otherwise the connection is refused before it is accepted (Daphne answers the
upgrade with HTTP 403; the agent takes it as its token refused and backs off for up to 5 minutes)
and the refusal is counted. If the database cannot be read to check the token, the connection is
accepted, gets an ``error`` and is closed with :data:`CLOSE_NOT_STORED` (the agent reconnects
within seconds). The first
frame must be a ``hello`` for the token's node, or the socket is closed (4403) and counted.

Then every frame is checked (:mod:`kalena_web.telemetry.validation`) and handed to the
process's group-commit writer; its ``ack`` — ``{"type": "ack", "v": 1, "batch_id", "accepted",
"rejected": {reason: n}, "duplicate"}`` — is sent only once the transaction holding it
committed. A message refused as a whole also gets an ``error`` naming what and where. If the
write fails — or the database cannot be read for the hello or the node's workloads — the
connection gets an ``error`` and is closed with :data:`CLOSE_NOT_STORED` (4500) without an ack:
the agent resends from its buffer after reconnecting and nothing it sent is lost. (Not 1011:
Daphne's autobahn refuses application close codes outside 1000 and 3000–4999, raises inside
the protocol, and leaves a socket that answers pings but no longer delivers frames.)

Frames are processed in arrival order; acks may overtake each other (each names its batch).
A node's token speaks for that node only: an ``action`` naming a workload placed on another
node is refused as a whole (``foreign_workload``: acknowledged, nothing of it recorded — no
mitigation event, no why-evicted record, no audit entry of an eviction, no count), and the
attempt is counted (``kalena_link_refusals_total``) and audited (``link.refused``, with the
node, its token, the client address and peer). A workload on no node any more (it left before
the report came) is kept by name as before.

Once the ``hello`` is accepted the console answers ``{"type": "welcome", "v": 1, "node": <name>}``:
the agent reports itself connected only then (a refused hello gets ``error`` and a close instead).

One live link per node (docs/control-plane-ingest.md, "One link per node"): an accepted ``hello``
for a node that already has a live link in this process supersedes it — the newest wins, as a
restarted agent must take over at once from a connection the kernel has not closed yet. The old
connection gets an ``error`` "superseded by a newer link for node X from <peer>" and is closed with
:data:`CLOSE_SUPERSEDED` (4409); both links are logged at WARNING, the takeover is counted
(``kalena_link_superseded_total``) and audited (``link.superseded``). The superseded connection's
disconnect does not mark the node disconnected.

A revoked token's open connections are closed (4401) within ``TokenWatch.check_s``. Agent
connections use no channel layer: nothing is sent to them from elsewhere.

Policy (docs/design.md §10): after the ``hello`` the agent gets its cluster's current policy version
(``policy`` message) and, within ``TokenWatch.check_s`` of a save, every newer one; the version
the agent reports applying (``policy_version`` of its ``hello``/``samples``) is recorded on its
:class:`~kalena_web.telemetry.models.AgentStatus` whenever it changes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from typing import Any

import orjson
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from channels.consumer import get_handler_name
from django.conf import settings
from django.db import DatabaseError

from agents.errors import ProtocolError
from agents.link.protocol import validate_agent_message
from kalena_web.console.clients import scope_client_address
from kalena_web.policy import selectors as policy_selectors
from kalena_web.telemetry import selectors, services
from kalena_web.telemetry.ingest import Entry, prepare_message, rejected_message
from kalena_web.telemetry.metrics import ingest_metrics
from kalena_web.telemetry.validation import Limits, NodeView, Rejected, resolve_workload
from kalena_web.telemetry.writer import GroupCommitWriter, Session, WriteFailed

log = logging.getLogger(__name__)

CLOSE_REFUSED = 4403      # hello missing, malformed or for another node
CLOSE_REVOKED = 4401      # the connection's token was revoked
CLOSE_SUPERSEDED = 4409  # a newer authenticated link for the same node took over (module doc)
CLOSE_NOT_STORED = 4500   # a write (or a read it needs) failed: reconnect and resend. Never 1011 (module doc)
VIEW_REFRESH_S = 2.0      # an unknown workload reloads the node's inventory at most this often
VIEW_MAX_AGE_S = 30.0     # and it is reloaded at least this often


def off_thread(func):
    """``database_sync_to_async`` on the executor's threads instead of the one sync thread all
    consumers share: after an outage every agent reconnects at once, and their hellos (a token
    lookup, the node's workloads, two counter updates) used to queue one after another on that
    thread, holding back every reconnected agent's resend for seconds."""
    return database_sync_to_async(func, thread_sensitive=False)


def _hello_load(*, node_id: int, hello: dict, peer: str, token_id: int,
                now_s: float) -> tuple[NodeView, int | None, tuple[int, dict] | None]:
    """The database work of a ``hello`` in one thread hop: the node's view, the hello recorded,
    the token marked used, the node's cluster and that cluster's current policy message
    (``(version, message)``, None without a cluster). One hop: the cluster and policy lookups
    used to be two more hops on the one sync thread every consumer shares, so after a database
    restart 150 reconnecting agents' hellos queued there one after another while their
    backlogs — which a connection reads only after its hello — waited."""
    view = selectors.node_view_load(node_id=node_id, shards=settings.KALENA_ESTIMATION_SHARDS)
    services.agent_hello_record(node_id=node_id, hello=hello, peer=peer, now_s=now_s)
    services.agent_token_used(token_id=token_id)
    cluster_id = policy_selectors.node_clusters([node_id]).get(node_id)
    policy = None if cluster_id is None else policy_selectors.agent_policy_message(cluster_id=cluster_id)
    return view, cluster_id, policy


def decode(raw: str | bytes) -> Any:
    """JSON text → Python. orjson first; the standard library only for what orjson refuses but
    JSON producers emit (``NaN``/``Infinity``), so those reach validation and are named there.

    Raises:
        Rejected: ``bad_json``.
    """
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise Rejected("bad_json", f"<frame>: not JSON: {str(exc)[:200]}") from None


def transport_max_message_bytes() -> int:
    """Daphne's ``websocket_max_message_size`` and ``websocket_max_frame_size`` (both 1 MiB by
    default) for the one setting ``KALENA_INGEST_MAX_FRAME_BYTES`` F: 2 F (8 MiB → 16 MiB). Both:
    a client may send a message as one frame, and autobahn drops a frame over its frame limit
    as it drops a message over its message limit. Frames up to 2 F reach the
    consumer, which refuses one over F as ``oversize_batch`` — counted with its samples, and
    acknowledged when its ``batch_id`` can be read, so the agent drops it instead of resending it
    forever. A frame over 2 F never reaches Kalena: autobahn drops the connection (logging
    "failing WebSocket connection (code=1009)"); Kalena's agent never sends one, it splits its
    batches to 1 MiB (:func:`agents.link.protocol.split_samples`). ``kalena serve`` passes this
    to Daphne."""
    return 2 * settings.KALENA_INGEST_MAX_FRAME_BYTES


def limits_from_settings() -> Limits:
    return Limits(max_batch_samples=settings.KALENA_INGEST_MAX_BATCH_SAMPLES,
                  max_future_s=settings.KALENA_INGEST_MAX_FUTURE_S, max_age_s=settings.KALENA_INGEST_MAX_AGE_S,
                  max_usage_ratio=settings.KALENA_INGEST_MAX_USAGE_RATIO)


class TokenWatch:
    """This process's open agent connections by token; every ``check_s`` one query finds the
    revoked tokens among them and their connections are closed."""

    def __init__(self, check_s: float = 2.0) -> None:
        self.check_s = check_s
        self.by_token: dict[int, set[AgentConsumer]] = {}
        self.by_node: dict[int, AgentConsumer] = {}   # node id → its one live link (hello accepted)
        self._task: asyncio.Task | None = None

    def add(self, token_id: int, consumer: AgentConsumer) -> None:
        self.by_token.setdefault(token_id, set()).add(consumer)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="kalena-token-watch")

    def discard(self, token_id: int, consumer: AgentConsumer) -> None:
        consumers = self.by_token.get(token_id)
        if consumers is not None:
            consumers.discard(consumer)
            if not consumers:
                del self.by_token[token_id]

    async def _run(self) -> None:
        while self.by_token:
            await asyncio.sleep(self.check_s)
            try:
                revoked = await database_sync_to_async(selectors.revoked_tokens)(list(self.by_token))
            except Exception:  # noqa: BLE001 - a failed check is retried at the next tick
                log.exception("checking agent tokens for revocation failed")
                continue
            for token_id in revoked:
                for consumer in list(self.by_token.pop(token_id, ())):
                    await consumer.token_revoked()
            await self._push_policies()

    async def _push_policies(self) -> None:
        """One query for the current policy versions of the connected agents' clusters; each
        agent sent an older one gets the new version."""
        consumers = [c for group in self.by_token.values() for c in group if c.cluster_id is not None]
        if not consumers:
            return
        try:
            versions = await database_sync_to_async(policy_selectors.current_versions)(
                cluster_ids={c.cluster_id for c in consumers})
        except Exception:  # noqa: BLE001 - retried at the next tick
            log.exception("checking policy versions failed")
            return
        for consumer in consumers:
            if versions.get(consumer.cluster_id, 0) > consumer.sent_policy_version:
                await consumer.send_policy()


class AgentConsumer(AsyncWebsocketConsumer):
    """One node agent's connection (module doc). ``writer`` is the process's
    :class:`~kalena_web.telemetry.writer.GroupCommitWriter` and ``tokens`` its
    :class:`TokenWatch`, both given to :meth:`as_asgi`."""

    channel_layer_alias = None  # no channel layer (module doc)

    def __init__(self, *args, writer: GroupCommitWriter, tokens: TokenWatch, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.writer = writer
        self.tokens = tokens

    async def dispatch(self, message: dict) -> None:
        """Channels' dispatch without its per-message ``close_old_connections`` thread hop: this
        consumer touches the database only through ``database_sync_to_async`` (which does it)
        and the writer's thread."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        self.closed = False
        self.identity = None
        self.view = None
        self.peer = ":".join(str(p) for p in (self.scope.get("client") or ("?",)))
        try:
            token = selectors.bearer_token(self.scope.get("headers") or [])
            self.identity = await off_thread(selectors.token_authenticate)(token)
        except selectors.Refused as refused:
            await self._refuse(refused.reason, refused.detail, node_id=refused.node_id)
            if refused.transient:  # not checked now (TokenReview failed): the agent retries within seconds
                self.identity = None
                await self.accept()
                await self.send(text_data=orjson.dumps({"type": "error", "v": 1, "message": (
                    f"the token could not be checked now ({refused.detail[:300]}); reconnect")}).decode())
                self.closed = True
                await self.close(code=CLOSE_NOT_STORED)
                return
            await self.close()  # before accept: the upgrade is denied
            return
        except DatabaseError as exc:
            # the database is away: accept, say so and close 4500 (reconnect soon) — not HTTP 403,
            # which the agent takes as its token refused and backs off from for minutes
            log.warning("agent connection from %s closed, database unavailable: %s", self.peer, exc)
            self.identity = None
            await self.accept()
            await self.send(text_data=orjson.dumps({"type": "error", "v": 1, "message": (
                f"the console's database is unavailable ({type(exc).__name__}); reconnect")}).decode())
            self.closed = True
            await self.close(code=CLOSE_NOT_STORED)
            return
        self.cluster_id: int | None = None
        self.sent_policy_version = -1
        self.reported_policy_version: int | None = None
        self.session = Session(node_id=self.identity.node_id)
        self.limits = limits_from_settings()
        self.pending: set[asyncio.Task] = set()
        self.view_loaded = 0.0
        self.tokens.add(self.identity.token_id, self)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        self.closed = True
        if self.identity is None:
            return
        self.tokens.discard(self.identity.token_id, self)
        current = self.tokens.by_node.get(self.identity.node_id)
        if current is self:
            del self.tokens.by_node[self.identity.node_id]
        elif current is not None:   # superseded: the node's newer link is live, it stays connected
            return
        if self.view is not None:
            try:
                await off_thread(services.agent_disconnect_record)(node_id=self.identity.node_id, now_s=time.time())
            except DatabaseError as exc:  # the next hello records the connection again
                log.warning("recording the disconnect of node %s failed: %s", self.identity.node_name, exc)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        received_s = time.time()
        if self.closed or self.session.broken:
            return
        raw = text_data if text_data is not None else bytes_data or b""
        try:
            message = decode(raw)
        except Rejected as error:
            message = None
            if len(raw) <= settings.KALENA_INGEST_MAX_FRAME_BYTES:
                if self.view is None:
                    await self._refuse("bad_hello", error.detail, node_id=self.identity.node_id, close=True)
                    return
                self._store(rejected_message(None, error, view=self.view, received_s=received_s))
                return
        size = len(raw.encode() if isinstance(raw, str) else raw)
        if size > settings.KALENA_INGEST_MAX_FRAME_BYTES:
            error = Rejected("oversize_batch", f"<frame>: {size} bytes (accepted: up to "
                                               f"{settings.KALENA_INGEST_MAX_FRAME_BYTES}, KALENA_INGEST_MAX_FRAME_BYTES)")
            if self.view is None:
                await self._refuse("bad_hello", error.detail, node_id=self.identity.node_id, close=True)
                return
            self._store(rejected_message(message, error, view=self.view, received_s=received_s))
            return
        try:
            if self.view is None:
                await self._hello(message, received_s)
                return
            await self._refresh_view(message, received_s)
            if isinstance(message, dict) and message.get("type") == "samples" and \
                    message.get("policy_version") != self.reported_policy_version:
                self.reported_policy_version = await off_thread(services.agent_policy_version_record)(
                    node_id=self.identity.node_id, message=message)
        except DatabaseError as exc:
            await self._not_stored(f"the database is unavailable ({type(exc).__name__}); reconnect and resend")
            return
        entry = prepare_message(message, view=self.view, now_s=time.time(), received_s=received_s, limits=self.limits)
        if entry.action is not None and entry.action["workload_id"] is None:
            try:
                await self._refuse_foreign(entry)
            except DatabaseError as exc:
                await self._not_stored(f"the database is unavailable ({type(exc).__name__}); reconnect and resend")
                return
        self._store(entry, received_s)

    async def _refuse_foreign(self, entry: Entry) -> None:
        """Refuse an action naming a workload placed on another node (module doc): the message
        is stored as refused (``foreign_workload``, acknowledged so the agent drops it), nothing
        of it is recorded as an action, and the refusal is counted and audited."""
        action = entry.action
        elsewhere = await off_thread(selectors.workload_elsewhere)(
            node_id=self.identity.node_id, names=[action["workload_ref"], action["workload_name"]])
        if elsewhere is None:
            return                                      # on no node (it left) or unknown: kept, as before
        workload, on_node = elsewhere
        entry.action = None
        entry.reject("foreign_workload", f"<action>.workload: {workload!r} is on node {on_node!r}, not on "
                     f"{self.identity.node_name!r}: a node's agent reports and acts only on its own node's workloads",
                     samples=0, messages=1)
        log.warning("agent of %s (from %s) named %s on node %s in a %r action: refused", self.identity.node_name,
                    self.peer, workload, on_node, action["action"])
        await off_thread(services.foreign_workload_refused)(
            node_id=self.identity.node_id, node_name=self.identity.node_name, action=str(action["action"])[:40],
            workload=workload, on_node=on_node, peer=self.peer, client_address=scope_client_address(self.scope),
            token_id=self.identity.token_id)

    async def _hello(self, message: Any, now_s: float) -> None:
        node_id = self.identity.node_id
        if not isinstance(message, dict) or message.get("type") != "hello":
            kind = message.get("type") if isinstance(message, dict) else type(message).__name__
            await self._refuse("no_hello", f"first frame is {kind!r}, expected 'hello'", node_id=node_id, close=True)
            return
        try:
            validate_agent_message(message)
        except ProtocolError as exc:
            await self._refuse("bad_hello", str(exc), node_id=node_id, close=True)
            return
        interval = float(message["sampling_interval_s"])
        if not math.isfinite(interval) or interval <= 0:
            await self._refuse("bad_hello", f"<hello>.sampling_interval_s: {interval} (accepted: > 0)",
                               node_id=node_id, close=True)
            return
        if message["node"] != self.identity.node_name:
            await self._refuse("node_mismatch", f"<hello>.node: {message['node'][:100]!r}, but the token is for node "
                               f"{self.identity.node_name!r}", node_id=node_id, close=True)
            return
        view, cluster_id, policy = await off_thread(_hello_load)(node_id=node_id, hello=message, peer=self.peer,
                                                                 token_id=self.identity.token_id, now_s=now_s)
        self.view, self.cluster_id = view, cluster_id
        self.view_loaded = time.monotonic()
        self.reported_policy_version = message.get("policy_version")
        previous = self.tokens.by_node.get(node_id)
        self.tokens.by_node[node_id] = self
        await self._send({"type": "welcome", "v": 1, "node": self.identity.node_name})
        if previous is not None and previous is not self and not previous.closed:
            await previous.superseded(self)
        if policy is not None:
            await self._send_policy_message(*policy)

    async def superseded(self, newer: AgentConsumer) -> None:
        """Close this link: ``newer`` is an accepted link for the same node (module doc)."""
        node = self.identity.node_name
        why = f"superseded by a newer link for node {node} from {newer.peer}"
        log.warning("agent link of node %s from %s closed: %s", node, self.peer, why)
        log.warning("agent link of node %s from %s supersedes the live link from %s (one live link per node; "
                    "if this repeats, two agents run for node %s)", node, newer.peer, self.peer, node)
        await self._send({"type": "error", "v": 1, "message": why[:1000]})
        self.closed = True
        await self.close(code=CLOSE_SUPERSEDED)
        try:
            await off_thread(services.link_superseded)(
                node_id=self.identity.node_id, node_name=node, old_peer=self.peer, new_peer=newer.peer,
                client_address=scope_client_address(newer.scope), token_id=newer.identity.token_id)
        except DatabaseError as exc:  # the takeover happened; only its count and audit entry are lost
            log.warning("recording the superseded link of node %s failed: %s", node, exc)

    async def send_policy(self) -> None:
        """Send the cluster's current policy version (none saved yet: nothing to send — the agent
        keeps its own defaults, which are the engine's)."""
        if self.cluster_id is None:
            return
        await self._send_policy_message(*await database_sync_to_async(policy_selectors.agent_policy_message)(
            cluster_id=self.cluster_id))

    async def _send_policy_message(self, version: int, message: dict) -> None:
        self.sent_policy_version = version
        if version > 0:
            await self._send(message)

    async def _refresh_view(self, message: Any, now_s: float) -> None:
        """Reload the node's workloads when a sample or an action names one the view does not know (at most
        every :data:`VIEW_REFRESH_S` for samples; at once for an action — rare, and its why-evicted join
        depends on it: an eviction can follow a placement within seconds) or the view is older than
        :data:`VIEW_MAX_AGE_S`."""
        age = time.monotonic() - self.view_loaded
        is_action = isinstance(message, dict) and message.get("type") == "action"
        if age < VIEW_REFRESH_S and not is_action:
            return
        if age < VIEW_MAX_AGE_S:
            records = message.get("samples") if isinstance(message, dict) else None
            workload = message.get("workload") if isinstance(message, dict) else None
            if isinstance(workload, dict) and isinstance(workload.get("id"), str):
                # an action names its workload as a sample does (a pod bound since the view loaded)
                records = [{"workload": workload["id"], "name": workload.get("name")}]
            if not isinstance(records, list) or all(
                    not isinstance(r, dict) or not isinstance(r.get("workload"), str)
                    or resolve_workload(r, self.view) is not None for r in records):
                return
        self.view = await off_thread(selectors.node_view_load)(
            node_id=self.identity.node_id, shards=settings.KALENA_ESTIMATION_SHARDS, last_ts=self.view.last_ts)
        self.view_loaded = time.monotonic()

    def _store(self, entry: Entry, received_s: float | None = None) -> None:
        task = asyncio.get_running_loop().create_task(self._store_and_ack(entry, received_s))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _store_and_ack(self, entry: Entry, received_s: float | None = None) -> None:
        metrics = ingest_metrics()
        try:
            await self.writer.submit(entry, self.session)
        except WriteFailed as exc:
            metrics.frames.labels(outcome="not_stored").inc()
            await self._not_stored(f"batch {entry.batch_id} {exc}; resend after reconnecting")
            return
        whole = [f"{reason}: {c[2]}" for reason, c in entry.rejected.items() if c[1]]
        if whole:
            await self._send({"type": "error", "v": 1, "message": "; ".join(whole)[:1000]})
        if entry.batch_id is not None:
            await self._send(entry.ack_payload())
            metrics.frames.labels(outcome="acked").inc()
            if received_s is not None:
                metrics.ack_latency.observe(max(0.0, time.time() - received_s))

    async def _not_stored(self, why: str) -> None:
        """Nothing more of this connection is stored: send ``error`` and close
        :data:`CLOSE_NOT_STORED` (the agent reconnects and resends what is unacknowledged)."""
        self.session.broken = True
        await self._send({"type": "error", "v": 1, "message": why[:1000]})
        if not self.closed:
            self.closed = True
            await self.close(code=CLOSE_NOT_STORED)

    async def _send(self, message: dict) -> None:
        if not self.closed:
            await self.send(text_data=orjson.dumps(message).decode())

    async def _refuse(self, reason: str, detail: str, *, node_id: int | None, close: bool = False) -> None:
        log.warning("agent connection from %s refused (%s): %s", self.peer, reason, detail)
        await off_thread(services.refused_connection_record)(
            reason=reason, node_id=node_id, peer=self.peer, detail=detail, now_s=time.time())
        if close:
            await self._send({"type": "error", "v": 1, "message": f"{reason}: {detail}"[:1000]})
            self.closed = True
            await self.close(code=CLOSE_REFUSED)

    async def token_revoked(self) -> None:
        await self._send({"type": "error", "v": 1, "message": "this connection's token was revoked"})
        self.closed = True
        await self.close(code=CLOSE_REVOKED)
