"""GWA-T-12 Bitbrains Rnd 2013-7 reader: the real 250 files and a small messy one."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import numpy as np
import pytest

from kalena_engine.errors import TraceError
from kalena_engine.traces import load_bitbrains, read_vm_series, sample_at, usage_ratio_series
from kalena_engine.traces.bitbrains import COLUMNS

DAY_S = 86_400


@pytest.fixture(scope="module")
def bitbrains_dir(traces_dir: Path) -> Path:
    return traces_dir / "bitbrains-rnd-2013-7"


@pytest.fixture(scope="module")
def loaded(bitbrains_dir: Path):
    calls: list[tuple[int, int]] = []
    began = time.perf_counter()
    vms = load_bitbrains(bitbrains_dir, on_file=lambda done, total: calls.append((done, total)))
    print(f"\nloaded {len(vms.series)} Bitbrains files in {time.perf_counter() - began:.1f} s")
    return vms, calls


def write_vm(path: Path, rows: list[str]) -> Path:
    """Write a VM file in the trace's own format: fields separated by ';' and a tab."""
    lines = [";\t".join(COLUMNS)] + [row.replace(";", ";\t") for row in rows]
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        handle.write("\n".join(lines) + "\n")
    return path


# --- the real files ---------------------------------------------------------------------------

def test_all_files_load_with_progress(loaded) -> None:
    vms, calls = loaded
    assert len(vms.series) == 250
    assert [vm.vm_id for vm in vms.series] == [str(i) for i in range(1, 251)]
    assert calls == [(i, 250) for i in range(1, 251)]


def test_real_anomaly_counts(loaded) -> None:
    vms, _ = loaded
    rows = np.array([vm.rows_read for vm in vms.series])
    # Raw data rows per file: `zcat $f | tail -n +2 | wc -l` → min 119, max 23,007,
    # median 8,252.5, total 1,931,865 (the README: 119 … 23,007, median ≈ 8,250).
    assert (rows.min(), rows.max(), float(np.median(rows)), rows.sum()) == (
        119, 23_007, 8_252.5, 1_931_865)
    # Independent Python pass (dict of rows per timestamp, max-merge, then drop): 65,321 extra
    # rows share a timestamp (README ≈ 65,000); 152,812 merged timestamps have zero provisioned
    # CPU or memory; 49,005 kept rows use more CPU than provisioned; 438 gaps exceed 900 s.
    # No NaN, negative, unparseable or out-of-order rows exist in this set.
    assert vms.anomalies == {
        "bitbrains.duplicate_timestamp": 65_321,
        "bitbrains.gap_over_900s": 438,
        "bitbrains.usage_above_provisioned": 49_005,
        "bitbrains.zero_provisioned": 152_812,
    }
    # awk '$3<=0 || $6<=0' over all raw rows → 218,133 = 11.3 % (the README's "about 11 %").
    # The duplicates are not complementary halves: at all 65,055 repeated timestamps every row
    # has zero provisioned CPU (awk: only 24 of them carry a memory size), so the merge rescues
    # no timestamp and 152,812 + 65,321 raw rows = 218,133.
    assert 152_812 + 65_321 == 218_133
    assert 218_133 / rows.sum() == pytest.approx(0.113, abs=0.001)
    kept = sum(len(vm) for vm in vms.series)
    assert kept == 1_931_865 - 65_321 - 152_812 == 1_713_732


def test_cleaned_series_invariants(loaded) -> None:
    vms, _ = loaded
    for vm in vms.series:
        assert (np.diff(vm.timestamp_s) > 0).all(), vm.vm_id
        assert (vm.cpu_provisioned_mhz > 0).all() and (vm.mem_provisioned_kib > 0).all()
        for name in ("cpu_usage_mhz", "mem_usage_kib", "disk_read_kibps", "net_out_kibps"):
            assert (getattr(vm, name) >= 0).all(), (vm.vm_id, name)
    # File 54 is almost all zero: 20,702 rows, 6,236 repeated timestamps, one usable sample.
    vm54 = vms.series[53]
    assert (vm54.vm_id, vm54.rows_read, len(vm54)) == ("54", 20_702, 1)
    assert vm54.anomalies == {"bitbrains.duplicate_timestamp": 6_236,
                              "bitbrains.zero_provisioned": 14_465}


