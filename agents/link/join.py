"""The agent's node credential from a join (the console's ``POST /agent/v1/join``,
:mod:`kalena_web.telemetry.join`).

With ``--join-secret-file`` and no ``--link-token-file``, the agent's token is
``<state dir>/link.token``: read from there when it exists; otherwise the agent joins once —
presents the stack's join secret and its node name — and writes the node token it receives
there (mode 0600, written to a temporary file and renamed, so a crash never leaves half a
token). From then on only that token is used; the join secret is not sent again while it exists.
A revoked token is not replaced by itself: the console refuses the connection (``revoked_token``)
until an operator removes ``link.token`` (or the state volume) so the node joins anew.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("kalena.agent.link")

TOKEN_FILE = "link.token"


class JoinFailed(OSError):
    """A join that did not give a token (an OSError, so the link client logs it and retries
    with its backoff): ``reason`` is the console's (``bad_join_secret``, ``unknown_node``,
    ``already_joined``, ``rate_limited``, ``join_disabled``…) or ``unreachable``."""

    def __init__(self, reason: str, detail: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(f"join refused ({reason}): {detail}")
        self.reason, self.detail, self.retry_after_s = reason, detail, retry_after_s


def join_url(link_url: str) -> str:
    """``ws://console:8000/agent/v1/ws`` → ``http://console:8000/agent/v1/join`` (wss → https)."""
    parts = urllib.parse.urlsplit(link_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    path = parts.path.rsplit("/", 1)[0] + "/join" if parts.path.endswith("/ws") else "/agent/v1/join"
    return urllib.parse.urlunsplit((scheme, parts.netloc, path, "", ""))


class JoinedToken:
    """Callable token source for :class:`~agents.link.client.LinkClient` (module doc).

    Args:
        link_url: the console's agent WebSocket URL (the join URL is derived: :func:`join_url`).
        node: this node's name as the console knows it (engine ID or node label).
        secret_file: file holding the join secret (read at each join attempt).
        state_dir: where ``link.token`` is kept.
        timeout_s: HTTP timeout of one join request.
        refused_wait_s: after a refusal that will not pass by itself (wrong secret, already
            joined, joining disabled), no new request for this many seconds (the link's own
            backoff is shorter); ``Retry-After`` is honoured for the others.

    Raises (when called): :class:`JoinFailed`.
    """

    def __init__(self, *, link_url: str, node: str, secret_file: str, state_dir: str, timeout_s: float = 10.0,
                 refused_wait_s: float = 60.0, ssl_context=None, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.url = join_url(link_url)
        self.node, self.secret_file = node, secret_file
        self.path = Path(state_dir) / TOKEN_FILE
        self.timeout_s, self.refused_wait_s = timeout_s, refused_wait_s
        self.ssl_context, self.monotonic = ssl_context, monotonic
        self.not_before = 0.0
        self.last: JoinFailed | None = None
        self.joins = 0

    def __call__(self) -> str:
        try:
            token = self.path.read_text().strip()
        except FileNotFoundError:
            token = ""
        if token:
            return token
        if self.monotonic() < self.not_before and self.last is not None:
            raise self.last
        try:
            return self._join()
        except JoinFailed as failed:
            wait = failed.retry_after_s if failed.retry_after_s is not None else (
                self.refused_wait_s if failed.reason in ("bad_join_secret", "already_joined", "join_disabled",
                                                         "bad_request", "unknown_cluster") else 0.0)
            self.not_before, self.last = self.monotonic() + wait, failed
            raise

    def _join(self) -> str:
        try:
            secret = Path(self.secret_file).read_text().strip()
        except OSError as exc:
            raise JoinFailed("no_join_secret", f"--join-secret-file {self.secret_file}: {exc.strerror or exc}") from None
        request = urllib.request.Request(self.url, data=json.dumps({"node": self.node}).encode(), method="POST",
                                         headers={"Authorization": f"Bearer {secret}",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=self.ssl_context) as response:
                body = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                answer = json.loads(exc.read() or b"{}")
            except ValueError:
                answer = {}
            retry = exc.headers.get("Retry-After")
            raise JoinFailed(str(answer.get("error") or f"http_{exc.code}"),
                             str(answer.get("detail") or exc.reason)[:500],
                             retry_after_s=float(retry) if retry and retry.isdigit() else None) from None
        except (OSError, ValueError) as exc:
            raise JoinFailed("unreachable", f"{self.url}: {exc}") from None
        token = body.get("token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise JoinFailed("bad_answer", f"{self.url} answered without a token")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(TOKEN_FILE + ".new")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(token + "\n")
        os.replace(temporary, self.path)
        self.joins += 1
        log.info("link: node %s joined cluster %s (token %s…, kept in %s)", self.node, body.get("cluster"),
                 token[:12], self.path)
        return token
