"""The node page's live updates: ledger points published after estimation reach the browsers
watching that node over a WebSocket; anonymous users and unknown nodes are refused."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser, User

from kalena_web.console.consumers import NodeLiveConsumer
from kalena_web.ledger.live import ledger_point, publish_node_ledgers
from kalena_web.ledger.models import LiveNodeLedger

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]


def communicator(node_id: int, user) -> WebsocketCommunicator:
    c = WebsocketCommunicator(NodeLiveConsumer.as_asgi(), f"/ws/nodes/{node_id}/")
    c.scope["user"] = user
    c.scope["url_route"] = {"kwargs": {"node_id": node_id}}
    return c


async def test_published_points_reach_the_watching_page(live) -> None:
    user = await sync_to_async(User.objects.create_user)("op", password="x" * 12)
    ledger = await sync_to_async(LiveNodeLedger.objects.select_related("node").get)(node__name="thinkcentre-beta")
    socket = communicator(ledger.node_id, user)
    connected, _ = await socket.connect()
    assert connected
    point = ledger_point(ledger, limits=list(ledger.prod_request))
    await sync_to_async(publish_node_ledgers)([(ledger.node_id, point)])
    got = await socket.receive_json_from(timeout=2)
    assert got["capacity"][0] == ledger.capacity[0] and got["version"] == ledger.version
    assert got["stale"] is False and got["t"] == ledger.last_sample_s  # the fixture's agents have reported
    await socket.disconnect()


async def test_anonymous_and_unknown_nodes_are_refused(live) -> None:
    ledger = await sync_to_async(LiveNodeLedger.objects.first)()
    socket = communicator(ledger.node_id, AnonymousUser())
    connected, code = await socket.connect()
    assert not connected and code == 4403
    user = await sync_to_async(User.objects.create_user)("op2", password="x" * 12)
    socket = communicator(10**9, user)
    connected, code = await socket.connect()
    assert not connected and code == 4404
