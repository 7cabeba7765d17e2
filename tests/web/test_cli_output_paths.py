"""Every ``kalena evaluate`` subcommand refuses an output path it could not write before anything
runs: exit 2, the message names the flag actually given (not always ``--summary-json``), and no
other output is written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CASES = [
    ("policies", "--summary-json"), ("policies", "--report-html"), ("policies", "--policy-out"),
    ("compaction", "--summary-json"), ("compaction", "--report-html"),
    ("calibrate", "--summary-json"), ("calibrate", "--report-html"), ("calibrate", "--out"),
    ("pareto", "--summary-json"), ("pareto", "--report-html"),
]


@pytest.mark.parametrize(("command", "flag"), CASES)
def test_unwritable_output_is_refused_naming_its_flag(tmp_path: Path, data_dir: Path, command: str,
                                                      flag: str) -> None:
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    bad = not_a_folder / "out.json"
    good = tmp_path / "summary.json"
    others = [] if flag == "--summary-json" else ["--summary-json", str(good)]
    result = subprocess.run([sys.executable, "-m", "kalena_web.cli", "evaluate", command, "--hours", "0.1",
                             "--no-progress", *others, flag, str(bad)], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "KALENA_DATA_DIR": str(data_dir)})
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"kalena evaluate {command}: error: {flag} {bad}" in result.stderr, result.stderr
    assert "is not a writable folder" in result.stderr
    assert not good.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]
