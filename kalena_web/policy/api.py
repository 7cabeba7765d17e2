"""Policy and audit REST API: the current policy version of a live cluster (as its policy
file), its versions, and the audit log with the console's filters."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router
from ninja.errors import HttpError

from kalena_engine.policy_file import policy_to_document
from kalena_web.api.errors import answers
from kalena_web.api.lists import MAX_PAGE_SIZE, list_query, order_by, page_of, with_page_size
from kalena_web.api.params import ClusterName, IsoTime, text
from kalena_web.api.times import iso
from kalena_web.inventory.models import Cluster
from kalena_web.policy import selectors

router = Router(tags=["policy"])
VersionListQuery = list_query("VersionListQuery", ("version",), "-version")
AuditListQuery = list_query("AuditListQuery", ("at",), "-at")


def _cluster(name: str) -> Cluster:
    try:
        return Cluster.objects.get(kind=Cluster.LIVE, name=name)
    except Cluster.DoesNotExist:
        raise HttpError(404, f"no live cluster named {name!r}") from None


@router.get("/clusters/{cluster}/policy", response=answers({200: dict[str, Any]}, 404),
            summary="The policy version in force, as a policy file")
def policy_current(request: HttpRequest, cluster: ClusterName):
    current = selectors.current_policy(cluster_id=_cluster(cluster).id)
    return {"version": current.version, "document": policy_to_document(current.document)}


@router.get("/clusters/{cluster}/policy/versions", response=answers({200: dict[str, list[dict[str, Any]]]}, 404),
            summary="Every policy version, newest first; paginated (X-Total-Count, Link)")
def policy_versions(request: HttpRequest, response: HttpResponse, cluster: ClusterName,
                    page: Query[VersionListQuery]):  # type: ignore[valid-type]
    rows = selectors.policy_versions(cluster=_cluster(cluster)).order_by(
        *order_by(page, {"version": ("version",)}, "-version"))
    return {"items": [{"version": r.version, "created_at": iso(r.created_at.timestamp()),
                       "created_s": r.created_at.timestamp(), "created_by": r.created_by,
                       "source": r.source, "note": r.note, "document": r.document}
                      for r in page_of(rows, page, request, response)]}


@router.get("/audit", response=answers({200: dict[str, list[dict[str, Any]]]}),
            summary="The audit log, newest first (filters: action prefix, actor, cluster, since, until); "
                    "paginated (X-Total-Count, Link)")
def audit(request: HttpRequest, response: HttpResponse, page: Query[AuditListQuery],  # type: ignore[valid-type]
          action: str = text(100, "an action or its prefix (policy → every policy action)"),
          actor: str = text(200, "who acted"), cluster: str = text(200, "the cluster's name"),
          since: IsoTime | None = Query(None, description="ISO 8601; a date is its midnight, no zone is UTC"),
          until: IsoTime | None = Query(None, description="ISO 8601; a date is its midnight, no zone is UTC"),
          limit: int | None = Query(None, ge=1, le=MAX_PAGE_SIZE, description="page_size, for older clients")):
    """``limit`` (1–1000, older clients): the same as ``page_size``."""
    from kalena_web.policy.selectors import AuditFilter

    page = with_page_size(page, limit)
    filters = AuditFilter(action=action.strip(), actor=actor.strip(), cluster=cluster.strip(),
                          since=since, until=until)
    return {"items": [{"id": e.id, "at": iso(e.at.timestamp()), "at_s": e.at.timestamp(), "actor_kind": e.actor_kind,
                       "actor": e.actor, "action": e.action, "cluster": e.cluster_name, "target": e.target,
                       "before": e.before, "after": e.after}
                      for e in page_of(selectors.audit_entries(filters).order_by(*order_by(page, {"at": ("at", "id")}, "-at")),
                                      page, request, response)]}


