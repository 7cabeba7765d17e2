"""The columnar (pyarrow) path of the trace readers gives exactly what the row-by-row path gives:
same arrays, same anomaly counts, same errors — on the real files and on messy ones."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

import kalena_engine.traces.anomalies as anomalies_module
import kalena_engine.traces.bitbrains as bitbrains
import kalena_engine.traces.google as google
from kalena_engine.errors import TraceError
from kalena_engine.traces.bitbrains import COLUMNS, read_vm_series
from kalena_engine.traces.google import read_task_events

VM_FIELDS = ("timestamp_s", "cpu_provisioned_mhz", "cpu_usage_mhz", "mem_provisioned_kib", "mem_usage_kib",
             "disk_read_kibps", "disk_write_kibps", "net_in_kibps", "net_out_kibps")
EVENT_FIELDS = ("time_s", "job_id", "task_index", "event_type", "priority", "scheduling_class",
                "cpu_request", "mem_request", "disk_request")


@pytest.fixture()
def columnar_calls(monkeypatch):
    """Counts the tables the columnar path returned (None: it declined)."""
    calls: list[bool] = []
    real = anomalies_module.columnar_table

    def spy(*args, **kwargs):
        table = real(*args, **kwargs)
        calls.append(table is not None)
        return table

    monkeypatch.setattr(bitbrains, "columnar_table", spy)
    monkeypatch.setattr(google, "columnar_table", spy)
    return calls


def row_by_row(monkeypatch, read, path):
    """``read(path)`` with the columnar path switched off."""
    with monkeypatch.context() as patch:
        patch.setattr(bitbrains, "columnar_table", lambda *a, **k: None)
        patch.setattr(google, "columnar_table", lambda *a, **k: None)
        return read(path)


def assert_same(a, b, fields) -> None:
    for name in fields:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    assert a.anomalies == b.anomalies


def write_vm(path: Path, rows: list[str]) -> Path:
    lines = [";\t".join(COLUMNS)] + [row.replace(";", ";\t") for row in rows]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


def test_real_bitbrains_files_read_columnar_give_the_row_by_row_values(traces_dir, monkeypatch, columnar_calls) -> None:
    folder = traces_dir / "bitbrains-rnd-2013-7"
    for vm_id in range(1, 251, 10):  # every 10th file (the row-by-row path is the slow one)
        path = folder / f"{vm_id}.csv.gz"
        fast = read_vm_series(path)
        slow = row_by_row(monkeypatch, read_vm_series, path)
        assert_same(fast, slow, VM_FIELDS)
        assert fast.rows_read == slow.rows_read
    assert columnar_calls == [True] * 25  # every real file took the columnar path


def test_real_task_events_read_columnar_give_the_row_by_row_values(traces_dir, monkeypatch, columnar_calls) -> None:
    path = traces_dir / "google-2011" / "task_events-part-00000-of-00500.csv.gz"
    fast = read_task_events(path)
    assert columnar_calls == [True]
    slow = row_by_row(monkeypatch, read_task_events, path)
    assert_same(fast, slow, EVENT_FIELDS)
    assert fast.anomalies == {"google.empty_request": 291} and len(fast) == 450_146


@pytest.mark.parametrize("odd", [
    "1900;2;5000;x;2;1000;500;0;0;0;0",         # not a number
    "1900;2;5000;1_000;2;1000;500;0;0;0;0",     # Python's float() takes it, pyarrow does not
    '1900;2;5000;"100";2;1000;500;0;0;0;0',     # quoted: not a number to the row reader
    "1900;2;5000;;2;1000;500;0;0;0;0",          # empty field
    "1900;2;5000;100",                          # too few fields
    "1900;2;5000;100;2;1000;NaN;0;0;0;0",       # NaN → 0, counted
    "1900;2;5000;100;2;1000;nan(1);0;0;0;0",    # C's NaN with a payload: pyarrow takes it, float() does not
])
def test_a_bitbrains_file_with_an_odd_row_gives_the_row_by_row_answer(tmp_path, monkeypatch, odd, columnar_calls) -> None:
    path = write_vm(tmp_path / "3.csv.gz", ["1000;2;5000;100;2;1000;500;1;2;3;4", odd,
                                            "2200;2;5000;6000;120;1000;500;0;0;0;0"])
    fast = read_vm_series(path)
    slow = row_by_row(monkeypatch, read_vm_series, path)
    assert_same(fast, slow, VM_FIELDS)
    assert fast.rows_read == slow.rows_read == 3
    assert fast.anomalies.get("bitbrains.usage_above_provisioned") == 1


def test_a_clean_bitbrains_file_takes_the_columnar_path(tmp_path, monkeypatch, columnar_calls) -> None:
    path = write_vm(tmp_path / "4.csv.gz", ["1000;2;5000;100;2;1000;500;1;2;3;4", "",
                                            "1300;2;5000;200;4;1000;600;0;0;0;0"])
    fast = read_vm_series(path)
    assert columnar_calls == [True]
    assert fast.rows_read == 2 and fast.timestamp_s.tolist() == [1000, 1300]
    assert_same(fast, row_by_row(monkeypatch, read_vm_series, path), VM_FIELDS)


def event(t: int, job: int, task: int, kind: int, prio: int, cpu: str = "0.0625", mem: str = "0.01") -> str:
    return f"{t * 1_000_000},,{job},{task},m1,{kind},user,0,{prio},{cpu},{mem},0.001,0"


@pytest.mark.parametrize("odd", [
    "garbage",                                  # unparseable
    event(3, 11, 0, 12, 0),                     # event type out of range (parses: columnar path)
    event(3, 11, 0, 0, 0, cpu="-0.1"),          # negative request (parses: columnar path)
    "1,,2,3,,0,user,0,9,0.1,0.1,0",             # 12 columns
    "1,,,3,m,0,user,0,9,0.1,0.1,0,0",           # empty job ID
    "1,,2,3,m,0,user,0,9, 0.1,0.1,0,0",         # a space: the row reader decides
    "1,,2,3,m,0,user,,9,,,,0",                  # empty class and requests: kept, counted
    "1,,2,3,m,0,user,0,9,nan(1),0.1,0,0",       # C's NaN with a payload: both readers refuse the row
    "1,,99999999999999999999,3,m,0,user,0,9,0.1,0.1,0,0",   # beyond a 64-bit integer
])
def test_task_events_with_an_odd_row_give_the_row_by_row_answer(tmp_path, monkeypatch, odd) -> None:
    path = tmp_path / "task_events.csv.gz"
    path.write_bytes(gzip.compress("\n".join([event(1, 1, 0, 0, 0), odd, event(2, 1, 0, 1, 0), ""]).encode()))
    fast = read_task_events(path)
    slow = row_by_row(monkeypatch, read_task_events, path)
    assert_same(fast, slow, EVENT_FIELDS)
    assert len(fast) + sum(n for k, n in fast.anomalies.items() if k != "google.empty_request") == 3


@pytest.mark.parametrize(("content", "message"), [
    (b"1,,2,3", "not a gzip file"),
    (gzip.compress(b"")[:-4], "corrupt or truncated"),
    (gzip.compress(b""), "empty file"),
])
def test_task_events_errors_name_the_file(tmp_path, content, message) -> None:
    path = tmp_path / "task_events.csv.gz"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as caught:
        read_task_events(path)
    assert str(path) in str(caught.value)
