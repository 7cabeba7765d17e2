"""Operator tools outside the Python package: ``scripts/screenshots`` works whichever Python
starts it, and the Prometheus alert rules and Grafana dashboards in ``deploy/`` are valid and
name only metrics Kalena exports."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_screenshots_runs_with_a_python_without_playwright() -> None:
    system = next((p for p in ("/usr/bin/python3", shutil.which("python3") or "")
                   if p and subprocess.run([p, "-c", "import playwright"], capture_output=True).returncode != 0), None)
    if system is None:
        pytest.skip("every python3 here has Playwright: nothing to fall back from")
    done = subprocess.run([system, str(ROOT / "scripts" / "screenshots"), "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--password" in done.stdout and "ModuleNotFoundError" not in done.stderr
    assert sys.prefix  # the test itself runs in the project's environment
