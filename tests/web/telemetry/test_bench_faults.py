"""``kalena bench faults --short`` end to end (the CI size: 12 agents, 120 samples/s, six fault
rows): a private PostgreSQL cluster and Redis of its own, real Daphne, worker, beat and link
clients; every row reconciles the database against the generated log and meets the floor."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kalena_web.cli.bench_faults import FLOOR_RECOVERY_S, SHORT_FAULTS

COLUMNS = ["fault", "samples_sent", "samples_stored", "samples_lost", "double_applied", "reservations_mismatched",
           "recovery_s"]
# why a recovery took what it took: the ledger's catch-up, the reconnects, the backlog and the
# rates that drained it, the CPU it had and the machine's load
CAUSES = ["applied_s", "reconnect_s", "backlog_samples", "arrival_per_s", "drain_per_s", "samples_per_write", "cores",
          "machine_busy_pct", "load_1m"]
# the worker-kill row: how soon the control loops ran again after the workers were killed
LOOPS = ["locks_held_at_kill", "loop_gap_s"]


def test_the_short_fault_suite_loses_nothing_applies_nothing_twice_and_recovers(tmp_path: Path) -> None:
    summary_path = tmp_path / "faults.json"
    kalena = Path(sys.executable).parent / "kalena"
    done = subprocess.run([str(kalena), "bench", "faults", "--short", "--pg-port", "23433", "--redis-port", "23380",
                           "--daphne-port", "23801", "--state-dir", str(tmp_path / "state"),
                           "--summary-json", str(summary_path)], capture_output=True, text=True, timeout=900)
    assert summary_path.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads(summary_path.read_text())
    rows = summary["rows"]
    assert [r["fault"] for r in rows] == list(SHORT_FAULTS)
    for row in rows:
        assert list(row) == COLUMNS + CAUSES + LOOPS
        assert row["samples_sent"] > 0 and row["samples_stored"] == row["samples_sent"], row
        assert (row["samples_lost"], row["double_applied"], row["reservations_mismatched"]) == (0, 0, 0), row
        # recovered (stored exactly once, then applied) before the bench gave up; the 30 s floor is
        # the benchmark's verdict (`floor_met`, exit code), not a timed assertion on a loaded machine
        assert row["recovery_s"] is not None and row["applied_s"] is not None, row
        assert row["recovery_s"] <= row["applied_s"], row
        assert row["reconnect_s"] is not None, row                  # every agent connected again
    killed = rows[SHORT_FAULTS.index("worker-kill")]
    # killed inside a scheduling pass, and both loops that run without Kubernetes ran again
    # (publish runs only with KALENA_ORCHESTRATOR=kubernetes: null here)
    assert "scheduling" in killed["locks_held_at_kill"], killed
    assert set(killed["loop_gap_s"]) == {"scheduling", "escalation", "publish"}, killed
    assert killed["loop_gap_s"]["scheduling"] is not None and killed["loop_gap_s"]["escalation"] is not None, killed
    assert killed["loop_gap_s"]["publish"] is None, killed
    assert all(r["loop_gap_s"] is None for r in rows if r is not killed)
    logged = sum(len(json.loads(line)["samples"]) for line in Path(summary["generated_log"]).read_text().splitlines())
    assert logged == sum(r["samples_sent"] for r in rows)                   # reconciled against the whole log
    floor = all(r["recovery_s"] <= FLOOR_RECOVERY_S and r["applied_s"] <= FLOOR_RECOVERY_S for r in rows)
    assert summary["floor_met"] is floor and done.returncode == (0 if floor else 1), done.stderr[-2000:]
