"""The agent's own estimate under a peak predictor: the same engine function, and each
workload's usage history survives other workloads arriving and leaving."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from agents.model import UsageSample, Workload
from agents.state import WorkloadTable
from kalena_engine.estimator import initial_reservations, pinned_mask, update_reservations
from kalena_engine.resources import CPU, ir_vector
from tests.worked import WORKED_ESTIMATOR

POLICY = replace(WORKED_ESTIMATOR, predictor="percentile", percentile=90.0, bucket_s=60.0, window_s=600.0, min_history_s=120.0)


def _workload(wid: str) -> Workload:
    return Workload(id=wid, name=wid, kind="process", tier="service", priority=0, request=ir_vector(cpu=4.0),
                    limit=ir_vector(cpu=4.0), start_s=0.0, grace_s=30.0, cgroup=f"kalena/{wid}")


def test_the_agent_serves_the_predictor_and_keeps_history_across_arrivals_and_departures() -> None:
    table = WorkloadTable()
    table.sync([_workload("a"), _workload("b")], 0.0)
    cpu = [3.0, 0.5, 0.6, 0.5, 0.7, 0.5, 0.5, 0.6, 0.5, 0.5, 0.5, 0.6, 0.5, 0.5, 0.5, 0.5]
    for k, share in enumerate(cpu):
        t = 400.0 + 60.0 * k
        if k == 5:
            table.sync([_workload("b"), _workload("c")], t)              # "a" leaves, "c" arrives
        samples = {w: UsageSample(workload_id=w, ts_s=t, usage=ir_vector(cpu=share, ram=0.0)) for w in table.ids}
        table.update_estimator(samples, POLICY)
    # "b" alone through the engine: the same reservation
    q = ir_vector(cpu=4.0)[None, :]
    state = initial_reservations(q, np.zeros(1))
    for k, share in enumerate(cpu):
        state = update_reservations(state, request=q, limit=q, usage=ir_vector(cpu=share, ram=0.0)[None, :],
                                    sampled=np.array([True]), now_s=400.0 + 60.0 * k, start_s=np.zeros(1),
                                    grace_s=np.array([POLICY.grace_s]), pinned=pinned_mask(np.array([False])),
                                    policy=POLICY)
    row = table.ids.index("b")
    np.testing.assert_allclose(table.res.value[row], state.value[0])
    # 1.15 × the 90th percentile of the ten closed 1-minute peaks before the last: the burst has gone
    expected = ir_vector(cpu=1.15 * float(np.percentile(cpu[-11:-1], 90)))[CPU]
    assert table.res.value[row, CPU] == pytest.approx(expected)
