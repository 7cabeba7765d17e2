"""Tester 10b: "every API call has a timeout" (issue 10, Deliver 4) re-checked with an answer
whose headers come at once and whose body trickles in: ``KubernetesOrchestrator._raw`` passes
``_request_timeout=request_timeout_s`` (urllib3 applies it to each socket read, not to the
whole answer), so a slow body is waited for as long as it keeps trickling."""

from __future__ import annotations

import json
import socket
import threading
import time

import kubernetes.client as k8s
import pytest

from agents.orchestrators import OrchestratorError
from agents.orchestrators.kubernetes.client import KubernetesOrchestrator

BODY = json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "batch"},
                   "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]},
                   "status": {"phase": "Running"}}).encode()


def _trickling_server(byte_every_s: float) -> tuple[socket.socket, int]:
    """An HTTP/1.1 server that answers every request with 200 and headers at once, then sends the
    body one byte every ``byte_every_s`` (``len(BODY) × byte_every_s`` in all)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                         + str(len(BODY)).encode() + b"\r\n\r\n")
            try:
                for i in range(len(BODY)):
                    conn.sendall(BODY[i:i + 1])
                    time.sleep(byte_every_s)
            except OSError:
                pass
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def test_a_call_whose_answer_trickles_in_gives_up_at_the_request_timeout() -> None:
    """``pod_node`` with a 0.5 s request timeout; the pod's JSON (~200 bytes) comes one byte every
    20 ms, so the answer takes ~4 s in all (8 × the timeout) while no single read waits 0.5 s.
    Observed: the answer is waited for and the call returns ``"n1"``. Expected: the call gives up
    (OrchestratorError), as with an answer that comes late at once (D6's fix for the watch)."""
    srv, port = _trickling_server(0.02)
    try:
        orch = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=f"http://127.0.0.1:{port}")),
                                      request_timeout_s=0.5)
        started = time.monotonic()
        with pytest.raises(OrchestratorError):
            where = orch.pod_node("batch/p")
            pytest.fail(f"answered {where!r} after {time.monotonic() - started:.1f} s with a 0.5 s timeout")
    finally:
        srv.close()
