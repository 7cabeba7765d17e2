"""Ctrl-C on `kalena serve` ends the process within a bound even when something keeps running:
the watchdog names what was running and exits 130."""

from __future__ import annotations

import subprocess
import sys


def test_a_stop_that_hangs_is_ended_naming_what_ran() -> None:
    script = ("import threading, time\n"
              "from kalena_web.kubehooks.listener import shutdown_watchdog\n"
              "def stuck_loop_pass():\n    time.sleep(60)\n"
              "threading.Thread(target=stuck_loop_pass).start()   # not a daemon: the interpreter would wait\n"
              "shutdown_watchdog(0.5)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 130
    assert "kalena serve: still stopping after 0.5 s; what was running:" in done.stderr
    assert "stuck_loop_pass" in done.stderr


def test_a_process_that_stops_in_time_never_sees_it() -> None:
    script = ("from kalena_web.kubehooks.listener import shutdown_watchdog\n"
              "shutdown_watchdog(5.0)\nprint('stopped')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and done.stdout == "stopped\n" and "still stopping" not in done.stderr
