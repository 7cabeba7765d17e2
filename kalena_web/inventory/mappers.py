"""The only place inventory rows and engine types meet (both directions).

Engine → rows: nodes, production pods and batch tasks of a built replay become unsaved model
instances. Rows → engine: resource vectors become ``(8,)`` / ``(k, 8)`` float64 arrays in
internal units.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from kalena_engine.estimator import estimator_limit
from kalena_engine.replay import Replay, ReplayInputs
from kalena_web.inventory.models import Cluster, Node, Workload


def vector(values: Sequence[float] | None) -> np.ndarray:
    """One stored vector as an ``(8,)`` array (``None`` → zeros)."""
    return np.zeros(8) if values is None else np.asarray(values, dtype=np.float64)


def vectors(values: Iterable[Sequence[float] | None]) -> np.ndarray:
    """Stored vectors as a ``(k, 8)`` array."""
    rows = [vector(v) for v in values]
    return np.array(rows, dtype=np.float64).reshape(len(rows), 8)


def nodes_from_replay(cluster: Cluster, inputs: ReplayInputs, replay: Replay) -> list[Node]:
    """Unsaved :class:`Node` rows in the engine's node order."""
    state = replay.simulator.state
    active = np.zeros(len(state.capacity), dtype=bool)
    active[replay.verification.active_nodes] = True
    eligible = replay.simulator.eligible
    return [
        Node(cluster=cluster, row=i, name=spec.name, zone=spec.zone, rack=spec.rack, labels=dict(spec.labels),
             taints=[{"key": t.key, "value": t.value, "effect": t.effect} for t in spec.taints],
             allocatable=spec.allocatable.tolist(), capacity=state.capacity[i].tolist(),
             active=bool(active[i]), takes_batch=bool(eligible[i]))
        for i, spec in enumerate(inputs.infra.nodes)
    ]


def production_from_replay(cluster: Cluster, inputs: ReplayInputs, replay: Replay,
                           nodes: Sequence[Node]) -> list[Workload]:
    """Unsaved production-pod :class:`Workload` rows in the engine's production order."""
    production = replay.simulator.state.production
    specs = {pod.id: pod for pod in inputs.workloads.pods}
    rows = []
    for i, pod_id in enumerate(production.ids):
        spec = specs.get(pod_id)
        rows.append(Workload(
            cluster=cluster, kind=Workload.PRODUCTION, row=i, name=pod_id,
            namespace=spec.namespace if spec else pod_id.partition("/")[0],
            owner=spec.declaration if spec else "", tier=spec.tier if spec else "service",
            priority=spec.priority if spec else 0, node=nodes[int(production.node[i])], instances=1,
            request=production.request[i].tolist(), limit=production.limit[i].tolist(),
        ))
    return rows


def tasks_from_replay(cluster: Cluster, replay: Replay) -> list[Workload]:
    """Unsaved batch-task :class:`Workload` rows in the engine's task order."""
    tasks = replay.simulator.state.tasks
    return [
        Workload(
            cluster=cluster, kind=Workload.BATCH, row=i, name=str(tasks.task_id[i]), owner=str(tasks.job_id[i]),
            tier="batch", priority=int(tasks.priority[i]), instances=int(tasks.instances[i]),
            arrival_s=float(tasks.arrival_s[i]), duration_s=float(tasks.duration_s[i]),
            request=tasks.request[i].tolist(), limit=tasks.limit[i].tolist(), usage=tasks.usage[i].tolist(),
        )
        for i in range(len(tasks))
    ]


def nodes_from_ir(cluster: Cluster, infra, capacity: np.ndarray, active: np.ndarray) -> list[Node]:
    """Unsaved :class:`Node` rows of a live cluster from a Kuberina infrastructure (row order)."""
    return [
        Node(cluster=cluster, row=i, name=spec.name, zone=spec.zone, rack=spec.rack, labels=dict(spec.labels),
             taints=[{"key": t.key, "value": t.value, "effect": t.effect} for t in spec.taints],
             allocatable=spec.allocatable.tolist(), capacity=capacity[i].tolist(),
             active=bool(active[i]), takes_batch=True)
        for i, spec in enumerate(infra.nodes)
    ]


def production_from_ir(cluster: Cluster, workloads, node_of_pod: np.ndarray, nodes: Sequence[Node],
                       limit_ratio: float) -> list[Workload]:
    """Unsaved production :class:`Workload` rows for the blueprint's placed pods."""
    rows = []
    for i, pod in enumerate(workloads.pods):
        if node_of_pod[i] < 0:
            continue
        limit = estimator_limit(pod.limits if pod.limits is not None else np.full(8, np.inf), pod.requests,
                                limit_ratio)
        rows.append(Workload(
            cluster=cluster, kind=Workload.PRODUCTION, row=len(rows), name=pod.id, namespace=pod.namespace,
            owner=pod.declaration, tier="service", priority=pod.priority, node=nodes[int(node_of_pod[i])],
            instances=1, request=pod.requests.tolist(), limit=limit.tolist(), labels=dict(pod.labels),
            constraints={"anti_affinity": list(pod.anti_affinity)} if pod.anti_affinity else {},
        ))
    return rows


def infra_from_cluster(cluster: Cluster):
    """The :class:`~kalena_engine.kuberina.Infrastructure` a live cluster's nodes describe, for
    checking a new blueprint against it when no infrastructure file is at hand (the console's
    re-plan adoption): each node's ``allocatable`` is its post-Phase-0 ``capacity`` and there
    are no DaemonSets, so ``phase0_capacity`` of the result is the capacity the ledgers use."""
    from kalena_engine.kuberina.model import Infrastructure, NodeSpec, Taint

    nodes = tuple(
        NodeSpec(name=n.name, zone=n.zone, rack=n.rack, labels=dict(n.labels or {}),
                 taints=tuple(Taint(key=t.get("key", ""), value=t.get("value", ""),
                                    effect=t.get("effect", "NoSchedule")) for t in n.taints or []),
                 allocatable=vector(n.capacity))
        for n in Node.objects.filter(cluster=cluster).order_by("row"))
    return Infrastructure(source=f"cluster {cluster.name} (its nodes)", nodes=nodes, daemonsets=())
