"""`kalena serve --tls-port` in a subprocess with a CA the test makes (trustme): the webhook as
kube-apiserver reaches it. ``start_webhook(tmp, plain_port, tls_port)`` → ``(process, base URL,
CA file)``; the caller terminates the process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trustme

from kalena_web.cli.benchenv import free_port

ROOT = Path(__file__).resolve().parents[2]


def start_webhook(tmp: Path, plain_port: int, tls_port: int, **env_extra: str):
    ca = trustme.CA()
    cert = ca.issue_cert("kalena-webhook.kalena.svc", "127.0.0.1")
    cert.private_key_pem.write_to_path(str(tmp / "tls.key"))
    cert.cert_chain_pems[0].write_to_path(str(tmp / "tls.crt"))
    ca.cert_pem.write_to_path(str(tmp / "ca.crt"))
    env = {**os.environ, "KALENA_DB_PATH": str(tmp / "k.sqlite3"), "KALENA_VAR_DIR": str(tmp / "var"),
           "DJANGO_SETTINGS_MODULE": "kalena_web.settings", **env_extra}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], check=True, env=env, cwd=ROOT)
    proc = subprocess.Popen(
        [sys.executable, "-m", "kalena_web.cli", "serve", "--port", str(plain_port), "--no-loops",
         "--tls-port", str(tls_port), "--tls-cert", str(tmp / "tls.crt"), "--tls-key", str(tmp / "tls.key")],
        env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", tls_port), timeout=1).close()
            return proc, f"https://127.0.0.1:{tls_port}", str(tmp / "ca.crt")
        except OSError:
            if proc.poll() is not None:
                raise RuntimeError(f"kalena serve exited: {proc.stdout.read()}") from None
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("kalena serve never listened on the TLS port")


@pytest.fixture(scope="session")
def kalena_webhook(tmp_path_factory):
    """One `kalena serve --tls-port` for the session (Job inference on), warmed up:
    ``(mutate URL, CA file)``."""
    import ssl

    import httpx

    proc, url, ca = start_webhook(tmp_path_factory.mktemp("webhook"), free_port(), free_port(),
                                KALENA_ADMISSION_INFER_JOBS="1")
    # warm Django up (the first request imports the URL map), as a deployed console is
    httpx.post(url + "/kubernetes/admission/mutate", content=b"{}", timeout=60,
               verify=ssl.create_default_context(cafile=ca))
    yield url + "/kubernetes/admission/mutate", ca
    proc.terminate()
    proc.wait(timeout=30)
