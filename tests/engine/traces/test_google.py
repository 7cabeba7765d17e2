"""Google cluster-usage trace 2011: task_events, task_usage, the SUBMIT join and batch tasks."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from kalena_engine.errors import TraceError
from kalena_engine.resources import CPU, GIB, RAM
from kalena_engine.traces import (
    batch_tasks_from_events, priority_tier, production_peak_ratios, read_task_events,
    read_task_usage,
)
from kalena_engine.traces.google import EVENT_TYPES

USAGE_HEADER = ("start_time,end_time,job_id,task_index,machine_id,cpu_rate,canonical_memory,"
                "assigned_memory,unmapped_page_cache,total_page_cache,max_memory,disk_io_time,"
                "local_disk_space,max_cpu_rate")


@pytest.fixture(scope="module")
def google_dir(traces_dir: Path) -> Path:
    return traces_dir / "google-2011"


@pytest.fixture(scope="module")
def events(google_dir: Path):
    return read_task_events(google_dir / "task_events-part-00000-of-00500.csv.gz")


@pytest.fixture(scope="module")
def usage(google_dir: Path):
    return read_task_usage(google_dir / "task_usage-part-00000-first10000.csv.gz")


def event(t_s: float, job: int, task: int, kind: int, prio: int, cpu: str = "0.0625",
          mem: str = "0.01", missing: str = "") -> str:
    """One task_events line: time µs, missing, job, task, machine, type, user, class, prio, …"""
    return f"{round(t_s * 1e6)},{missing},{job},{task},,{kind},user,0,{prio},{cpu},{mem},0.001,0"


def usage_row(start_s: float, job: int, task: int, max_cpu: float, max_mem: float) -> str:
    return (f"{round(start_s * 1e6)},{round((start_s + 300) * 1e6)},{job},{task},1,0.01,0.01,"
            f"0.01,0,0,{max_mem},0,0,{max_cpu}")


def write_gz(path: Path, lines: list[str]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


# --- the real files ---------------------------------------------------------------------------

def test_real_task_events(events) -> None:
    # README: 450,146 events, t = 0 … 5,611 s. The only oddity: 291 SUBMITs flagged
    # "missing info" (= 2) with empty requests (awk '$10==""' counts 291, all event type 0).
    assert len(events) == 450_146
    assert events.anomalies == {"google.empty_request": 291}
    assert events.time_s.min() == 0.0 and events.time_s.max() == pytest.approx(5611.086346)
    # Event counts per type from `zcat … | cut -d, -f6 | sort | uniq -c`.
    counts = dict(zip(EVENT_TYPES, np.bincount(events.event_type, minlength=9).tolist(),
                      strict=True))
    assert counts == {"SUBMIT": 201_491, "SCHEDULE": 189_994, "EVICT": 4_338, "FAIL": 581,
                      "FINISH": 43_237, "KILL": 10_505, "LOST": 0, "UPDATE_PENDING": 0,
                      "UPDATE_RUNNING": 0}
    assert int(np.isnan(events.cpu_request).sum()) == 291


def test_real_task_usage(usage) -> None:
    assert len(usage) == 10_000
    assert usage.anomalies == {}
    assert (usage.start_s == 600.0).all() and (usage.end_s <= 900.0).all()
    assert np.isfinite(usage.max_cpu_rate).all() and np.isfinite(usage.max_memory).all()


def test_real_production_peak_ratios(events, usage) -> None:
    got = production_peak_ratios(events, usage)
    # Independent check (a throwaway csv-module script with a dict of SUBMITs per (job, task)):
    # every usage row's key has a SUBMIT; 9,891 of those SUBMITs have requests and 8,179 are
    # priority ≥ 9 with both requests > 0, as the README and docs/design.md §11 state. Of the 8,179, max_cpu_rate exceeds the CPU request in 6,209
    # rows and max_memory exceeds the memory request in 4,772 — both ratios are capped at 1.
    assert (got.usage_rows, got.joined, got.with_requests, got.production) == (
        10_000, 10_000, 9_891, 8_179)
    assert (got.capped_cpu, got.capped_mem) == (6_209, 4_772)
    assert got.ratios.shape == (8_179, 2)
    assert (got.ratios >= 0).all() and (got.ratios <= 1).all()
    assert (got.priority >= 9).all()
    assert int((got.ratios[:, 0] == 1).sum()) >= 6_209


def test_real_batch_tasks(events) -> None:
    tasks = batch_tasks_from_events(events)
    # Independent check (dict of events per (job, task), sorted by time): of the tasks with
    # priority < 9, 11,129 are never scheduled in the shard, 189 have an empty request and
    # 123,264 remain, of which 71,565 are still running at the shard's end (5,611 s).
    assert len(tasks) == 123_264
    assert tasks.anomalies == {
        "google.censored_duration": 71_565, "google.empty_request": 291,
        "google.never_scheduled": 11_129, "google.task_without_request": 189,
    }
    assert tasks.duration_s.sum() == pytest.approx(428_707_231.2, rel=1e-9)
    assert (tasks.priority < 9).all() and (tasks.duration_s > 0).all()
    assert (tasks.instances == 1).all()
    assert len(np.unique(tasks.task_id)) == len(tasks)


# --- small synthetic shard --------------------------------------------------------------------

@pytest.fixture()
def shard(tmp_path: Path):
    path = write_gz(tmp_path / "task_events.csv.gz", [
        event(1, 1, 0, 0, 0), event(2, 1, 0, 1, 0), event(12, 1, 0, 4, 0),      # 10 s
        event(1, 1, 1, 0, 0), event(3, 1, 1, 1, 0), event(5, 1, 1, 2, 0),       # evicted: 2 s
        event(6, 1, 1, 0, 0, cpu="0.125"), event(7, 1, 1, 1, 0), event(20, 1, 1, 4, 0),
        event(2, 2, 0, 0, 4), event(4, 2, 0, 1, 4),                             # censored
        event(5, 3, 0, 0, 2),                                                   # never scheduled
        event(1, 4, 0, 0, 10, cpu="0.5", mem="0.2"),                            # production
        event(10, 4, 0, 0, 10, cpu="0.25", mem="0.1"),
        event(1, 5, 0, 0, 1, cpu="", mem="", missing="2"), event(2, 5, 0, 1, 1),
        event(1, 6, 0, 0, 0, cpu="0", mem="0"), event(2, 6, 0, 1, 0), event(3, 6, 0, 4, 0),
        event(8, 7, 0, 0, 0), event(9, 7, 0, 1, 0), event(9, 7, 0, 4, 0),       # zero duration
        event(20, 8, 0, 0, 11, cpu="0.1", mem="0.1"),
        event(1, 10, 0, 0, 9, cpu="0", mem="0.1"),
        event(30, 9, 0, 4, 0),                                                  # no SUBMIT
        "garbage",                                                              # unparseable
        event(3, 11, 0, 12, 0),                                                 # type 12
        "1,,2,3,,0,user,0,9,0.1,0.1,0",                                         # 12 columns
        event(1, 99999999999999999999, 0, 0, 0),                                # beyond int64
    ])
    return read_task_events(path)


def test_synthetic_events_anomalies(shard) -> None:
    assert shard.anomalies == {"google.empty_request": 1, "google.out_of_range": 1,
                               "google.unparseable_row": 3}
    assert len(shard) == 25  # 30 lines − 5 skipped
    assert shard.time_s[0] == 1.0 and shard.cpu_request[0] == 0.0625


def test_synthetic_batch_tasks(shard) -> None:
    tasks = batch_tasks_from_events(shard, machine_cores=32, machine_ram_bytes=64 * GIB)
    assert tasks.task_id.tolist() == ["google:1:0", "google:1:1", "google:2:0"]
    assert tasks.job_id.tolist() == ["1", "1", "2"]
    assert tasks.arrival_s.tolist() == [1.0, 1.0, 2.0]   # first SUBMIT
    # 1:0 SCHEDULE 2 s → FINISH 12 s; 1:1 SCHEDULE 3 s → EVICT 5 s (first terminal after the
    # first SCHEDULE); 2:0 SCHEDULE 4 s → shard end 30 s (censored).
    assert tasks.duration_s.tolist() == [10.0, 2.0, 26.0]
    # 0.0625 × 32 cores × 1000 = 2000 mcpu; 0.01 × 64 GiB = 0.64 GiB (first SUBMIT's request).
    np.testing.assert_allclose(tasks.request[:, CPU], [2000.0] * 3)
    np.testing.assert_allclose(tasks.request[:, RAM], [0.64 * GIB] * 3)
    assert tasks.priority.tolist() == [0, 0, 4]
    assert tasks.anomalies == {
        "google.censored_duration": 1, "google.empty_request": 1, "google.never_scheduled": 1,
        "google.no_submit": 1, "google.out_of_range": 1, "google.task_without_request": 1,
        "google.unparseable_row": 3, "google.zero_duration": 1, "google.zero_request": 1,
    }


def test_synthetic_peak_ratios_use_latest_submit_at_or_before_the_window(shard, tmp_path) -> None:
    usage = read_task_usage(write_gz(tmp_path / "usage.csv.gz", [
        USAGE_HEADER,
        usage_row(5, 4, 0, max_cpu=0.25, max_mem=0.3),   # SUBMIT at 1 s: 0.25/0.5, 0.3/0.2 → 1
        usage_row(10, 4, 0, max_cpu=0.5, max_mem=0.05),  # SUBMIT at 10 s: 0.5/0.25 → 1, 0.05/0.1
        usage_row(5, 8, 0, max_cpu=0.05, max_mem=0.02),  # only SUBMIT is later (20 s): the first
        usage_row(5, 5, 0, max_cpu=0.1, max_mem=0.1),    # SUBMIT without requests
        usage_row(5, 99, 0, max_cpu=0.1, max_mem=0.1),   # no SUBMIT at all
        usage_row(5, 1, 0, max_cpu=0.1, max_mem=0.1),    # batch priority
        usage_row(5, 10, 0, max_cpu=0.1, max_mem=0.1),   # production but cpu request 0
        "bad,row",
        usage_row(5, 99999999999999999999, 0, max_cpu=0.1, max_mem=0.1),   # beyond int64
    ]))
    assert usage.anomalies == {"google.unparseable_row": 2}
    got = production_peak_ratios(shard, usage)
    assert (got.usage_rows, got.joined, got.with_requests, got.production) == (7, 6, 5, 3)
    assert (got.capped_cpu, got.capped_mem) == (1, 1)
    np.testing.assert_allclose(got.ratios, [[0.5, 1.0], [1.0, 0.5], [0.5, 0.2]])
    assert got.job_id.tolist() == [4, 4, 8] and got.priority.tolist() == [10, 10, 11]


@pytest.mark.parametrize(("priority", "tier"), [
    (0, "batch"), (1, "batch"),            # free
    (2, "batch"), (8, "batch"),            # middle
    (9, "service"), (11, "service"),       # production
])
def test_priority_tier(priority: int, tier: str) -> None:
    assert priority_tier(priority) == tier


@pytest.mark.parametrize("priority", [-1, 12])
def test_priority_tier_rejects_out_of_band(priority: int) -> None:
    with pytest.raises(ValueError, match="0–11"):
        priority_tier(priority)


def test_unreadable_files_raise_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open"):
        read_task_events(tmp_path / "missing.csv.gz")
    empty = write_gz(tmp_path / "empty.csv.gz", [])
    with pytest.raises(TraceError, match="no task_events rows"):
        read_task_events(tmp_path / "empty.csv.gz")
    headerless = write_gz(tmp_path / "usage.csv.gz", ["600000000,900000000,1,0,1,0.1"])
    with pytest.raises(TraceError, match="header lacks column") as caught:
        read_task_usage(headerless)
    assert str(headerless) in str(caught.value)
    assert empty.exists()
