"""What each Kubernetes node publishes for batch (docs/design.md §14): the extended resources
``kalena.naughtian.io/batch-cpu`` / ``batch-memory`` last patched into its status, and when
they last changed (the lazy-raise clock of :func:`kalena_engine.published.publish_batch`)."""

from __future__ import annotations

from django.db import models

from kalena_web.inventory.models import Node


class PublishedBatch(models.Model):
    """``cpu_mcpu`` (millicores) and ``memory_bytes`` (bytes) in the node's status capacity and
    allocatable; ``changed_s`` Unix seconds of the last change; ``patched_s`` of the last patch
    the API accepted (``None`` while the value is decided but not yet accepted)."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="published_batch")
    cpu_mcpu = models.FloatField()
    memory_bytes = models.FloatField()
    changed_s = models.FloatField()
    patched_s = models.FloatField(null=True, blank=True)
