"""Rows → the engine's production identity types (docs/design.md §15), and the override keys a live pod
carries (the only place the control plane reads them from a watch event).

:func:`entries_for` loads the blueprint entries a live pod may claim (its own name, its forge
label's entry, the entries of the declarations its owner names) with the claims held on them;
:func:`kalena_engine.kuberina.identity.production_identity` decides.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db.models import Q

from kalena_engine.kuberina.identity import BLUEPRINT_POD_LABEL, BlueprintEntries, LivePod, candidate_declarations
from kalena_engine.overrides import KEYS
from kalena_web.control.models import ProductionPlacement
from kalena_web.inventory.models import Cluster, Workload


def live_overrides(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None) -> dict[str, str]:
    """The per-workload override keys (:data:`kalena_engine.overrides.KEYS`: reclaim, startup
    grace) a live pod sets, read from its annotations over its labels (docs/design.md §4: Kubernetes
    carries them as annotations, a label is read too). Example: label ``reclaim: enabled``,
    annotation ``reclaim: disabled`` → ``{"kalena.naughtian.io/reclaim": "disabled"}``."""
    out: dict[str, str] = {}
    for source in (labels or {}, annotations or {}):
        for key in KEYS:
            if source.get(key) is not None:
                out[key] = str(source[key])
    return out


def with_overrides(labels: Mapping[str, str] | None, overrides: Mapping[str, str]) -> dict[str, str]:
    """``labels`` with the override keys replaced by the live pod's (``overrides``): the
    estimation loop and the pre-flight read the keys from a workload's labels."""
    return {**{k: str(v) for k, v in (labels or {}).items() if k not in KEYS}, **overrides}


def is_entry(workload: Workload) -> bool:
    """A blueprint entry (a production row the import created: its owner is its declaration's
    bare name) rather than an extra pod's own row (owner ``Kind/name`` or ``""``)."""
    return workload.kind == Workload.PRODUCTION and bool(workload.owner) and "/" not in workload.owner


def _entry_rows(cluster: Cluster):
    return (Workload.objects.filter(cluster=cluster, kind=Workload.PRODUCTION).exclude(owner="")
            .exclude(owner__contains="/"))


def entries_for(cluster: Cluster, pods: list[LivePod], *, declarations: list[tuple[str, str]] = ()) -> tuple[
        BlueprintEntries, dict[str, str], dict[str, Workload]]:
    """The entries ``pods`` may claim — their own names, their forge labels' entries, the
    replicas of the declarations their owners name, and of ``declarations`` (``(namespace,
    name)``) — as ``(entries, held, rows)``: ``held`` maps an entry held by a live pod to that
    pod's ref; ``rows`` maps an entry id to its row. An entry's blueprint node is its
    placement's ``blueprint_node`` when held, else its row's node (2 queries)."""
    names = {p.ref for p in pods} | {p.labels[BLUEPRINT_POD_LABEL] for p in pods if p.labels.get(BLUEPRINT_POD_LABEL)}
    wanted = set(declarations) | {(p.namespace, d) for p in pods for d in candidate_declarations(p)}
    query = Q(name__in=names)
    for namespace, declaration in wanted:
        query |= Q(namespace=namespace, owner=declaration)
    rows = {w.name: w for w in _entry_rows(cluster).filter(query).select_related("node")}
    claims = {c.workload_id: c for c in ProductionPlacement.objects.filter(workload__in=list(rows.values()))
              .select_related("blueprint_node")}
    table = []
    held: dict[str, str] = {}
    for name, w in sorted(rows.items()):
        claim = claims.get(w.id)
        node = claim.blueprint_node if claim is not None else w.node
        if claim is not None and claim.pod:
            held[name] = claim.pod
        table.append((name, w.namespace, w.owner, None, node.name if node is not None else ""))
    return BlueprintEntries.of(table), held, rows
