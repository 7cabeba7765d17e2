"""The live cluster as the engine's pre-flight reads it (:class:`kalena_engine.preflight.PreflightCluster`):
the scheduling pass's own snapshot and queue (:func:`kalena_web.scheduling.selectors.cluster_snapshot`,
:func:`~kalena_web.scheduling.selectors.pending_rows` — the pre-flight's "placeable" runs the
engine scheduler on them), each agent's sampling interval, and every running workload's request,
limit, newest usage and estimator state with its stored peak history (the estimation loop's own
reads, :func:`kalena_web.ledger.estimation_io.load_workloads` and ``load_histories``). A fixed
number of queries whatever the cluster's size (:data:`QUERIES`; a test guards it).
"""

from __future__ import annotations

import numpy as np

from kalena_engine.estimator import Reservations
from kalena_engine.preflight import PreflightCluster
from kalena_web.inventory.models import Cluster
from kalena_web.ledger import estimation_io
from kalena_web.ledger.mappers import live_workloads
from kalena_web.scheduling import mappers as scheduling_mappers
from kalena_web.scheduling import selectors as scheduling
from kalena_web.telemetry.models import AgentStatus

#: node rows, production pods, batch residents, recent evictions (the why-evicted records and the
#: agents' evict actions not yet recorded), published batch capacity, pending pods, bound gang
#: members, agent intervals, workloads, their stored peak histories (+1 where nodes publish batch
#: capacity: the pods the kubelet holds).
QUERIES = 11


def preflight_cluster_load(*, cluster: Cluster, now_s: float, cooldown_s: float) -> PreflightCluster:
    """Read ``cluster`` for a pre-flight at ``now_s``; ``cooldown_s`` is the longest eviction
    cooldown of the policies compared (the scheduler's cooldown filter reads evictions that recent)."""
    rows, snapshot = scheduling.cluster_snapshot(cluster=cluster, now_s=now_s, cooldown_s=cooldown_s)
    pending_rows = scheduling.pending_rows(cluster=cluster)
    _, image_sizes = scheduling_mappers.node_images(rows)
    pending, _ = scheduling_mappers.pending_batch(pending_rows, image_sizes)
    row_of = {r.id: i for i, r in enumerate(rows)}
    intervals = dict(AgentStatus.objects.filter(node__cluster=cluster).values_list("node_id", "sampling_interval_s"))
    cols = estimation_io.load_workloads(list(row_of))
    live = live_workloads(cols, limit_ratio=1.0)
    histories = estimation_io.load_histories(live.ids)
    return PreflightCluster(
        node_names=tuple(r.name for r in rows), capacity=snapshot.nodes.capacity,
        sampling_interval_s=np.array([float(intervals.get(r.id) or 0.0) for r in rows]),
        names=tuple(cols.names), node_of=np.array([row_of[int(n)] for n in cols.node_ids], dtype=np.int64),
        batch=live.batch, priority=np.array(cols.priorities, dtype=np.int64).reshape(len(cols)),
        request=live.request, limit=live.declared_limit,
        usage=live.last_usage, start_s=live.start_s, reclaim_disabled=live.reclaim_disabled,
        state=Reservations(value=live.state.value, updated_s=live.state.updated_s,
                           last_sample_s=live.state.last_sample_s),
        snapshot=snapshot if rows else None, pending=pending if pending_rows else None,
        grace_override_s=live.grace_override_s, histories=tuple(histories.get(int(i)) for i in live.ids))
