"""Publishing live ledger changes to console pages over Channels (docs/design.md §1: the node page's
four-series chart updates as samples arrive).

The estimation loop calls :func:`publish_node_ledgers` after the commit that changed the
ledgers; :class:`kalena_web.console.consumers.NodeLiveConsumer` forwards each point to the
browsers watching that node. A point carries, in internal units: the vectors (``null`` =
unconstrained) capacity, aggregate limits, requests, reservations, usage (Σ u) and batch usage
(Σ u of batch; ``null`` when the ledger has none yet), and ``batch_throttled``, the batch pods'
cpu throttling rate in mcpu (``null`` = not measured).
"""

from __future__ import annotations

from collections.abc import Iterable

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from kalena_web.inventory.fields import encode_vector
from kalena_web.ledger.models import LiveNodeLedger


def node_group(node_id: int) -> str:
    """The Channels group of browsers watching node ``node_id``."""
    return f"kalena.node.{node_id}"


def ledger_point(ledger: LiveNodeLedger, *, limits: list[float]) -> dict:
    """One chart point for a live node ledger (see module doc); ``limits`` is Σ limits."""
    add = [a + b for a, b in zip(ledger.prod_request, ledger.batch_request, strict=True)]
    reserved = [a + b for a, b in zip(ledger.prod_reservation, ledger.batch_reservation, strict=True)]
    return {
        "t": ledger.last_sample_s if ledger.last_sample_s is not None else ledger.updated_s,
        "version": ledger.version, "stale": ledger.stale,
        "capacity": encode_vector(ledger.capacity), "limits": encode_vector(limits),
        "requests": encode_vector(add), "reservations": encode_vector(reserved),
        "usage": encode_vector(ledger.usage),
        "batch_usage": None if ledger.batch_usage is None else encode_vector(ledger.batch_usage),
        "batch_throttled": ledger.batch_throttled_mcpu,
    }


def publish_node_ledgers(points: Iterable[tuple[int, dict]]) -> None:
    """Send ``(node id, point)`` pairs to their groups; a missing channel layer is a no-op."""
    layer = get_channel_layer()
    if layer is None:
        return
    send = async_to_sync(layer.group_send)
    for node_id, point in points:
        send(node_group(node_id), {"type": "ledger.update", "point": point})
