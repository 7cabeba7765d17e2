"""Policy and audit reads.

:func:`current_policy` is what every live decision uses (docs/design.md §15: the scheduling passes —
Docker, Swarm, REST and the Kubernetes Lease holder —, the scheduler extender, the batch-capacity
publisher, escalation, estimation and the pre-flight); a long-running loop re-reads it every pass
through :func:`current_policy_refreshed` (one indexed query of the version number, the document
parsed again only when it changed). The agents get the same version over their link
(:mod:`kalena_web.telemetry.consumers`). :func:`parts_policy_state` is which version each part
last applied, for the policy page.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import QuerySet

from kalena_engine.policy import Policy
from kalena_engine.policy_file import PolicyDocument
from kalena_web.inventory.models import Cluster, Node
from kalena_web.policy import mappers
from kalena_web.policy.models import AuditEntry, PolicyApplied, PolicyVersion


@dataclass(frozen=True)
class CurrentPolicy:
    """The version in force (0 = no version saved: the engine defaults) and its policy."""

    version: int
    policy: Policy
    document: PolicyDocument


def current_policy(*, cluster_id: int) -> CurrentPolicy:
    row = PolicyVersion.objects.filter(cluster_id=cluster_id).order_by("-version").first()
    if row is None:
        return CurrentPolicy(version=0, policy=Policy(), document=PolicyDocument())
    document = mappers.version_document(row)
    return CurrentPolicy(version=row.version, policy=document.policy, document=document)


def current_policy_refreshed(*, cluster_id: int, known: CurrentPolicy | None) -> CurrentPolicy:
    """The cluster's current policy, reusing ``known`` while it is still the current version.

    Versions only grow (a save or a rollback adds one), so an equal number is the same policy:
    a pass that finds ``known.version`` current costs one indexed query of the number and no
    parsing; a saved change is read on the next call.
    """
    if known is not None:
        latest = (PolicyVersion.objects.filter(cluster_id=cluster_id).order_by("-version")
                  .values_list("version", flat=True).first()) or 0
        if latest == known.version:
            return known
    return current_policy(cluster_id=cluster_id)


def current_versions(*, cluster_ids: Iterable[int]) -> dict[int, int]:
    """``{cluster id: current version}`` (0 where none is saved) in one query."""
    from django.db.models import Max

    ids = list(cluster_ids)
    found = dict(PolicyVersion.objects.filter(cluster_id__in=ids).values("cluster_id")
                 .annotate(v=Max("version")).values_list("cluster_id", "v"))
    return {c: found.get(c, 0) for c in ids}


def node_clusters(node_ids: Iterable[int]) -> dict[int, int]:
    """``{node id: cluster id}``."""
    return dict(Node.objects.filter(id__in=list(node_ids)).values_list("id", "cluster_id"))


def policy_versions(*, cluster: Cluster) -> QuerySet[PolicyVersion]:
    return PolicyVersion.objects.filter(cluster=cluster).order_by("-version")


def policy_version_get(*, cluster: Cluster, version: int) -> PolicyVersion | None:
    return PolicyVersion.objects.filter(cluster=cluster, version=version).first()


@dataclass(frozen=True)
class AuditFilter:
    action: str = ""
    actor: str = ""
    cluster: str = ""
    since: dt.datetime | None = None
    until: dt.datetime | None = None


def audit_entries(filters: AuditFilter) -> QuerySet[AuditEntry]:
    """Newest first; ``action`` matches a prefix (``policy`` → every policy action)."""
    rows = AuditEntry.objects.all()
    if filters.action:
        rows = rows.filter(action__startswith=filters.action)
    if filters.actor:
        rows = rows.filter(actor=filters.actor)
    if filters.cluster:
        rows = rows.filter(cluster_name=filters.cluster)
    if filters.since:
        rows = rows.filter(at__gte=filters.since)
    if filters.until:
        rows = rows.filter(at__lt=filters.until)
    return rows.order_by("-at", "-id")


def audit_actions() -> list[str]:
    """Every action in the audit log, once each, sorted. (``order_by`` clears the model's
    ``-at`` ordering, which would otherwise join the DISTINCT and repeat an action per entry.)"""
    return list(AuditEntry.objects.order_by("action").values_list("action", flat=True).distinct())


def agent_policy_message(*, cluster_id: int) -> tuple[int, dict]:
    """``(version, the link's policy message)`` carrying the whole estimator and eviction sections
    of the cluster's current version (:mod:`agents.link.protocol`)."""
    from dataclasses import asdict

    current = current_policy(cluster_id=cluster_id)
    return current.version, {"type": "policy", "v": 1, "version": current.version,
                             "estimator": asdict(current.policy.estimator),
                             "eviction": asdict(current.policy.eviction)}


@dataclass(frozen=True)
class AgentPolicyState:
    node: str
    connected: bool
    reported: int | None
    behind: bool


def agents_policy_state(*, cluster: Cluster) -> tuple[int, list[AgentPolicyState]]:
    """The current version and, per node with an agent, the version it reports applying;
    ``behind`` when it reports an older one (or none while a version is saved)."""
    from kalena_web.telemetry.models import AgentStatus

    version = current_versions(cluster_ids=[cluster.id])[cluster.id]
    rows = AgentStatus.objects.filter(node__cluster=cluster).order_by("node__name").values_list(
        "node__name", "connected", "policy_version")
    return version, [AgentPolicyState(node=n, connected=c, reported=v, behind=(v or 0) < version)
                     for n, c, v in rows]


@dataclass(frozen=True)
class PartPolicyState:
    """One live part of a cluster: the version it last decided with (``None``: it has not run
    for this cluster) and when (epoch s); ``behind`` when that is older than the current one."""

    part: str
    label: str
    version: int | None
    applied_s: float | None
    behind: bool


def parts_policy_state(*, cluster: Cluster, current: int) -> list[PartPolicyState]:
    """Per live part (:attr:`PolicyApplied.PARTS`, in that order) the version it last applied
    against ``current``, the cluster's current version. A part that never ran is not behind
    (a Docker cluster has no extender nor publisher); one that ran an older version is."""
    found = {part: (version, at) for part, version, at in PolicyApplied.objects.filter(cluster=cluster)
             .values_list("part", "version", "applied_s")}
    out = []
    for part, label in PolicyApplied.PARTS:
        version, at = found.get(part, (None, None))
        out.append(PartPolicyState(part=part, label=label, version=version, applied_s=at,
                                   behind=version is not None and version < current))
    return out
