"""A live cluster of any size for the ingest benchmarks: the real Kuberina ``irina-186-3d``
infrastructure, workloads and blueprint, replicated until it has ``n_nodes`` nodes.

Copy ``k`` of node ``n`` is named ``n`` (k = 0) or ``n-c<k>``; its production pods are the
blueprint's pods of ``n``, renamed ``<ns>/<pod>-c<k>``. A partial last copy takes the first
nodes in file order and their pods. Each copy keeps the real blueprint's placement, so the
replicated blueprint is feasible by construction (``live_cluster_import`` verifies it).
Soft constraints (affinity, anti-affinity, spread) and gangs are dropped: the ingest path does
not read them. ``irina-620-8d`` is not used: it ships without a blueprint.
"""

from __future__ import annotations

import dataclasses

from kalena_engine.kuberina import Blueprint, Infrastructure, Workloads


def replicate(infra: Infrastructure, workloads: Workloads, blueprint: Blueprint,
              n_nodes: int) -> tuple[Infrastructure, Workloads, Blueprint]:
    """``(infra, workloads, blueprint)`` with exactly ``n_nodes`` nodes (module doc).

    Raises:
        ValueError: ``n_nodes`` < 1.
    """
    if n_nodes < 1:
        raise ValueError(f"n_nodes must be ≥ 1, got {n_nodes}")
    base = len(infra.nodes)
    pods_on: dict[str, list] = {}
    for pod in workloads.pods:
        node = blueprint.assignment.get(pod.id)
        if node is not None:
            pods_on.setdefault(node, []).append(pod)
    nodes, pods, assignment = [], [], {}
    for i in range(n_nodes):
        k, spec = divmod(i, base)
        original = infra.nodes[spec]
        suffix = "" if k == 0 else f"-c{k}"
        name = original.name + suffix
        nodes.append(dataclasses.replace(original, name=name))
        for pod in pods_on.get(original.name, []):
            copy = dataclasses.replace(pod, id=pod.id + suffix, name=pod.name + suffix,
                                       declaration=pod.declaration + suffix, affinity=(), anti_affinity=(),
                                       topology_spread=None, gang=None)
            pods.append(copy)
            assignment[copy.id] = name
    return (dataclasses.replace(infra, nodes=tuple(nodes)),
            Workloads(source=workloads.source, pods=tuple(pods), api_version=workloads.api_version),
            Blueprint(source=blueprint.source, assignment=assignment, metadata=dict(blueprint.metadata)))
