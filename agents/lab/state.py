"""The lab's record on disk (``<state dir>/lab.json``) and the processes it names.

``up`` writes the record before it starts anything and after every piece it starts, so ``down``
(and the roll-back of a failed ``up``) finds everything even when ``up`` died half-way. A
process is named by pid *and* its start time (``/proc/<pid>/stat`` field 22), so a pid reused
by another program is never signalled; a zombie counts as gone.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

STATE_FILE = "lab.json"


def state_path(state_dir: Path) -> Path:
    return Path(state_dir) / STATE_FILE


def state_read(state_dir: Path) -> dict[str, Any] | None:
    """The record, or ``None`` when no lab is recorded in ``state_dir``."""
    path = state_path(state_dir)
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def state_write(state_dir: Path, state: dict[str, Any]) -> None:
    """Write the record atomically (a reader never sees half of it)."""
    path = state_path(state_dir)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)


def process_ref(pid: int, proc_root: str = "/proc") -> dict[str, int]:
    """``{"pid", "start"}`` for a process just started (its start time in clock ticks)."""
    return {"pid": pid, "start": _start_ticks(pid, proc_root) or 0}


def _stat_fields(pid: int, proc_root: str) -> list[str] | None:
    try:
        text = Path(f"{proc_root}/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # the command name is in parentheses and may hold spaces: split after its closing one
    return text[text.rindex(")") + 2:].split()


def _start_ticks(pid: int, proc_root: str) -> int | None:
    fields = _stat_fields(pid, proc_root)
    return int(fields[19]) if fields else None


def alive(ref: dict[str, int] | None, proc_root: str = "/proc") -> bool:
    """Whether the process ``ref`` names still runs (same pid and start time, not a zombie)."""
    if not ref or not ref.get("pid"):
        return False
    fields = _stat_fields(int(ref["pid"]), proc_root)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return not ref.get("start") or int(fields[19]) == int(ref["start"])


def stop(ref: dict[str, int] | None, *, timeout_s: float = 20.0) -> bool:
    """SIGTERM the process ``ref`` names, SIGKILL it after ``timeout_s``; returns whether it is gone."""
    if not alive(ref):
        return True
    pid = int(ref["pid"])  # type: ignore[index]
    for sig, wait_s in ((signal.SIGTERM, timeout_s), (signal.SIGKILL, 10.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        end = time.monotonic() + wait_s
        while time.monotonic() < end:
            _reap(pid)
            if not alive(ref):
                return True
            time.sleep(0.1)
    return not alive(ref)


def _reap(pid: int) -> None:
    """Collect ``pid``'s exit status when it is our own child (``up`` rolling back)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
