"""Alibaba cluster-trace-v2018 batch_task reader, and the BatchTasks helpers it feeds."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import numpy as np
import pytest

from kalena_engine.errors import TraceError
from kalena_engine.resources import CPU, GIB, RAM
from kalena_engine.traces import (
    Anomalies, read_batch_task, scale_load, select_window, sorted_by_arrival, sum_counts,
    total_instances,
)

HEADER = "task_name,instance_num,job_name,task_type,status,start_time,end_time,plan_cpu,plan_mem"


@pytest.fixture(scope="module")
def batch_file(traces_dir: Path) -> Path:
    return traces_dir / "alibaba-2018" / "batch_task-first50000.csv.gz"


@pytest.fixture(scope="module")
def tasks(batch_file: Path):
    return read_batch_task(batch_file)


def write_gz(path: Path, lines: list[str]) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


# --- the real file ----------------------------------------------------------------------------

def test_real_file_anomaly_counts(tasks) -> None:
    # Computed independently with awk over the 50,000 rows, checks in the reader's order
    # (empty plan first, then end < start, then end == start):
    #   zcat … | awk -F, 'NR>1 { if ($8==""||$9=="") e++; else if ($7<$6) b++;
    #                           else if ($7==$6) z++ }'  → 199, 64, 2733.
    # The README's "150 end before they start" counts rows regardless of plan: 86 of those 150
    # (all status Running with end_time 0) also have an empty plan and are counted there.
    assert tasks.anomalies == {
        "alibaba.empty_plan": 199,
        "alibaba.end_before_start": 64,
        "alibaba.zero_duration": 2733,
    }
    # 50,000 rows − 199 − 64 − 2,733 = 47,004 tasks; Σ instance_num over them (awk) = 5,346,112.
    assert len(tasks) == 47_004
    assert total_instances(tasks) == 5_346_112


def test_real_file_busy_day_window(tasks, batch_file: Path) -> None:
    with gzip.open(batch_file, "rt") as handle:
        rows = csv.reader(handle)
        next(rows)
        raw = sum(1 for row in rows if 86_400 <= int(row[5]) < 172_800)
    assert raw == 6_404  # rows in [86,400, 172,800) before cleaning
    day = select_window(tasks, 86_400, 172_800)
    # awk over the same window: 9 empty plan, 5 end < start, 348 zero duration → 6,042 kept,
    # 903,427 instances (the README's "a busy day has ~900,000 instances").
    assert len(day) == 6_404 - 9 - 5 - 348 == 6_042
    assert total_instances(day) == 903_427
    assert day.arrival_s.min() >= 86_400 and day.arrival_s.max() < 172_800  # trace time kept


def test_real_file_row_mapping(tasks) -> None:
    # R6_3,371,j_3,1,Terminated,157297,157325,100,0.49 → 371 pods of 100 × 10 = 1000 mcpu and
    # 0.49 / 100 × 512 GiB = 2.5088 GiB, arriving at 157,297 s for 157,325 − 157,297 = 28 s.
    row = int(np.flatnonzero(tasks.task_id == "j_3/R6_3")[0])
    assert tasks.job_id[row] == "j_3"
    assert tasks.instances[row] == 371
    assert tasks.arrival_s[row] == 157_297 and tasks.duration_s[row] == 28
    assert tasks.request[row, CPU] == pytest.approx(1000.0)
    assert tasks.request[row, RAM] == pytest.approx(0.0049 * 512 * GIB)
    assert not tasks.request[row, 2:].any()
    assert (tasks.priority == 0).all()
    assert len(set(tasks.task_id.tolist())) == len(tasks)
    assert (tasks.duration_s > 0).all() and (tasks.instances >= 1).all()


def test_machine_ram_is_a_parameter(batch_file: Path, tasks) -> None:
    small = read_batch_task(batch_file, machine_ram_bytes=256 * GIB)
    np.testing.assert_allclose(small.request[:, RAM], tasks.request[:, RAM] / 2)
    with pytest.raises(ValueError, match="machine_ram_bytes"):
        read_batch_task(batch_file, machine_ram_bytes=0)


# --- every anomaly kind in a small file -------------------------------------------------------

def test_each_anomaly_kind_is_counted_and_good_rows_survive(tmp_path: Path) -> None:
    path = write_gz(tmp_path / "batch.csv.gz", [
        HEADER,
        "M1,2,j_1,1,Terminated,100,110,50,0.5",          # good: 2 × (500 mcpu, 0.5 % RAM), 10 s
        "R2_1,1,j_1,1,Terminated,105,125,100,1",         # good
        "M1,1,j_2,1,Running,200,0,,",                    # empty_plan (also end < start)
        "M2,1,j_2,1,Running,300,0,100,1",                # end_before_start
        "M3,1,j_2,1,Terminated,400,400,100,1",           # zero_duration
        "M4,0,j_2,1,Terminated,400,410,100,1",           # bad_instance_num (0)
        "M5,two,j_2,1,Terminated,400,410,100,1",         # bad_instance_num (unparseable)
        "M5b,99999999999999999999,j_2,1,Terminated,400,410,100,1",   # bad_instance_num (beyond int64)
        "M6,1,j_2,1,Terminated,400,410",                 # unparseable_row (7 columns)
        "M7,1,j_2,1,Terminated,soon,410,100,1",          # unparseable_row (non-numeric time)
        "M8,1,j_2,1,Terminated,400,410,0,0",             # zero_request
        "M9,1,j_2,1,Terminated,400,410,-5,1",            # negative_plan
        "M1,3,j_1,1,Terminated,500,530,25,0.25",         # duplicate_task: kept as j_1/M1#2
    ])
    got = read_batch_task(path, machine_ram_bytes=100 * GIB)
    assert got.anomalies == {
        "alibaba.bad_instance_num": 3, "alibaba.duplicate_task": 1, "alibaba.empty_plan": 1,
        "alibaba.end_before_start": 1, "alibaba.negative_plan": 1,
        "alibaba.unparseable_row": 2, "alibaba.zero_duration": 1, "alibaba.zero_request": 1,
    }
    assert got.task_id.tolist() == ["j_1/M1", "j_1/R2_1", "j_1/M1#2"]
    assert got.job_id.tolist() == ["j_1", "j_1", "j_1"]
    assert got.instances.tolist() == [2, 1, 3]
    assert got.arrival_s.tolist() == [100, 105, 500]
    assert got.duration_s.tolist() == [10, 20, 30]
    # plan_cpu 50 → 500 mcpu; plan_mem 0.5 % of 100 GiB → 0.5 GiB
    np.testing.assert_allclose(got.request[0, :2], [500.0, 0.5 * GIB])
    assert total_instances(got) == 6


@pytest.mark.parametrize(("case", "content", "message"), [
    ("not gzip", b"task_name,instance_num\n", "not a gzip file"),
    ("wrong header", gzip.compress(b"a,b,c\n1,2,3\n"), "unexpected header"),
    ("empty", gzip.compress(b""), "empty file"),
    ("truncated", gzip.compress("\n".join(
        [HEADER] + [f"M{i},1,j_{i},1,T,{i},{i + 7},3,4" for i in range(5000)]).encode())[:400],
     "truncated"),
])
def test_unreadable_file_raises_trace_error_naming_it(tmp_path: Path, case: str, content: bytes,
                                                      message: str) -> None:
    path = tmp_path / "batch_task.csv.gz"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as caught:
        read_batch_task(path)
    assert str(path) in str(caught.value)


def test_missing_file_raises_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot open") as caught:
        read_batch_task(tmp_path / "absent.csv.gz")
    assert "absent.csv.gz" in str(caught.value)


# --- BatchTasks helpers -----------------------------------------------------------------------

@pytest.fixture()
def small(tmp_path: Path):
    return read_batch_task(write_gz(tmp_path / "small.csv.gz", [
        HEADER,
        "A,4,j_1,1,Terminated,300,310,100,1",
        "B,1,j_1,1,Terminated,100,110,100,1",
        "C,10,j_2,1,Terminated,200,210,100,1",
        "D,3,j_3,1,Terminated,100,130,100,1",
    ]))


def test_select_window_is_half_open_and_keeps_trace_time(small) -> None:
    got = select_window(small, 100, 300)  # 300 itself is excluded
    assert got.task_id.tolist() == ["j_1/B", "j_2/C", "j_3/D"]
    assert got.arrival_s.tolist() == [100, 200, 100]
    with pytest.raises(ValueError, match="before its start"):
        select_window(small, 300, 100)


def test_sorted_by_arrival_is_stable(small) -> None:
    assert sorted_by_arrival(small).task_id.tolist() == ["j_1/B", "j_3/D", "j_2/C", "j_1/A"]


def test_scale_load_keeps_expected_total(tasks) -> None:
    day = select_window(tasks, 86_400, 172_800)
    rng = np.random.default_rng(7)
    totals = [total_instances(scale_load(day, 0.3, rng)) for _ in range(20)]
    # E = 0.3 × 903,427 = 271,028.1; the rounding noise is at most ±√k/2 per draw, far below 1 %.
    assert np.mean(totals) == pytest.approx(0.3 * 903_427, rel=0.005)
    assert total_instances(scale_load(day, 2.0, rng)) == 2 * 903_427  # integer factor: exact


@pytest.mark.parametrize(("factor", "expected"), [
    (1.0, [4, 1, 10, 3]),     # identity
    (0.5, None),              # 2, 0–1, 5, 1–2: rows rounding to 0 are dropped
])
def test_scale_load_rounds_each_row(small, factor: float, expected: list[int] | None) -> None:
    got = scale_load(small, factor, np.random.default_rng(0))
    if expected is not None:
        assert got.instances.tolist() == expected
    assert (got.instances >= 1).all()
    n = dict(zip(small.task_id.tolist(), small.instances.tolist(), strict=True))
    for task, count in zip(got.task_id.tolist(), got.instances.tolist(), strict=True):
        assert np.floor(n[task] * factor) <= count <= np.ceil(n[task] * factor)


@pytest.mark.parametrize("factor", [0.0, -1.0, float("nan"), float("inf")])
def test_scale_load_rejects_bad_factor(small, factor: float) -> None:
    with pytest.raises(ValueError, match="load factor"):
        scale_load(small, factor, np.random.default_rng(0))


def test_anomalies_helper() -> None:
    counts = Anomalies("alibaba")
    counts.add("empty_plan")
    counts.add("empty_plan", 2)
    counts.add("zero_request", 0)  # zero counts are not reported
    assert counts.as_dict() == {"alibaba.empty_plan": 3}
    assert counts["empty_plan"] == 3 and counts["alibaba.zero_request"] == 0
    with pytest.raises(ValueError, match="snake_case"):
        counts.add("EmptyPlan")
    assert sum_counts({"a.x": 1}, {"a.x": 2, "a.y": 0}) == {"a.x": 3}
