"""The REST API: one ``NinjaAPI`` mounted at ``/api/``; each app contributes one router.

Authentication: the console's session (``django_auth``) or a user's API token
(``Authorization: Bearer kal_…``, :mod:`kalena_web.api.auth`). Anonymous calls answer 401.
Agents do not use this API: they stream over their own WebSocket with per-node tokens.
"""

from __future__ import annotations

from ninja import NinjaAPI
from ninja.security import django_auth

from kalena_web.api.auth import ApiTokenAuth
from kalena_web.archive.api import router as archive_router
from kalena_web.control.api import router as control_router
from kalena_web.policy.api import router as policy_router
from kalena_web.replan.api import router as replan_router
from kalena_web.telemetry.api import router as telemetry_router
from kalena_web.scheduling.api import router as scheduling_router


def build_api() -> NinjaAPI:
    """A fresh API object with every app's router (built once, by ``kalena_web.urls``)."""
    # docs_url=None: the interactive docs page loads Swagger UI from a CDN, and nothing here may;
    # the schema itself stays at /api/openapi.json.
    # Bearer first: django-ninja's session auth refuses a request without a CSRF token outright,
    # which would stop a script's bearer-token write before its token is even looked at.
    api = NinjaAPI(title="Kalena", version="1", auth=[ApiTokenAuth(), django_auth], urls_namespace="api", docs_url=None,
                   description="Kalena operator API: replay runs, live clusters, batch pods and why-pending, "
                               "agents and tokens, nodes and escalations, export and re-plan.")
    api.add_router("/", archive_router)
    api.add_router("/", telemetry_router)
    api.add_router("/", scheduling_router)
    api.add_router("/", control_router)
    api.add_router("/", replan_router)
    api.add_router("/", policy_router)
    return api
