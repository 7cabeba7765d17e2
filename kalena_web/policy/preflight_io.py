"""The live cluster as the engine's pre-flight reads it (:class:`kalena_engine.preflight.PreflightCluster`):
each node's capacity and agent sampling interval, every running workload's request, limit,
newest usage and estimator state (the same rows the estimation loop reads), and the pending
batch queue in order. Five queries whatever the cluster's size (a test guards the count).
"""

from __future__ import annotations

import numpy as np

from kalena_engine.estimator import Reservations
from kalena_engine.preflight import PreflightCluster
from kalena_engine.resources import N_DIMS
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.ledger import estimation_io
from kalena_web.ledger.mappers import live_workloads
from kalena_web.scheduling.models import BatchPod
from kalena_web.telemetry.models import AgentStatus


def _matrix(vectors: list, n: int, fill: float = 0.0) -> np.ndarray:
    out = np.full((n, N_DIMS), fill, dtype=np.float64)
    for i, v in enumerate(vectors):
        if v is not None:
            out[i] = v
    return out


def preflight_cluster_load(*, cluster: Cluster) -> PreflightCluster:
    nodes = list(Node.objects.filter(cluster=cluster).order_by("row").values_list("id", "name", "capacity",
                                                                                 "takes_batch"))
    row_of = {node_id: i for i, (node_id, *_rest) in enumerate(nodes)}
    intervals = dict(AgentStatus.objects.filter(node__cluster=cluster).values_list("node_id", "sampling_interval_s"))
    rows = estimation_io.load_workloads(list(row_of))
    live = live_workloads(rows, limit_ratio=1.0)
    declared = _matrix([r[4] for r in rows], len(rows), fill=np.inf)
    meta = {wid: (name, ns, prio) for wid, name, ns, prio in
            Workload.objects.filter(cluster=cluster, node__isnull=False).values_list("id", "name", "namespace", "priority")}
    pending = list(BatchPod.objects.filter(cluster=cluster, state=BatchPod.PENDING).order_by("queued_s", "id")
                   .values_list("workload__request", "workload__namespace"))
    names = tuple(meta[int(i)][0] for i in live.ids)
    return PreflightCluster(
        node_names=tuple(n[1] for n in nodes),
        capacity=_matrix([n[2] for n in nodes], len(nodes)),
        takes_batch=np.array([bool(n[3]) for n in nodes], dtype=bool),
        sampling_interval_s=np.array([float(intervals.get(n[0]) or 0.0) for n in nodes]),
        names=names, node_of=np.array([row_of[int(n)] for n in live.node_ids], dtype=np.int64),
        batch=live.batch, priority=np.array([meta[int(i)][2] for i in live.ids], dtype=np.int64),
        namespace=tuple(meta[int(i)][1] for i in live.ids), request=live.request, limit=declared,
        usage=live.last_usage, start_s=live.start_s, reclaim_disabled=live.reclaim_disabled,
        state=Reservations(value=live.state.value, updated_s=live.state.updated_s,
                           last_sample_s=live.state.last_sample_s),
        pending_request=_matrix([p[0] for p in pending], len(pending)),
        pending_namespace=tuple(p[1] for p in pending), grace_override_s=live.grace_override_s)
