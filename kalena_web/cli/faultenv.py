"""Private services for ``kalena bench faults``, so faults never touch the machine's shared
PostgreSQL (5432) and Redis (6379): a PostgreSQL cluster of its own (``pg_createcluster`` on
another port — ``initdb`` refuses root, the Debian wrappers run it as ``postgres``), a Redis
server child process, and the fault actions on them (stop, start, restart ``-m immediate``,
SIGSTOP/SIGCONT). ``scripts/services faults`` installs what they need on a fresh machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kalena_web.cli.benchenv import BenchEnvError


def _run(argv: list[str], *, timeout_s: float = 120.0) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise BenchEnvError(f"{argv[0]} is not installed (scripts/services faults installs it)") from None
    if done.returncode != 0:
        raise BenchEnvError(f"{' '.join(argv)} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[:500]}")


def _pg_version() -> str:
    root = Path("/etc/postgresql")
    versions = sorted((p.name for p in root.iterdir() if p.name.replace(".", "").isdigit()),
                      key=lambda v: [int(x) for x in v.split(".")]) if root.is_dir() else []
    if not versions:
        raise BenchEnvError("no PostgreSQL under /etc/postgresql (scripts/services faults installs it)")
    return versions[-1]


@dataclass
class PrivatePostgres:
    """A throw-away PostgreSQL cluster ``kalena-faults-<port>`` on 127.0.0.1:``port`` (trust
    auth, not started at boot), dropped by :meth:`drop`."""

    port: int
    database: str = "kalena_faults"
    version: str = field(default_factory=_pg_version)

    @property
    def name(self) -> str:
        return f"kalena-faults-{self.port}"

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{self.database}"

    def create(self) -> None:
        if Path(f"/etc/postgresql/{self.version}/{self.name}").exists():
            self.drop()
        _run(["pg_createcluster", "--start-conf=manual", "-p", str(self.port), self.version, self.name, "--",
              "--auth=trust"])
        self.start()
        import psycopg

        with psycopg.connect(f"postgres://postgres@127.0.0.1:{self.port}/postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')

    def _ctl(self, action: str, *extra: str) -> None:
        _run(["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, action, *extra])

    def ready(self) -> bool:
        return subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode == 0

    def start(self) -> None:
        self._ctl("start")
        self._wait(self.ready, "PostgreSQL to accept connections")

    def stop(self) -> None:
        """Stop at once (``-m immediate``: no checkpoint, like a crash)."""
        self._ctl("stop", "-m", "immediate")

    def restart(self) -> None:
        self._ctl("restart", "-m", "immediate")
        self._wait(self.ready, "PostgreSQL to accept connections")

    def drop(self) -> None:
        _run(["pg_dropcluster", "--stop", self.version, self.name])

    @staticmethod
    def _wait(predicate, what: str, timeout_s: float = 60.0) -> None:
        end = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > end:
                raise BenchEnvError(f"timed out waiting for {what}")
            time.sleep(0.1)


@dataclass
class PrivateRedis:
    """``redis-server`` on 127.0.0.1:``port`` as a child process (nothing persisted)."""

    port: int
    log_dir: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def ready(self) -> bool:
        import redis

        try:
            return bool(redis.Redis(port=self.port, socket_timeout=1).ping())
        except redis.exceptions.RedisError:
            return False

    def start(self) -> None:
        log = open(self.log_dir / "redis.log", "a")  # noqa: SIM115 - kept open for the process's life
        try:
            self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                          "--appendonly", "no"], stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        except FileNotFoundError:
            raise BenchEnvError("redis-server is not installed (scripts/services up installs it)") from None
        PrivatePostgres._wait(self.ready, "Redis to answer")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None

    def freeze(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGCONT)
