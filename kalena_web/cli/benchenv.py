"""Processes and measurements for the control-plane benchmarks (loopback only): a dedicated
PostgreSQL database, a Redis database index, Daphne and Celery worker processes, and CPU
accounting from ``/proc``.

Every process started here is a child of the benchmark, stopped by its pid at the end.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse, urlunparse

from kalena_engine.errors import InputError

CLK_TCK = os.sysconf("SC_CLK_TCK")


class BenchEnvError(InputError):
    """A service the benchmark needs is missing or a process did not start."""


def database_url_with_name(url: str, name: str) -> str:
    parts = urlparse(url)
    return urlunparse(parts._replace(path=f"/{name}"))


def recreate_database(url: str) -> None:
    """Drop and create the database named in ``url`` (connecting to the server's ``postgres``
    database). Raises BenchEnvError when PostgreSQL is unreachable."""
    import psycopg

    name = urlparse(url).path.lstrip("/")
    if not name.replace("_", "").isalnum():
        raise BenchEnvError(f"database name {name!r} must be letters, digits and _", field="--database-url")
    admin = database_url_with_name(url, "postgres")
    try:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
    except psycopg.OperationalError as exc:
        raise BenchEnvError(f"PostgreSQL at {admin} is not reachable: {exc} (start it with scripts/services up)",
                            field="--database-url") from None


def drop_database(url: str) -> None:
    import psycopg

    name = urlparse(url).path.lstrip("/")
    with psycopg.connect(database_url_with_name(url, "postgres"), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def check_redis(url: str) -> None:
    import redis

    try:
        client = redis.Redis.from_url(url)
        client.ping()
        client.flushdb()
    except redis.exceptions.RedisError as exc:
        raise BenchEnvError(f"Redis at {url} is not reachable: {exc} (start it with scripts/services up)",
                            field="--redis-url") from None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, *, proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise BenchEnvError(f"process {proc.args[0]} exited with {proc.returncode} before listening on {port}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise BenchEnvError(f"nothing listens on 127.0.0.1:{port} after {timeout_s:.0f} s")


@dataclass
class Processes:
    """Child processes of a benchmark, stopped (by pid) on exit; logs under ``log_dir``."""

    env: dict[str, str]
    log_dir: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        return proc

    def daphne(self, port: int, name: str = "daphne") -> subprocess.Popen:
        """Daphne as production runs it (``kalena serve``: its websocket message limit follows
        ``KALENA_INGEST_MAX_FRAME_BYTES``)."""
        bindir = Path(sys.executable).parent
        proc = self.start(name, [str(bindir / "kalena"), "serve", "--host", "127.0.0.1", "--port", str(port),
                                 "--no-loops"])
        wait_port(port, proc=proc)
        return proc

    def worker(self, name: str, *, pool: str = "solo", concurrency: int = 1) -> subprocess.Popen:
        bindir = Path(sys.executable).parent
        return self.start(name, [str(bindir / "celery"), "-A", "kalena_web", "worker", "-P", pool,
                                 "-c", str(concurrency), "-n", f"{name}@%h", "--without-gossip", "--without-mingle",
                                 "--without-heartbeat", "-l", "WARNING"])

    def stop(self, name: str, *, sig: int = signal.SIGTERM, timeout_s: float = 20.0) -> None:
        proc = self.procs.pop(name, None)
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)


@contextmanager
def processes(env: dict[str, str], log_dir: Path):
    log_dir.mkdir(parents=True, exist_ok=True)
    procs = Processes(env=env, log_dir=log_dir)
    try:
        yield procs
    finally:
        procs.stop_all()


def wait_celery_ready(app, *, timeout_s: float = 60.0, workers: int = 1) -> None:
    """Until ``workers`` workers answer a ping."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        replies = app.control.ping(timeout=1.0) or []
        if len(replies) >= workers:
            return
    raise BenchEnvError(f"{workers} Celery worker(s) did not answer within {timeout_s:.0f} s")


# --- CPU accounting ------------------------------------------------------------------------------

def _proc_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return 0
    return int(fields[11]) + int(fields[12])  # utime + stime


def _tree(pid: int) -> list[int]:
    out = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except FileNotFoundError:
        return out
    for child in children:
        out.extend(_tree(int(child)))
    return out


