"""Login throttling that no anonymous client can turn against real accounts (docs/design.md §12).

Failed logins are counted per client address (:func:`~kalena_web.console.clients.request_client_address`:
the peer, or behind a trusted proxy the client it names; an IPv6 client by its /64, which it can
pick new addresses in at will, :func:`~kalena_web.console.clients.client_network`) in two ways,
within ``WINDOW_S``:

* per account **and** address — ``ACCOUNT_FAILURES`` (5) failures for one real account from one
  client lock that account *for that client only*;
* per address — ``ADDRESS_FAILURES`` (20) failures from one client under any user names lock
  that client out of every account.

While locked, the client's attempts are refused (HTTP 429, the form saying when to try again)
without checking the password — even a right one — until the window has passed since its first
counted failure. A user name that names no account is counted under that name, never against a
real account (so ``Alice`` or ``nobody`` cannot lock ``alice``; ``alice `` and ``ａｌｉｃｅ`` are ``alice``,
as the form signs them in to it: :func:`submitted_username`), with the same
limit, so the answers do not tell which names exist; and nothing a client does locks another
client out: the same operator signing in from elsewhere is answered normally. A successful
login clears that client's count for the account.

Every lock-out is written to the audit log (``login.lockout``: the user name tried, the client
address and the peer it came through, the failures, until when), and every refused attempt is
counted in ``kalena_login_refusals_total{scope}`` (``account`` or ``address``) on ``/metrics``.
Counts live in Django's cache (Redis in production, so every console process shares them).

Example: client 203.0.113.5, behind the ingress, fails five times as ``alice``: its sixth try is
refused for 15 minutes; ``alice`` signing in from 198.51.100.7 gets in at once. After 20 failures
under any names, 203.0.113.5 is refused for every account.
"""

from __future__ import annotations

import functools
import hashlib
import math
import time

from django.contrib.auth import get_user_model
from django.contrib.auth.views import LoginView
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from prometheus_client import REGISTRY, Counter

from kalena_web.console.clients import client_network, request_client_address

ACCOUNT_FAILURES = 5
ADDRESS_FAILURES = 20
WINDOW_S = 900.0


@functools.cache
def login_refusals() -> Counter:
    """``kalena_login_refusals_total{scope}`` on this process's registry (created once)."""
    return Counter("kalena_login_refusals", "Login attempts refused unchecked while the client was locked out, by "
                   "scope (account: this client and this account; address: this client, any account)", ["scope"],
                   registry=REGISTRY)


def _key(kind: str, value: str) -> str:
    return f"kalena:login-failures:{kind}:{hashlib.sha256(value.encode()).hexdigest()[:32]}"


def _account_id(username: str) -> int | None:
    """The id of the account ``username`` signs in to (exactly as the authentication backend
    looks it up), or None when it names none."""
    model = get_user_model()
    try:
        return model._default_manager.get_by_natural_key(username).pk
    except model.DoesNotExist:
        return None


def submitted_username(raw: str) -> str:
    """The user name the login form signs in with for ``raw`` (what was typed): Django's
    ``UsernameField`` strips surrounding whitespace and NFKC-normalises, so ``" alice"`` and
    the full-width ``"ａｌｉｃｅ"`` both sign in to ``alice`` and are counted as ``alice`` —
    counted as typed, every spelling would have a fresh count and an account's limit none."""
    from django.contrib.auth.forms import UsernameField

    return UsernameField().to_python(raw)[:150]


def _counters(address: str, username: str) -> list[tuple[str, str, int]]:
    """``(scope, cache key, limit)`` of every count a failure from ``address`` as ``username``
    adds to. A real account is keyed by its id; a user name that names none by the name itself
    — a count of its own, which no real account shares, with the same limit, so a client cannot
    tell from the answers which user names exist."""
    account = _account_id(username)
    name = f"id:{account}" if account is not None else f"name:{username}"
    network = client_network(address)
    return [("address", _key("address", network), ADDRESS_FAILURES),
            ("account", _key("account", f"{name}|{network}"), ACCOUNT_FAILURES)]


def login_locked_for_s(address: str, username: str, *, now_s: float) -> tuple[float, str]:
    """``(seconds, scope)``: how long the client at ``address`` must wait before trying
    ``username`` again (0: it may now), and which count locked it (``account``/``address``)."""
    wait, scope = 0.0, ""
    for kind, key, limit in _counters(address, username):
        entry = cache.get(key)
        if entry and entry["count"] >= limit and entry["since_s"] + WINDOW_S - now_s > wait:
            wait, scope = entry["since_s"] + WINDOW_S - now_s, kind
    return max(0.0, wait), scope


def login_failure_record(address: str, username: str, *, peer: str, now_s: float) -> None:
    """Count a failed login; the failure that reaches a limit is audited as ``login.lockout``."""
    from kalena_web.policy.services import audit_record

    for kind, key, limit in _counters(address, username):
        entry = cache.get(key)
        if not entry or now_s - entry["since_s"] > WINDOW_S:
            entry = {"count": 0, "since_s": now_s}
        entry["count"] += 1
        cache.set(key, entry, timeout=int(WINDOW_S) + 60)
        if entry["count"] == limit:
            audit_record(actor_kind="user", actor=f"{username[:100] or '(no user name)'} from {address}",
                         action="login.lockout", target=(f"account {username[:100]}" if kind == "account"
                                                         else f"every account, from {address}"),
                         after={"scope": kind, "client_address": address, "client_network": client_network(address),
                                "peer": peer, "failures": entry["count"],
                                "account_exists": _account_id(username) is not None, "since_s": entry["since_s"],
                                "until_s": entry["since_s"] + WINDOW_S})


def login_success_record(address: str, username: str) -> None:
    """Clear the client's failures for the account it just signed in to."""
    for kind, key, _ in _counters(address, username):
        if kind == "account":
            cache.delete(key)


class ThrottledLoginView(LoginView):
    """Django's login view, refusing attempts while this client is locked out (module doc)."""

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        username = submitted_username(request.POST.get("username", ""))
        wait_s, scope = login_locked_for_s(request_client_address(request), username, now_s=time.time())
        if wait_s > 0:
            login_refusals().labels(scope=scope).inc()
            minutes = math.ceil(wait_s / 60)
            what = "for this account from your address" if scope == "account" else "from your address"
            locked = (f"Too many failed logins {what}: try again in {minutes} minute{'' if minutes == 1 else 's'}. "
                      "The password was not checked.")
            response = self.render_to_response(self.get_context_data(locked=locked), status=429)
            response["Retry-After"] = str(math.ceil(wait_s))
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form):
        username = submitted_username(self.request.POST.get("username", ""))
        login_failure_record(request_client_address(self.request), username,
                             peer=self.request.META.get("REMOTE_ADDR", ""), now_s=time.time())
        return super().form_invalid(form)

    def form_valid(self, form):
        login_success_record(request_client_address(self.request), form.get_user().get_username())
        return super().form_valid(form)
