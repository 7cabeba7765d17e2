"""Which application answers a request of ``kalena serve``: the console's, or — for a request
that arrived on the hooks listener (:mod:`kalena_web.kubehooks.listener`) — the hooks' alone.
Pure ASGI (no Twisted): :mod:`kalena_web.asgi` builds its application from it."""

from __future__ import annotations

import json
import logging

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler

log = logging.getLogger(__name__)

#: The URL map of the hooks listener (the webhook and the extender views only).
HOOKS_URLCONF = "kalena_web.kubehooks.urls"
#: The only path prefix the hooks listener hands to Django.
HOOKS_PREFIX = "/kubernetes/"
#: The scope key that marks a request as arrived on the hooks listener (set by
#: :class:`~kalena_web.kubehooks.listener.KalenaServer`, never by anything a client sends).
LISTENER_KEY = "kalena_listener"


def record_refusal(**refusal: str) -> None:
    """:func:`~kalena_web.kubehooks.services.hooks_refusal_record` from outside a request (a worker
    thread of the listener): a failure (the database down) is logged, never raised, and the
    thread's database connection is closed."""
    from django.db import connections

    from kalena_web.kubehooks.services import hooks_refusal_record

    try:
        hooks_refusal_record(**refusal)
    except Exception:  # noqa: BLE001 - recording must never break the listener
        log.exception("hooks listener: could not record a refusal %s", refusal)
    finally:
        connections.close_all()


class HooksHandler(ASGIHandler):
    """Django's ASGI handler resolving with :data:`HOOKS_URLCONF` (the hooks' views only)."""

    def create_request(self, scope, body_file):
        request, error = super().create_request(scope, body_file)
        if request is not None:
            request.urlconf = HOOKS_URLCONF
        return request, error


class ListenerRouter:
    """The ASGI application of ``kalena serve``: a request from the hooks listener goes to
    ``hooks`` when its path is under ``/kubernetes/`` (anything else there is a 404, and a
    WebSocket is closed); every other request goes to ``console`` (whose URL map has no
    ``/kubernetes/`` route)."""

    def __init__(self, *, console, hooks) -> None:
        self.console, self.hooks = console, hooks

    async def __call__(self, scope, receive, send):
        if scope.get(LISTENER_KEY) != "hooks":
            return await self.console(scope, receive, send)
        if scope["type"] == "http" and scope["path"].startswith(HOOKS_PREFIX):
            return await self.hooks(scope, receive, send)
        tls = (scope.get("extensions") or {}).get("tls") or {}
        client = scope.get("client") or ("", "")
        await sync_to_async(record_refusal, thread_sensitive=False)(
            endpoint="other", reason="not_a_hook", peer=f"{client[0]}:{client[1]}",
            client=tls.get("client_cert_name") or "anonymous", detail=f"{scope['type']} {scope.get('path', '')[:200]}")
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return None
        if scope["type"] != "http":
            return None
        body = json.dumps({"detail": f"not found: this port serves only {HOOKS_PREFIX}… (the admission webhook "
                                     "and the scheduler extender)"}).encode()
        await send({"type": "http.response.start", "status": 404,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
        return None
