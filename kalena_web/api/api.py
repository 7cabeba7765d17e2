"""The REST API: one ``NinjaAPI`` mounted at ``/api/``; each app contributes one router.

Authentication: the console's session (``django_auth``) or a user's API token
(``Authorization: Bearer kal_…``, :mod:`kalena_web.api.auth`). Anonymous calls answer 401.
Every error is JSON with a machine-readable ``code`` (:mod:`kalena_web.api.errors`); lists are
paginated and filtered one way (:mod:`kalena_web.api.lists`).
Agents do not use this API: they stream over their own WebSocket with per-node tokens.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from ninja import NinjaAPI

from kalena_web.api.auth import ApiTokenAuth, ConsoleSessionAuth
from kalena_web.api.clusters import router as clusters_router
from kalena_web.api.errors import install_error_handlers
from kalena_web.archive.api import router as archive_router
from kalena_web.control.api import router as control_router
from kalena_web.policy.api import router as policy_router
from kalena_web.replan.api import router as replan_router
from kalena_web.telemetry.api import router as telemetry_router
from kalena_web.scheduling.api import router as scheduling_router


def docs_login_required(view):
    """The interactive docs page needs a login (to the login page, then back); the schema
    ``/api/openapi.json`` stays open, for client generators and schema tests."""
    name = getattr(getattr(view, "func", view), "__name__", "")
    return view if name == "openapi_json" else login_required(view)


def build_api() -> NinjaAPI:
    """A fresh API object with every app's router (built once, by ``kalena_web.urls``)."""
    # /api/docs: Swagger UI from django-ninja's own static files ("ninja" in INSTALLED_APPS; no
    # CDN), for logged-in users only; the schema itself stays at /api/openapi.json.
    # Bearer first: a script's bearer-token write is authenticated before the session's CSRF check.
    api = NinjaAPI(title="Kalena", version="1", auth=[ApiTokenAuth(), ConsoleSessionAuth()], urls_namespace="api",
                   docs_url="/docs", docs_decorator=docs_login_required,
                   description="Kalena operator API: replay runs, live clusters, batch pods and why-pending, "
                               "agents and tokens, nodes and escalations, export and re-plan.")
    install_error_handlers(api)
    api.add_router("/", clusters_router)
    api.add_router("/", archive_router)
    api.add_router("/", telemetry_router)
    api.add_router("/", scheduling_router)
    api.add_router("/", control_router)
    api.add_router("/", replan_router)
    api.add_router("/", policy_router)
    return api
