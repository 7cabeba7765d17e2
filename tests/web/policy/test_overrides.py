"""The per-workload startup grace override the estimation loop reads from labels/annotations."""

from __future__ import annotations

import math

import numpy as np

from kalena_web.ledger.mappers import STARTUP_GRACE, live_workloads


def _row(wid: int, labels: dict) -> tuple:
    q = [1000.0, 2.0**30] + [0.0] * 6
    return (wid, 1, "production", q, None, labels, 0.0, q, 0.0, None, None)


def test_startup_grace_override_replaces_the_policy_grace_per_workload() -> None:
    rows = [_row(1, {}), _row(2, {STARTUP_GRACE: "0"}), _row(3, {STARTUP_GRACE: "900"}),
            _row(4, {STARTUP_GRACE: "soon"}), _row(5, {STARTUP_GRACE: "-5"})]
    live = live_workloads(rows, limit_ratio=1.0)
    assert live.grace_s(300.0).tolist() == [300.0, 0.0, 900.0, 300.0, 300.0]
    assert math.isnan(live.grace_override_s[0]) and np.isnan(live.grace_override_s[3:]).all()
