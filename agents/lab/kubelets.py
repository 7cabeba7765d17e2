"""The lab's kubelet doubles, one per node in Kubernetes mode: the command line
(``python -m agents.lab.kubelet``, see :mod:`agents.lab.kubelet`), the start recorded in the
node's record (``kubelet``: pid and start time, ``kubelet_url``) and its ``/healthz``.

A node record (``lab.json``'s ``nodes[]``) holds ``name``, ``address``, ``cpu_mcpu``,
``memory_bytes``, ``cgroup``, ``directory`` and ``socket``; the kubelet serves its read API on
``<address>:10250`` (the kubelet's port, one loopback address per node) and writes its log to
``<logs>/kubelet-<node>.log``.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from agents.lab.errors import LabError
from agents.lab.state import alive, process_ref

KUBELET_PORT = 10250


def kubelet_argv(record: dict[str, Any], *, api_server: str, token_file: str | None = None,
                 port: int = KUBELET_PORT, heartbeat_s: float = 10.0) -> list[str]:
    """``python -m agents.lab.kubelet`` for the node ``record``."""
    argv = [sys.executable, "-m", "agents.lab.kubelet", "--node", record["name"], "--api-server", api_server,
            "--docker-host", f"unix://{record['socket']}", "--cgroup-parent", record["cgroup"],
            "--address", record["address"], "--port", str(port), "--cpu-m", str(record["cpu_mcpu"]),
            "--memory-bytes", str(record["memory_bytes"]), "--heartbeat-s", f"{heartbeat_s:g}"]
    if token_file:
        argv += ["--token-file", str(token_file)]
    return argv


def kubelet_launch(record: dict[str, Any], *, api_server: str, logs: Path, token_file: str | None = None,
                   port: int = KUBELET_PORT, heartbeat_s: float = 10.0, cwd: Path | None = None) -> subprocess.Popen:
    """Start the node's kubelet double and record it (``record["kubelet"]``, ``record["kubelet_url"]``);
    :func:`kubelet_ready` waits for it."""
    log_path = Path(logs) / f"kubelet-{record['name']}.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(kubelet_argv(record, api_server=api_server, token_file=token_file, port=port,
                                             heartbeat_s=heartbeat_s),
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=cwd or Path(__file__).resolve().parents[2])
    record["kubelet"] = process_ref(proc.pid)
    record["kubelet_url"] = f"http://{record['address']}:{port}"
    record["kubelet_log"] = str(log_path)
    return proc


def kubelet_health(record: dict[str, Any], timeout_s: float = 3.0) -> str | None:
    """The kubelet's ``/healthz`` body (``ok``), or ``None`` when it does not answer."""
    if not record.get("kubelet_url"):
        return None
    try:
        with urllib.request.urlopen(record["kubelet_url"] + "/healthz", timeout=timeout_s) as r:  # noqa: S310 - loopback
            return r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.read().decode(errors="replace") or f"HTTP {exc.code}"
    except OSError:
        return None


def kubelet_ready(record: dict[str, Any], *, timeout_s: float = 120.0) -> None:
    """Wait until the kubelet answers ``/healthz`` ok (the first start builds the lab's images).

    Raises:
        LabError: it exited, or did not answer ok within ``timeout_s`` (naming its log).
    """
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if not alive(record.get("kubelet")):
            raise LabError(f"the kubelet double exited (see {record.get('kubelet_log')})",
                           source=f"node {record['name']}", field="kubelet")
        if kubelet_health(record) == "ok":
            return
        time.sleep(0.3)
    raise LabError(f"the kubelet double's /healthz is not ok after {timeout_s:.0f} s (see {record.get('kubelet_log')})",
                   source=f"node {record['name']}", field="kubelet")
