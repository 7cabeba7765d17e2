"""Probes (docs/design.md §12; Kubernetes' ``/livez`` and ``/readyz`` conventions).

``/livez``: the process answers — no dependency is consulted, so an outage of the database or
Redis never restarts a console pod. ``/readyz``: the database answers, every migration is
applied, and Redis answers when configured (``REDIS_URL``); 503 with the failing checks named
otherwise, so the pod leaves the Service until they pass. ``/healthz`` is kept as an alias of
``/readyz`` for probes written before these two existed. Both are answered by
:class:`~kalena_web.console.middleware.ProbeMiddleware` before any host check (probes address the
pod by its IP).
"""

from __future__ import annotations

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, JsonResponse


def livez(request: HttpRequest) -> JsonResponse:
    """200 ``{"status": "ok"}`` while the process serves requests."""
    return JsonResponse({"status": "ok"})


def readiness_checks() -> dict[str, str]:
    """``{check: "ok" | what failed}`` for ``database``, ``migrations`` and (when configured)
    ``redis``."""
    checks: dict[str, str] = {}
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        checks["database"] = "ok"
    except DatabaseError as exc:
        checks["database"] = f"unreachable: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
        connection.close_if_unusable_or_obsolete()
    if checks["database"] == "ok":
        try:
            executor = MigrationExecutor(connection)
            plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
            checks["migrations"] = "ok" if not plan else f"{len(plan)} not applied (run manage.py migrate)"
        except DatabaseError as exc:
            checks["migrations"] = f"unreadable: {type(exc).__name__}"
    else:
        checks["migrations"] = "unknown: database unreachable"
    if settings.REDIS_URL:
        import redis

        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_timeout=1.0, socket_connect_timeout=1.0).ping()
            checks["redis"] = "ok"
        except redis.RedisError as exc:
            checks["redis"] = f"unreachable: {exc}"
    return checks


def readyz(request: HttpRequest) -> JsonResponse:
    """200 when every :func:`readiness_checks` check is ``ok``, else 503; the body lists them."""
    checks = readiness_checks()
    ready = all(v == "ok" for v in checks.values())
    return JsonResponse({"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503)
