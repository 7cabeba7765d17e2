"""A small synthetic cluster for replay tests: everything real except the inputs' size."""

from __future__ import annotations

import numpy as np

from kalena_engine.estimator import initial_reservations
from kalena_engine.policy import Policy
from kalena_engine.replay.simulator import SimClock, Simulator
from kalena_engine.replay.state import BatchGroups, ClusterState, Production, TaskTable
from kalena_engine.replay.usage import ProductionUsage
from kalena_engine.resources import ir_vector
from tests.worked import WORKED_POLICY


def synthetic_simulator(*, nodes: int = 3, prod_per_node: int = 2, steps: int = 50, step_s: float = 60.0,
                        tasks: list[tuple[float, int, float, float, float, int]] = (),
                        policy: Policy | None = None) -> Simulator:
    """Nodes of 16 cores / 64 GiB; production pods of 3 cores / 12 GiB (request = limit);
    ``tasks`` rows: (arrival_s, instances, cpu cores, ram GiB, duration_s, priority).
    Production usage shapes are zero until a test writes ``simulator.usage.shapes[step]``
    (columns cpu, ram as fractions of the request; ``scale`` = request)."""
    capacity = np.array([ir_vector(cpu=16, ram=64, gpu=0)] * nodes)
    capacity[:, 3:] = np.inf
    p = nodes * prod_per_node
    request = np.array([ir_vector(cpu=3, ram=12)] * p).reshape(p, 8)
    production = Production(ids=tuple(f"prod/p-{i}" for i in range(p)),
                            node=np.repeat(np.arange(nodes), prod_per_node), request=request, limit=request.copy())
    scale = np.ones((p, 8))
    scale[:, [0, 1, 4, 5, 6, 7]] = request[:, [0, 1, 4, 5, 6, 7]]
    usage = ProductionUsage(
        mapping="peak", step_times_s=step_s * np.arange(steps), vm_of_pod=np.arange(p), vm_ids=tuple(map(str, range(p))),
        scale=scale, shapes=np.zeros((steps, p, 6)), sample_age_s=np.zeros((steps, p)), rho=np.ones((p, 2)),
        request=request, limit=request.copy(),
    )
    rows = list(tasks)
    req = np.array([ir_vector(cpu=t[2], ram=t[3]) for t in rows]).reshape(len(rows), 8)
    table = TaskTable(
        task_id=np.array([f"job-{i}/task" for i in range(len(rows))], dtype=object),
        job_id=np.array([f"job-{i}" for i in range(len(rows))], dtype=object),
        instances=np.array([t[1] for t in rows], dtype=np.int64),
        arrival_s=np.array([t[0] for t in rows], dtype=float), duration_s=np.array([t[4] for t in rows], dtype=float),
        request=req, limit=req.copy(), usage=req.copy(), priority=np.array([t[5] for t in rows], dtype=np.int64),
    )
    k = len(rows)
    state = ClusterState(
        capacity=capacity, node_names=tuple(f"n{i}" for i in range(nodes)), production=production,
        prod_reservations=initial_reservations(request, np.zeros(p)), tasks=table,
        pending=np.zeros(k, dtype=np.int64), groups=BatchGroups(),
        submitted=np.zeros(k, dtype=np.int64), completed=np.zeros(k, dtype=np.int64),
    )
    return Simulator(state=state, usage=usage, clock=SimClock(0.0, step_s, steps), policy=policy or WORKED_POLICY,
                     eligible=np.ones(nodes, dtype=bool), stale_ttl_s=60.0)
