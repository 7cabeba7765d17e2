"""Batch pods declared in a Kuberina workloads document as a scheduler queue.

One entry per declaration (its unplaced replicas are identical pods); one template per
declaration (owner ``namespace/declaration``) carrying its nodeSelector, tolerations, labels,
Kuberina anti-affinity name list and the ids of its pods. Gangs come from the document's
groups — Kuberina inline ``gang`` (min = every member) and IR v1 ``groups`` (``min_members``,
``colocate``), which the reader has already merged — and from a ``kalena.naughtian.io/min-member``
annotation given per declaration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from kalena_engine.kuberina.model import PodSpec, Workloads
from kalena_engine.placement.model import BatchTemplate, Gang, PendingBatch, min_member_from_annotations


def pending_from_workloads(workloads: Workloads, *, pods: Iterable[str] | None = None, queued_s: float = 0.0,
                           annotations: Mapping[str, Mapping[str, str]] | None = None) -> PendingBatch:
    """Queue the pods ``pods`` (ids; default every pod) grouped by declaration.

    Args:
        annotations: ``{"namespace/declaration": {annotation: value}}``; the min-member
            annotation turns a declaration without a Kuberina gang into one.

    Raises:
        InputError: a malformed min-member annotation.
    """
    wanted = set(pods) if pods is not None else None
    by_decl: dict[str, list[PodSpec]] = {}
    for pod in workloads.pods:
        if wanted is None or pod.id in wanted:
            by_decl.setdefault(f"{pod.namespace}/{pod.declaration}", []).append(pod)
    all_ids: dict[str, list[str]] = {}
    for pod in workloads.pods:
        all_ids.setdefault(f"{pod.namespace}/{pod.declaration}", []).append(pod.id)
    gang_of_pod = {m: i for i, g in enumerate(workloads.groups) for m in g.members}
    gangs = [Gang(g.name, g.min_members, g.colocate) for g in workloads.groups]
    templates, gang, request, count = [], [], [], []
    annotations = annotations or {}
    for owner, members in by_decl.items():
        first = members[0]
        templates.append(BatchTemplate(
            owner=owner, namespace=first.namespace, labels=dict(first.labels), node_selector=dict(first.node_selector),
            tolerations=first.tolerations, anti_affinity_pods=first.anti_affinity, member_ids=tuple(all_ids[owner]),
            min_member=min_member_from_annotations(annotations.get(owner, {}), source=owner),
        ))
        gang.append(gang_of_pod.get(first.id, -1))
        request.append(first.requests)
        count.append(len(members))
    k = len(templates)
    return PendingBatch(
        ids=np.array(list(by_decl), dtype=object), template=np.arange(k, dtype=np.int64), templates=tuple(templates),
        request=np.array(request).reshape(k, 8), count=np.array(count, dtype=np.int64),
        priority=np.array([m[0].priority for m in by_decl.values()], dtype=np.int64),
        queued_s=np.full(k, float(queued_s)), gang=np.array(gang, dtype=np.int64), gangs=tuple(gangs),
    )
