"""The scheduler benchmark's input (``kalena bench scheduler``): a cluster of ``N`` nodes built
by replicating the Irina infrastructure and blueprint, production usage from the Bitbrains
series at a fixed instant through the replay's usage mapping, and ``M`` pending batch pods
from the Alibaba 2018 ``batch_task`` sizes (``plan_cpu`` / ``plan_mem``).

Construction (deterministic for a seed):

1. Phase 0 capacity and the blueprint's node of every production pod (186 Irina nodes).
2. Node ``i`` is Irina node ``i mod 186`` of replica ``⌊i / 186⌋`` (name ``<node>~r<replica>``),
   same labels, taints, zone and rack; each replica carries the production pods the blueprint
   put on its nodes (a partial last replica carries those of the nodes it has).
3. Each production pod gets its own Bitbrains VM and ρ pair (the ``peak`` mapping); the
   estimator runs over ``instant_s`` of 300 s samples, so reservations have risen and decayed as
   they would have; slack is read at the instant. Batch may use the active nodes (those with
   production), as in the replay. Node volatility comes from the same run.
4. Pending: consecutive Alibaba tasks in arrival order from a random start, each task one
   owner (template) with ``instance_num`` identical pods, the last one cut to make exactly
   ``M`` pods — a realistic queue: 64 % of tasks are single pods, a few have hundreds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kalena_engine.estimator import (
    effective_reservations,
    estimator_limit,
    initial_reservations,
    pinned_mask,
    update_reservations,
)
from kalena_engine.kuberina import NodeSpec, phase0_capacity, verify_blueprint
from kalena_engine.kuberina.model import Infrastructure
from kalena_engine.ledger import ledgers
from kalena_engine.placement import (
    BatchTemplate, Bindings, ClusterSnapshot, NodeTable, PendingBatch, ProductionPods, VolatilityTracker,
)
from kalena_engine.policy import Policy
from kalena_engine.replay.setup import ReplayInputs
from kalena_engine.replay.usage import build_production_usage
from kalena_engine.resources import CPU, RAM

SAMPLE_S = 300.0


@dataclass(frozen=True, eq=False)
class BenchCase:
    """One benchmark input: the snapshot and queue, plus what placement quality needs.

    Attributes:
        prod_request: ``(n, 8)`` production request ledger per node (for reclaimed capacity).
        facts: sizes and provenance for the summary.
    """

    snapshot: ClusterSnapshot
    pending: PendingBatch
    prod_request: np.ndarray
    facts: dict[str, object]


def replicate_nodes(infra: Infrastructure, capacity: np.ndarray, n_nodes: int) -> tuple[NodeTable, np.ndarray]:
    """``(node table, base row (n,))`` of ``n_nodes`` nodes cycling through the Irina nodes."""
    base = np.arange(n_nodes) % len(infra.nodes)
    replica = np.arange(n_nodes) // len(infra.nodes)
    nodes: list[NodeSpec] = [infra.nodes[b] for b in base]
    table = NodeTable(
        names=tuple(f"{n.name}~r{r}" for n, r in zip(nodes, replica.tolist(), strict=True)),
        zone=tuple(n.zone for n in nodes), rack=tuple(n.rack for n in nodes),
        labels=tuple(n.labels for n in nodes), taints=tuple(n.taints for n in nodes), capacity=capacity[base],
    )
    return table, base


def build_bench(inputs: ReplayInputs, *, n_nodes: int, m_pending: int, seed: int = 0,
                instant_s: float = 12 * 3600.0, policy: Policy | None = None,
                on_sample: Callable[[int, int], None] | None = None) -> BenchCase:
    """Build the benchmark input (see the module doc); ``on_sample(done, total)`` reports
    the estimator's progress through the samples.

    Raises:
        ValueError: ``n_nodes`` or ``m_pending`` < 1, or the batch trace has fewer pods than
            ``m_pending``.
    """
    if n_nodes < 1 or m_pending < 1:
        raise ValueError(f"--nodes ({n_nodes}) and --pending ({m_pending}) must be ≥ 1")
    policy = policy or Policy()
    rng = np.random.default_rng(seed)
    capacity = phase0_capacity(inputs.infra)
    verification = verify_blueprint(inputs.infra, inputs.workloads, inputs.blueprint, capacity)
    table, base = replicate_nodes(inputs.infra, capacity, n_nodes)
    base_rows = len(inputs.infra.nodes)
    placed = np.flatnonzero(verification.node_of_pod >= 0)
    pods = [inputs.workloads.pods[i] for i in placed]
    pod_node = verification.node_of_pod[placed]
    rows, ids, names, labels, namespaces, request = [], [], [], [], [], []
    for r in range((n_nodes + base_rows - 1) // base_rows):
        offset = r * base_rows
        here = np.flatnonzero(offset + pod_node < n_nodes)
        rows.append(offset + pod_node[here])
        request.append(inputs.workloads.requests[placed[here]])
        for i in here.tolist():
            pod = pods[i]
            ids.append(f"{pod.id}~r{r}")
            names.append(tuple(f"{t}~r{r}" for t in pod.anti_affinity))
            labels.append(pod.labels)
            namespaces.append(pod.namespace)
    node_of = np.concatenate(rows).astype(np.int64)
    q = np.concatenate(request)
    limit = estimator_limit(np.full_like(q, np.inf), q, policy.estimator.limit_ratio)
    times = np.arange(0.0, instant_s + SAMPLE_S / 2, SAMPLE_S)
    start = inputs.bitbrains.earliest_start_s()
    window_s = max(instant_s, 24 * 3600.0)
    vms = inputs.bitbrains.covering(start, start + window_s, tolerance_s=SAMPLE_S)
    usage = build_production_usage(vms, trace_start_s=start, step_times_s=np.arange(0.0, window_s, SAMPLE_S),
                                   request=q, limit=limit, peak_ratios=inputs.peak_ratios, mapping="peak", rng=rng)
    p = len(q)
    state = initial_reservations(q, np.zeros(p))
    grace = np.full(p, policy.estimator.grace_s)
    pinned = pinned_mask(np.zeros(p, dtype=bool))
    volatility = VolatilityTracker(policy.placement.volatility_half_life_s)
    for step, now_s in enumerate(times.tolist()):
        u, _ = usage.clipped_usage_at(step)
        state = update_reservations(state, request=q, limit=limit, usage=u, sampled=np.ones(p, dtype=bool),
                                    now_s=now_s, start_s=np.zeros(p), grace_s=grace, pinned=pinned,
                                    policy=policy.estimator)
        prod_r = effective_reservations(state, q, now_s, policy.estimator.stale_ttl_s(SAMPLE_S))
        led = ledgers(table.capacity, prod_node=node_of, prod_request=q, prod_reservation=prod_r,
                      batch_node=np.zeros(0, dtype=np.int64), batch_request=np.zeros((0, 8)),
                      batch_reservation=np.zeros((0, 8)))
        volatility.update(now_s, np.where(np.isfinite(led.prod_reservation), led.prod_reservation, 0.0))
        if on_sample is not None:
            on_sample(step + 1, len(times))
    has_production = np.bincount(node_of, minlength=n_nodes) > 0
    snapshot = ClusterSnapshot(
        nodes=table, slack=led.slack, version=np.zeros(n_nodes, dtype=np.int64), ready=np.ones(n_nodes, dtype=bool),
        telemetry_fresh=np.ones(n_nodes, dtype=bool), slack_eligible=has_production, has_production=has_production,
        has_batch=np.zeros(n_nodes, dtype=bool), volatility=volatility.ratio(table.capacity), now_s=float(times[-1]),
        production=ProductionPods(ids=tuple(ids), node=node_of, namespaces=tuple(namespaces), labels=tuple(labels),
                                  terms=((),) * p, names=tuple(names)),
    )
    pending = alibaba_queue(inputs, m_pending, rng)
    facts = {
        "nodes": n_nodes, "active_nodes": int(has_production.sum()), "replicas": -(-n_nodes // base_rows),
        "production_pods": p, "pending_pods": m_pending, "pending_tasks": len(pending),
        "pending_templates": len(pending.templates), "distinct_requests": int(len(np.unique(pending.request, axis=0))),
        "instant_s": float(times[-1]), "seed": seed, "usage_vms": len(vms),
        "slack_cores": round(float(np.clip(led.slack[has_production, CPU], 0, None).sum()) / 1000.0, 1),
        "slack_ram_gib": round(float(np.clip(led.slack[has_production, RAM], 0, None).sum()) / 2**30, 1),
    }
    return BenchCase(snapshot=snapshot, pending=pending, prod_request=led.prod_request, facts=facts)


def alibaba_queue(inputs: ReplayInputs, m_pending: int, rng: np.random.Generator) -> PendingBatch:
    """``m_pending`` pods of consecutive batch tasks (arrival order) from a random start."""
    batch = inputs.batch
    total = int(batch.instances.sum())
    if total < m_pending:
        raise ValueError(f"the batch trace {batch.source} has {total} pods, fewer than --pending {m_pending}")
    order = np.argsort(batch.arrival_s, kind="stable")
    counts = batch.instances[order]
    tail = np.cumsum(counts[::-1])[::-1]  # pods from each position to the end
    first = int(rng.integers(0, int(np.flatnonzero(tail >= m_pending)[-1]) + 1))
    upto = first + int(np.searchsorted(np.cumsum(counts[first:]), m_pending))
    rows = order[first:upto + 1]
    count = batch.instances[rows].astype(np.int64)
    count[-1] -= int(count.sum()) - m_pending
    owners, template = np.unique(batch.job_id[rows].astype(str), return_inverse=True)
    return PendingBatch(
        ids=batch.task_id[rows], template=template.reshape(-1).astype(np.int64),
        templates=tuple(BatchTemplate(owner=str(o)) for o in owners), request=batch.request[rows], count=count,
        priority=batch.priority[rows].astype(np.int64), queued_s=batch.arrival_s[rows].astype(np.float64),
    )


def placement_quality(case: BenchCase, bindings: Bindings) -> dict[str, float]:
    """Placed and pending pods and the reclaimed fraction after binding (docs/design.md §6):
    ``Σ_n max(0, Σ q_prod + Σ q_batch − C) / Σ_n (Σ q_prod + Σ q_batch)`` on cpu and ram."""
    n = len(case.snapshot.nodes)
    batch = np.zeros((n, 8))
    np.add.at(batch, bindings.node, bindings.request * bindings.count[:, None])
    request = case.prod_request + batch
    cap = case.snapshot.nodes.capacity
    out: dict[str, float] = {"placed": int(bindings.count.sum()),
                             "pending": int(case.pending.count.sum() - bindings.count.sum())}
    for name, d in (("cpu", CPU), ("ram", RAM)):
        finite = np.isfinite(cap[:, d])
        over = np.maximum(0.0, request[finite, d] - cap[finite, d]).sum()
        out[f"reclaimed_fraction_{name}"] = float(over / request[:, d].sum()) if request[:, d].sum() > 0 else 0.0
    return out
