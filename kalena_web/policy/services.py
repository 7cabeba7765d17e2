"""Policy and audit writes (keyword-only, ``<entity>_<action>``).

Every policy change goes through :func:`policy_version_create` — the engine's parser
checks the document first, so a refused one changes nothing — and writes one audit entry in
the same transaction. :func:`audit_record` is the one writer of the audit log; other apps call
it beside their own writes (replan decisions, manual actions, token changes, evictions).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.db import transaction
from django.db.models import Max

from kalena_engine.errors import InputError
from kalena_engine.policy_file import PolicyDocument, policy_to_document
from kalena_web.inventory.models import Cluster
from kalena_web.policy import mappers
from kalena_web.policy.models import AuditEntry, PolicyApplied, PolicyVersion

#: seconds after which :func:`policy_applied_record` refreshes an unchanged version's time
APPLIED_REFRESH_S = 10.0


class VersionNotFound(InputError):
    """A rollback to a version the cluster does not have."""


def audit_record(*, actor_kind: str, actor: str, action: str, cluster_name: str = "", target: str = "",
                 before: Any = None, after: Any = None) -> AuditEntry:
    """Append one audit entry (who — user, agent or loop —, what, before and after)."""
    return AuditEntry.objects.create(actor_kind=actor_kind, actor=str(actor)[:150], action=action[:40],
                                     cluster_name=cluster_name[:200], target=str(target)[:300],
                                     before=before, after=after)


def policy_version_create(*, cluster: Cluster, document: PolicyDocument, user: str, source: str = "console",
                          note: str = "", action: str = "policy.change") -> PolicyVersion:
    """Store ``document`` (already parsed by the engine) as the cluster's next version and audit
    the change with the changed keys before and after. The live loops and the agents pick it up
    on their next pass (docs/design.md §10)."""
    with transaction.atomic():
        Cluster.objects.select_for_update().filter(id=cluster.id).first()
        previous = PolicyVersion.objects.filter(cluster=cluster).order_by("-version").first()
        number = (PolicyVersion.objects.filter(cluster=cluster).aggregate(m=Max("version"))["m"] or 0) + 1
        stored = mappers.document_for_store(document, version=number, source=source,
                                            created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
        before_doc = previous.document if previous else policy_to_document(PolicyDocument())
        row = PolicyVersion.objects.create(cluster=cluster, version=number, document=stored, source=source[:200],
                                           note=note[:500], created_by=user[:150])
        diff = mappers.spec_diff(before_doc, stored)
        audit_record(actor_kind=AuditEntry.USER, actor=user, action=action, cluster_name=cluster.name,
                     target=f"policy v{number}",
                     before={"version": previous.version if previous else 0, **{k: b for k, b, _ in diff}},
                     after={"version": number, **{k: a for k, _, a in diff}})
    return row


def policy_rollback(*, cluster: Cluster, version: int, user: str) -> PolicyVersion:
    """Roll back: a new version holding version ``version``'s policy; version 0 is the engine
    defaults a cluster runs on before its first save.

    Raises:
        VersionNotFound: the cluster has no such version.
    """
    if version == 0:
        if not PolicyVersion.objects.filter(cluster=cluster).exists():
            raise VersionNotFound(f"{cluster.name} already runs on the engine defaults (no version saved)",
                                  field="version", accepted="a version listed in the history")
        return policy_version_create(cluster=cluster, document=PolicyDocument(), user=user,
                                     source="rollback to the engine defaults", action="policy.rollback")
    old = PolicyVersion.objects.filter(cluster=cluster, version=version).first()
    if old is None:
        raise VersionNotFound(f"{cluster.name} has no policy version {version}", field="version",
                              accepted="a version listed in the history, or 0 for the engine defaults")
    return policy_version_create(cluster=cluster, document=mappers.version_document(old), user=user,
                                 source=f"rollback to v{version}", action="policy.rollback")


def policy_applied_record(*, cluster_id: int, part: str, version: int, now_s: float) -> bool:
    """Record that ``part`` (one of :attr:`PolicyApplied.PARTS`) of the cluster decided with
    policy ``version`` at ``now_s`` (epoch s), for the policy page. Cheap enough for every pass
    and every extender call: one indexed read, and a write only when the version changed or the
    stored time is older than :data:`APPLIED_REFRESH_S`. Returns whether it wrote.

    Raises:
        InputError: ``part`` is not a known part.
    """
    parts = dict(PolicyApplied.PARTS)
    if part not in parts:
        raise InputError(f"{part!r} is not a live part", field="part", accepted=", ".join(parts))
    stored = PolicyApplied.objects.filter(cluster_id=cluster_id, part=part).values_list("version", "applied_s").first()
    if stored is not None and stored[0] == version and now_s - stored[1] < APPLIED_REFRESH_S:
        return False
    PolicyApplied.objects.bulk_create(
        [PolicyApplied(cluster_id=cluster_id, part=part, version=version, applied_s=now_s)],
        update_conflicts=True, unique_fields=["cluster", "part"], update_fields=["version", "applied_s"])
    return True


def policy_apply(*, cluster_id: int, part: str, now_s: float, known=None):
    """The cluster's current policy (a :class:`~kalena_web.policy.selectors.CurrentPolicy`) for
    ``part`` to decide with now, recorded as the version that part applies
    (:func:`policy_applied_record`). ``known``, the version a long-running loop read last, is
    reused while still current (:func:`~kalena_web.policy.selectors.current_policy_refreshed`).

    Raises:
        InputError: ``part`` is not a known part.
    """
    from kalena_web.policy.selectors import current_policy_refreshed

    current = current_policy_refreshed(cluster_id=cluster_id, known=known)
    policy_applied_record(cluster_id=cluster_id, part=part, version=current.version, now_s=now_s)
    return current


def calibration_import(*, cluster: Cluster, document: PolicyDocument, filename: str, user: str):
    """Keep an imported calibration file (already parsed by the engine) and audit it."""
    from kalena_web.policy.models import CalibrationImport

    cal = document.metadata.calibration
    with transaction.atomic():
        row = CalibrationImport.objects.create(cluster=cluster, document=policy_to_document(document),
                                               filename=filename[:300], imported_by=user[:150])
        audit_record(actor_kind=AuditEntry.USER, actor=user, action="calibration.import", cluster_name=cluster.name,
                     target=filename, after={"points": len(cal.points) if cal else 0,
                                             "knee": dict(cal.knee) if cal else None})
    return row
