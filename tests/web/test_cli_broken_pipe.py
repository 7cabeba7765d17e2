"""``kalena batch get C | head``: a reader that leaves early stops the command quietly, as kubectl
does — no ``BrokenPipeError`` traceback on the terminal, the SIGPIPE status (141) for
``set -o pipefail`` — here against a stub console answering 2,000 pods (more than a pipe holds)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PODS = [{"name": f"batch/p-{i}", "state": "pending", "node": None, "priority": 0, "owner": "o",
         "request": {"cpu": 0.5, "ram": 1.0}, "submitted_s": 1.0, "requeues": 0, "binding": None}
        for i in range(2000)]


class _Console(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps(PODS).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def test_a_reader_that_leaves_stops_kalena_batch_get_without_a_traceback() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Console)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    read, write = os.pipe()
    os.close(read)  # `| head -0`: the reader has gone before the first line is written
    env = {**os.environ, "KALENA_SERVER": f"http://127.0.0.1:{server.server_address[1]}", "KALENA_TOKEN": "kal_x"}
    try:
        done = subprocess.run([sys.executable, "-c", "from agents.cli import kalena_main; raise SystemExit(kalena_main())",
                               "batch", "get", "home"], cwd=ROOT, env=env, stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    finally:
        os.close(write)
        server.shutdown()
    assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, done.stderr
    assert done.returncode == 141
