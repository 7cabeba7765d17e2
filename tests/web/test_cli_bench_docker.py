"""``kalena bench docker`` refuses bad sizes and an unwritable --summary-json before it starts
any engine (the run itself is a benchmark, not a test: docs/docker.md has its figures)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kalena_web.cli import main


@pytest.mark.parametrize("argv", [["--pods", "0"], ["--engines", "0"], ["--duration-s", "-1"],
                                  ["--summary-json", "/nonexistent-dir/s.json"]])
def test_bad_arguments_are_refused_before_anything_starts(argv, capsys) -> None:
    assert main(["bench", "docker", *argv]) == 2
    err = capsys.readouterr().err
    assert "bench docker" in err or "--summary-json" in err
    assert not Path("var/bench-docker").exists()
