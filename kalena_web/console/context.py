"""Template context every console page gets (a context processor, settings.TEMPLATES)."""

from __future__ import annotations

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject


def _open(limit: int = 5) -> list[dict]:
    from kalena_web.replan.models import ReplanRecommendation

    rows = (ReplanRecommendation.objects.filter(state=ReplanRecommendation.OPEN)
            .order_by("-created_s").values_list("id", "cluster__name", "drift", "report")[:limit])
    return [{"id": i, "cluster": name, "drift": drift or {}, "coverage": (report or {}).get("coverage"),
             "findings": len((report or {}).get("fidelity_findings") or [])} for i, name, drift, report in rows]


def open_replans(request: HttpRequest) -> dict:
    """``open_replans``: the open re-plan recommendations (newest first, at most five), for the
    banner ``base.html`` shows on every page until a person with the approver role decides them.
    Read only when a page renders the banner (one query), and only for a logged-in user."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"open_replans": ()}
    return {"open_replans": SimpleLazyObject(_open)}
