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
SHORT = ["--hours", "0.5", "--margins", "1.0,1.15", "--half-lives", "300,600", "--grid", "full", "--load-factors", "1,4",
         "--predictors", "asymmetric,nsigma:margin_ratio=1.15:half_life_s=600", "--baselines", "oracle-60m",
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
        # the asymmetric rule across μ × h, the pinned N-sigma variant at its one setting
        assert len(result_at["points"]) == 5
        keys = {(p["predictor"], p["margin_ratio"], p["half_life_s"]) for p in result_at["points"]}
        assert keys == {("asymmetric", m, h) for m in (1.0, 1.15) for h in (300.0, 600.0)} | {
            ("nsigma:margin_ratio=1.15:half_life_s=600", 1.15, 600.0)}
        assert result_at["knee"] in result_at["frontier"]
        assert set(result_at["baselines"]) == {"oracle-60m"}
    knee = summary["knee"]
    assert knee == summary["load_factors"]["1"]["knee"]
    assert isinstance(summary["change_default"], bool) and summary["verdict"]
    assert "knee (×1): " in result.stdout and f"μ {knee['margin_ratio']:g}, h {knee['half_life_s']:g} s" in result.stdout
    assert "ship as default: " in result.stdout
    # the operator's tolerance picks the shipped setting; its table has every load's figures
    ship = summary["shipped"]
    assert ship["setting"] in summary["load_factors"]["1"]["points"]
    assert set(ship["loads"]) == {"1", "4"}
    for load, row in ship["loads"].items():
        oracle = summary["load_factors"][load]["baselines"]["oracle-60m"]["reclaimed_fraction_cpu"]
        assert row["harvest_ratio_vs_oracle_60m"] == pytest.approx(row["reclaimed_fraction_cpu"] / oracle, abs=1e-4)
    assert "shipped default (the operator's tolerance): " in result.stdout
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
    # the file's policy is the shipped setting (predictor variant, μ, h); every load's points are kept
    ship = summary["shipped"]["setting"]
    assert doc.policy.estimator.margin_ratio == ship["margin_ratio"]
    assert doc.policy.estimator.predictor == ship["predictor"].split(":")[0]
    assert dict(doc.metadata.calibration.shipped)["predictor"] == ship["predictor"]
    assert len(doc.metadata.calibration.points) == 10
    assert {p.load_factor for p in doc.metadata.calibration.points} == {1.0, 4.0}
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
    assert f"×1 knee (μ {knee['margin_ratio']:g} · h {knee['half_life_s']:g} s)" in names
    assert any(n.startswith("×1 shipped (") for n in names) and any(n.startswith("×4 shipped (") for n in names)
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
    for div in ("safety-curve-x1", "safety-curve-x4", "contention-x1", "contention-x4"):
        assert f'id="{div}"' in html
    assert "the estimator starts from nothing" in html and a["warm_h"] == 0


def test_a_warmed_calibration_says_so_and_moves_the_periodic_member(tmp_path: Path, data_dir: Path) -> None:
    """``--warm-h``: the periodic member (a day of hours before it serves) reserves differently once
    it is fed the 25 h before the window; the summary, stdout and the report say the window was warmed."""
    common = ["evaluate", "calibrate", "--hours", "0.5", "--usage-offset-h", "26", "--load-factors", "1",
              "--predictors", "periodic:periodic_days=1:margin_ratio=1.15:half_life_s=600:peak_margin_ratio=1",
              "--baselines", "", "--no-progress", "--widen-rounds", "0", "--jobs", "1"]
    got = {}
    for warm in ("0", "25"):
        folder = tmp_path / warm
        result = run(*common, "--warm-h", warm, "--summary-json", str(folder / "s.json"),
                     "--report-html", str(folder / "r.html"), data_dir=data_dir)
        assert result.returncode == 0, result.stderr[-3000:]
        got[warm] = (result.stdout, json.loads((folder / "s.json").read_text()), (folder / "r.html").read_text())
    (cold_out, cold, _), (warm_out, warm, warm_html) = got["0"], got["25"]
    assert "estimator warmed with the 25 h before it" in warm_out and "estimator warmed" not in cold_out
    assert warm["warm_h"] == 25 and "the estimator warmed with the 25 h before it" in warm_html
    cold_point, warm_point = (s["load_factors"]["1"]["points"][0] for s in (cold, warm))
    assert warm_point["reclaimed_fraction_cpu"] != cold_point["reclaimed_fraction_cpu"]


@pytest.mark.parametrize("args, fragment", [
    (["--margins", "0.9"], "argument --margins: 0.9 is not a finite number ≥ 1"),
    (["--margins", "1.1,1.1"], "--margins/--half-lives/--load-factors: a value is named twice"),
    (["--half-lives", "x"], "argument --half-lives: 'x' is not a number"),
    (["--knee-rate", "-1"], "argument --knee-rate: -1 is not a finite number ≥ 0"),
    (["--predictors", "asymmetric,oracle"], "argument --predictors: predictor 'oracle' is unknown"),
    (["--predictors", "nsigma:window_s=60"], "argument --predictors: 'nsigma:window_s=60': window_s 60 is shorter"),
    (["--predictors", "percentile:percentile=101"],
     "'percentile:percentile=101': spec.estimator.percentile: 101.0 is out of range (accepted: a number in [0, 100])"),
    (["--predictors", "nsigma:sigma=2"], "'sigma' is not a predictor key"),
    (["--baselines", "kalena"], "argument --baselines: kalena: each must be one of"),
    (["--usage-offset-h", "5000", "--predictors", "asymmetric", "--margins", "1.15", "--half-lives", "600",
      "--load-factors", "1", "--baselines", ""],
     "--usage-offset-h/--hours: no production usage series covers 0.1 h from 5000 h"),
    (["--usage-offset-h", "24", "--warm-h", "72"], "--warm-h 72 is longer than --usage-offset-h 24"),
    (["--predictors", "asymmetric:memory_margin_ratio=0.5"],
     "spec.estimator.memory_margin_ratio: 0.5 is out of range (accepted: a number in [1, 10] or null)"),
], ids=["margin", "repeat", "half-life", "rate", "predictor", "window", "percentile", "key", "baseline", "offset",
        "warm-up", "memory-margin"])
def test_bad_flags_are_refused_naming_the_flag(tmp_path: Path, data_dir: Path, args, fragment) -> None:
    out = tmp_path / "cal.yaml"
    result = run("evaluate", "calibrate", "--hours", "0.1", "--no-progress", "--out", str(out), *args, data_dir=data_dir)
    assert result.returncode == 2, result.stdout + result.stderr
    assert fragment in result.stderr, result.stderr
    assert not out.exists()


def test_a_knee_on_the_edge_widens_the_grid_and_the_frontier_carries_every_load(tmp_path: Path, data_dir: Path) -> None:
    out = tmp_path / "summary.json"
    result = run("evaluate", "calibrate", "--hours", "0.25", "--margins", "1.2,1.3", "--half-lives", "600",
                 "--predictors", "asymmetric", "--baselines", "",
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


def test_the_default_sweep_is_a_cross_that_grows_towards_the_knee(tmp_path: Path, data_dir: Path) -> None:
    """Without --margins/--half-lives/--grid/--predictors: the asymmetric rule on a cross of the
    default grid (every margin at h 1200 s, every half-life at μ 1.45), only settings beside the
    knee added while it lies on an edge — and the shipped default at its own setting beside it."""
    from kalena_engine.policy import Policy

    out = tmp_path / "summary.json"
    result = run("evaluate", "calibrate", "--hours", "0.25", "--load-factors", "1", "--baselines", "",
                 "--no-progress", "--summary-json", str(out), data_dir=data_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(out.read_text())
    shipped = Policy().estimator
    default = f"{shipped.predictor}:margin_ratio={shipped.margin_ratio:g}:half_life_s={shipped.half_life_s:g}"
    assert summary["grid"] == "cross" and summary["predictors"] == ["asymmetric", default]
    assert [tuple(s) for s in summary["settings"][default]] == [(shipped.margin_ratio, shipped.half_life_s)]
    assert summary["requested_margins"] == [1.3, 1.45, 1.6] and summary["requested_half_lives_s"] == [600, 1200, 2400]
    swept = [tuple(s) for s in summary["settings"]["asymmetric"]]
    cross = [(1.3, 1200.0), (1.45, 1200.0), (1.6, 1200.0), (1.45, 600.0), (1.45, 2400.0)]
    assert swept[:5] == cross and len(set(swept)) == len(swept) == summary["replays"] - 1
    assert (len(swept) > 5) == (summary["widening_rounds"] > 0)
    knee = (summary["knee"]["margin_ratio"], summary["knee"]["half_life_s"])
    row = [m for m, h in swept if h == knee[1]]
    column = [h for m, h in swept if m == knee[0]]
    if summary["knee_interior"]:
        # swept on both sides of the knee along its row and its column
        assert min(row) < knee[0] < max(row) and min(column) < knee[1] < max(column)
        assert "the knee is interior to the swept grid" in result.stdout
    else:
        assert summary["widening_rounds"] == 3 or knee[0] == 1.0
        assert "warning: the knee lies on the swept grid's edge" in result.stderr
    # a full sweep of a 3 × 3 grid costs 9 replays at this load; the cross grows only where the knee is
    assert summary["replays"] <= 5 + 3 * summary["widening_rounds"] + 1  # + the shipped default


def test_the_help_and_the_docs_name_the_default_grid(data_dir: Path) -> None:
    from kalena_engine.replay.calibration import DEFAULT_PREDICTORS, HALF_LIVES, MARGINS

    margins, lives = ",".join(f"{m:g}" for m in MARGINS), ",".join(f"{h:g}" for h in HALF_LIVES)
    result = run("evaluate", "calibrate", "--help", data_dir=data_dir)
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    assert f"(default {margins})" in text and f"(default {lives})" in text
    assert f"(default {','.join(DEFAULT_PREDICTORS)})" in text.replace("- ", "-") and "(default)" in text
    docs = (Path(__file__).resolve().parents[2] / "docs" / "evaluation.md").read_text()
    assert f"[--margins {margins}] [--half-lives {lives}]" in docs
