"""Console middleware.

Login required everywhere by default (Django's ``LoginRequiredMiddleware``), except the
REST API, which answers 401 itself instead of redirecting to a login page, and the health
probe."""

from __future__ import annotations

from pathlib import Path

from django.contrib.auth.middleware import LoginRequiredMiddleware
from whitenoise.middleware import WhiteNoiseMiddleware

OPEN_PREFIXES = ("/api/", "/healthz")


class ConsoleLoginRequiredMiddleware(LoginRequiredMiddleware):
    """Anonymous requests to console pages are redirected to the login page."""

    def process_view(self, request, view_func, view_args, view_kwargs):
        if request.path_info.startswith(OPEN_PREFIXES):
            return None
        return super().process_view(request, view_func, view_args, view_kwargs)


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    """WhiteNoise, quiet when ``collectstatic`` has not run yet: the files are then served from
    the finders (``WHITENOISE_USE_FINDERS``), so a missing ``STATIC_ROOT`` is not an error."""

    def add_files(self, root, prefix=None):
        if root == self.static_root and not Path(root).is_dir():
            return
        super().add_files(root, prefix)
