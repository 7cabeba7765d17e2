"""Replay end to end on a slice of the real data: Irina 186-3d blueprint, Bitbrains usage,
Alibaba batch arrivals."""

from __future__ import annotations

import json
from argparse import Namespace
from pathlib import Path

import numpy as np
import pytest

from kalena_engine.replay import ReplayConfig, build_replay
from kalena_engine.resources import CPU, RAM
from kalena_web.cli.inputs import DEFAULTS, load_inputs


@pytest.fixture(scope="module")
def inputs(data_dir: Path):
    args = Namespace(**{k: str(data_dir / v) for k, v in DEFAULTS.items()}, batch_format="auto",
                     machine_ram_gib=None, machine_cores=None)
    return load_inputs(args, progress=False)


def test_two_hour_slice_keeps_production_safe_and_ledgers_consistent(inputs) -> None:
    replay = build_replay(inputs, ReplayConfig(hours=2.0))
    overloaded_by_placement: list[tuple[float, int]] = []
    placement_steps = []
    blueprint = replay.simulator.state.blueprint_request_ledger().copy()

    def observe(record) -> None:
        # the reservation ledger after placement is never overloaded by batch placement itself: on
        # every node that took batch this step, Σ r ≤ C (cpu and ram; evictions only lower it). Any
        # overrun elsewhere comes from production usage rising, which eviction answers on ram.
        reserved = (record.prod_reservation + record.batch_reservation)[:, [CPU, RAM]]
        capacity = record.capacity[:, [CPU, RAM]]
        placed = sorted({e.node for e in record.events if e.kind == "placed"})
        placement_steps.append(len(placed))
        over = np.any(reserved > capacity * (1 + 1e-9) + 1e-6, axis=1)
        overloaded_by_placement.extend((record.time_s, n) for n in placed if over[n])
        # removing every batch workload leaves the blueprint's request ledger
        np.testing.assert_array_equal(record.prod_request, blueprint)

    summary = replay.run(observe)
    assert overloaded_by_placement == []
    assert sum(1 for n in placement_steps if n) > 0.5 * len(placement_steps)   # placement really ran
    assert summary["production_pods"] == 2714 and summary["active_nodes"] == 152
    assert summary["blueprint_violations"] == 0
    assert summary["production_evictions"] == 0
    assert summary["batch_submitted"] > 10_000
    assert summary["batch_completed"] > 0.5 * summary["batch_submitted"]
    state = replay.simulator.state
    running = int(state.groups.count.sum())
    assert summary["batch_submitted"] == int(state.pending.sum()) + running + summary["batch_completed"]
    assert 0 < summary["reclaimed_fraction_cpu"] < 1
    assert 0 < summary["usage_fill_cpu"] < 1 and 0 < summary["slack_fill_cpu"] < 1
    assert summary["clipped_fraction_cpu"] < 0.01 and summary["clipped_fraction_ram"] < 0.01
    # batch only on the blueprint's active nodes
    active = np.zeros(len(state.capacity), dtype=bool)
    active[replay.verification.active_nodes] = True
    assert active[state.groups.node].all()
    # the engine half of why-pending: the latest pass explains every task still pending
    records = replay.why_pending()
    waiting = state.pending > 0
    assert sorted(r.workload for r in records) == sorted(state.tasks.task_id[waiting].tolist())
    assert sum(r.pending for r in records) == int(state.pending.sum())
    assert {r.binding for r in records} <= {"cpu", "ram", "gpu", "slack_ineligible", "cooldown"}
    json.dumps([r.to_dict() for r in records[:50]])


def test_replay_is_deterministic_for_a_seed(inputs) -> None:
    a = build_replay(inputs, ReplayConfig(hours=0.5, seed=7)).run()
    b = build_replay(inputs, ReplayConfig(hours=0.5, seed=7)).run()
    c = build_replay(inputs, ReplayConfig(hours=0.5, seed=8)).run()
    assert a == b
    assert a["usage_fill_cpu"] != c["usage_fill_cpu"]


def test_load_factor_scales_arrivals(inputs) -> None:
    base = build_replay(inputs, ReplayConfig(hours=1.0)).run()
    double = build_replay(inputs, ReplayConfig(hours=1.0, load_factor=2.0)).run()
    assert double["batch_submitted"] == pytest.approx(2 * base["batch_submitted"], rel=0.05)


def test_all_nodes_opens_empty_nodes(inputs) -> None:
    replay = build_replay(inputs, ReplayConfig(hours=0.25, node_set="all"))
    assert replay.facts["batch_nodes"] == 186


def test_a_warm_start_feeds_the_estimator_the_days_before_the_window_and_changes_nothing_else(inputs) -> None:
    """``warm_s``: production's estimator is fed the usage of the 25 h before the window, so the
    periodic member (it needs a whole day of hours before the hour under way) serves from the window's start; the window
    itself — each pod's VM, its usage, the batch — is the cold replay's."""
    from kalena_engine.policy import EstimatorPolicy, Policy
    from kalena_engine.predictors import LEAVES

    policy = Policy(estimator=EstimatorPolicy(predictor="periodic", periodic_days=1, margin_ratio=1.3,
                                              half_life_s=1200.0))
    cold = build_replay(inputs, ReplayConfig(hours=0.5, usage_offset_s=93_600.0, policy=policy))
    warm = build_replay(inputs, ReplayConfig(hours=0.5, usage_offset_s=93_600.0, warm_s=90_000.0, policy=policy))
    np.testing.assert_array_equal(cold.simulator.usage.shapes, warm.simulator.usage.shapes)
    np.testing.assert_array_equal(cold.simulator.usage.vm_of_pod, warm.simulator.usage.vm_of_pod)
    assert warm.facts["warm_s"] == 90_000.0 and warm.facts["warm_samples"] > 250 * 2714   # ≥ 250 of 300 per pod
    periodic = LEAVES.index("periodic")
    warm_history = warm.simulator.state.prod_reservations.history
    assert cold.simulator.state.prod_reservations.history is None                        # nothing fed yet
    assert np.mean(~np.isnan(warm_history.leaf[:, periodic, CPU])) > 0.9                  # serving at time 0
    cold_first, warm_first = [], []
    cold.run(lambda r: cold_first.append(r.prod_reservation[:, CPU].sum()))
    summary = warm.run(lambda r: warm_first.append(r.prod_reservation[:, CPU].sum()))
    assert warm_first[0] < 0.8 * cold_first[0]      # the cold estimator starts at the request and decays
    assert summary["batch_submitted"] == cold.summary()["batch_submitted"]


def test_a_warm_start_longer_than_the_usage_offset_is_refused() -> None:
    with pytest.raises(ValueError, match="warm-up 7200 s .* at most the usage offset"):
        ReplayConfig(hours=1.0, usage_offset_s=3600.0, warm_s=7200.0)
