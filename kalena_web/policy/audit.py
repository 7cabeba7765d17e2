"""Who is acting, for the audit log (docs/design.md §12): a console or API request's user, else the
process's own actor (a loop, an agent, the command line).

:class:`AuditActorMiddleware` keeps the current request in a context variable; :func:`audit`
(what services call beside their own writes) reads the user from it at the moment of the write
— ``request.auth`` for the REST API's bearer tokens, ``request.user`` for console sessions.
Outside a request the caller names the actor (``loop``/``agent``) or it is ``cli``.
"""

from __future__ import annotations

import contextvars
from typing import Any

_request: contextvars.ContextVar[Any] = contextvars.ContextVar("kalena_audit_request", default=None)


class AuditActorMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)


def _request_user() -> str | None:
    request = _request.get()
    if request is None:
        return None
    for user in (getattr(request, "auth", None), getattr(request, "user", None)):
        if getattr(user, "is_authenticated", False):
            return user.get_username()
    return None


def audit(action: str, *, cluster_name: str = "", target: str = "", before: Any = None, after: Any = None,
          actor_kind: str = "", actor: str = "") -> None:
    """Append an audit entry; the actor is the request's user when there is one, else
    ``actor_kind``/``actor`` as given (default: the command line)."""
    from kalena_web.policy.services import audit_record

    user = _request_user()
    if user is not None:
        actor_kind, actor = "user", user
    audit_record(actor_kind=actor_kind or "user", actor=actor or "cli", action=action, cluster_name=cluster_name,
                 target=target, before=before, after=after)
