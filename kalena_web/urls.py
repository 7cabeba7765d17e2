"""URL map: the console at ``/``, the REST API at ``/api/``, login/logout, the probes and the metrics.
The admission webhook and the scheduler extender are not here: they are served only on the hooks
listener (``kalena serve --tls-port``, :data:`kalena_web.kubehooks.routing.HOOKS_URLCONF`), so
every path under ``/kubernetes/`` is a 404 on this port."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.http import HttpResponsePermanentRedirect

from kalena_web.api.api import build_api
from kalena_web.console.login import ThrottledLoginView
from kalena_web.control.health import livez, readyz
from kalena_web.control.metrics import cluster_metrics_view, metrics_view

api = build_api()


def favicon(request):
    """Browsers ask for /favicon.ico on every page: send them to the console's icon (resolved per
    request, so the hashed static name exists only after collectstatic)."""
    return HttpResponsePermanentRedirect(static("console/favicon.svg"))

def bad_request(request, exception=None):
    """A console request Django refused before any view (``handler400``): an oversize body is a
    413 page naming the limit, anything else a 400 page saying what was wrong — never the bare
    "Bad Request (400)". (Under ``/api/`` the JSON error middleware answers first.)"""
    from django.conf import settings
    from django.core.exceptions import RequestDataTooBig

    from kalena_web.console.views import error_page

    if isinstance(exception, RequestDataTooBig):
        return error_page(request, 413, f"the request body is larger than the {settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,}-byte "
                                        "limit (DATA_UPLOAD_MAX_MEMORY_SIZE); nothing was changed")
    return error_page(request, 400, str(exception) or "the request could not be read")


handler400 = bad_request

urlpatterns = [
    path("accounts/login/", ThrottledLoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("favicon.ico", favicon),
    path("livez", livez, name="livez"),
    path("readyz", readyz, name="readyz"),
    path("healthz", readyz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("metrics/cluster", cluster_metrics_view, name="metrics-cluster"),
    path("api/", api.urls),
    path("", include("kalena_web.telemetry.urls")),
    path("", include("kalena_web.policy.urls")),
    path("", include("kalena_web.console.urls")),
]
