"""Tester 10c: ``KubernetesOrchestrator._raw``'s one deadline (254202d) re-checked by counting
what the server had to send: the deadline is only looked at after ``resp.stream(64 KiB)`` yields
a chunk, and a Content-Length body is yielded in one chunk once all of it (≤ 64 KiB) is in —
so the client waits for the whole trickling body and only then raises."""

from __future__ import annotations

import socket
import threading
import time

import kubernetes.client as k8s
import pytest

from agents.orchestrators import OrchestratorError
from agents.orchestrators.kubernetes.client import KubernetesOrchestrator

BODY = (b'{"metadata": {"name": "p", "namespace": "batch"}, "spec": {"nodeName": "n1"}, "pad": "'
        + b"x" * 500 + b'"}')


def _trickling_server(byte_every_s: float) -> tuple[socket.socket, int, list[int]]:
    """Answers one request: 200 and headers at once, then ``BODY`` one byte every
    ``byte_every_s``; ``sent`` gets how many body bytes went out before the client hung up."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    sent: list[int] = []

    def serve() -> None:
        conn, _ = srv.accept()
        conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(BODY)).encode() + b"\r\n\r\n")
        n = 0
        try:
            for i in range(len(BODY)):
                conn.sendall(BODY[i:i + 1])
                n += 1
                time.sleep(byte_every_s)
        except OSError:
            pass
        sent.append(n)
        conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1], sent


def test_a_trickling_answer_is_abandoned_at_the_deadline_not_after_all_of_it_came() -> None:
    """``pod_node`` with a 0.5 s request timeout; the ~580-byte answer comes one byte every
    10 ms (~6 s in all). Observed: OrchestratorError is raised, but only after the server sent
    every byte (the call lasted ~6 s = 12 × the timeout; a body that trickles for an hour holds
    the pass — and its lease — for an hour). Expected: the client hangs up at about the deadline,
    long before the last byte (< half of the body sent)."""
    srv, port, sent = _trickling_server(0.01)
    try:
        orch = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=f"http://127.0.0.1:{port}")),
                                      request_timeout_s=0.5)
        with pytest.raises(OrchestratorError):
            orch.pod_node("batch/p")
        for _ in range(300):  # the server notices the hang-up on its next send
            if sent:
                break
            time.sleep(0.05)
        assert sent and sent[0] < len(BODY) // 2, \
            f"the client read {sent[0] if sent else '?'} of {len(BODY)} bytes before giving up"
    finally:
        srv.close()
