"""Telemetry reads: token authentication, what ingest needs to know about a node, and the
agents of a live cluster for the console page and the API."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Max, OuterRef, Subquery, Sum

from kalena_web.control.locks import shard_of
from kalena_web.control.models import ProductionPlacement
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.telemetry.models import AgentStatus, AgentToken, RefusedConnection, RejectedSamples, Sample
from kalena_web.telemetry.services import TOKEN_PREFIX, token_digest
from kalena_web.telemetry.validation import NodeView, pod_index


class Refused(Exception):
    """An agent connection refused before it is accepted: ``reason`` and ``detail``. ``transient``:
    the token could not be checked now (the Kubernetes API server did not answer a TokenReview) —
    the connection is accepted and closed 4500 so the agent retries within seconds, not refused
    (HTTP 403), which an agent backs off from for minutes."""

    def __init__(self, reason: str, detail: str, *, node_id: int | None = None, transient: bool = False) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail
        self.node_id = node_id
        self.transient = transient


@dataclass(frozen=True)
class AgentIdentity:
    """Who a valid token speaks for."""

    token_id: int
    node_id: int
    node_name: str
    cluster_id: int


def bearer_token(headers: list[tuple[bytes, bytes]]) -> str:
    """The token of an ``Authorization: Bearer <token>`` header (ASGI header pairs).

    Raises:
        Refused: ``missing_token`` or ``malformed_token``.
    """
    values = [v for k, v in headers if k.lower() == b"authorization"]
    if not values:
        raise Refused("missing_token", "no Authorization header (accepted: Authorization: Bearer <token>)")
    scheme, _, token = values[0].decode("latin-1").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(values) > 1:
        raise Refused("malformed_token", "the Authorization header is not one 'Bearer <token>'")
    return token


def token_authenticate(token: str) -> AgentIdentity:
    """The node a plaintext token belongs to.

    Raises:
        Refused: ``malformed_token``, ``unknown_token`` or ``revoked_token`` (with the node).
    """
    if not token.startswith(TOKEN_PREFIX) and settings.KALENA_AGENT_TOKENREVIEW_CLUSTER:
        from kalena_web.kubehooks.agent_auth import service_account_authenticate

        return service_account_authenticate(token)  # Kubernetes: the pod's projected token, TokenReview
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        raise Refused("malformed_token", f"a Kalena agent token starts with {TOKEN_PREFIX!r}")
    row = (AgentToken.objects.filter(digest=token_digest(token))
           .select_related("node", "node__cluster").first())
    if row is None:
        raise Refused("unknown_token", f"no agent token {token[:12]}…")
    if row.revoked_at is not None:
        raise Refused("revoked_token", f"token {row.prefix}… of node {row.node.name!r} was revoked",
                      node_id=row.node_id)
    if row.node.cluster.kind != Cluster.LIVE:
        raise Refused("unknown_token", f"token {row.prefix}… is for a node outside any live cluster")
    return AgentIdentity(token_id=row.id, node_id=row.node_id, node_name=row.node.name,
                         cluster_id=row.node.cluster_id)


def revoked_tokens(token_ids: list[int]) -> list[int]:
    """Those of ``token_ids`` that are revoked (or deleted)."""
    alive = set(AgentToken.objects.filter(id__in=token_ids, revoked_at__isnull=True).values_list("id", flat=True))
    return [t for t in token_ids if t not in alive]


def node_view_load(*, node_id: int, shards: int, last_ts: dict[int, float] | None = None) -> NodeView:
    """What ingest checks samples against (:class:`~kalena_web.telemetry.validation.NodeView`):
    the node's allocatable, the workloads placed on it now (production and bound batch) — by
    their names and by the live pods holding them (production identity: the agent reports
    ``shop/web-7d9c5b6f4-x2k9q``, the sample lands on ``shop/web-0000``) — and the time of each
    one's newest stored sample (or ``last_ts`` when refreshing a view)."""
    node = Node.objects.only("id", "name", "allocatable").get(id=node_id)
    workloads = Workload.objects.filter(node_id=node_id)
    if last_ts is None:
        newest = Sample.objects.filter(workload_id=OuterRef("id")).order_by("-ts").values("ts")[:1]
        rows = list(workloads.annotate(newest=Subquery(newest)).values_list("id", "name", "newest"))
        last_ts = {wid: ts for wid, _, ts in rows if ts is not None}
    else:
        rows = [(wid, name, None) for wid, name in workloads.values_list("id", "name")]
    by_name = {name: wid for wid, name, _ in rows}
    for pod, wid in ProductionPlacement.objects.filter(workload__node_id=node_id).exclude(pod="").values_list(
            "pod", "workload_id"):  # a live pod holding a blueprint entry reports under its own name
        by_name.setdefault(pod, wid)
    return NodeView(node_id=node.id, name=node.name, shard=shard_of(node.name, shards),
                    allocatable=tuple(float(v) for v in node.allocatable), by_name=by_name,
                    by_pod=pod_index(by_name), last_ts=last_ts)


