"""Whose request it is: the client's address, behind a reverse proxy too (docs/design.md §12).

Behind a proxy every request's peer is the proxy. The proxy names the client in a header
(``KALENA_TRUSTED_PROXY_HEADER``, e.g. ``X-Forwarded-For: <client>, <proxy 1>``, each proxy
appending the address it received the request from); that header is believed only when the peer
is one of ``KALENA_TRUSTED_PROXIES`` — anyone else can send it too. Read right to left, the
first address that is not a trusted proxy is the client: what a client wrote into the header
itself stands left of what the proxies appended, so it is never taken while a trusted proxy
appended an address after it.

Example, trusted ``10.0.0.0/8``: peer ``10.1.2.3`` with ``X-Forwarded-For: 6.6.6.6, 203.0.113.5,
10.9.9.9`` → ``203.0.113.5`` (``10.9.9.9`` is a trusted proxy, ``6.6.6.6`` the client's own
claim); peer ``192.0.2.9`` with the same header → ``192.0.2.9`` (not a trusted proxy: header
ignored).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from django.conf import settings
from django.http import HttpRequest


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:           # [v6]:port
        text = text[1:text.index("]")]
    elif text.count(":") == 1:                         # v4:port
        text = text.split(":", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def client_address(peer: str, forwarded: str | None, *, trusted: Sequence[str]) -> str:
    """The client's address for a request from ``peer`` carrying ``forwarded`` (the trusted
    proxy header's value, comma-separated addresses; None when absent) — see the module doc.

    ``trusted`` are networks (``"10.0.0.0/8"``). An entry that is not an address ends the walk
    at the last good address (a proxy would not write one; a client may). Returns ``peer``
    (or ``"unknown"`` when there is none) when the header is not to be believed.
    """
    peer = peer or "unknown"
    networks = [ipaddress.ip_network(n) for n in trusted]

    def is_trusted(address) -> bool:
        return address is not None and any(address.version == n.version and address in n for n in networks)

    if not forwarded or not is_trusted(_address(peer)):
        return peer
    client = peer
    for entry in reversed(forwarded.split(",")):
        address = _address(entry)
        if address is None:
            break
        client = str(address)
        if not is_trusted(address):
            break
    return client


def client_network(address: str) -> str:
    """The network one client holds, as its throttling counts it: an IPv6 address's ``/64`` (a
    host is given a whole /64 — SLAAC, privacy addresses — and picks a new address in it at
    will), an IPv4-mapped IPv6 address as the IPv4 address it maps, any other address (and
    anything that is not one, e.g. ``"unknown"``) as itself.

    Example: ``2001:db8:5:6::1`` and ``2001:db8:5:6::ff`` → ``2001:db8:5:6::/64``;
    ``::ffff:192.0.2.44`` → ``192.0.2.44``.
    """
    parsed = _address(address)
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed) if parsed is not None else address


def request_client_address(request: HttpRequest) -> str:
    """:func:`client_address` of a Django request, with the project's settings."""
    header = settings.KALENA_TRUSTED_PROXY_HEADER
    forwarded = request.META.get("HTTP_" + header.upper().replace("-", "_")) if header else None
    return client_address(request.META.get("REMOTE_ADDR", ""), forwarded, trusted=settings.KALENA_TRUSTED_PROXIES)


def scope_client_address(scope: dict) -> str:
    """:func:`client_address` of an ASGI connection scope (the agents' WebSocket)."""
    header = settings.KALENA_TRUSTED_PROXY_HEADER.lower().encode()
    forwarded = None
    if header:
        values = [v.decode("latin-1") for k, v in scope.get("headers") or () if k.lower() == header]
        forwarded = ",".join(values) or None
    peer = scope.get("client") or ("", 0)
    return client_address(peer[0] or "", forwarded, trusted=settings.KALENA_TRUSTED_PROXIES)
