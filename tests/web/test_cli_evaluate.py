"""``kalena evaluate policies`` and ``kalena replay --policy`` as a user runs them: the console
script on a short slice of the real data, its JSON, HTML and policy outputs, and its refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kalena_engine.policy_file import parse_policy_text

KALENA = [sys.executable, "-m", "kalena_web.cli"]
POLICIES = ("kalena", "none", "koordinator", "vpa", "oracle-60m", "oracle-exact")
FIELDS = ("reclaimed_fraction_cpu", "reclaimed_fraction_ram", "harvest_ratio_vs_oracle_60m",
          "harvest_ratio_vs_oracle_exact", "batch_completed", "batch_evicted", "batch_evictions_per_100_pod_hours",
          "production_evictions", "production_contention_core_hours", "oom_kills", "throttled_batch_core_hours",
          "completion_inflation_p99", "completion_inflation_p50", "batch_pod_hours", "production_contention_node_steps")
POLICY = """apiVersion: kalena.naughtian.io/v1
kind: Policy
metadata: {name: evaluation-test, version: 2}
spec:
  estimator: {half_life_s: 900}
"""


def run(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KALENA, *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "KALENA_DATA_DIR": str(data_dir)})


@pytest.fixture(scope="module")
def evaluation(tmp_path_factory, data_dir: Path):
    out = tmp_path_factory.mktemp("evaluate")
    policy = out / "policy.yaml"
    policy.write_text(POLICY)
    runs = {}
    for jobs in ("2", "1"):
        folder = out / f"jobs{jobs}"
        result = run("evaluate", "policies", "--hours", "0.25", "--jobs", jobs, "--policy", str(policy),
                     "--margin-ratio", "1.2", "--summary-json", str(folder / "summary.json"),
                     "--report-html", str(folder / "report.html"), "--policy-out", str(folder / "used.yaml"),
                     data_dir=data_dir)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[jobs] = (result, folder)
    return runs


def test_every_policy_reports_every_field_and_kalena_keeps_production_safe(evaluation) -> None:
    result, folder = evaluation["2"]
    summaries = json.loads((folder / "summary.json").read_text())
    assert set(summaries) == set(POLICIES)  # the same top-level keys at every load factor
    for name, summary in summaries.items():
        for field in FIELDS:
            assert field in summary, (name, field)
        assert summary["reservation_rule"] == name and summary["sim_seconds"] == 900
        assert summary["policy_name"] == "evaluation-test" and summary["policy_version"] == 2
    for name in ("kalena", "oracle-60m", "oracle-exact"):  # the floors
        assert summaries[name]["production_evictions"] == 0
        assert summaries[name]["oom_kills_by_tier"]["service"] == 0
    assert summaries["oracle-60m"]["harvest_ratio_vs_oracle_60m"] == 1.0
    assert summaries["oracle-exact"]["harvest_ratio_vs_oracle_exact"] == 1.0
    assert summaries["none"]["reclaimed_fraction_cpu"] == 0.0 and summaries["none"]["batch_evicted"] == 0
    assert summaries["kalena"]["reclaimed_fraction_cpu"] > 0
    # nothing causal reclaims more than the exact oracle without contention
    assert summaries["oracle-exact"]["reclaimed_fraction_cpu"] >= summaries["oracle-60m"]["reclaimed_fraction_cpu"]
    # the printed table has a row per policy
    for name in POLICIES:
        assert any(line.startswith(name) for line in result.stdout.splitlines()), result.stdout


def test_the_policy_file_and_flags_reach_the_runs_and_come_back_out(evaluation) -> None:
    _, folder = evaluation["2"]
    used = parse_policy_text((folder / "used.yaml").read_text(), source="used.yaml")
    assert used.policy.estimator.half_life_s == 900.0  # from the file
    assert used.policy.estimator.margin_ratio == 1.2  # the flag overrides the file
    assert used.metadata.name == "evaluation-test"


def test_results_do_not_depend_on_jobs_and_the_report_is_self_contained(evaluation) -> None:
    (_, two), (_, one) = evaluation["2"], evaluation["1"]
    a = json.loads((two / "summary.json").read_text())
    b = json.loads((one / "summary.json").read_text())
    for summary in (*a.values(), *b.values()):
        summary.pop("wall_seconds")
    assert a == b
    html = (two / "report.html").read_text()
    assert html == (one / "report.html").read_text()  # deterministic for a seed
    assert "<script src=" not in html  # plotly.js inlined: no network
    for div in ("reclaimed-cpu", "reclaimed-ram", "evictions-harvest", "throttled"):
        assert f'id="{div}"' in html
    for name in POLICIES:
        assert name in html


@pytest.mark.parametrize("args, fragments", [
    (["--margin-ratio", "0.5"], ["--margin-ratio: spec.estimator.margin_ratio: 0.5 is out of range", "[1, 10]"]),
    (["--evict-threshold-ratio", "1.5"], ["--evict-threshold-ratio: spec.eviction.evict_threshold_ratio: 1.5 is out of range"]),
    (["--policies", "kalena,borg"], ["--policies: policy 'borg' is not one of kalena, none, koordinator, vpa"]),
    (["--jobs", "0"], ["argument --jobs: 0 is not a finite number ≥ 1"]),
], ids=["margin", "threshold", "policies", "jobs"])
def test_bad_flags_are_refused_before_anything_runs(tmp_path: Path, data_dir: Path, args, fragments) -> None:
    out = tmp_path / "summary.json"
    result = run("evaluate", "policies", "--hours", "0.1", "--no-progress", "--summary-json", str(out), *args,
                 data_dir=data_dir)
    assert result.returncode == 2, result.stdout + result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
    assert not out.exists()


@pytest.mark.parametrize("command", [["replay"], ["evaluate", "policies"]])
def test_a_bad_policy_file_is_refused_naming_file_line_and_key(tmp_path: Path, data_dir: Path, command) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text("apiVersion: kalena.naughtian.io/v1\nkind: Policy\nspec:\n  eviction:\n    cooldown: 60\n")
    out = tmp_path / "summary.json"
    result = run(*command, "--policy", str(bad), "--hours", "0.1", "--no-progress", "--summary-json", str(out),
                 data_dir=data_dir)
    assert result.returncode == 2
    assert f"{bad}:5: spec.eviction.cooldown: unknown key 'cooldown'" in result.stderr
    assert "cooldown_s" in result.stderr  # what is accepted
    assert not out.exists()
    missing = run(*command, "--policy", str(tmp_path / "nope.yaml"), "--hours", "0.1", "--no-progress", data_dir=data_dir)
    assert missing.returncode == 2 and "nope.yaml: file not found" in missing.stderr
