"""Reads for the scheduler extender: one pod judged against the live cluster's ledgers with the
scheduler's own filters and scores (:func:`kalena_engine.placement.verdict.node_verdicts`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from agents.orchestrators.kubernetes.batch_resources import pod_vectors
from agents.orchestrators.kubernetes.extender import pod_constraints, pod_ref
from kalena_engine.placement.verdict import node_verdicts
from kalena_engine.policy import Policy
from kalena_web.inventory.models import Cluster
from kalena_web.scheduling import mappers
from kalena_web.scheduling import selectors as scheduling


def extender_verdicts(*, cluster: Cluster, pod: Mapping[str, Any], node_names: Sequence[str], now_s: float,
                      policy: Policy) -> tuple[dict[str, tuple[str, str]], dict[str, float]]:
    """``(failed, scores)`` for ``pod`` on ``node_names``: failed maps node → ``(reason kind,
    message)`` (a node Kalena does not know fails as ``unknown_node``); scores node → 0–100.

    Raises:
        QuantityError, InputError: the pod's resources or constraints cannot be read.
    """
    requests, _ = pod_vectors(pod)
    meta = pod.get("metadata") or {}
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    ref = pod_ref(pod)
    template = mappers.template_of(owner=f"{owners[0]['kind']}/{owners[0]['name']}" if owners else ref,
                                   namespace=ref.split("/", 1)[0], labels=meta.get("labels") or {},
                                   constraints=pod_constraints(pod), min_member=None)
    rows, snap = scheduling.cluster_snapshot(cluster=cluster, now_s=now_s, cooldown_s=policy.eviction.cooldown_s,
                                              kubelet=False)
    verdicts = node_verdicts(snap, template, np.asarray(requests), policy) if rows else None
    index = {r.name: i for i, r in enumerate(rows)}
    failed: dict[str, tuple[str, str]] = {}
    scores: dict[str, float] = {}
    for name in node_names:
        row = index.get(name)
        if row is None or verdicts is None:
            failed[name] = ("unknown_node", f"node {name} is not in Kalena cluster {cluster.name}")
        elif not verdicts.feasible[row]:
            reason = verdicts.reasons[row]
            failed[name] = (reason.kind, describe(reason.to_dict()))
        else:
            scores[name] = float(verdicts.score[row])
    return failed, scores


def describe(reason: Mapping[str, Any]) -> str:
    """One line for kube-scheduler's FailedScheduling text, e.g. ``Insufficient cpu slack
    (requested 2 cores, free 1 cores)`` or ``releasing batch/v (3 cores of cpu)``."""
    kind = reason["kind"]
    if kind == "releasing":
        return (f"releasing {', '.join(reason['releasing'])} ({reason['releasing_amount']:g} {reason['unit']} of "
                f"{reason['dim']}): the kubelet still counts it")
    if "requested" in reason:
        return (f"Insufficient {reason['dim']} {'allocatable' if kind == 'kubelet_allocatable' else 'slack'} "
                f"(requested {reason['requested']:g} {reason['unit']}, free {reason['free']:g} {reason['unit']})")
    details = ", ".join(f"{k} {v}" for k, v in reason.items() if k not in ("kind", "node") and v not in ("", None))
    return f"{kind}" + (f" ({details})" if details else "")


# -- the kubelet's admission room (docs/design.md §14, case C11) ------------------------------------------

def held_by_node(*, cluster: Cluster, admitted_only: bool = False, bound: dict[int, np.ndarray] | None = None,
                 node_ids: Sequence[int] | None = None,
                 ) -> tuple[dict[int, np.ndarray], dict[int, list[tuple[str, tuple]]]]:
    """``(held, releasing)`` per node id: ``held`` Σ requests (8-vector) of the batch pods the
    kubelet counts there — bound pods (``admitted_only``: only those the kubelet has admitted,
    ``BatchPod.admitted_s`` set — the published floor of docs/design.md §14: a pod bound but not yet
    admitted, which the kubelet may still refuse, never raises what a node publishes), and
    watched pods Kalena saw evicted whose object is not gone yet (terminating: the kubelet
    counts them until they are terminal); ``releasing`` those terminating pods as
    ``(ref, request)``. ``bound`` (node id → Σ requests of its bound pods, e.g. the scheduler
    cache's residents, which a pass has just synced with the record): used instead of reading
    the bound pods again (not with ``admitted_only``). ``node_ids``: only these nodes (a sharded
    scheduler's publisher reads the pods of its own nodes); None: every node."""
    from kalena_web.archive.models import EvictionRecord
    from kalena_web.scheduling.models import BatchPod

    releasing: dict[int, list[tuple[str, tuple]]] = {}
    if bound is not None and not admitted_only:
        held = {node_id: np.array(vec, dtype=np.float64) for node_id, vec in bound.items()}
    else:
        held = {}
        pods = BatchPod.objects.filter(cluster=cluster, state=BatchPod.BOUND, workload__node__isnull=False)
        if node_ids is not None:
            pods = pods.filter(workload__node_id__any=list(node_ids))
        if admitted_only:
            pods = pods.filter(admitted_s__isnull=False)
        for node_id, request in pods.values_list("workload__node_id", "workload__request"):
            held[node_id] = held.get(node_id, np.zeros(8)) + np.asarray(request, dtype=np.float64)
    victims = EvictionRecord.objects.filter(
        cluster=cluster, workload__batch__source=BatchPod.WATCH, workload__batch__state=BatchPod.COMPLETED,
        workload__batch__outcome="evicted", workload__batch__gone=False,
    ).order_by("workload_id", "-time_s").values_list("workload_id", "node_id", "workload_name", "workload__request")
    wanted = None if node_ids is None else set(node_ids)
    seen: set[int] = set()
    for workload_id, node_id, name, request in victims:
        if workload_id in seen:
            continue  # the latest eviction of each pod object
        seen.add(workload_id)
        if wanted is not None and node_id not in wanted:
            continue
        vec = np.asarray(request, dtype=np.float64)
        held[node_id] = held.get(node_id, np.zeros(8)) + vec
        releasing.setdefault(node_id, []).append((name, tuple(vec.tolist())))
    return held, releasing


def kubelet_room(*, cluster: Cluster, rows, bound: Callable[[], dict[int, np.ndarray]] | None = None,
                 ) -> "KubeletRoom | None":
    """The :class:`~kalena_engine.placement.KubeletRoom` of a scheduling pass over ``rows``
    (selector NodeRows): published − held on cpu and ram (+inf elsewhere); ``None`` when no node
    of the cluster publishes (Docker, the fake: nothing re-checks). Once any node publishes, a
    node that does not has room 0 (the kubelet would refuse every converted pod there).
    ``bound()``: the bound pods' requests per node, as :func:`held_by_node` takes them."""
    from kalena_engine.placement import KubeletRoom
    from kalena_web.kubehooks.models import PublishedBatch

    published = {node_id: (cpu, memory) for node_id, cpu, memory in PublishedBatch.objects.filter(
        node__cluster=cluster).values_list("node_id", "cpu_mcpu", "memory_bytes")}
    if not published:
        return None
    held, releasing = held_by_node(cluster=cluster, bound=None if bound is None else bound())
    room = np.full((len(rows), 8), np.inf)
    out_releasing = {}
    for i, row in enumerate(rows):
        cpu, memory = published.get(row.id, (0.0, 0.0))
        h = held.get(row.id, np.zeros(8))
        room[i, 0], room[i, 1] = cpu - h[0], memory - h[1]
        if releasing.get(row.id):
            out_releasing[i] = tuple(releasing[row.id])
    return KubeletRoom(room=room, releasing=out_releasing)
