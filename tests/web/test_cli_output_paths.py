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


@pytest.mark.parametrize("command", ["policies", "compaction", "calibrate", "pareto"])
def test_help_shows_percent_signs_as_written(command: str) -> None:
    """argparse %-formats argument help but prints a description as is: no ``%%`` reaches the user."""
    result = subprocess.run([sys.executable, "-m", "kalena_web.cli", "evaluate", command, "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "%%" not in result.stdout, result.stdout


def test_compaction_report_labels_the_allowance_where_its_line_is() -> None:
    """The probes chart has a log y axis; the allowance's label must sit at log10 of its value."""
    import json
    import math
    import re

    from kalena_web.cli.evaluate_report import render_compaction_report

    probes = [{"arm": arm, "nodes": n, "unserved_fraction": f, "fits": f <= 0.002}
              for arm, rows in (("on", ((10, 0.3), (12, 0.001))), ("off", ((12, 0.05), (14, 0.0))))
              for n, f in rows]
    summary = {"allowance": 0.002, "nodes_needed_p90_on": 12, "nodes_needed_p90_off": 14,
               "extra_nodes_without_reclamation_p90": 2, "seeds": [0], "window_hours": 1.0, "window_start_h": 20.0,
               "active_nodes_blueprint": 10, "load_factor": 1.0,
               "trials": [{"seed": 0, "nodes_needed_on": 12, "nodes_needed_off": 14, "probes": probes}]}
    html = render_compaction_report(summary, title="t")
    labels = [json.loads(m) for m in re.findall(r'(\{[^{}]*"text":"allowance[^{}]*\})', html)]
    assert labels, "no allowance label"
    assert all(math.isclose(a["y"], math.log10(0.2)) and a["yref"] == "y" for a in labels), labels


def test_calibrate_tables_mark_the_knee_that_is_written_at_every_load() -> None:
    """The knee is taken on the first load factor (the one written and compared, and starred at
    every load in the report); another load's own knee is labelled as such, not as ``knee``."""
    from kalena_web.cli.evaluate_calibrate import format_points

    def pt(m: float, h: float, x: float, e: float) -> dict[str, float]:
        return {"margin_ratio": m, "half_life_s": h, "reclaimed_fraction_cpu": x, "reclaimed_fraction_ram": 0.0,
                "batch_evictions_per_100_pod_hours": e, "production_contention_core_hours": 0.0, "oom_kills": 0.0}

    points = [pt(1.0, 300.0, 0.3, 2.0), pt(1.3, 1200.0, 0.2, 0.5), pt(1.15, 1200.0, 0.28, 0.4)]
    table = format_points(points, chosen=points[1], front=[points[0], points[2]], own_knee=points[2], load="4")
    # columns: predictor, μ, h (s), … , the mark last
    marks = {line.split()[1] + "/" + line.split()[2]: line.split("  ")[-1].strip() for line in table.splitlines()[2:]}
    assert marks == {"1/300": "frontier", "1.3/1200": "knee", "1.15/1200": "knee of ×4"}, table
