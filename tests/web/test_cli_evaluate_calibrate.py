"""``kalena evaluate calibrate`` as a user runs it: a short sweep of the real data; its table,
JSON, report and policy file — which ``kalena replay --policy`` loads and the console's
calibration page imports — and its refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile

from kalena_engine.policy_file import parse_policy_text
from tests.web.conftest import PASSWORD

KALENA = [sys.executable, "-m", "kalena_web.cli"]
SHORT = ["--hours", "0.5", "--margins", "1.0,1.15", "--half-lives", "300,600", "--load-factors", "1,4",
         "--no-progress", "--widen-rounds", "0"]


def run(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KALENA, *args], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "KALENA_DATA_DIR": str(data_dir)})


@pytest.fixture(scope="module")
def calibration(tmp_path_factory, data_dir: Path):
    out = tmp_path_factory.mktemp("calibrate")
    runs = {}
    for jobs in ("2", "1"):
        folder = out / f"jobs{jobs}"
        result = run("evaluate", "calibrate", *SHORT, "--jobs", jobs, "--out", str(folder / "cal.yaml"),
                     "--summary-json", str(folder / "summary.json"), "--report-html", str(folder / "report.html"),
                     data_dir=data_dir)
        assert result.returncode == 0, result.stderr[-3000:]
        runs[jobs] = (result, folder)
    return runs


def test_points_knee_and_verdict(calibration) -> None:
    result, folder = calibration["2"]
    summary = json.loads((folder / "summary.json").read_text())
    assert set(summary["load_factors"]) == {"1", "4"}
    for result_at in summary["load_factors"].values():
        assert len(result_at["points"]) == 4
        keys = {(p["margin_ratio"], p["half_life_s"]) for p in result_at["points"]}
        assert keys == {(m, h) for m in (1.0, 1.15) for h in (300.0, 600.0)}
        assert result_at["knee"] in result_at["frontier"]
    knee = summary["knee"]
    assert knee == summary["load_factors"]["1"]["knee"]
    assert isinstance(summary["ship_knee_as_default"], bool) and summary["verdict"]
    assert f"knee (×1): μ {knee['margin_ratio']:g}, h {knee['half_life_s']:g} s" in result.stdout
    assert "ship as default: " in result.stdout
    # on a 2 × 2 grid every setting is on an edge: the knee's edges are named, flag by flag
    assert summary["knee_grid_edges"] and all(e.split(" value")[0].split()[-1] in ("--margins", "--half-lives")
                                              for e in summary["knee_grid_edges"])
    assert "warning: the knee lies on the swept grid's edge" in result.stderr


def test_the_policy_file_holds_the_knee_and_loads_with_replay(calibration, data_dir: Path, tmp_path: Path) -> None:
    _, folder = calibration["2"]
    summary = json.loads((folder / "summary.json").read_text())
    doc = parse_policy_text((folder / "cal.yaml").read_text(), source="cal.yaml")
    assert doc.metadata.source == "calibration"
    assert dict(doc.metadata.calibration.knee) == {"margin_ratio": summary["knee"]["margin_ratio"],
                                                   "half_life_s": summary["knee"]["half_life_s"]}
    assert doc.policy.estimator.margin_ratio == summary["knee"]["margin_ratio"]
    assert len(doc.metadata.calibration.points) == 4
    replayed = run("replay", "--policy", str(folder / "cal.yaml"), "--hours", "0.1", "--no-progress",
                   "--summary-json", str(tmp_path / "replay.json"), data_dir=data_dir)
    assert replayed.returncode == 0, replayed.stderr[-2000:]
    assert (tmp_path / "replay.json").exists()


@pytest.mark.django_db
def test_the_console_calibration_page_imports_it(calibration, client, django_user_model, live) -> None:
    from kalena_web.policy.models import CalibrationImport

    _, folder = calibration["2"]
    summary = json.loads((folder / "summary.json").read_text())
    user = django_user_model.objects.create_user(username="olga", password=PASSWORD)
    user.groups.add(Group.objects.get(name="operator"))
    client.force_login(user)
    posted = client.post("/policy/home/calibration/",
                         {"file": SimpleUploadedFile("cal.yaml", (folder / "cal.yaml").read_bytes())})
    assert posted.status_code == 302, posted.content[:2000]
    page = client.get("/policy/home/calibration/")
    knee = summary["knee"]
    names = [t["name"] for t in json.loads(page.context["figure"])["data"]]
    assert f"knee (μ {knee['margin_ratio']:g}, h {knee['half_life_s']:g} s)" in names
    assert CalibrationImport.objects.count() == 1


def test_results_do_not_depend_on_jobs_and_the_report_is_self_contained(calibration) -> None:
    (_, two), (_, one) = calibration["2"], calibration["1"]
    a, b = (json.loads((f / "summary.json").read_text()) for f in (two, one))
    for summary in (a, b):
        summary.pop("wall_seconds"), summary.pop("load_seconds")
    assert a == b
    html = (two / "report.html").read_text()
    assert html == (one / "report.html").read_text()
    assert "<script src=" not in html
    for div in ("safety-curve", "contention"):
        assert f'id="{div}"' in html


@pytest.mark.parametrize("args, fragment", [
    (["--margins", "0.9"], "argument --margins: 0.9 is not a finite number ≥ 1"),
    (["--margins", "1.1,1.1"], "--margins/--half-lives/--load-factors: a value is named twice"),
    (["--half-lives", "x"], "argument --half-lives: 'x' is not a number"),
    (["--knee-rate", "-1"], "argument --knee-rate: -1 is not a finite number ≥ 0"),
], ids=["margin", "repeat", "half-life", "rate"])
def test_bad_flags_are_refused_naming_the_flag(tmp_path: Path, data_dir: Path, args, fragment) -> None:
    out = tmp_path / "cal.yaml"
    result = run("evaluate", "calibrate", "--hours", "0.1", "--no-progress", "--out", str(out), *args, data_dir=data_dir)
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in result.stderr, result.stderr
    assert not out.exists()


def test_a_knee_on_the_edge_widens_the_grid_and_the_frontier_carries_every_load(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "summary.json"
    result = run("evaluate", "calibrate", "--hours", "0.25", "--margins", "1.2,1.3", "--half-lives", "600",
                 "--load-factors", "1,4", "--widen-rounds", "2", "--jobs", "2", "--no-progress",
                 "--summary-json", str(out), data_dir=data_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(out.read_text())
    knee = summary["knee"]
    # every round widened the margins past the edge the knee was on, by the grid's gap (0.1)
    assert summary["requested_margins"] == [1.2, 1.3]
    added = sorted(set(summary["margins"]) - {1.2, 1.3})
    assert len(added) == summary["widening_rounds"] == len(summary["widened"])
    assert all(round(m * 10, 6) == round(m * 10) for m in added) and all(1.0 <= m <= 1.5 for m in added)
    assert summary["half_lives_s"] == [600.0]  # one value: nothing to widen
    assert summary["replays"] == len(summary["margins"]) * 2
    assert summary["knee_interior"] == (not summary["knee_grid_edges"])
    if summary["knee_interior"]:
        assert min(summary["margins"]) < knee["margin_ratio"] < max(summary["margins"])
        assert "the knee is interior to the swept grid" in result.stdout
    else:
        assert summary["widening_rounds"] == 2 or 1.0 in summary["margins"]
        assert "warning: the knee lies on the swept grid's edge" in result.stderr
    # the frontier (of ×1) with each point's ×1 and ×4 figures, in the JSON and printed
    front = summary["frontier"]
    assert [(f["margin_ratio"], f["half_life_s"]) for f in front] == [
        (p["margin_ratio"], p["half_life_s"]) for p in summary["load_factors"]["1"]["frontier"]]
    for f in front:
        assert set(f["loads"]) == {"1", "4"}
        at4 = {(p["margin_ratio"], p["half_life_s"]): p for p in summary["load_factors"]["4"]["points"]}
        assert f["loads"]["4"] == at4[(f["margin_ratio"], f["half_life_s"])]
    assert "frontier (non-dominated at ×1) with every load factor's figures" in result.stdout
