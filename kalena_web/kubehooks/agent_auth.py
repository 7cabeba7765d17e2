"""One credential per node without a Secret holding every node's token (docs/design.md §12, §14): on
Kubernetes an agent presents its pod's projected service-account token (audience ``kalena``), the
console asks the API server who it is (TokenReview), and the token is accepted for the node the
API server names — ``authentication.kubernetes.io/node-name``, which kube-apiserver adds to the
user of a token bound to a pod on that node (Kubernetes ≥ 1.30) — when the user is the agent's
service account. Each node's credential is an :class:`~kalena_web.telemetry.models.AgentToken`
row (prefix ``k8s-sa``), so an operator sees and revokes it like any agent token.

Settings: ``KALENA_AGENT_TOKENREVIEW_CLUSTER`` (the live cluster the nodes belong to; empty = off),
``KALENA_AGENT_SERVICE_ACCOUNT`` (``system:serviceaccount:kalena-system:kalena-agent``),
``KALENA_AGENT_TOKEN_AUDIENCE`` (``kalena``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings

from kalena_web.inventory.models import Cluster, Node
from kalena_web.telemetry.models import AgentToken
from kalena_web.telemetry.selectors import AgentIdentity, Refused

NODE_EXTRA = "authentication.kubernetes.io/node-name"
PREFIX = "k8s-sa"


def _review_with_api(token: str, audiences: list[str], cluster: Cluster) -> Mapping[str, Any]:
    from kalena_web.control.orchestrators import orchestrator_for

    # direct: the console asks the API server itself (its ServiceAccount may create TokenReviews
    # and nothing else), even where it forwards pod stops to the workers
    orchestrator = orchestrator_for(cluster, direct=True)
    review = getattr(orchestrator, "token_review", None)
    if review is None:
        raise Refused("unknown_token", "TokenReview needs KALENA_ORCHESTRATOR=kubernetes")
    return review(token, audiences)


def service_account_authenticate(token: str, *, review: Callable[[str, list[str], Cluster], Mapping[str, Any]]
                                 = _review_with_api) -> AgentIdentity:
    """The node a projected service-account token speaks for (see module doc).

    Raises:
        Refused: ``malformed_token`` (too long), ``unknown_token`` (not authenticated, another
            user, no node binding, a node outside the cluster, the API unreachable) or
            ``revoked_token`` (an operator revoked the node's credential).
    """
    if len(token) > 8192:
        raise Refused("malformed_token", "a service-account token of more than 8 KiB")
    name = settings.KALENA_AGENT_TOKENREVIEW_CLUSTER
    cluster = Cluster.objects.filter(kind=Cluster.LIVE, name=name).first()
    if cluster is None:
        raise Refused("unknown_token", f"KALENA_AGENT_TOKENREVIEW_CLUSTER names no live cluster ({name!r})")
    audience = settings.KALENA_AGENT_TOKEN_AUDIENCE
    try:
        status = review(token, [audience], cluster)
    except Refused:
        raise
    except Exception as exc:  # noqa: BLE001 - the API server unreachable or refusing: not authenticated
        raise Refused("unknown_token", f"TokenReview failed: {type(exc).__name__}: {str(exc)[:200]}",
                      transient=True) from None
    if not status.get("authenticated"):
        raise Refused("unknown_token", f"TokenReview: not authenticated ({str(status.get('error') or '')[:200]})")
    user = status.get("user") or {}
    if user.get("username") != settings.KALENA_AGENT_SERVICE_ACCOUNT:
        raise Refused("unknown_token", f"TokenReview: {str(user.get('username'))[:100]!r} is not the agent service "
                                       f"account {settings.KALENA_AGENT_SERVICE_ACCOUNT!r}")
    if audience not in (status.get("audiences") or []):
        raise Refused("unknown_token", f"TokenReview: the token is not for audience {audience!r}")
    nodes = (user.get("extra") or {}).get(NODE_EXTRA) or []
    if len(nodes) != 1:
        raise Refused("unknown_token", "TokenReview: the token is bound to no node (use the agent pod's projected "
                                       f"token, audience {audience!r})")
    node = Node.objects.filter(cluster=cluster, name=nodes[0]).first()
    if node is None:
        raise Refused("unknown_token", f"TokenReview: node {nodes[0][:100]!r} is not in cluster {cluster.name!r}")
    digest = hashlib.sha256(f"kubernetes-service-account:{cluster.id}:{node.id}".encode()).hexdigest()
    row, _ = AgentToken.objects.get_or_create(digest=digest, defaults={"node": node, "prefix": PREFIX})
    if row.revoked_at is not None:
        raise Refused("revoked_token", f"the service-account credential of node {node.name!r} was revoked",
                      node_id=node.id)
    return AgentIdentity(token_id=row.id, node_id=node.id, node_name=node.name, cluster_id=cluster.id)
