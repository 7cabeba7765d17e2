"""Collectors only read, the engine only decides, one enforcer changes things: no
agent module other than agents/enforcer.py writes files, signals processes or makes a mutating
Docker call. Exceptions, each for a reason: agents/bench/ stands in for a container runtime
(creates groups, starts processes); agents/runner.py appends the operator's actions log;
agents/pressure/monitor.py writes one byte to its own wake-up pipe. The orchestrator adapters
(agents/orchestrators/) are the control plane's side of the port and follow their own rule: in
each orchestrator package only ``client.py`` talks to the API or engine (the watch, lease and
decision modules call its methods)."""

from __future__ import annotations

import ast
from pathlib import Path

AGENTS = Path(__file__).resolve().parents[2] / "agents"
SIGNALS = {("os", "kill"), ("os", "killpg"), ("os", "write"), ("os", "pwrite"), ("os", "truncate")}
DOCKER_READS = {"stats", "inspect_container", "containers", "ping", "version", "info", "images", "inspect_image"}
ALLOWED = {"enforcer.py": "all", "runner.py": {"open"}, "pressure/monitor.py": {"os.write"}}


def _problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        where = f"{path.relative_to(AGENTS.parent)}:{node.lineno}"
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and (func.value.id, func.attr) in SIGNALS:
            found.append((where, f"{func.value.id}.{func.attr}"))
        elif isinstance(func, ast.Attribute) and func.attr in ("send_signal", "write_text", "write_bytes"):
            found.append((where, func.attr))
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) and func.value.attr == "api" \
                and func.attr not in DOCKER_READS:
            found.append((where, f"api.{func.attr}"))
        elif isinstance(func, ast.Name | ast.Attribute) and getattr(func, "id", getattr(func, "attr", "")) == "open":
            modes = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            modes += [k.value.value for k in node.keywords if k.arg == "mode" and isinstance(k.value, ast.Constant)]
            if any(set(str(m)) & set("wax+") for m in modes):
                found.append((where, "open"))
    try:
        allowed = ALLOWED.get(path.relative_to(AGENTS).as_posix(), set())
    except ValueError:
        allowed = set()
    return [f"{where} {what}" for where, what in found if allowed != "all" and what not in allowed]


def test_only_the_enforcer_changes_anything() -> None:
    problems = []
    for path in sorted(AGENTS.rglob("*.py")):
        # benchmarks, orchestrator adapters and the lab (which builds the nodes an agent runs on)
        # are not the agent
        if {"bench", "orchestrators", "lab"} & set(path.relative_to(AGENTS).parts):
            continue
        problems += _problems(path)
    assert problems == []


#: client libraries an orchestrator adapter may use only in its client.py (pure helpers such as
#: ``kubernetes.utils.parse_quantity`` excepted)
API_LIBRARIES = ("docker", "kubernetes.client", "kubernetes.config", "kubernetes.watch", "httpx", "requests",
                 "urllib.request", "http.client")


def test_only_each_orchestrators_client_calls_its_api() -> None:
    found = []
    for path in sorted((AGENTS / "orchestrators").rglob("*.py")):
        if path.name in ("client.py", "testserver.py", "teststore.py", "testkubelet.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom) and node.module else []
            for name in names:
                if name == "kubernetes" or any(name == lib or name.startswith(lib + ".") for lib in API_LIBRARIES):
                    found.append(f"{path.relative_to(AGENTS.parent)}:{node.lineno} {name}")
    assert found == []


def test_the_check_catches_a_write() -> None:
    sample = AGENTS.parent / "tests" / "agents" / "_arch_sample.py"
    sample.write_text("import os\nos.kill(1, 9)\nopen('/sys/fs/cgroup/x', 'w')\n")
    try:
        assert len(_problems_outside(sample)) == 2
    finally:
        sample.unlink()


def _problems_outside(path: Path) -> list[str]:
    global AGENTS
    saved, AGENTS = AGENTS, path.parent.parent.parent / "tests"
    try:
        return _problems(path)
    finally:
        AGENTS = saved
