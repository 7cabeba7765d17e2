"""Ledger models: each node's request and reservation ledgers over a run, reduced to the
figures an operator sorts and compares by (DESIGN §6).

Per node ``n``, dimension ``d`` and step ``t``: slack ``S = C − Σ r``, headroom
``H = C − Σ_{p∈P} q_p``, reclaimed in use ``X = max(0, Σ q − C)``; usage ``Σ u`` and
reservation ``Σ r`` over production and batch. Means are over the run's steps; internal units
(``_mcpu``, ``_bytes``); ``_ratio`` columns are 0–1 of capacity (0 where capacity is 0).
"""

from __future__ import annotations

from django.db import models

from kalena_web.archive.models import Run
from kalena_web.inventory.models import Node


class NodeLedger(models.Model):
    """One node's ledger over one run (see module doc)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="node_ledgers")
    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="ledger")
    pods = models.PositiveIntegerField(default=0)
    capacity_cpu_mcpu = models.FloatField()
    capacity_ram_bytes = models.FloatField()
    headroom_cpu_mcpu = models.FloatField()
    headroom_ram_bytes = models.FloatField()
    slack_mean_cpu_mcpu = models.FloatField()
    slack_mean_ram_bytes = models.FloatField()
    slack_min_cpu_mcpu = models.FloatField()
    slack_min_ram_bytes = models.FloatField()
    usage_mean_cpu_mcpu = models.FloatField()
    usage_mean_ram_bytes = models.FloatField()
    usage_peak_cpu_mcpu = models.FloatField()
    usage_peak_ram_bytes = models.FloatField()
    usage_mean_cpu_ratio = models.FloatField()
    usage_mean_ram_ratio = models.FloatField()
    reservation_mean_cpu_mcpu = models.FloatField()
    reservation_mean_ram_bytes = models.FloatField()
    reclaimed_mean_cpu_mcpu = models.FloatField()
    reclaimed_mean_ram_bytes = models.FloatField()
    batch_request_mean_cpu_mcpu = models.FloatField()
    batch_request_mean_ram_bytes = models.FloatField()
    batch_placed = models.PositiveIntegerField(default=0)
    batch_evicted = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["node__row"]
