"""The engine stays pure: no Django, Celery, Channels, Kubernetes or Docker
imports (import-linter contract in pyproject.toml), and no clock, environment or global
randomness reads."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_import_contract_holds() -> None:
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    result = subprocess.run([lint, "--config", str(ROOT / "pyproject.toml")], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "kalena_engine stays pure" in result.stdout and "KEPT" in result.stdout


FORBIDDEN_CALLS = {
    ("time", "time"), ("time", "monotonic"), ("time", "perf_counter"), ("time", "sleep"),
    ("datetime", "now"), ("datetime", "utcnow"), ("date", "today"), ("os", "getenv"),
}
FORBIDDEN_MODULES = {"random", "socket", "subprocess", "threading"}


def test_engine_reads_no_clock_environment_or_global_randomness() -> None:
    problems = []
    for path in sorted((ROOT / "kalena_engine").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                for name in names:
                    if name.split(".")[0] in FORBIDDEN_MODULES:
                        problems.append(f"{path}:{node.lineno} imports {name}")
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if (node.value.id, node.attr) in FORBIDDEN_CALLS or (node.value.id == "os" and node.attr == "environ"):
                    problems.append(f"{path}:{node.lineno} uses {node.value.id}.{node.attr}")
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                f = node.func
                if isinstance(f.value, ast.Attribute) and getattr(f.value.value, "id", "") == "np" \
                        and f.value.attr == "random" and not (f.attr == "default_rng" and node.args):
                    # a generator seeded from an argument is deterministic; anything else is not
                    problems.append(f"{path}:{node.lineno} calls np.random.{f.attr} (randomness must be passed in)")
    assert problems == []
