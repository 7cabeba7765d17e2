"""Packaging as an operator meets it: the wheel alone installs a working console (templates and
static files inside it, state outside it), the agent installs without the web stack, one
version everywhere, and the locks agree with pyproject.toml's ranges."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import httpx
import pytest
from packaging.requirements import Requirement

from agents import __version__

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _locked(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements" / f"{name}.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            package, version = line.split("==", 1)
            pins[re.sub(r"[-_.]+", "-", package.split("[")[0]).lower()] = version.split(";")[0].strip()
    return pins


def _requirements(extra: str | None) -> list[Requirement]:
    project = PYPROJECT["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    extras = {"web": ["web"], "dev": ["web", "dev"]}.get(extra or "", [])
    for e in extras:
        reqs += [Requirement(r) for r in project["optional-dependencies"][e] if not r.startswith("kalena[")]
    return reqs


@pytest.mark.parametrize("lock", ["agent", "web", "dev"])
def test_each_lock_pins_every_dependency_within_its_range(lock: str) -> None:
    pins = _locked(lock)
    for req in _requirements(None if lock == "agent" else lock):
        name = re.sub(r"[-_.]+", "-", req.name).lower()
        assert name in pins, f"requirements/{lock}.lock does not pin {req.name} (run scripts/lock)"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"requirements/{lock}.lock pins {req.name}=={pins[name]} outside {req.specifier} (run scripts/lock)"
    if lock == "agent":
        assert not {"django", "celery", "daphne", "channels", "plotly"} & set(pins), "the agent lock pulls the web stack"


def test_one_version_source() -> None:
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "agents.__version__"}
    for cmd in (["kalena", "--version"], ["kalena-agent", "--version"]):
        out = subprocess.run([str(Path(sys.executable).parent / cmd[0]), *cmd[1:]], capture_output=True, text=True)
        assert out.stdout.strip() == f"{cmd[0]} {__version__}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _venv(path: Path, *requirements: str) -> Path:
    """A new venv holding exactly ``requirements`` (lock files and the wheel), with uv."""
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(path)], check=True)
    args = []
    for r in requirements:
        args += ["-r", r] if r.endswith(".lock") else [r]
    subprocess.run([uv, "pip", "install", "--quiet", "--python", str(path / "bin" / "python"), *args], check=True)
    return path / "bin"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """``pip wheel .`` of the tracked sources (a fresh clone's files), never the working tree's
    local state."""
    src = tmp_path_factory.mktemp("src")
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(src)], check=True)
    (built,) = out.glob("kalena-*.whl")
    return built


def test_the_wheel_alone_serves_the_console_with_its_static_files(wheel: Path, tmp_path: Path, data_dir: Path) -> None:
    bin_dir = _venv(tmp_path / "venv", str(ROOT / "requirements" / "web.lock"), f"kalena[web] @ {wheel.as_uri()}")
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL", "DJANGO_"))}
    env.update(KALENA_VAR_DIR=str(state), KALENA_DATA_DIR=str(data_dir), HOME=str(tmp_path / "home"),
               PATH=f"{bin_dir}:{env['PATH']}")
    run = lambda *a, **kw: subprocess.run([str(bin_dir / a[0]), *a[1:]], cwd=tmp_path, env=env,  # noqa: E731
                                          capture_output=True, text=True, **kw)
    where = run("python", "-c", "import kalena_web; print(kalena_web.__file__)")
    assert "site-packages" in where.stdout, where.stdout + where.stderr   # not this checkout
    assert run("kalena", "--version").stdout.strip() == f"kalena {__version__}"
    assert run("kalena", "migrate").returncode == 0
    replay = run("kalena", "replay", "--hours", "1", "--no-progress", timeout=600)
    assert replay.returncode == 0, replay.stderr[-2000:]
    port = _free_port()
    serve = subprocess.Popen([str(bin_dir / "kalena"), "serve", "--port", str(port), "--no-loops"], cwd=tmp_path,
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                page = httpx.get(f"http://127.0.0.1:{port}/accounts/login/", timeout=5)
                break
            except httpx.HTTPError:
                assert time.monotonic() < deadline, "kalena serve from the wheel did not answer"
                time.sleep(0.3)
        assert page.status_code == 200 and "<form" in page.text
        assets = re.findall(r'(?:href|src)="(/static/[^"]+)"', page.text)
        assert assets, "the login page links no static file"
        for asset in assets:
            assert httpx.get(f"http://127.0.0.1:{port}{asset}", timeout=10).status_code == 200, asset
    finally:
        serve.terminate()
        serve.wait(timeout=30)
    site = Path(where.stdout.strip()).parent.parent
    assert not (site / "var").exists(), "state was written inside site-packages"
    assert (state / "kalena.sqlite3").exists()


def test_the_agent_installs_without_the_web_stack(wheel: Path, tmp_path: Path) -> None:
    bin_dir = _venv(tmp_path / "venv", str(ROOT / "requirements" / "agent.lock"), str(wheel))
    run = lambda *a: subprocess.run([str(bin_dir / a[0]), *a[1:]], cwd=tmp_path, capture_output=True, text=True)  # noqa: E731
    assert run("kalena-agent", "--version").stdout.strip() == f"kalena-agent {__version__}"
    assert run("kalena-agent", "run", "--help").returncode == 0
    assert run("python", "-c", "import django").returncode != 0
    web = run("kalena", "--version")
    assert web.returncode == 2 and "pip install 'kalena[web]'" in web.stderr
