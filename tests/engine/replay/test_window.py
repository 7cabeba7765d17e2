"""A batch trace none of whose arrivals falls inside the replay window is refused, naming the
trace's time range (issue 16: a Google shard behind ``--offset`` ran silently with 0 batch)."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.errors import TraceError
from kalena_engine.replay.setup import ReplayConfig, _task_table
from kalena_engine.traces.batch import BatchTasks


def tasks(arrivals: list[float]) -> BatchTasks:
    k = len(arrivals)
    request = np.zeros((k, 8))
    request[:, 0] = 500.0
    return BatchTasks(source="shard.csv.gz", task_id=np.array([f"t{i}" for i in range(k)]),
                      job_id=np.array(["j"] * k), instances=np.ones(k, dtype=np.int64),
                      arrival_s=np.array(arrivals, dtype=np.float64), duration_s=np.full(k, 60.0),
                      request=request, priority=np.zeros(k, dtype=np.int64), anomalies={})


@pytest.mark.parametrize(("offset", "side"), [(10_000.0, "precedes"), (0.0, "falls after")])
def test_arrivals_outside_the_window_are_refused_naming_the_trace_range(offset, side) -> None:
    batch = tasks([4_000.0, 5_561.0] if offset else [7_200.0, 9_000.0])
    with pytest.raises(TraceError) as caught:
        _task_table(batch, ReplayConfig(hours=1.0, batch_offset_s=offset), np.random.default_rng(0))
    text = str(caught.value)
    first, last = ("4,000", "5,561") if offset else ("7,200", "9,000")
    assert text.startswith("shard.csv.gz: offset: ") and side in text and f"{first}–{last} s" in text


def test_a_window_holding_arrivals_is_kept() -> None:
    table = _task_table(tasks([100.0, 5_000.0]), ReplayConfig(hours=1.0, batch_offset_s=0.0), np.random.default_rng(0))
    assert list(table.arrival_s) == [100.0]