def workload_elsewhere(*, node_id: int, names: list[str]) -> tuple[str, str] | None:
    """``(workload name, node name)`` of a workload of the node's cluster that ``names`` denote
    — an inventory name (``namespace/pod``) or, without a ``/``, the pod part of one — placed
    on *another* node now; None when none is (on no node, on this one, or unknown).

    Used for what an agent names but its own node's view does not hold (a node's agent reports
    and acts only on its own node's workloads, docs/design.md §12)."""
    wanted = [n for n in dict.fromkeys(names) if n]
    if not wanted:
        return None
    node = Node.objects.only("cluster_id").get(id=node_id)
    query = Workload.objects.filter(cluster_id=node.cluster_id, node__isnull=False).exclude(node_id=node_id)
    match = query.filter(name__in=wanted)
    for name in wanted:
        if "/" not in name:
            match = match | query.filter(name__endswith=f"/{name}")
    found = match.values_list("name", "node__name").order_by("name").first()
    return None if found is None else (found[0], found[1])


@dataclass
class AgentRow:
    """One node of a live cluster as the agents page shows it."""

    node: Node
    tokens_active: int = 0
    tokens_revoked: int = 0
    status: AgentStatus | None = None
    stale: bool = True
    ledger_last_sample_s: float | None = None
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())


def cluster_agents(*, cluster: Cluster) -> list[AgentRow]:
    """Every node of ``cluster`` with its tokens, agent status, staleness and rejected samples
    per reason (a fixed number of queries, whatever the cluster size)."""
    nodes = list(Node.objects.filter(cluster=cluster).select_related("live_ledger").order_by("row").only(
        "id", "row", "name", "cluster_id", "live_ledger__id", "live_ledger__stale",
        "live_ledger__last_sample_s"))  # the ledger's vectors and blueprint workloads: not read here
    rows = {n.id: AgentRow(node=n) for n in nodes}
    for node_id, revoked in AgentToken.objects.filter(node__cluster=cluster).values_list("node_id", "revoked_at"):
        if revoked is None:
            rows[node_id].tokens_active += 1
        else:
            rows[node_id].tokens_revoked += 1
    for status in AgentStatus.objects.filter(node__cluster=cluster):
        rows[status.node_id].status = status
    for node_id, reason, samples in RejectedSamples.objects.filter(node__cluster=cluster).values_list(
            "node_id", "reason", "samples"):
        rows[node_id].rejected[reason] = samples
    for n in nodes:
        ledger = getattr(n, "live_ledger", None)
        if ledger is not None:
            rows[n.id].stale = ledger.stale
            rows[n.id].ledger_last_sample_s = ledger.last_sample_s
    return list(rows.values())


def cluster_rejections(*, cluster: Cluster) -> list[dict]:
    """Rejected samples of ``cluster`` per reason: samples, messages, last time and detail."""
    out = []
    for row in (RejectedSamples.objects.filter(node__cluster=cluster).values("reason")
                .annotate(samples=Sum("samples"), messages=Sum("messages"), last_s=Max("last_s")).order_by("reason")):
        last = (RejectedSamples.objects.filter(node__cluster=cluster, reason=row["reason"])
                .order_by("-last_s").select_related("node").first())
        out.append({**row, "node": last.node.name if last else "", "detail": last.last_detail if last else ""})
    return out


def cluster_refusals(*, cluster: Cluster) -> list[dict]:
    """Refused agent connections per reason: those naming a node of ``cluster`` and those
    naming no node at all (missing or unknown token)."""
    rows = (RefusedConnection.objects.filter(node__cluster=cluster) | RefusedConnection.objects.filter(node=None))
    return list(rows.values("reason").annotate(count=Sum("count"), last_s=Max("last_s")).order_by("reason"))


class NotFound(Exception):
    """A live cluster, node or token that does not exist (message names it)."""


def live_node_get(*, cluster: str, node: str) -> Node:
    """Node ``node`` of live cluster ``cluster``.

    Raises:
        NotFound: naming the cluster or node.
    """
    found = Node.objects.filter(cluster__kind=Cluster.LIVE, cluster__name=cluster, name=node).select_related(
        "cluster").first()
    if found is None:
        if not Cluster.objects.filter(kind=Cluster.LIVE, name=cluster).exists():
            raise NotFound(f"no live cluster named {cluster!r}")
        raise NotFound(f"live cluster {cluster!r} has no node {node!r}")
    return found


def live_cluster_get(*, cluster: str) -> Cluster:
    """Raises: NotFound."""
    found = Cluster.objects.filter(kind=Cluster.LIVE, name=cluster).first()
    if found is None:
        raise NotFound(f"no live cluster named {cluster!r}")
    return found


def tokens_list(*, cluster: str | None = None, node: str | None = None):
    """Agent tokens (newest first per node), optionally of one live cluster and node."""
    rows = AgentToken.objects.select_related("node", "node__cluster", "created_by").order_by("node__cluster__name",
                                                                                             "node__row", "-id")
    if cluster is not None:
        rows = rows.filter(node__cluster__kind=Cluster.LIVE, node__cluster__name=cluster)
    if node is not None:
        rows = rows.filter(node__name=node)
    return rows
