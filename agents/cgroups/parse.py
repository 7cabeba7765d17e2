"""Pure parsers for cgroup (v1 and v2) and procfs files. Every function takes the file's text
and a ``source`` (its path, for messages) and raises :class:`~agents.errors.TelemetryError`
naming the source, line and what was expected.

Formats (``Documentation/admin-guide/cgroup-v1/*`` and ``cgroup-v2.rst``):

* flat keyed (``cpu.stat``, ``memory.stat``): ``key value`` per line;
* single value (``memory.usage_in_bytes``, ``cpuacct.usage``, ``cpu.cfs_quota_us``): one integer,
  v2 limits may be ``max``;
* ``cpu.max``: ``"$MAX $PERIOD"`` with ``$MAX`` = ``max`` for no limit;
* v1 ``blkio.throttle.io_service_bytes[_recursive]``: ``"8:0 Read 4096"`` … ``"Total 8192"``;
* v2 ``io.stat``: ``"8:0 rbytes=4096 wbytes=0 rios=1 wios=0 dbytes=0 dios=0"``;
* ``/proc/<pid>/cgroup``: ``"hierarchy-id:controller-list:path"`` (v2: ``"0::/path"``);
* ``/proc/<pid>/net/dev``: two header lines, then ``"iface: rx_bytes … tx_bytes …"``.
"""

from __future__ import annotations

from agents.errors import TelemetryError

MAX = "max"


def parse_flat_keyed(text: str, *, source: str) -> dict[str, int]:
    """``"nr_periods 10\\nnr_throttled 2\\n"`` → ``{"nr_periods": 10, "nr_throttled": 2}``."""
    out: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        parts = raw.split()
        if len(parts) != 2:
            raise TelemetryError(f"expected 'key value', got {raw!r}", source=source, line=number)
        try:
            out[parts[0]] = int(parts[1])
        except ValueError:
            raise TelemetryError(f"value of {parts[0]} is not an integer: {parts[1]!r}",
                                 source=source, line=number) from None
    return out


def parse_int_or_max(text: str, *, source: str) -> int | None:
    """One integer, or ``max`` / a negative number (no limit) → ``None``."""
    value = text.strip()
    if value == MAX:
        return None
    try:
        number = int(value)
    except ValueError:
        raise TelemetryError(f"expected an integer or 'max', got {value!r}", source=source) from None
    return None if number < 0 else number


def parse_int(text: str, *, source: str) -> int:
    """Exactly one integer."""
    value = text.strip()
    try:
        return int(value)
    except ValueError:
        raise TelemetryError(f"expected an integer, got {value!r}", source=source) from None


def parse_cpu_max(text: str, *, source: str) -> tuple[int | None, int]:
    """v2 ``cpu.max`` → ``(quota_us or None for 'max', period_us)``. ``"40000 100000"`` →
    ``(40000, 100000)``."""
    parts = text.split()
    if len(parts) != 2:
        raise TelemetryError(f"expected '$MAX $PERIOD', got {text.strip()!r}", source=source)
    return parse_int_or_max(parts[0], source=source), parse_int(parts[1], source=source)


def format_cpu_max(quota_us: int | None, period_us: int) -> str:
    """Inverse of :func:`parse_cpu_max`: ``(40000, 100000)`` → ``"40000 100000"``."""
    return f"{MAX if quota_us is None else int(quota_us)} {int(period_us)}"


def parse_blkio_bytes(text: str, *, source: str) -> tuple[int, int]:
    """v1 ``blkio.throttle.io_service_bytes_recursive`` → total ``(read_bytes, write_bytes)``
    summed over devices (the ``Total`` line and other ops are ignored)."""
    read = write = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        parts = raw.split()
        if not parts or parts[0] == "Total":
            continue
        if len(parts) != 3:
            raise TelemetryError(f"expected 'MAJ:MIN Op bytes', got {raw!r}", source=source, line=number)
        try:
            value = int(parts[2])
        except ValueError:
            raise TelemetryError(f"byte count is not an integer: {parts[2]!r}", source=source, line=number) from None
        if parts[1] == "Read":
            read += value
        elif parts[1] == "Write":
            write += value
    return read, write


def parse_io_stat(text: str, *, source: str) -> tuple[int, int]:
    """v2 ``io.stat`` → total ``(rbytes, wbytes)`` summed over devices."""
    read = write = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        parts = raw.split()
        if not parts:
            continue
        for token in parts[1:]:
            key, eq, value = token.partition("=")
            if not eq:
                raise TelemetryError(f"token {token!r} is not key=value", source=source, line=number)
            if key in ("rbytes", "wbytes"):
                try:
                    amount = int(value)
                except ValueError:
                    raise TelemetryError(f"{key} is not an integer: {value!r}", source=source, line=number) from None
                if key == "rbytes":
                    read += amount
                else:
                    write += amount
    return read, write


def parse_proc_cgroup(text: str, *, source: str) -> dict[str, str]:
    """``/proc/<pid>/cgroup`` → ``{controller: path}``; the v2 line is keyed ``""``; named
    hierarchies keep their ``name=…`` key. Paths lose their leading ``/``:
    ``"4:memory:/docker/abc"`` → ``{"memory": "docker/abc"}``."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        parts = raw.split(":", 2)
        if len(parts) != 3:
            raise TelemetryError(f"expected 'id:controllers:path', got {raw!r}", source=source, line=number)
        path = parts[2].lstrip("/")
        if parts[1] == "":
            out[""] = path
        for controller in filter(None, parts[1].split(",")):
            out[controller] = path
    return out


def parse_net_dev(text: str, *, source: str) -> tuple[int, int]:
    """``/proc/<pid>/net/dev`` → ``(rx_bytes, tx_bytes)`` summed over interfaces except ``lo``."""
    rx = tx = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        if number <= 2 or not raw.strip():
            continue
        name, colon, rest = raw.partition(":")
        fields = rest.split()
        if not colon or len(fields) < 9:
            raise TelemetryError(f"expected 'iface: 16 counters', got {raw!r}", source=source, line=number)
        if name.strip() == "lo":
            continue
        try:
            rx += int(fields[0])
            tx += int(fields[8])
        except ValueError:
            raise TelemetryError(f"non-integer counter in {raw!r}", source=source, line=number) from None
    return rx, tx


def parse_meminfo(text: str, *, source: str) -> dict[str, int]:
    """``/proc/meminfo`` → ``{key: bytes}`` (``kB`` values × 1024)."""
    out: dict[str, int] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        key, colon, rest = raw.partition(":")
        parts = rest.split()
        if not colon or not parts:
            continue
        try:
            value = int(parts[0])
        except ValueError:
            raise TelemetryError(f"non-integer value in {raw!r}", source=source, line=number) from None
        out[key.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


def parse_schedstat(text: str, *, source: str) -> tuple[int, int]:
    """``/proc/<pid>/task/<tid>/schedstat`` → ``(run_ns, wait_ns)``: time on a cpu and time
    runnable but waiting for one (``Documentation/scheduler/sched-stats.rst``)."""
    parts = text.split()
    if len(parts) < 2:
        raise TelemetryError(f"expected 'run_ns wait_ns slices', got {text.strip()!r}", source=source)
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        raise TelemetryError(f"non-integer schedstat {text.strip()!r}", source=source) from None
