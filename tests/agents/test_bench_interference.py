"""``kalena-agent bench interference``: a short run on real cgroups with h2load and the real agent
measures what it says (every arm served the offered load, latencies and scheduling delay recorded,
batch ran only where it should, the agent acted only in its arm, the report was written, the
cgroups were removed); bad flags exit 2 naming the flag and create nothing; the arithmetic's
docstring examples hold. No assertion on how fast anything was."""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agents.bench import interference_stats as st

AGENT = [sys.executable, "-m", "agents.cli"]
ARMS = ("isolated", "colocated_unmanaged", "colocated_kalena")


def _port() -> int:
    """A free port in this branch's range (26000–26999)."""
    for _ in range(200):
        port = random.randint(26000, 26999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port in 26000-26999")


def _interference_groups() -> set[str]:
    return {p.name for p in Path("/sys/fs/cgroup/cpu").glob("kalena-interference-*")}


@pytest.mark.cgroup
def test_short_run_measures_every_arm_on_the_same_offered_load(tmp_path) -> None:
    summary_path, report = tmp_path / "interference.json", tmp_path / "interference.html"
    rate, steady, spike, recover = 40, 4, 4, 2
    result = subprocess.run([*AGENT, "bench", "interference", "--repetitions", "1", "--rate", str(rate),
                             "--clients", "4", "--steady-s", str(steady), "--spike-s", str(spike),
                             "--recover-s", str(recover), "--settle-s", "2", "--port", str(_port()),
                             "--summary-json", str(summary_path), "--report-html", str(report)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    offered = rate * (steady + spike + recover) + rate * spike
    runs = {r["arm"]: r for r in summary["per_arm_run"]}
    assert set(summary["arms"]) == set(ARMS) == set(runs)
    for name in ARMS:
        arm, run = summary["arms"][name], runs[name]
        assert run["offered_requests"] == offered
        # every arm served the offered load (h2load paces each connection; a saturated service falls short)
        assert run["responses_2xx"] >= 0.95 * offered, (name, run["responses_2xx"], offered)
        assert run["responses"] == run["responses_2xx"]
        assert 0 < arm["p50_ms"] <= arm["p99_ms"] <= arm["p999_ms"]
        # the spike really doubled the load (requests started inside it; late-paced ones may fall after it)
        assert arm["spike_p99_ms"] is not None and run["spike"]["count"] >= 1.5 * rate * spike
        assert arm["throughput_rps"] == pytest.approx(rate, rel=0.25)
        assert 0 < run["service_cpu_seconds"] and run["service_cpu_ms_per_request"] > 0
        # scheduling delay recorded, and its buckets add up to the whole
        wait = run["wait"]
        assert wait["runnable_s"] > 0 and wait["intervals"] > 0
        assert sum(b["runnable_s"] for b in wait["by_utilisation"]) == pytest.approx(wait["runnable_s"], rel=0.05)
        assert 0 <= arm["wait_over_10ms_share"] <= arm["wait_over_5ms_share"] <= arm["wait_share"] <= 1
        assert [b["bucket"] for b in arm["wait_by_utilisation"]] == ["0-20%", "20-40%", "40-60%", "60-80%", "80-100%"]
        assert run["node_util_mean_pct"] is not None and len(run["loadavg_before"]) == 3
        assert len(run["p99_windows"]) == steady + spike + recover
    # batch ran only in the co-located arms; the agent acted only in its own arm
    assert runs["isolated"]["batch_cpu_seconds"] == 0
    assert runs["colocated_unmanaged"]["batch_cpu_seconds"] > 0 and runs["colocated_kalena"]["batch_cpu_seconds"] > 0
    assert "throttle" in runs["colocated_kalena"]["agent_actions"]
    assert runs["isolated"]["agent_actions"] == {} == runs["colocated_unmanaged"]["agent_actions"]
    assert summary["p99_ratio_kalena_vs_isolated"] == pytest.approx(
        summary["arms"]["colocated_kalena"]["p99_ms"] / summary["arms"]["isolated"]["p99_ms"])
    assert set(summary["goal"]) == {"kalena_p99_within_10pct_of_isolated", "kalena_batch_at_least_half_of_unmanaged"}
    assert summary["machine"]["psi_trigger_window_s"] == 2.0 and "h2load" in summary["machine"]["load_generator"]
    # printed table and report
    assert "goal: Kalena p99 within 10 % of isolated" in result.stdout and "co-located, Kalena agent" in result.stdout
    html = report.read_text()
    assert "plotly" in html and "co-located, unmanaged" in html and "offered load ×2" in html
    # its cgroups are gone (others' runs may be under way, so only its own is checked)
    assert summary["machine"]["cgroup_parent"] not in _interference_groups()
    assert not Path("/sys/fs/cgroup/cpuset", summary["machine"]["cgroup_parent"]).exists()


@pytest.mark.parametrize(("argv", "named"), [
    (["--rate", "0"], "--rate"),
    (["--repetitions", "0"], "--repetitions"),
    (["--node-cpus", "99"], "--node-cpus"),
    (["--node-cpus", "one"], "--node-cpus"),
    (["--spike-s", "-1"], "--spike-s"),
    (["--port", "70000"], "--port"),
    (["--node-weight", "1"], "--node-weight"),
    (["--service-request-mcpu", "5000"], "--service-request-mcpu"),
])
def test_bad_flags_exit_2_naming_the_flag_and_create_nothing(argv, named, tmp_path) -> None:
    before = _interference_groups()
    result = subprocess.run([*AGENT, "bench", "interference", *argv, "--summary-json", str(tmp_path / "s.json")],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert named in result.stdout + result.stderr
    assert not (tmp_path / "s.json").exists()
    assert _interference_groups() <= before


def test_arithmetic_matches_its_documented_examples() -> None:
    windows = st.windowed_p99(np.array([0.1, 0.2, 1.5]), np.array([1.0, 3.0, 2.0]), t0_s=0.0, t1_s=2.0)
    assert [(w[0], w[2]) for w in windows] == [(0.0, 2), (1.0, 1)]
    assert windows[0][1] == pytest.approx(2.98) and windows[1][1] == 2.0
    spike = [(float(k), p, 10) for k, p in enumerate([9, 9, 2, 2, 2])]
    assert st.restored_after_s(spike, spike_start_s=0.0, spike_end_s=5.0, bound_ms=3.0) == 3.0
    assert st.restored_after_s(spike, spike_start_s=0.0, spike_end_s=4.0, bound_ms=3.0) is None  # run cut by the end
    assert st.classify_interval(12e6, 2, 5.0) and not st.classify_interval(12e6, 2, 10.0)
    assert st.classify_interval(6e6, 0, 5.0)                                   # waited through the interval
    assert not st.classify_interval(4e6, 0, 5.0) and not st.classify_interval(9e6, 3, 5.0)
    tally = st.WaitTally.empty()
    tally.add(cpu_ns=8e6, wait_ns=12e6, slices=2, util_pct=90.0)   # long at 5 ms
    tally.add(cpu_ns=18e6, wait_ns=2e6, slices=2, util_pct=10.0)   # short
    shares = tally.shares()
    assert shares["wait_over_5ms_share"] == pytest.approx(12 / 40) and shares["wait_over_10ms_share"] == 0
    assert shares["by_utilisation"][4]["wait_over_5ms_share"] == pytest.approx(12 / 20)
    assert shares["by_utilisation"][0]["wait_over_5ms_share"] == 0
    assert st.bucket_of(100.0) == 4 and st.bucket_of(19.9) == 0 and st.bucket_of(20.0) == 1
