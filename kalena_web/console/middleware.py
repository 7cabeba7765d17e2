"""Console middleware.

Login required everywhere by default (Django's ``LoginRequiredMiddleware``), except the
REST API, which answers 401 itself instead of redirecting to a login page, the probes
(``/livez``, ``/readyz``), and the Prometheus endpoint (guarded by its own bearer token when one is set)."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.middleware import LoginRequiredMiddleware
from django.http import HttpResponseBadRequest
from whitenoise.middleware import WhiteNoiseMiddleware

OPEN_PREFIXES = ("/api/", "/agent/", "/livez", "/readyz", "/healthz", "/metrics", "/favicon.ico")


class ProbeMiddleware:
    """Probes and scrapes (``settings.PROBE_PATHS``: ``/livez``, ``/readyz``, ``/healthz``,
    ``/metrics``, ``/metrics/cluster``) answered before anything reads the Host header or
    redirects to HTTPS: orchestrators and Prometheus address the pod by its IP over plain HTTP
    (``Host: 10.1.2.3:8000``), which ``ALLOWED_HOSTS`` rightly refuses for everything else.
    First in ``MIDDLEWARE``; only GET and HEAD. The agents' join (``POST /agent/v1/join``,
    :mod:`kalena_web.telemetry.join`) is answered here too: agents address the console by
    service name or IP, as they do its WebSocket, and authenticate with the join secret."""

    def __init__(self, get_response):
        from kalena_web.control import health, metrics

        self.get_response = get_response
        self.views = {"/livez": health.livez, "/readyz": health.readyz, "/healthz": health.readyz,
                      "/metrics": metrics.metrics_view, "/metrics/cluster": metrics.cluster_metrics_view}
        from kalena_web.telemetry.join import join_view

        self.join_view = join_view

    def __call__(self, request):
        view = self.views.get(request.path_info)
        if view is not None and request.method in ("GET", "HEAD"):
            return view(request)
        if request.path_info == "/agent/v1/join":
            return self.join_view(request)
        return self.get_response(request)


class NulRefusedMiddleware:
    """A request whose path or query holds a NUL character is refused (400) before any view:
    no name, cluster or node contains one, and PostgreSQL cannot even compare text with it."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if "\x00" in request.path or "\x00" in request.META.get("QUERY_STRING", "") or \
                any("\x00" in v for values in request.GET.lists() for v in values[1]):
            return HttpResponseBadRequest("the request's path or query contains a NUL character")
        return self.get_response(request)


class ConsoleLoginRequiredMiddleware(LoginRequiredMiddleware):
    """Anonymous requests to console pages are redirected to the login page."""

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith(OPEN_PREFIXES):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise where collected files win and the finders only fill gaps.

    Files ``collectstatic`` wrote to ``STATIC_ROOT`` (with their gzip twins: plotly.min.js goes
    out as ~1.4 MB instead of 4.8 MB) are served first; anything not collected yet is served
    straight from the finders (``WHITENOISE_USE_FINDERS``), so a console started without
    ``collectstatic`` still works and a missing ``STATIC_ROOT`` is not an error.
    """

    def add_files(self, root, prefix=None):
        if root == self.static_root and not Path(root).is_dir():
            return
        super().add_files(root, prefix)

    def add_files_from_finders(self):
        collected = dict(self.files)
        super().add_files_from_finders()
        self.files.update(collected)
