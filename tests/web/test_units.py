"""Small pure pieces of the console: number formatting, the series codec, the ledger
reductions, query-parameter parsing — each case named, the arithmetic in the comment."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from django.http import QueryDict

from kalena_engine.resources import CPU, RAM, ir_vector
from kalena_web.archive import series
from kalena_web.console import formatting, params
from kalena_web.inventory.fields import decode_vector, encode_vector
from kalena_web.ledger.accumulate import LedgerAccumulator

GIB = 2.0**30


@pytest.mark.parametrize("func, value, expected", [
    pytest.param(formatting.cores, 61_750.0, "61.75", id="standard-node-cores"),   # 61,750 mcpu / 1000
    pytest.param(formatting.cores, 1_528_300.0, "1,528.3", id="thousands"),
    pytest.param(formatting.cores, -3_030.0, "-3.03", id="negative-slack"),
    pytest.param(formatting.cores, -0.001, "0", id="minus-zero"),
    pytest.param(formatting.gib, 253.25 * GIB, "253.25", id="standard-node-gib"),   # 271,925,149,696 B / 2^30
    pytest.param(formatting.gib, float("inf"), "unconstrained", id="infinite"),
    pytest.param(formatting.pct, 0.13464, "13.5 %", id="percent"),
    pytest.param(formatting.clock, 45_900.0, "12:45", id="clock"),                 # 12 h 45 min
    pytest.param(formatting.clock, 3_349.0, "00:55:49", id="clock-seconds"),
    pytest.param(formatting.clock, 90_000.0, "1d 01:00", id="clock-past-a-day"),
    pytest.param(formatting.duration, 7_500.0, "2 h 05 min", id="duration-hours"),
    pytest.param(formatting.duration, 42.0, "42 s", id="duration-seconds"),
    pytest.param(formatting.integer, 903_427, "903,427", id="integer"),
])
def test_formatting(func, value, expected) -> None:
    assert func(value) == expected


def test_quantity_uses_the_ir_unit() -> None:
    assert formatting.quantity("ram", 1.5 * GIB) == "1.5 GiB"
    assert formatting.quantity("cpu", 500.0) == "0.5 cores"


def test_vectors_store_infinity_as_null_and_read_it_back() -> None:
    stored = encode_vector(ir_vector(cpu=2, ram=4, storage=np.inf))
    assert stored[3] is None and stored[0] == 2000.0
    assert decode_vector(stored)[3] == float("inf")
    with pytest.raises(Exception, match="8 dimensions"):
        encode_vector([1.0, 2.0])


def test_series_codec_round_trips_exactly_and_detects_damage() -> None:
    values = np.random.default_rng(0).random((7, *series.NODE_SHAPE)) * 1e11
    blob = series.encode(values)
    assert np.array_equal(series.decode(blob, 7, series.NODE_SHAPE), values)
    joined = series.join([(0, 7, blob), (7, 7, blob)], series.NODE_SHAPE)
    assert joined.shape == (14, *series.NODE_SHAPE)
    with pytest.raises(series.SeriesCorrupt, match="holds 4032 bytes, expected 3456"):
        series.decode(blob, 6, series.NODE_SHAPE)
    with pytest.raises(series.SeriesCorrupt, match="not zlib"):
        series.decode(b"nonsense", 7, series.NODE_SHAPE)
    with pytest.raises(series.SeriesCorrupt, match="not contiguous"):
        series.join([(0, 7, blob), (8, 7, blob)], series.NODE_SHAPE)
    assert zlib.decompress(blob)  # plain zlib: readable without Kalena


def test_ledger_accumulator_worked_example() -> None:
    # one node, two steps, cpu in cores: C = 64, production q = 56, r = 30 then 40, batch
    # q = r = 20, usage 35 then 45 → slack 64 − 50 = 14 then 64 − 60 = 4 (mean 9, min 4),
    # headroom 64 − 56 = 8, reclaimed 56 + 20 − 64 = 12, usage mean 40, peak 45.
    chunk = np.zeros((2, 1, *series.NODE_SHAPE))
    i = series.NODE_INDEX
    chunk[:, 0, i["capacity"], CPU] = 64_000
    chunk[:, 0, i["prod_request"], CPU] = 56_000
    chunk[:, 0, i["prod_reservation"], CPU] = [30_000, 40_000]
    chunk[:, 0, i["batch_request"], CPU] = 20_000
    chunk[:, 0, i["batch_reservation"], CPU] = 20_000
    chunk[:, 0, i["prod_usage"], CPU] = [15_000, 25_000]
    chunk[:, 0, i["batch_usage"], CPU] = 20_000
    chunk[:, 0, i["capacity"], RAM] = 256 * GIB
    acc = LedgerAccumulator(1)
    acc.add(chunk[:1])
    acc.add(chunk[1:])  # two chunks give the same as one
    f = acc.figures()
    assert f["slack_mean_cpu_mcpu"][0] == 9_000 and f["slack_min_cpu_mcpu"][0] == 4_000
    assert f["headroom_cpu_mcpu"][0] == 8_000 and f["reclaimed_mean_cpu_mcpu"][0] == 12_000
    assert f["usage_mean_cpu_mcpu"][0] == 40_000 and f["usage_peak_cpu_mcpu"][0] == 45_000
    assert f["usage_mean_cpu_ratio"][0] == pytest.approx(40 / 64)
    assert f["slack_mean_ram_bytes"][0] == 256 * GIB


@pytest.mark.parametrize("query, expected", [
    pytest.param("", 7, id="default"),
    pytest.param("step=3", 3, id="step"),
    pytest.param("at=00:05", 5, id="clock"),                 # 300 s / 60 s
    pytest.param("at=00:05:30", None, id="seconds-refused"),
    pytest.param("at=1d 00:00", 1440, id="past-a-day"),     # 86,400 s / 60 s
])
def test_step_parameter(query, expected) -> None:
    if expected is None:
        with pytest.raises(params.BadParameter, match="accepted: HH:MM"):
            params.step_of(QueryDict(query), steps=2000, step_s=60.0, start_s=0.0, default=7)
    else:
        assert params.step_of(QueryDict(query), steps=2000, step_s=60.0, start_s=0.0, default=7) == expected


@pytest.mark.parametrize("reason, count, chosen", [
    pytest.param("priority", 6, "priority 0, lowest first, youngest on ties", id="priority"),
    pytest.param("limit_breach", 1, "used more than its own limit", id="limit-breach"),
])
def test_eviction_reason_carries_the_numbers(reason, count, chosen) -> None:
    from kalena_web.console.presenters import eviction_why

    # working set 248.863 GiB of 253.25 GiB capacity = 98.3 %; Σ r 264.767 → 252.786 GiB
    detail = {"dimension": "ram", "capacity": 253.25 * GIB, "working_set": 248.863 * GIB,
              "ledger_before": 264.767 * GIB, "ledger_after": 252.786 * GIB, "reservation": 1.997 * GIB,
              "usage": 1.997 * GIB, "limit": 1.997 * GIB, "priority": 0, "acute": False}
    why = eviction_why(detail, reason, count)
    assert why.lead == ("ram pressure: working set 248.863 GiB = 98.3 % of capacity 253.25 GiB, "
                        "while Σ reservations 264.767 GiB > capacity")
    assert chosen in why.numbers and why.numbers.endswith("brought Σ reservations to 252.786 GiB")
    assert ("each reserved 1.997 GiB" in why.numbers) == (count > 1)


def test_eviction_reason_names_memory_no_workload_holds() -> None:
    from kalena_web.console.presenters import eviction_why

    detail = {"dimension": "ram", "capacity": 2 * GIB, "working_set": 2.075 * GIB, "unaccounted": 0.395 * GIB,
              "ledger_before": 2.1 * GIB, "ledger_after": 2.07 * GIB, "reservation": 0.03 * GIB,
              "usage": 0.01 * GIB, "limit": 0.0625 * GIB, "priority": 0, "acute": True}
    why = eviction_why(detail, "priority", 1)
    assert "Σ reservations 2.1 GiB (of which 0.395 GiB held by nothing Kalena tracks) > capacity" in why.lead, why.lead