def test_vms_covering_the_first_day(loaded) -> None:
    vms, _ = loaded
    start = vms.earliest_start_s()
    assert start == 1_372_629_804  # 2013-06-30 22:03:24 UTC, first row of file 1
    covering = vms.covering(start, start + DAY_S)
    # The README's 202 counts raw rows. Thirteen VMs (38, 44–54, 162) have raw rows over the
    # whole first day but zero provisioned CPU there, so their cleaned series start 28–686 h
    # later; 202 − 13 = 189. (Tolerance 0 s gives the same 189.)
    assert len(covering) == 189
    assert len(vms.covering(start, start + DAY_S, tolerance_s=0)) == 189
    missing = {vm.vm_id for vm in vms.series} - {vm.vm_id for vm in covering}
    assert {"38", "44", "54", "162"} <= missing


# --- a small messy file -----------------------------------------------------------------------

@pytest.fixture()
def messy(tmp_path: Path):
    # ts; cores; cpu prov; cpu use; cpu %; mem prov; mem use; disk r; disk w; net in; net out
    return read_vm_series(write_vm(tmp_path / "7.csv.gz", [
        "1000;2;5000;100;2;1000;500;1;2;3;4",
        "1300;0;0;0;0;2000;800;0;0;0;0",        # half-row: CPU zeroed …
        "1300;2;5000;200;4;0;0;5;0;0;0",        # … and its twin with memory zeroed: merged
        "1600;0;0;0;0;0;0;0;0;0;0",             # zero provisioned (and duplicated below)
        "1600;0;0;0;0;0;0;0;0;0;0",
        "not;a;row",                            # unparseable (3 fields)
        "1900;2;5000;x;2;1000;500;0;0;0;0",     # unparseable (non-numeric)
        "2200;2;5000;6000;120;1000;500;0;0;0;0",  # CPU above provisioned (bursting)
        "2100;2;5000;100;2;1000;500;0;0;0;0",   # out of order
        "",
        "4000;2;5000;100;2;1000;500;0;0;0;0",   # 1,800 s after 2,200: a gap over 900 s
        "4300;2;5000;100;2;1000;NaN;0;0;0;0",   # NaN memory usage → 0
        "4600;2;5000;100;2;1000;500;0;0;0;-3",  # negative net out → 0
    ]))


def test_messy_file_counts_and_merged_values(messy) -> None:
    assert messy.vm_id == "7"
    assert messy.rows_read == 12  # blank line ignored
    assert messy.anomalies == {
        "bitbrains.duplicate_timestamp": 2, "bitbrains.gap_over_900s": 1,
        "bitbrains.nan_value": 1, "bitbrains.negative_value": 1, "bitbrains.out_of_order": 1,
        "bitbrains.unparseable_row": 2, "bitbrains.usage_above_provisioned": 1,
        "bitbrains.zero_provisioned": 1,
    }
    assert messy.timestamp_s.tolist() == [1000, 1300, 2100, 2200, 4000, 4300, 4600]
    # 1300 s: per-column max of the two half-rows.
    assert messy.cpu_provisioned_mhz[1] == 5000 and messy.cpu_usage_mhz[1] == 200
    assert messy.mem_provisioned_kib[1] == 2000 and messy.mem_usage_kib[1] == 800
    assert messy.disk_read_kibps[1] == 5
    assert messy.cpu_usage_mhz[3] == 6000  # bursting kept
    assert messy.mem_usage_kib[5] == 0 and messy.net_out_kibps[6] == 0


