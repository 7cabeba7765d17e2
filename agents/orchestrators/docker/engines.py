"""The list of engines (nodes) from configuration (pure: text in, :class:`EngineConfig` out).

``KALENA_DOCKER_ENGINES`` is a comma-separated list of ``[node=]url``:

* ``unix:///run/docker.sock`` — a local engine, node named by the engine (``docker info`` Name);
* ``node-b=tcp://10.0.0.12:2376`` — a remote engine over TCP, node ``node-b``. TCP needs TLS
  (``KALENA_DOCKER_TLS_CA``, ``KALENA_DOCKER_TLS_CERT``, ``KALENA_DOCKER_TLS_KEY``, as
  ``DOCKER_CERT_PATH``'s ``ca.pem``/``cert.pem``/``key.pem``) unless the host is a loopback
  address; ``KALENA_DOCKER_TLS_VERIFY=0`` keeps TLS without checking the engine's certificate.

Unset: ``DOCKER_HOST``, else ``unix:///var/run/docker.sock`` (one engine).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


NODE_NAME = re.compile(r"[a-z0-9]([-.a-z0-9]{0,251}[a-z0-9])?")
LOOPBACK = ("127.", "localhost", "[::1]")


@dataclass(frozen=True)
class EngineConfig:
    """One engine: ``url`` is ``unix:///path/docker.sock`` or ``tcp://host:2376``; ``node`` the
    node's name (empty: the engine's own ``Name``); TLS files for TCP (``tls_verify`` checks the
    engine's certificate against ``tls_ca``)."""

    url: str
    node: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_verify: bool = True
    timeout_s: float = 30.0


class EngineConfigError(ValueError):
    """A malformed engine list; the message names the entry and what is accepted."""


def parse_engines(env: Mapping[str, str]) -> list[EngineConfig]:
    """Engines from ``env`` (see module doc).

    Raises:
        EngineConfigError: an entry that is not ``[node=]unix://…`` or ``[node=]tcp://host:port``,
            a bad node name, a name or URL given twice, or TCP to a non-loopback host without TLS.

    Example: ``{"KALENA_DOCKER_ENGINES": "a=unix:///v/a.sock,b=unix:///v/b.sock"}`` →
    ``[EngineConfig("unix:///v/a.sock", "a"), EngineConfig("unix:///v/b.sock", "b")]``.
    """
    text = env.get("KALENA_DOCKER_ENGINES", "").strip()
    if not text:
        text = env.get("DOCKER_HOST", "").strip() or "unix:///var/run/docker.sock"
    tls = {k: env.get(f"KALENA_DOCKER_TLS_{k.upper()}", "").strip() for k in ("ca", "cert", "key")}
    verify = env.get("KALENA_DOCKER_TLS_VERIFY", "1").strip().lower() not in ("0", "false", "no")
    out: list[EngineConfig] = []
    for i, raw in enumerate(part.strip() for part in text.split(",")):
        where = f"KALENA_DOCKER_ENGINES entry {i + 1} ({raw!r})"
        if not raw:
            raise EngineConfigError(f"{where}: empty (accepted: [node=]unix:///path or [node=]tcp://host:port)")
        node, _, url = raw.rpartition("=") if "=" in raw.split("://", 1)[0] else ("", "", raw)
        if node and not NODE_NAME.fullmatch(node):
            raise EngineConfigError(f"{where}: node name {node!r} is not a DNS-1123 name")
        if url.startswith("unix://"):
            if len(url) <= len("unix://"):
                raise EngineConfigError(f"{where}: no socket path")
        elif url.startswith("tcp://"):
            host = url[len("tcp://"):]
            if not re.fullmatch(r"[^/:]+(:\d{1,5})?/?|\[[0-9a-fA-F:]+\](:\d{1,5})?/?", host):
                raise EngineConfigError(f"{where}: {url!r} is not tcp://host:port")
            if not host.startswith(LOOPBACK) and not (tls["ca"] or tls["cert"]):
                raise EngineConfigError(f"{where}: TCP to a remote engine needs TLS (set KALENA_DOCKER_TLS_CA, "
                                        "KALENA_DOCKER_TLS_CERT and KALENA_DOCKER_TLS_KEY)")
            if bool(tls["cert"]) != bool(tls["key"]):
                raise EngineConfigError("KALENA_DOCKER_TLS_CERT and KALENA_DOCKER_TLS_KEY go together")
        else:
            raise EngineConfigError(f"{where}: accepted: [node=]unix:///path or [node=]tcp://host:port")
        out.append(EngineConfig(url=url, node=node, tls_ca=tls["ca"], tls_cert=tls["cert"], tls_key=tls["key"],
                                tls_verify=verify))
    for key in ("url", "node"):
        values = [getattr(c, key) for c in out if getattr(c, key)]
        dup = {v for v in values if values.count(v) > 1}
        if dup:
            raise EngineConfigError(f"KALENA_DOCKER_ENGINES: {key} {sorted(dup)[0]!r} given twice")
    return out
