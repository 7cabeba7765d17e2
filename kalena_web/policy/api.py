"""Policy and audit REST API: the current policy version of a live cluster (as its policy
file), its versions, and the audit log with the console's filters."""

from __future__ import annotations

from django.http import HttpRequest
from ninja import Router
from ninja.errors import HttpError

from kalena_engine.errors import PolicyError
from kalena_engine.policy_file import policy_to_document
from kalena_web.inventory.models import Cluster
from kalena_web.policy import selectors

router = Router(tags=["policy"])
MAX_LIMIT = 1000


def _cluster(name: str) -> Cluster:
    try:
        return Cluster.objects.get(kind=Cluster.LIVE, name=name)
    except Cluster.DoesNotExist:
        raise HttpError(404, f"no live cluster named {name!r}") from None


@router.get("/clusters/{cluster}/policy", summary="The policy version in force, as a policy file")
def policy_current(request: HttpRequest, cluster: str):
    current = selectors.current_policy(cluster_id=_cluster(cluster).id)
    return {"version": current.version, "document": policy_to_document(current.document)}


@router.get("/clusters/{cluster}/policy/versions", summary="Every policy version, newest first")
def policy_versions(request: HttpRequest, cluster: str):
    return {"items": [{"version": r.version, "created_at": r.created_at.isoformat(), "created_by": r.created_by,
                       "source": r.source, "note": r.note, "document": r.document}
                      for r in selectors.policy_versions(cluster=_cluster(cluster))[:MAX_LIMIT]]}


@router.get("/audit", summary="The audit log, newest first (filters: action prefix, actor, cluster, since, until)")
def audit(request: HttpRequest, action: str = "", actor: str = "", cluster: str = "", since: str = "",
          until: str = "", limit: int = 200):
    from kalena_web.policy.views import audit_filter

    if not 1 <= limit <= MAX_LIMIT:
        raise HttpError(400, f"limit: {limit} (accepted: 1–{MAX_LIMIT})")
    try:
        filters = audit_filter({"action": action, "actor": actor, "cluster": cluster, "since": since, "until": until})
    except PolicyError as exc:
        raise HttpError(400, str(exc)) from None
    return {"items": [{"id": e.id, "at": e.at.isoformat(), "actor_kind": e.actor_kind, "actor": e.actor,
                       "action": e.action, "cluster": e.cluster_name, "target": e.target, "before": e.before,
                       "after": e.after} for e in selectors.audit_entries(filters)[:limit]]}
