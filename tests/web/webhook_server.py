"""`kalena serve --tls-port` in a subprocess with certificates the test makes (trustme, on the
`cryptography` package): the hooks listener as kube-apiserver and kube-scheduler reach it — a
serving certificate from one CA, client certificates from a second (``--tls-client-ca``), and a
third CA no one trusts for the wrong-certificate caller.

``start_webhook(tmp, plain_port, tls_port, seed=…, **env)`` → :class:`Hooks`; the caller
terminates ``hooks.process``."""

from __future__ import annotations

import os
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import trustme

from kalena_web.cli.benchenv import free_port

ROOT = Path(__file__).resolve().parents[2]
RSA = trustme.KeyType.RSA


@dataclass(frozen=True)
class Hooks:
    process: subprocess.Popen
    url: str                 # https://127.0.0.1:<tls port> (the hooks listener)
    console_url: str         # http://127.0.0.1:<port> (the console's listener)
    ca: str                  # the serving certificate's CA (what a caller verifies)
    client_cert: str         # a certificate the --tls-client-ca signed (CN kube-scheduler)
    client_key: str
    rogue_cert: str          # a certificate from a CA the listener does not trust
    rogue_key: str
    db_path: str             # the server's SQLite database

    @property
    def mutate_url(self) -> str:
        return self.url + "/kubernetes/admission/mutate"

    def context(self, *, cert: str = "", key: str = "") -> ssl.SSLContext:
        """A client TLS context verifying the listener, presenting ``cert``/``key`` if given."""
        context = ssl.create_default_context(cafile=self.ca)
        if cert:
            context.load_cert_chain(cert, key)
        return context

    def client(self) -> ssl.SSLContext:
        return self.context(cert=self.client_cert, key=self.client_key)

    def rogue(self) -> ssl.SSLContext:
        return self.context(cert=self.rogue_cert, key=self.rogue_key)


def _write(leaf, tmp: Path, name: str) -> tuple[str, str]:
    leaf.private_key_pem.write_to_path(str(tmp / f"{name}.key"))
    leaf.cert_chain_pems[0].write_to_path(str(tmp / f"{name}.crt"))
    return str(tmp / f"{name}.crt"), str(tmp / f"{name}.key")


def start_webhook(tmp: Path, plain_port: int, tls_port: int, seed: str = "", tls_host: str = "127.0.0.1",
                  **env_extra: str) -> Hooks:
    """Migrate a fresh SQLite database, run ``seed`` (Python source, Django set up) in it, then
    start ``kalena serve --no-loops`` with the hooks listener (on ``tls_host``; the console on
    127.0.0.1); returns once both listen."""
    server_ca, client_ca, rogue_ca = trustme.CA(key_type=RSA), trustme.CA(key_type=RSA), trustme.CA(key_type=RSA)
    _write(server_ca.issue_cert("kalena-webhook.kalena.svc", "127.0.0.1", key_type=RSA), tmp, "tls")
    server_ca.cert_pem.write_to_path(str(tmp / "ca.crt"))
    client_ca.cert_pem.write_to_path(str(tmp / "client-ca.crt"))
    client = _write(client_ca.issue_cert("kube-scheduler", common_name="kube-scheduler", key_type=RSA), tmp, "client")
    rogue = _write(rogue_ca.issue_cert("kube-scheduler", common_name="impostor", key_type=RSA), tmp, "rogue")
    env = {**os.environ, "KALENA_DB_PATH": str(tmp / "k.sqlite3"), "KALENA_VAR_DIR": str(tmp / "var"),
           "DJANGO_SETTINGS_MODULE": "kalena_web.settings", **env_extra}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], check=True, env=env, cwd=ROOT)
    if seed:
        subprocess.run([sys.executable, "-c", "import django; django.setup()\n" + seed], check=True, env=env,
                       cwd=ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kalena_web.cli", "serve", "--port", str(plain_port), "--no-loops",
         "--tls-port", str(tls_port), "--tls-cert", str(tmp / "tls.crt"), "--tls-key", str(tmp / "tls.key"),
         "--tls-client-ca", str(tmp / "client-ca.crt"), "--tls-host", tls_host],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            for host, port in ((tls_host, tls_port), ("127.0.0.1", plain_port)):
                socket.create_connection((host, port), timeout=1).close()
            return Hooks(proc, f"https://{tls_host}:{tls_port}", f"http://127.0.0.1:{plain_port}", str(tmp / "ca.crt"),
                         *client, *rogue, str(tmp / "k.sqlite3"))
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"kalena serve exited: {proc.stdout.read()}") from None
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("kalena serve never listened on the TLS port")


def stop(hooks: Hooks) -> None:
    hooks.process.terminate()
    try:
        hooks.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        hooks.process.kill()
        hooks.process.wait(timeout=30)


@pytest.fixture(scope="session")
def kalena_webhook(tmp_path_factory):
    """One `kalena serve --tls-port` for the session (Job inference on), warmed up: :class:`Hooks`."""
    import httpx

    hooks = start_webhook(tmp_path_factory.mktemp("webhook"), free_port(), free_port(),
                          KALENA_ADMISSION_INFER_JOBS="1")
    # warm Django up (the first request imports the URL map), as a deployed console is
    httpx.post(hooks.mutate_url, content=b"{}", timeout=60, verify=hooks.client())
    yield hooks
    stop(hooks)
