"""WebSocket consumers for console pages (session-authenticated)."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from kalena_web.inventory.models import Node
from kalena_web.ledger.live import node_group


class NodeLiveConsumer(AsyncJsonWebsocketConsumer):
    """Streams a live node's ledger points (:mod:`kalena_web.ledger.live`) to its page.

    Anonymous users and unknown or non-live nodes are refused (the socket closes with 4403 /
    4404) and nothing is subscribed.
    """

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=4403)
            return
        node_id = int(self.scope["url_route"]["kwargs"]["node_id"])
        if not await self._live_node_exists(node_id):
            await self.close(code=4404)
            return
        self.group = node_group(node_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def ledger_update(self, event: dict) -> None:
        await self.send_json(event["point"])

    @database_sync_to_async
    def _live_node_exists(self, node_id: int) -> bool:
        return Node.objects.filter(id=node_id, cluster__kind="live").exists()
