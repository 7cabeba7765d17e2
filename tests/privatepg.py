"""A private PostgreSQL cluster for tests that stop or restart the database (never the machine's
shared one on 5432): ``pg_createcluster`` on another port (initdb refuses root; the Debian
wrapper runs it as ``postgres``), trust auth on localhost, dropped at the end."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def _version() -> str:
    return sorted(os.listdir("/etc/postgresql"), key=lambda v: [int(p) for p in v.split(".")])[-1]


class PrivatePostgres:
    """``with PrivatePostgres(port) as pg:`` — ``pg.url(db)``, ``pg.stop()``, ``pg.start()``."""

    def __init__(self, port: int, name: str | None = None) -> None:
        self.port = port
        self.version = _version()
        self.name = name or f"kalena_test_{port}"

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def __enter__(self) -> PrivatePostgres:
        subprocess.run(["pg_dropcluster", "--stop", self.version, self.name], capture_output=True)
        subprocess.run(["pg_createcluster", self.version, self.name, "-p", str(self.port), "--start-conf=manual",
                        "--", "--auth=trust"], check=True, capture_output=True)
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["pg_dropcluster", "--stop", self.version, self.name], capture_output=True)

    def start(self) -> None:
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, "start"],
                       check=True, capture_output=True)
        deadline = time.monotonic() + 60
        while subprocess.run(["pg_isready", "-q", "-h", "127.0.0.1", "-p", str(self.port)]).returncode != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"private PostgreSQL on {self.port} did not come up")
            time.sleep(0.2)

    def stop(self, mode: str = "fast") -> None:
        subprocess.run(["pg_ctlcluster", "--skip-systemctl-redirect", self.version, self.name, "stop", "-m", mode],
                       check=True, capture_output=True)

    def createdb(self, database: str) -> None:
        subprocess.run(["createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", database],
                       check=True, capture_output=True)

    @property
    def log_path(self) -> Path:
        return Path(f"/var/log/postgresql/postgresql-{self.version}-{self.name}.log")
