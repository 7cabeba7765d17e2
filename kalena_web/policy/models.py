"""Policy as versioned data per live cluster, and the audit log (docs/design.md §10, §12).

:class:`PolicyVersion` holds one whole policy file (``document``, the mapping of
:func:`kalena_engine.policy_file.policy_to_document`); versions count from 1 per cluster and
are never changed — a save or a rollback adds one. No version yet means the engine defaults
(version 0).

:class:`PolicyApplied` is, per cluster and live part (the scheduler, the extender, the
batch-capacity publisher, escalation), the version that part last decided with and when (docs/design.md
§15: the console shows which version each part applies). The agents report theirs on their link
(``AgentStatus.policy_version``).

:class:`AuditEntry` is append-only: a PostgreSQL trigger (migration ``0002``) refuses UPDATE
and DELETE. ``cluster_name`` is text, not a key, so an entry outlives its cluster.
"""

from __future__ import annotations

from django.db import models

from kalena_web.inventory.models import Cluster


class PolicyVersion(models.Model):
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="policy_versions")
    version = models.PositiveIntegerField()
    document = models.JSONField()
    source = models.CharField(max_length=200, blank=True)
    note = models.CharField(max_length=500, blank=True)
    created_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "version"], name="policy_version_unique")]
        ordering = ["-version"]
        permissions = [("tune_policy", "Can tune a live cluster's policy")]


class PolicyApplied(models.Model):
    SCHEDULER, EXTENDER, PUBLISHER, ESCALATION = "scheduler", "extender", "publisher", "escalation"
    PARTS = [(SCHEDULER, "scheduler"), (EXTENDER, "scheduler extender"), (PUBLISHER, "batch-capacity publisher"),
             (ESCALATION, "escalation")]

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="policy_applied")
    part = models.CharField(max_length=16, choices=PARTS)
    version = models.PositiveIntegerField()
    applied_s = models.FloatField()  # epoch seconds of the last decision recorded with ``version``

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "part"], name="policy_applied_unique")]


class AuditEntry(models.Model):
    USER, AGENT, LOOP, CLIENT = "user", "agent", "loop", "client"
    #: ``client``: a caller of the hooks listener (kube-apiserver, kube-scheduler, or whoever tried)
    ACTORS = [(USER, "user"), (AGENT, "agent"), (LOOP, "loop"), (CLIENT, "client")]

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor_kind = models.CharField(max_length=8, choices=ACTORS)
    actor = models.CharField(max_length=150)
    action = models.CharField(max_length=40, db_index=True)
    cluster_name = models.CharField(max_length=200, blank=True, db_index=True)
    target = models.CharField(max_length=300, blank=True)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]


class CalibrationImport(models.Model):
    """A calibration result imported for a cluster: one policy file whose metadata carries the
    sweep, its points and the knee (docs/design.md §10), kept as the file mapping."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="calibrations")
    document = models.JSONField()
    filename = models.CharField(max_length=300, blank=True)
    imported_by = models.CharField(max_length=150, blank=True)
    imported_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-imported_at", "-id"]
