"""Re-plan recommendations (docs/design.md §10): Kalena recommends, a human approves; Kalena never
re-plans by itself."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from kalena_web.inventory.models import Cluster


class ReplanRecommendation(models.Model):
    """Drift above the operator's threshold, with the export a re-plan would start from.

    ``drift``: ``{dimension: D}`` (0–1); ``top_nodes``: the nodes contributing most, with their
    share; ``workloads_yaml``: the workloads file with IR v1 ``observed:`` blocks;
    ``report``: the Kalena report beside it. ``state``: open → approved | rejected.
    """

    OPEN, APPROVED, REJECTED = "open", "approved", "rejected"
    STATES = [(OPEN, "open"), (APPROVED, "approved"), (REJECTED, "rejected")]

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="recommendations")
    created_s = models.FloatField()
    window_s = models.FloatField()
    threshold = models.FloatField()
    drift = models.JSONField()
    top_nodes = models.JSONField(default=list)
    workloads_yaml = models.TextField(blank=True)
    report = models.JSONField(default=dict)
    state = models.CharField(max_length=10, choices=STATES, default=OPEN)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)
    decided_s = models.FloatField(null=True, blank=True)
    note = models.CharField(max_length=500, blank=True)

    class Meta:
        ordering = ["-created_s"]
        permissions = [("approve_replan", "Can approve or reject re-plan recommendations")]


class DriftCheck(models.Model):
    """The drift loop's last pass over a cluster (one row per cluster, replaced each pass), so
    the re-plan page can say what D is now, against which threshold, and why no recommendation
    exists yet — without recomputing a day of rollups per page view.

    ``drift``: ``{dimension: D or None}`` (None: no steady reservation yet, nothing to compare);
    ``observed_pods`` of ``production_pods`` had steady (p95) samples in the window;
    ``findings``: production pods the watch saw off their blueprint node; ``recommended``:
    this pass opened a recommendation.
    """

    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="drift_check")
    time_s = models.FloatField()
    window_s = models.FloatField()
    threshold = models.FloatField()
    drift = models.JSONField(default=dict)
    observed_pods = models.PositiveIntegerField(default=0)
    production_pods = models.PositiveIntegerField(default=0)
    findings = models.PositiveIntegerField(default=0)
    recommended = models.BooleanField(default=False)
