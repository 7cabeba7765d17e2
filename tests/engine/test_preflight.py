"""The policy pre-flight (kalena_engine.preflight) on the module's worked example: two nodes,
a service pod whose reservation rises with μ, a batch pod, two pending pods; "placeable" is the
engine scheduler's own answer, node filters included."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_engine.estimator import Reservations
from kalena_engine.kuberina.model import Taint
from kalena_engine.placement import BatchResidents, BatchTemplate
from kalena_engine.preflight import PreflightCluster, policy_preflight
from kalena_engine.resources import CPU, N_DIMS, RAM
from tests.engine.placement.builders import Entry, Node, node_table, pending, snapshot
from tests.worked import WORKED_POLICY

GIB = 2.0**30
NOW = 10_000.0


def _vec(cpu_mcpu: float, ram_gib: float, fill: float = 0.0) -> np.ndarray:
    v = np.full(N_DIMS, fill)
    v[CPU], v[RAM] = cpu_mcpu, ram_gib * GIB
    return v


def _cluster(*, pending_namespaces=("team-a", "team-a"), nodes=None, node_selector=None) -> PreflightCluster:
    # node A: C = 4 cores, 10 GiB. service: q = 2 cores / 8 GiB, L = 4 cores / 12 GiB, u = 1 core / 8 GiB,
    # r = μ·u = 1.15 / 9.2 GiB
    # batch: q = L = 0.5 core / 1 GiB, u = q, r = q. Node B: empty, same capacity.
    capacity = np.array([_vec(4000, 10, np.inf), _vec(4000, 10, np.inf)])
    request = np.array([_vec(2000, 8), _vec(500, 1)])
    limit = np.array([_vec(4000, 12, np.inf), _vec(500, 1, np.inf)])
    usage = np.array([_vec(1000, 8), _vec(500, 1)])
    reservation = np.array([_vec(1150, 9.2), _vec(500, 1)])
    # the scheduling pass's snapshot of the same nodes: team-a already runs the batch pod on a;
    # the queue: one 1-core / 2 GiB pod per namespace given (one template each)
    nodes = nodes or [Node("a", cpu=4, ram=10), Node("b", cpu=4, ram=10)]
    table = node_table(nodes)
    table = type(table)(names=table.names, zone=table.zone, rack=table.rack, labels=table.labels,
                        taints=table.taints, capacity=capacity)
    templates = tuple(BatchTemplate(owner=f"{ns}/job", namespace=ns, node_selector=node_selector or {})
                      for ns in dict.fromkeys(pending_namespaces))
    row = {t.namespace: i for i, t in enumerate(templates)}
    queue = pending([Entry(f"{ns}/job-{i}", 1, cpu=1.0, ram=2.0, template=row[ns], queued_s=float(i))
                     for i, ns in enumerate(pending_namespaces)], templates=templates)
    residents = BatchResidents(node=np.array([0]), count=np.array([1]), template=np.array([0]),
                               templates=(BatchTemplate(owner="batch/job", namespace="team-a"),))
    return PreflightCluster(
        node_names=("a", "b"), capacity=capacity,
        sampling_interval_s=np.array([10.0, 10.0]), names=("default/web-0", "batch/job-1"),
        node_of=np.array([0, 0]), batch=np.array([False, True]), priority=np.array([0, 3]),
        request=request, limit=limit, usage=usage,
        start_s=np.array([-np.inf, NOW - 3600.0]), reclaim_disabled=np.array([False, False]),
        state=Reservations(value=reservation, updated_s=np.full(2, NOW), last_sample_s=np.full(2, NOW - 5.0)),
        snapshot=snapshot(nodes, now_s=NOW, batch=residents, table=table), pending=queue)


def test_raising_the_margin_evicts_the_batch_pod_now() -> None:
    current = WORKED_POLICY
    proposed = WORKED_POLICY.with_estimator(margin_ratio=1.3).with_eviction(evict_threshold_ratio=0.9)
    result = policy_preflight(_cluster(), current=current, proposed=proposed, now_s=NOW)
    # Σ r = 10.4 + 1 = 11.4 GiB > 10 and the working set 9 GiB ≥ 0.9 · 10 GiB → evict the batch pod;
    # today Σ r = 10.2 GiB > 10 but 9 GiB < 0.95 · 10: no pressure, so the eviction is new.
    assert len(result.evictions) == 1
    victim = result.evictions[0]
    assert (victim.node, victim.workload, victim.dimension, victim.reason, victim.new) == (
        "a", "batch/job-1", "ram", "priority", True)
    assert victim.ledger_before == pytest.approx(11.4 * GIB) and victim.ledger_after == pytest.approx(10.4 * GIB)
    a = result.nodes[0]
    assert a.ram_now_bytes == pytest.approx(-0.2 * GIB) and a.ram_after_bytes == pytest.approx(-1.4 * GIB)
    assert a.cpu_now_mcpu == pytest.approx(2350.0) and a.cpu_after_mcpu == pytest.approx(2200.0)
    assert a.cpu_settled_mcpu == pytest.approx(2200.0)
    # node b is empty: its slack is its capacity under both policies
    assert result.nodes[1].ram_settled_bytes == pytest.approx(10 * GIB)
    assert (result.pending, result.placeable_current, result.placeable_proposed) == (2, 2, 2)


def test_lowering_the_margin_frees_slack_only_once_the_decay_is_over() -> None:
    result = policy_preflight(_cluster(), current=WORKED_POLICY, proposed=WORKED_POLICY.with_estimator(margin_ratio=1.05),
                              now_s=NOW)
    a = result.nodes[0]
    assert result.evictions == ()
    assert a.ram_after_bytes == pytest.approx(a.ram_now_bytes)          # r decays from 9.2 GiB: Δt = 0
    assert a.ram_settled_bytes == pytest.approx((10 - 8.4 - 1) * GIB)   # τ = 1.05 · 8 GiB


def test_a_namespace_cap_limits_what_becomes_placeable() -> None:
    caps = WORKED_POLICY.with_placement(namespace_batch_caps=(("team-a", 2),))
    result = policy_preflight(_cluster(), current=WORKED_POLICY, proposed=caps, now_s=NOW)
    # team-a already runs one batch pod: a cap of 2 admits one of the two pending pods
    assert (result.placeable_current, result.placeable_proposed) == (2, 1)


def test_stale_telemetry_never_creates_slack() -> None:
    cluster = _cluster()
    old = Reservations(value=cluster.state.value, updated_s=cluster.state.updated_s,
                       last_sample_s=np.array([NOW - 3600.0, NOW - 5.0]))
    from dataclasses import replace

    result = policy_preflight(replace(cluster, state=old), current=WORKED_POLICY,
                              proposed=WORKED_POLICY.with_estimator(margin_ratio=1.05), now_s=NOW)
    # the service pod's sample is an hour old: its r is held and reads max(r, q) = 2 cores / 9.2 GiB
    # whatever μ — no slack appears from lowering the margin
    assert result.nodes[0].cpu_settled_mcpu == pytest.approx(4000 - 2000 - 500)
    assert result.nodes[0].ram_settled_bytes == pytest.approx((10 - 9.2 - 1) * GIB)


def test_a_workload_startup_grace_override_is_honoured() -> None:
    from dataclasses import replace

    # the service pod started 60 s ago: within the policy's 300 s grace r stays ≥ q = 8 GiB
    young = replace(_cluster(), start_s=np.array([NOW - 60.0, NOW - 3600.0]))
    lower = WORKED_POLICY.with_estimator(margin_ratio=1.05)
    held = policy_preflight(young, current=WORKED_POLICY, proposed=lower, now_s=NOW)
    assert held.nodes[0].ram_settled_bytes == pytest.approx((10 - 8.4 - 1) * GIB)   # max(q, τ) = max(8, 8.4)
    # with kalena.naughtian.io/startup-grace-s: 0 the grace is over: τ = 1.05 · 8 GiB alone (and q = 9 GiB here)
    bigger = replace(young, request=np.array([_vec(2000, 9), _vec(500, 1)]))
    in_grace = policy_preflight(bigger, current=WORKED_POLICY, proposed=lower, now_s=NOW)
    no_grace = policy_preflight(replace(bigger, grace_override_s=np.array([0.0, np.nan])), current=WORKED_POLICY,
                                proposed=lower, now_s=NOW)
    assert in_grace.nodes[0].ram_settled_bytes == pytest.approx((10 - 9 - 1) * GIB)
    assert no_grace.nodes[0].ram_settled_bytes == pytest.approx((10 - 8.4 - 1) * GIB)


@pytest.mark.parametrize("case, nodes, selector, placeable", [
    # settled slack under μ = 1.05: a = 4 − 1.05 − 0.5 = 2.45 cores, 10 − 8.4 − 1 = 0.6 GiB (no room for
    # 2 GiB); b = 4 cores / 10 GiB: both pending pods (1 core / 2 GiB each) fit on b by slack alone
    ("no filter", [Node("a", cpu=4, ram=10), Node("b", cpu=4, ram=10)], None, 2),
    ("b tainted, not tolerated", [Node("a", cpu=4, ram=10),
                                  Node("b", cpu=4, ram=10, taints=(Taint("gpu", "only", "NoSchedule"),))], None, 0),
    ("b not ready", [Node("a", cpu=4, ram=10), Node("b", cpu=4, ram=10, ready=False)], None, 0),
    ("b telemetry stale", [Node("a", cpu=4, ram=10), Node("b", cpu=4, ram=10, fresh=False)], None, 0),
    ("b outside the batch node set", [Node("a", cpu=4, ram=10), Node("b", cpu=4, ram=10, eligible=False)], None, 0),
    ("selector names a label only a carries", [Node("a", cpu=4, ram=10, labels={"disk": "ssd"}),
                                               Node("b", cpu=4, ram=10)], {"disk": "ssd"}, 0),
    ("selector matches b", [Node("a", cpu=4, ram=10), Node("b", cpu=4, ram=10, labels={"disk": "ssd"})],
     {"disk": "ssd"}, 2),
    ("selector no node carries", [Node("a", cpu=4, ram=10), Node("b", cpu=4, ram=10)], {"disk": "nvme"}, 0),
])
def test_placeable_applies_the_scheduler_node_filters(case, nodes, selector, placeable) -> None:
    cluster = _cluster(pending_namespaces=("team-b", "team-b"), nodes=nodes, node_selector=selector)
    result = policy_preflight(cluster, current=WORKED_POLICY, proposed=WORKED_POLICY.with_estimator(margin_ratio=1.05), now_s=NOW)
    # the slack itself is the same in every case: b has room for both by slack alone
    assert result.nodes[1].cpu_settled_mcpu == pytest.approx(4000) and result.nodes[1].ram_settled_bytes == pytest.approx(10 * GIB)
    assert (result.pending, result.placeable_proposed) == (2, placeable), case
    # what keeps the rest pending is named as the why-pending page names it
    assert sum(n for _, n in result.unplaced_proposed) == 2 - placeable
    # (a passes the rules but lacks ram: the binding constraint is ram; no node carries the label: the selector)
    if case.startswith(("b tainted", "selector names")):
        assert result.unplaced_proposed == (("ram", 2),)
    if case == "selector no node carries":
        assert result.unplaced_proposed == (("node_selector", 2),)


def test_no_queue_places_nothing_and_a_snapshot_of_other_nodes_is_refused() -> None:
    from dataclasses import replace

    result = policy_preflight(replace(_cluster(), pending=None), current=WORKED_POLICY, proposed=WORKED_POLICY, now_s=NOW)
    assert (result.pending, result.placeable_current, result.placeable_proposed) == (0, 0, 0)
    with pytest.raises(ValueError, match="not the pre-flight's 2 in the same order"):
        _cluster(nodes=[Node("a", cpu=4, ram=10), Node("c", cpu=4, ram=10)])


def test_under_a_peak_predictor_the_preflight_reads_the_stored_history_as_the_estimation_pass_does() -> None:
    """The live estimation pass serves the percentile member from each workload's stored peak
    history: the service's 9.6 GiB spike an hour ago holds its reservation up although it now
    uses 8 GiB. The pre-flight of the same policy reads that history (the bytes the pass
    stored), so its slack "now" is the ledger's, and it settles where the predictor serves — not
    where the asymmetric rule alone would (τ = u = 8 GiB at a memory margin of 1)."""
    from kalena_engine import predictors
    from kalena_engine.estimator import update_reservations

    policy = WORKED_POLICY.with_estimator(predictor="percentile", percentile=100.0, window_s=7200.0,
                                          min_history_s=1800.0, peak_margin_ratio=1.0, memory_margin_ratio=1.0)
    base = _cluster()
    state = Reservations(value=base.request.copy(), updated_s=np.full(2, NOW - 7200.0),
                         last_sample_s=np.full(2, -np.inf))
    for t in np.arange(NOW - 7200.0, NOW - 5.0 + 1, 60.0):  # the estimation pass, one sample a minute
        usage = base.usage.copy()
        if NOW - 3700.0 <= t < NOW - 3500.0:
            usage[0, RAM] = 9.6 * GIB
        state = update_reservations(state, request=base.request, limit=base.limit, usage=usage,
                                    sampled=np.ones(2, dtype=bool), now_s=float(t), start_s=base.start_s,
                                    grace_s=np.full(2, policy.estimator.grace_s),
                                    pinned=np.zeros((2, N_DIMS), dtype=bool), policy=policy.estimator)
    stored = tuple(predictors.pack_rows(state.history, np.arange(2)))
    live = Reservations(value=state.value, updated_s=state.updated_s, last_sample_s=state.last_sample_s)
    cluster = PreflightCluster(**{**base.__dict__, "state": live, "histories": stored})
    assert live.value[0, RAM] == pytest.approx(9.6 * GIB)  # the ledger holds the spike
    result = policy_preflight(cluster, current=policy, proposed=policy, now_s=NOW)
    a = result.nodes[0]
    assert a.ram_now_bytes == pytest.approx((10 - 9.6 - 1) * GIB)  # as the ledger reads it
    assert a.ram_settled_bytes == pytest.approx((10 - 9.6 - 1) * GIB)  # the predictor keeps serving the peak
    # without the stored history the asymmetric rule serves: the pre-flight would settle at τ
    bare = policy_preflight(PreflightCluster(**{**base.__dict__, "state": live}), current=policy,
                            proposed=policy, now_s=NOW)
    assert bare.nodes[0].ram_settled_bytes == pytest.approx((10 - 8 - 1) * GIB)


def test_the_preflight_says_when_saving_starts_every_peak_history_afresh() -> None:
    """A draft that keeps the history's layout (another μ) keeps every workload's history; one whose
    predictor cannot read it (``percentile`` alone after ``auto``; any peak predictor after the
    asymmetric rule, which stores none) starts it afresh, and the pre-flight says so."""
    shipped = WORKED_POLICY.with_estimator(predictor="auto")
    cases = [(shipped, shipped.with_estimator(margin_ratio=1.3), False),
             (shipped, shipped.with_estimator(predictor="percentile"), True),
             (WORKED_POLICY.with_estimator(predictor="asymmetric"), shipped, True),
             (shipped, WORKED_POLICY.with_estimator(predictor="asymmetric"), False)]
    for current, proposed, restarts in cases:
        result = policy_preflight(_cluster(), current=current, proposed=proposed, now_s=NOW)
        assert result.history_restarts is restarts, (current.estimator.predictor, proposed.estimator.predictor)
