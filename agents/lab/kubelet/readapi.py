"""The kubelet's read API the agent uses, on the node's address and the kubelet's port (plain
HTTP; a bearer token is accepted and not checked): ``GET /pods`` (``v1.PodList``),
``GET /stats/summary`` (``stats/v1alpha1`` Summary), ``GET /healthz`` (``ok``)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ReadAPI:
    """Serve ``kubelet``'s read API on ``address:port`` (a context manager; ``port=0`` picks one)."""

    def __init__(self, kubelet: Any, address: str, port: int) -> None:
        self.kubelet = kubelet
        self.server = ThreadingHTTPServer((address, port), self._handler())
        self.server.daemon_threads = True

    @property
    def port(self) -> int:
        return self.server.server_address[1]

    def start(self) -> ReadAPI:
        threading.Thread(target=self.server.serve_forever, name="kubelet-read-api", daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> ReadAPI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler(self):
        kubelet = self.kubelet

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # the agent polls every few seconds: no access log
                pass

            def _send(self, code: int, body: bytes, ctype: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0].rstrip("/")
                try:
                    if path == "/pods":
                        return self._send(200, json.dumps(kubelet.pod_list()).encode(), "application/json")
                    if path == "/stats/summary":
                        return self._send(200, json.dumps(kubelet.summary()).encode(), "application/json")
                    if path == "/healthz":
                        ok = kubelet.healthy()
                        return self._send(200 if ok else 503, b"ok" if ok else b"not ready", "text/plain")
                    return self._send(404, b"404 page not found\n", "text/plain")
                except Exception as exc:  # noqa: BLE001 - answer 500 rather than drop the connection
                    return self._send(500, f"{type(exc).__name__}: {exc}\n".encode(), "text/plain")

        return Handler
