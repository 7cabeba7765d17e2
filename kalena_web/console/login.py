"""Login throttling: failed logins counted per account and per client address.

After ``ACCOUNT_FAILURES`` failures for one user name, or ``ADDRESS_FAILURES`` from one address,
within ``WINDOW_S`` seconds, further attempts are refused (HTTP 429, the form saying when to try
again) without checking the password — even a right one — until the window has passed since the
first counted failure. A successful login clears the account's count. Counts live in Django's
cache (Redis in production, so every console process shares them).
"""

from __future__ import annotations

import hashlib
import math
import time

from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse

ACCOUNT_FAILURES = 5
ADDRESS_FAILURES = 20
WINDOW_S = 900.0


def _key(kind: str, value: str) -> str:
    return f"kalena:login-failures:{kind}:{hashlib.sha256(value.lower().encode()).hexdigest()[:32]}"


def _keys(request: HttpRequest, username: str) -> list[tuple[str, int]]:
    address = request.META.get("REMOTE_ADDR", "") or "unknown"
    return [(_key("account", username), ACCOUNT_FAILURES), (_key("address", address), ADDRESS_FAILURES)]


def login_locked_for_s(request: HttpRequest, username: str, *, now_s: float) -> float:
    """Seconds until ``username`` may try again from this address (0: it may now)."""
    wait = 0.0
    for key, limit in _keys(request, username):
        entry = cache.get(key)
        if entry and entry["count"] >= limit:
            wait = max(wait, entry["since_s"] + WINDOW_S - now_s)
    return max(0.0, wait)


def login_failure_record(request: HttpRequest, username: str, *, now_s: float) -> None:
    for key, _ in _keys(request, username):
        entry = cache.get(key)
        if not entry or now_s - entry["since_s"] > WINDOW_S:
            entry = {"count": 0, "since_s": now_s}
        entry["count"] += 1
        cache.set(key, entry, timeout=int(WINDOW_S) + 60)


def login_success_record(request: HttpRequest, username: str) -> None:
    cache.delete(_key("account", username))


class ThrottledLoginView(LoginView):
    """Django's login view, refusing attempts while the account or the address is locked."""

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        username = request.POST.get("username", "")[:150]
        wait_s = login_locked_for_s(request, username, now_s=time.time())
        if wait_s > 0:
            minutes = math.ceil(wait_s / 60)
            locked = (f"Too many failed logins for this account or from this address: try again in "
                      f"{minutes} minute{'' if minutes == 1 else 's'}. The password was not checked.")
            response = self.render_to_response(self.get_context_data(locked=locked), status=429)
            response["Retry-After"] = str(math.ceil(wait_s))
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        login_failure_record(self.request, self.request.POST.get("username", "")[:150], now_s=time.time())
        return super().form_invalid(form)

    def form_valid(self, form):
        login_success_record(self.request, form.get_user().get_username())
        return super().form_valid(form)
