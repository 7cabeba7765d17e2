"""Small clusters for scheduler tests, in IR units (cores, GiB)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from kalena_engine.kuberina.model import Taint
from kalena_engine.placement import (
    BatchResidents, BatchTemplate, ClusterSnapshot, Evictions, Gang, NodeTable, PendingBatch, ProductionPods,
)
from kalena_engine.resources import ir_vector

INF_DIMS = slice(3, 8)  # storage, disk, network unconstrained unless a test says otherwise


@dataclass
class Node:
    name: str
    cpu: float = 16.0          # capacity, cores
    ram: float = 64.0          # capacity, GiB
    gpu: float = 0.0
    slack_cpu: float | None = None   # default: capacity
    slack_ram: float | None = None
    slack_gpu: float | None = None
    zone: str = "z1"
    rack: str = "r1"
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    fresh: bool = True
    eligible: bool = True
    production: bool = True
    batch: bool = False
    volatility: float = 0.0


def node_table(nodes: Sequence[Node]) -> NodeTable:
    capacity = np.array([ir_vector(cpu=n.cpu, ram=n.ram, gpu=n.gpu) for n in nodes]).reshape(len(nodes), 8)
    capacity[:, INF_DIMS] = np.inf
    return NodeTable(names=tuple(n.name for n in nodes), zone=tuple(n.zone for n in nodes),
                     rack=tuple(n.rack for n in nodes), labels=tuple(dict(n.labels) for n in nodes),
                     taints=tuple(n.taints for n in nodes), capacity=capacity)


def snapshot(nodes: Sequence[Node], *, now_s: float = 0.0, production: ProductionPods | None = None,
             batch: BatchResidents | None = None, evictions: Evictions | None = None,
             images: Mapping[str, np.ndarray] | None = None, table: NodeTable | None = None) -> ClusterSnapshot:
    table = table or node_table(nodes)
    slack = table.capacity.copy()
    for i, n in enumerate(nodes):
        slack[i, 0] = 1000.0 * (n.cpu if n.slack_cpu is None else n.slack_cpu)
        slack[i, 1] = 2.0**30 * (n.ram if n.slack_ram is None else n.slack_ram)
        slack[i, 2] = n.gpu if n.slack_gpu is None else n.slack_gpu
    m = len(nodes)
    return ClusterSnapshot(
        nodes=table, slack=slack, version=np.zeros(m, dtype=np.int64),
        ready=np.array([n.ready for n in nodes], dtype=bool), telemetry_fresh=np.array([n.fresh for n in nodes], dtype=bool),
        slack_eligible=np.array([n.eligible for n in nodes], dtype=bool),
        has_production=np.array([n.production for n in nodes], dtype=bool),
        has_batch=np.array([n.batch for n in nodes], dtype=bool),
        volatility=np.array([n.volatility for n in nodes], dtype=float), now_s=now_s,
        production=production or ProductionPods(), batch=batch or BatchResidents(),
        evictions=evictions or Evictions(), images=dict(images or {}),
    )


@dataclass
class Entry:
    id: str
    count: int
    cpu: float = 1.0
    ram: float = 1.0
    gpu: float = 0.0
    template: int = 0
    priority: int = 0
    queued_s: float = 0.0
    gang: int = -1


def pending(entries: Sequence[Entry], templates: Sequence[BatchTemplate] = (BatchTemplate(owner="job"),),
            gangs: Sequence[Gang] = ()) -> PendingBatch:
    k = len(entries)
    return PendingBatch(
        ids=np.array([e.id for e in entries], dtype=object), template=np.array([e.template for e in entries], dtype=np.int64),
        templates=tuple(templates),
        request=np.array([ir_vector(cpu=e.cpu, ram=e.ram, gpu=e.gpu) for e in entries]).reshape(k, 8),
        count=np.array([e.count for e in entries], dtype=np.int64), priority=np.array([e.priority for e in entries], dtype=np.int64),
        queued_s=np.array([e.queued_s for e in entries], dtype=float), gang=np.array([e.gang for e in entries], dtype=np.int64),
        gangs=tuple(gangs),
    )


def placements(result) -> list[tuple[int, int, int]]:
    """(entry, node, count) rows of a pass, aggregated and sorted."""
    agg: dict[tuple[int, int], int] = {}
    b = result.bindings
    for e, n, c in zip(b.entry.tolist(), b.node.tolist(), b.count.tolist(), strict=True):
        agg[e, n] = agg.get((e, n), 0) + c
    return sorted((e, n, c) for (e, n), c in agg.items())
