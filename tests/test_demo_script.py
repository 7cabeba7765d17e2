"""``./scripts/demo`` as a newcomer and as CI run it: ``--no-serve`` exits 0 with the login and
starts nothing (no lab, no process left); serving with ``--no-lab`` says plainly why there is no
live cluster and Ctrl-C stops everything it started. (The lab itself, which needs root, cgroups and
minutes, is exercised by the lab's own tests; the demo calls ``kalena lab up/play/down`` as a user
would.)"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(KALENA_DB_PATH=str(tmp_path / "kalena.sqlite3"), PYTHONUNBUFFERED="1")
    return env


def _session_alive(sid: int) -> list[str]:
    out = subprocess.run(["ps", "-eo", "sid=,pid=,args="], capture_output=True, text=True, check=True).stdout
    return [line for line in out.splitlines() if line.split()[0] == str(sid)]


def test_no_serve_exits_0_with_the_login_and_leaves_nothing_running(tmp_path: Path) -> None:
    proc = subprocess.Popen([str(ROOT / "scripts" / "demo"), "--no-serve", "--hours", "1", "--no-progress"],
                            cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    out, _ = proc.communicate(timeout=1800)
    assert proc.returncode == 0, out[-2000:]
    assert "user: demo  password: " in out and "not serving (--no-serve)" in out
    assert "lab cluster" not in out  # --no-serve never starts the lab
    assert not _session_alive(proc.pid)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serving_without_the_lab_says_why_and_ctrl_c_stops_it(tmp_path: Path) -> None:
    port = _free_port()
    # a terminal's Ctrl-C reaches a process whose SIGINT is live; a suite started in the background
    # (`.ci/run &`) inherits SIGINT ignored, which exec keeps: restore it as a terminal has it
    proc = subprocess.Popen([str(ROOT / "scripts" / "demo"), "--no-lab", "--port", str(port), "--hours", "1",
                             "--no-progress"], cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("kalena serve: console on"):
                break
        text = "".join(lines)
        # keep reading what the server prints: a pipe nobody reads fills (64 KiB) and blocks the
        # server on its next log line, which would look like Ctrl-C not stopping it
        drain = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
        drain.start()
        assert "no live lab cluster: --no-lab (or KALENA_DEMO_LAB=0) was given" in text, text[-2000:]
        # the line comes as the server starts; wait until it *answers* a request, not until its socket
        # accepts: the kernel accepts connections on a listening socket before the server's event loop
        # runs (and installs its SIGINT handler), and a Ctrl-C in that window was not acted on
        deadline = time.monotonic() + 90
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/livez", timeout=30).close()
                break  # the replay's console answers
            except urllib.error.HTTPError:
                break  # an answer all the same
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.5)
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal: the whole foreground group
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGUSR1)  # the server's every thread's stack (faulthandler), then fail
            time.sleep(3)
            raise AssertionError("Ctrl-C did not stop the demo in 120 s; it printed (last, its threads' "
                                 "stacks):\n" + "".join(lines)[-12000:]) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _session_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _session_alive(proc.pid)
