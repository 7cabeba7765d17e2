"""Inventory writes (keyword-only arguments, ``<entity>_<action>``)."""

from __future__ import annotations

from dataclasses import dataclass

from kalena_engine.replay import Replay, ReplayInputs
from kalena_web.inventory import mappers
from kalena_web.inventory.models import Cluster, Node, Workload


@dataclass(frozen=True, eq=False)
class ClusterInventory:
    """A saved cluster with its rows in engine order (index = engine row)."""

    cluster: Cluster
    nodes: list[Node]
    production: list[Workload]
    tasks: list[Workload]


def cluster_create_from_replay(*, name: str, sources: dict[str, str], inputs: ReplayInputs,
                               replay: Replay) -> ClusterInventory:
    """Save the nodes, production pods and batch tasks a built replay will run, in bulk.

    Must run inside the caller's transaction (a persist is all-or-nothing).
    """
    cluster = Cluster.objects.create(name=name, sources=dict(sources))
    nodes = Node.objects.bulk_create(mappers.nodes_from_replay(cluster, inputs, replay), batch_size=500)
    production = Workload.objects.bulk_create(
        mappers.production_from_replay(cluster, inputs, replay, nodes), batch_size=1000)
    tasks = Workload.objects.bulk_create(mappers.tasks_from_replay(cluster, replay), batch_size=1000)
    return ClusterInventory(cluster=cluster, nodes=nodes, production=production, tasks=tasks)
