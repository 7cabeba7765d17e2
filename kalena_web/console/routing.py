"""Console WebSocket routes: session-authenticated, same-host origin only."""

from channels.auth import AuthMiddlewareStack
from channels.security.websocket import AllowedHostsOriginValidator
from django.urls import path

from kalena_web.console.consumers import NodeLiveConsumer

websocket_urlpatterns = [
    path("ws/nodes/<int:node_id>/", AllowedHostsOriginValidator(AuthMiddlewareStack(NodeLiveConsumer.as_asgi()))),
]