def _by_name(name: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    pids.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
    return pids


def process_cpu_s(pid: int, *, descendants: bool = True) -> float:
    """CPU seconds (user + system) used so far by process ``pid`` (and its descendants)."""
    return sum(_proc_ticks(p) for p in (_tree(pid) if descendants else [pid])) / CLK_TCK


def machine_ticks() -> tuple[int, int]:
    """``(busy, total)`` clock ticks of all cpus since boot (``/proc/stat``)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


@dataclass
class CpuMeter:
    """CPU seconds per component between :meth:`start` and :meth:`stop`."""

    components: dict[str, callable]
    begin: dict[str, int] = field(default_factory=dict)
    machine_begin: tuple[int, int] = (0, 0)
    wall_begin: float = 0.0

    @staticmethod
    def for_bench(procs: Processes) -> CpuMeter:
        comps = {name: (lambda p=p: sum(_proc_ticks(x) for x in _tree(p.pid))) for name, p in procs.procs.items()}
        comps["postgres"] = lambda: sum(_proc_ticks(p) for p in _by_name("postgres"))
        comps["redis"] = lambda: sum(_proc_ticks(p) for p in _by_name("redis-server"))
        comps["load_generator (this process)"] = lambda: _proc_ticks(os.getpid())
        return CpuMeter(components=comps)

    def start(self) -> None:
        self.begin = {k: f() for k, f in self.components.items()}
        self.machine_begin = machine_ticks()
        self.wall_begin = time.monotonic()

    def stop(self) -> dict[str, object]:
        wall = time.monotonic() - self.wall_begin
        busy0, total0 = self.machine_begin
        busy1, total1 = machine_ticks()
        cpus = os.cpu_count() or 1
        busy_fraction = (busy1 - busy0) / max(1, total1 - total0)
        per = {k: round((f() - self.begin[k]) / CLK_TCK / wall, 3) for k, f in self.components.items()}
        return {"cpus": cpus, "wall_s": round(wall, 1), "machine_busy_fraction": round(busy_fraction, 3),
                "headroom_cores": round(cpus * (1 - busy_fraction), 2), "cores_by_component": per}


def _thread_kind(name: str) -> str:
    """A thread's kind: its name up to its first digit or dash-number (``kalena-watch-pods``,
    ``ThreadPoolExecutor``)."""
    import re

    return re.sub(r"[-_]?\d+(_\d+)?$", "", name)


def _live_threads() -> dict:
    """thread → (kind, CPU seconds so far) of this process's live threads, each from its own CPU
    clock (keyed by the :class:`threading.Thread` itself: an ended thread's id is reused)."""
    import threading

    out: dict = {}
    for t in threading.enumerate():
        try:
            out[t] = (_thread_kind(t.name), time.clock_gettime(time.pthread_getcpuclockid(t.ident)))
        except (OSError, TypeError, AttributeError):
            continue
    return out


def threads_cpu() -> dict[str, float]:
    """CPU seconds of this process's live threads per kind (:func:`_thread_kind`), from each
    thread's own CPU clock. A thread that has ended is not counted."""
    out: dict[str, float] = {}
    for kind, cpu in _live_threads().values():
        out[kind] = round(out.get(kind, 0.0) + cpu, 2)
    return out


@dataclass
class ThreadCpu:
    """CPU seconds per thread kind over a window, threads that end inside it included: each
    :meth:`sample` keeps every live thread's latest CPU clock reading (a thread that ends is
    counted up to its last sample before it ended). ``start`` holds the readings at the window's
    start (a thread started later counts from 0)."""

    start: dict = field(default_factory=dict)
    latest: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.latest = _live_threads()
        self.start = {thread: cpu for thread, (_, cpu) in self.latest.items()}

    def sample(self) -> None:
        self.latest.update(_live_threads())

    def spent(self, minimum_s: float = 0.05) -> dict[str, float]:
        """CPU seconds per kind since the start, largest first, kinds under ``minimum_s`` left out."""
        out: dict[str, float] = {}
        for thread, (kind, cpu) in self.latest.items():
            out[kind] = out.get(kind, 0.0) + cpu - self.start.get(thread, 0.0)
        return {k: round(v, 2) for k, v in sorted(out.items(), key=lambda kv: -kv[1]) if v >= minimum_s}
