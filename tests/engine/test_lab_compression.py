"""Time compression of a lab day (kalena_engine.labslice.compression): every time constant of the
policy, the agents' clocks and the pods' grace divided by k, floored where the machine cannot go
lower, and the replay's policy on the simulated clock."""

from __future__ import annotations

import dataclasses

import pytest

from kalena_engine.errors import InputError
from kalena_engine.labslice.compression import (
    scale_sizes,
    FLOORS, POLICY_CLOCKS, compress, format_clocks, policy_on_clock, simulated_policy,
)
from kalena_engine.policy import Policy
from kalena_engine.policy_file import PolicyDocument, dump_policy_text, parse_policy_text


def _duration_fields(policy: Policy) -> set[str]:
    out = set()
    for section in ("estimator", "eviction", "placement", "escalation"):
        for f in dataclasses.fields(getattr(policy, section)):
            if f.name.endswith("_s"):
                out.add(f"{section}.{f.name}")
    return out


def test_every_time_constant_of_the_policy_is_scaled() -> None:
    # a duration field added to the policy and forgotten here would run uncompressed in the lab
    assert {f"{s}.{k}" for s, k in POLICY_CLOCKS} == _duration_fields(Policy())


def test_at_10x_every_constant_above_its_floor_is_divided_by_10() -> None:
    c = compress(Policy(), 10)
    p = c.policy
    assert (p.estimator.half_life_s, p.estimator.grace_s, p.estimator.window_s) == (120, 30, 720)
    assert (p.eviction.min_run_time_s, p.eviction.cooldown_s, p.eviction.starvation_window_s) == (12, 60, 6)
    assert (p.escalation.not_converged_s, p.escalation.window_s, p.escalation.cooldown_s) == (3, 30, 60)
    assert p.placement.volatility_half_life_s == 360
    assert p.estimator.bucket_s == 30 and p.estimator.margin_ratio == Policy().estimator.margin_ratio  # μ is no clock
    for row in c.clocks:
        if not row.floored and row.name.split(".")[0] in ("estimator", "eviction", "placement", "escalation") \
                and row.name != "estimator.periodic_days":
            assert row.simulated_s == pytest.approx(row.trace_s), row


def test_floors_apply_and_are_reported_with_the_simulated_value_they_amount_to() -> None:
    c = compress(Policy(), 20)
    stale = c.clock("estimator.stale_min_s")          # 60 / 20 = 3 s < the 10 s floor
    assert (stale.divided_s, stale.wall_s, stale.floored, stale.simulated_s) == (3, FLOORS["estimator.stale_min_s"],
                                                                               True, 200)
    psi = c.clock("agent.psi_window_s")                # the kernel's 2 s stays 2 s: 40 s simulated
    assert (psi.wall_s, psi.floored, psi.simulated_s) == (2, True, 40)
    sampling = c.clock("agent.sampling_interval_s")    # 10 s / 20 = 0.5 s → 1 s
    assert (sampling.wall_s, sampling.simulated_s) == (1, 20)
    assert c.clock("escalation.not_converged_s").wall_s == 2 and c.clock("escalation.not_converged_s").floored
    assert "--psi-window-s=2" in c.agent_flags() and "--sampling-interval-s=1" in c.agent_flags()
    assert c.grace_s == 2                              # ⌈30 / 20⌉ whole seconds
    text = format_clocks(c)
    assert "estimator.stale_min_s" in text and "agent.psi_window_s" in text and "*" in text
    assert set(c.to_dict()["floored"]) >= {"estimator.stale_min_s", "agent.psi_window_s", "agent.sampling_interval_s"}


def test_the_operators_policy_is_scaled_too_and_the_bucket_stays_a_divisor_of_an_hour() -> None:
    op = Policy().with_estimator(half_life_s=1000.0, grace_s=70.0, bucket_s=600.0, window_s=1200.0)
    c = compress(op, 7)
    assert c.policy.estimator.half_life_s == pytest.approx(1000 / 7)
    assert c.policy.estimator.grace_s == 10.0
    assert 3600 % c.policy.estimator.bucket_s == 0 and c.policy.estimator.bucket_s <= 600 / 7
    assert c.policy.estimator.window_s >= 2 * c.policy.estimator.bucket_s


def test_the_replay_policy_is_the_trace_policy_except_where_a_floor_bound() -> None:
    c = compress(Policy(), 20)
    sim = simulated_policy(c)
    assert sim.estimator.half_life_s == 1200 and sim.eviction.min_run_time_s == 120
    assert sim.estimator.stale_min_s == 200            # the 10 s floor × 20
    assert sim.escalation.not_converged_s == 40        # the 2 s floor × 20
    # the rows written to compression.json give the same policy back, from the saved scaled policy
    saved = parse_policy_text(dump_policy_text(PolicyDocument(policy=c.policy)), source="t").policy
    assert policy_on_clock(saved, c.to_dict()["clocks"]) == sim
    assert policy_on_clock(sim, c.to_dict()["clocks"], which="wall_s") == c.policy


def test_a_speed_that_is_not_positive_is_refused_naming_the_flag() -> None:
    with pytest.raises(InputError, match="--speed"):
        compress(Policy(), 0)


def test_the_slack_buckets_scale_with_the_labs_nodes_and_survive_the_policy_file() -> None:
    # Irina's 64-core / 256 GiB nodes as 300 m / 384 MiB lab nodes: the published batch capacity's
    # raise step shrinks with them (128 MiB would be a third of the lab node)
    policy = scale_sizes(Policy(), cpu_scale=0.0046875, memory_scale=0.00146484375)
    assert policy.placement.slack_buckets[0] == pytest.approx(0.234375)
    assert policy.placement.slack_buckets[1] == pytest.approx(0.1875 * 2**20)
    assert policy.placement.slack_buckets[2:] == Policy().placement.slack_buckets[2:]
    assert policy.estimator == Policy().estimator
    # the lab writes it as the live cluster's first policy: it reads back the same
    back = parse_policy_text(dump_policy_text(PolicyDocument(policy=policy)), source="t").policy
    assert back.placement.slack_buckets == pytest.approx(policy.placement.slack_buckets)
    with pytest.raises(InputError, match="scale.memory_scale"):
        scale_sizes(Policy(), cpu_scale=1.0, memory_scale=0.0)
