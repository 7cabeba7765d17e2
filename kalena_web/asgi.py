"""ASGI entry point for HTTP and WebSockets (Daphne: ``daphne kalena_web.asgi:application``).

WebSocket routes come from each app's ``routing.py``: node agents authenticate with their
per-node bearer token and send no Origin header; console pages use the session and must come
from an allowed host (the console's routes wrap themselves accordingly).

A request that arrived on the hooks listener of ``kalena serve --tls-port`` (mutual TLS) is
answered by the hooks' URL map alone; every other request by the console's, which has no
``/kubernetes/`` route (:class:`kalena_web.kubehooks.routing.ListenerRouter`).
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "kalena_web.settings")
django_http = get_asgi_application()  # sets Django up before the routing modules import models

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from kalena_web.console.routing import websocket_urlpatterns as console_routes  # noqa: E402
from kalena_web.kubehooks.routing import HooksHandler, ListenerRouter  # noqa: E402
from kalena_web.telemetry.routing import agent_routes  # noqa: E402

application = ListenerRouter(
    console=ProtocolTypeRouter({
        "http": django_http,
        "websocket": URLRouter([*agent_routes(), *console_routes]),
    }),
    hooks=HooksHandler(),
)