def test_usage_ratio_series_units(messy) -> None:
    ratios = usage_ratio_series(messy)
    assert ratios.shape == (7, 6)
    # 1000 s: cpu 100/5000 = 0.02, ram 500/1000 = 0.5, then KiB/s × 1024 → bytes/s.
    np.testing.assert_allclose(ratios[0], [0.02, 0.5, 1024, 2048, 3072, 4096])
    assert ratios[3, 0] == pytest.approx(1.2)  # 6000 / 5000: bursting shows as > 1


@pytest.mark.parametrize(("t", "index"), [
    (999, -1),      # before the first sample
    (1000, 0),      # exactly on a sample
    (1299, 0),      # held until the next
    (1300, 1),
    (3999, 3),      # through the gap: the 2,200 s sample is held
    (10**10, 6),    # after the last
])
def test_sample_at_holds_previous_sample(messy, t: int, index: int) -> None:
    assert sample_at(messy, np.array([t])).tolist() == [index]


def test_file_with_no_usable_row_is_empty_not_an_error(tmp_path: Path) -> None:
    vm = read_vm_series(write_vm(tmp_path / "3.csv.gz", ["100;0;0;0;0;0;0;0;0;0;0"]))
    assert len(vm) == 0 and vm.rows_read == 1
    assert vm.anomalies == {"bitbrains.empty_after_cleaning": 1, "bitbrains.zero_provisioned": 1}
    assert usage_ratio_series(vm).shape == (0, 6)
    assert sample_at(vm, np.array([100])).tolist() == [-1]


def test_set_helpers_on_small_directory(tmp_path: Path) -> None:
    write_vm(tmp_path / "10.csv.gz", ["1000;1;1;1;1;1;1;0;0;0;0", "90000;1;1;1;1;1;1;0;0;0;0"])
    write_vm(tmp_path / "2.csv.gz", ["1200;1;1;1;1;1;1;0;0;0;0", "87200;1;1;1;1;1;1;0;0;0;0"])
    write_vm(tmp_path / "3.csv.gz", ["100;0;0;0;0;0;0;0;0;0;0"])
    (tmp_path / "notes.txt").write_text("ignored")
    vms = load_bitbrains(tmp_path)
    assert [vm.vm_id for vm in vms.series] == ["2", "3", "10"]  # numeric order
    assert vms.earliest_start_s() == 1000
    # Window [1000, 87,400): VM 2 starts 200 s late and ends 200 s early — within 300 s, not 100 s.
    assert [vm.vm_id for vm in vms.covering(1000, 1000 + DAY_S)] == ["2", "10"]
    assert [vm.vm_id for vm in vms.covering(1000, 1000 + DAY_S, tolerance_s=100)] == ["10"]
    # Summed over files: VM 3 is empty; VMs 2 and 10 each have one gap over 900 s.
    assert vms.anomalies == {"bitbrains.empty_after_cleaning": 1, "bitbrains.gap_over_900s": 2,
                             "bitbrains.zero_provisioned": 1}


@pytest.mark.parametrize(("case", "content", "message"), [
    ("not gzip", b"Timestamp [ms];\tCPU cores\n", "not a gzip file"),
    ("wrong header", gzip.compress(b"time;cpu\n1;2\n"), "unexpected header"),
    ("empty", gzip.compress(b""), "empty file"),
])
def test_unreadable_file_raises_trace_error(tmp_path: Path, case: str, content: bytes,
                                            message: str) -> None:
    path = tmp_path / "5.csv.gz"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as caught:
        read_vm_series(path)
    assert str(path) in str(caught.value)
    with pytest.raises(TraceError, match="5.csv.gz"):
        load_bitbrains(tmp_path)  # one unreadable file fails the set, naming the file


def test_missing_or_empty_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="not a directory"):
        load_bitbrains(tmp_path / "absent")
    with pytest.raises(TraceError, match="no VM files"):
        load_bitbrains(tmp_path)
