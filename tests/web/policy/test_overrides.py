"""The per-workload overrides the estimation loop and the pre-flight read from labels/annotations
(through :func:`kalena_engine.overrides.workload_overrides`, the agent's reading too)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from kalena_engine.overrides import RECLAIM, STARTUP_GRACE, OverrideError, workload_overrides
from kalena_web.ledger.mappers import WorkloadColumns, live_workloads

Q = json.dumps([1000.0, 2.0**30] + [0.0] * 6)


def _columns(overrides: list[dict]) -> WorkloadColumns:
    n = len(overrides)
    return WorkloadColumns(
        ids=tuple(range(1, n + 1)), node_ids=(1,) * n, kinds=("production",) * n, request=(Q,) * n,
        limit=(None,) * n, start_s=(0.0,) * n, value=(Q,) * n, updated_s=(0.0,) * n, last_sample_s=(None,) * n,
        last_usage=(None,) * n, names=tuple(f"w{i}" for i in range(n)), priorities=(0,) * n,
        overrides={key: tuple(o.get(key) for o in overrides) for key in (RECLAIM, STARTUP_GRACE)})


def test_startup_grace_override_replaces_the_policy_grace_per_workload() -> None:
    live = live_workloads(_columns([{}, {STARTUP_GRACE: "0"}, {STARTUP_GRACE: "900"}, {STARTUP_GRACE: "soon"},
                                    {STARTUP_GRACE: "-5"}]), limit_ratio=1.0)
    # a bad value keeps the policy's grace (nothing taken out of the ledgers)
    assert live.grace_s(300.0).tolist() == [300.0, 0.0, 900.0, 300.0, 300.0]
    assert math.isnan(live.grace_override_s[0]) and np.isnan(live.grace_override_s[3:]).all()


def test_reclaim_disabled_pins_and_an_unknown_value_does_not() -> None:
    live = live_workloads(_columns([{RECLAIM: "disabled"}, {RECLAIM: "Disabled "}, {RECLAIM: "enabled"},
                                    {RECLAIM: "off"}, {}]), limit_ratio=1.0)
    assert live.reclaim_disabled.tolist() == [True, True, False, False, False]


@pytest.mark.parametrize("keys, says", [
    ({STARTUP_GRACE: "soon"}, "kalena.naughtian.io/startup-grace-s: 'soon' is not a number of seconds ≥ 0"),
    ({STARTUP_GRACE: "nan"}, "'nan' is not a number of seconds ≥ 0 (accepted: seconds ≥ 0, e.g. 0 or 900)"),
    ({RECLAIM: "off"}, "kalena.naughtian.io/reclaim: 'off' is not a reclaim setting (accepted: disabled, enabled)"),
])
def test_a_bad_override_is_refused_naming_the_workload_and_key(keys, says) -> None:
    with pytest.raises(OverrideError) as err:
        workload_overrides(keys, source="default/web-0")
    assert str(err.value).startswith("default/web-0: ") and says in str(err.value)
    errors: list[str] = []
    assert workload_overrides(keys, source="default/web-0", errors=errors).grace_s(300.0) == 300.0
    assert len(errors) == 1 and says in errors[0]
