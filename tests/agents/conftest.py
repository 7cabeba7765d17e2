"""Fixtures for the agent tests: real cgroups (v1 here), temp-dir cgroupfs trees (v1 and v2
layouts), the private Docker engine ``scripts/services up`` starts, and small real servers
(HTTP for kubelet/cAdvisor fixtures, WebSocket for the link).

A real facility that is missing fails the test with the reason — never a skip.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agents.bench.harness import CgroupHarness
from agents.errors import FacilityUnavailable

PROJECT_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def load_fixture(name: str) -> dict:
    """A hand-written JSON fixture; its ``_source`` key cites the document it follows."""
    doc = json.loads((FIXTURES / name).read_text())
    assert doc.pop("_source", "").startswith("http"), f"{name} must cite the document it is written from"
    return doc


@pytest.fixture
def harness() -> Iterator[CgroupHarness]:
    """Real cgroup v1 groups under /sys/fs/cgroup, removed (with their processes) afterwards."""
    try:
        h = CgroupHarness("/sys/fs/cgroup", prefix="kalena-test")
    except FacilityUnavailable as exc:
        pytest.fail(f"real cgroups are required for this test: {exc}")
    if h.unified is None:
        h.cleanup()
        pytest.fail("per-group PSI needs the cgroup v2 hierarchy at /sys/fs/cgroup/unified (hybrid mode)")
    try:
        yield h
    finally:
        h.cleanup()


def make_v2_tree(root: Path, groups: dict[str, dict[str, str]]) -> Path:
    """A temp-dir cgroup v2 layout: ``root/cgroup.controllers`` plus one dir per group with the
    given files (name → text)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory io\n")
    for rel, files in groups.items():
        d = root / rel
        d.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (d / name).write_text(text)
    return root


def v2_files(*, usage_usec: int = 0, memory_bytes: int = 0, inactive_file: int = 0, procs: str = "",
             cpu_max: str = "max 100000", nr_periods: int = 0, nr_throttled: int = 0,
             throttled_usec: int = 0) -> dict[str, str]:
    return {
        "cpu.stat": f"usage_usec {usage_usec}\nuser_usec {usage_usec}\nsystem_usec 0\n"
                    f"nr_periods {nr_periods}\nnr_throttled {nr_throttled}\nthrottled_usec {throttled_usec}\n",
        "cpu.max": cpu_max + "\n", "cpu.weight": "100\n",
        "memory.current": f"{memory_bytes}\n",
        "memory.stat": f"anon {memory_bytes - inactive_file}\nfile {inactive_file}\ninactive_file {inactive_file}\n",
        "memory.high": "max\n", "memory.max": "max\n", "cgroup.procs": procs,
        "io.stat": "8:0 rbytes=0 wbytes=0 rios=0 wios=0 dbytes=0 dios=0\n",
    }


class JsonServer:
    """A real local HTTP server answering GET paths from a dict (path → JSON-able or bytes)."""

    def __init__(self) -> None:
        self.routes: dict[str, object] = {}
        self.requests: list[tuple[str, str, dict[str, str], bytes]] = []
        self.status: dict[str, int] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.requests.append((self.command, self.path, dict(self.headers), body))
                path = self.path
                if path not in server.routes:
                    path = self.path.split("?")[0]
                if path not in server.routes:
                    self.send_response(404)
                    self.end_headers()
                    return
                payload = server.routes[path]
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(server.status.get(path, 200))
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PATCH = _answer

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def json_server() -> Iterator[JsonServer]:
    server = JsonServer()
    try:
        yield server
    finally:
        server.close()


def docker_socket() -> str:
    return os.environ.get("KALENA_TEST_DOCKER_HOST") or f"unix://{PROJECT_ROOT / 'var' / 'dockerd' / 'docker.sock'}"


@pytest.fixture(scope="session")
def docker_client():
    """The private Docker engine started by ``scripts/services up`` (fails with the reason if it
    is not running or lacks the kalena/busybox:test image)."""
    import docker

    url = docker_socket()
    try:
        client = docker.DockerClient(base_url=url, timeout=60)
        client.ping()
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"the private Docker engine is not reachable at {url} ({exc}); run ./scripts/services up "
                    "(./scripts/test does) or set KALENA_TEST_DOCKER_HOST")
    try:
        client.images.get("kalena/busybox:test")
    except docker.errors.ImageNotFound:
        pytest.fail("image kalena/busybox:test is missing; ./scripts/services up imports it from busybox-static")
    yield client
    client.close()
