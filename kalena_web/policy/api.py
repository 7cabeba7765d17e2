"""Policy and audit REST API: the current policy version of a live cluster (as its policy
file), its versions, and the audit log with the console's filters."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router
from ninja.errors import HttpError

from kalena_engine.errors import PolicyError
from kalena_engine.policy_file import policy_to_document
from kalena_web.api.lists import ListQuery, order_by, page_of
from kalena_web.api.times import iso
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


@router.get("/clusters/{cluster}/policy/versions",
            summary="Every policy version, newest first; paginated (X-Total-Count, Link)")
def policy_versions(request: HttpRequest, response: HttpResponse, cluster: str, page: Query[ListQuery]):
    rows = selectors.policy_versions(cluster=_cluster(cluster)).order_by(
        *order_by(page, {"version": ("version",)}, "-version"))
    return {"items": [{"version": r.version, "created_at": iso(r.created_at.timestamp()),
                       "created_s": r.created_at.timestamp(), "created_by": r.created_by,
                       "source": r.source, "note": r.note, "document": r.document}
                      for r in page_of(rows, page, request, response)]}


@router.get("/audit", summary="The audit log, newest first (filters: action prefix, actor, cluster, since, until); "
                           "paginated (X-Total-Count, Link)")
def audit(request: HttpRequest, response: HttpResponse, page: Query[ListQuery], action: str = "", actor: str = "",
          cluster: str = "", since: str = "", until: str = "", limit: int | None = None):
    """``limit`` (1–1000, older clients): the same as ``page_size``."""
    from kalena_web.policy.views import audit_filter

    if limit is not None:
        if not 1 <= limit <= MAX_LIMIT:
            raise HttpError(400, f"limit: {limit} (accepted: 1–{MAX_LIMIT})")
        page = ListQuery(page=page.page, page_size=limit, sort=page.sort)
    try:
        filters = audit_filter({"action": action, "actor": actor, "cluster": cluster, "since": since, "until": until})
    except PolicyError as exc:
        raise HttpError(400, str(exc)) from None
    return {"items": [{"id": e.id, "at": iso(e.at.timestamp()), "at_s": e.at.timestamp(), "actor_kind": e.actor_kind,
                       "actor": e.actor, "action": e.action, "cluster": e.cluster_name, "target": e.target,
                       "before": e.before, "after": e.after}
                      for e in page_of(selectors.audit_entries(filters).order_by(*order_by(page, {"at": ("at", "id")}, "-at")),
                                      page, request, response)]}
