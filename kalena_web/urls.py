"""URL map: the console at ``/``, the REST API at ``/api/``, login/logout, a health probe."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import include, path

from kalena_web.api.api import build_api
from kalena_web.console.views import healthz
from kalena_web.control.metrics import metrics_view

api = build_api()

urlpatterns = [
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("api/", api.urls),
    path("", include("kalena_web.kubehooks.urls")),
    path("", include("kalena_web.telemetry.urls")),
    path("", include("kalena_web.console.urls")),
]
