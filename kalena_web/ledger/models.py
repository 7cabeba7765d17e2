"""Ledger models: each node's request and reservation ledgers over a run, reduced to the
figures an operator sorts and compares by (docs/design.md §6).

Per node ``n``, dimension ``d`` and step ``t``: slack ``S = C − Σ r``, headroom
``H = C − Σ_{p∈P} q_p``, reclaimed in use ``X = max(0, Σ q − C)``; usage ``Σ u`` and
reservation ``Σ r`` over production and batch. Means are over the run's steps; internal units
(``_mcpu``, ``_bytes``); ``_ratio`` columns are 0–1 of capacity (0 where capacity is 0).
"""

from __future__ import annotations

from django.db import models

from kalena_web.archive.models import Run
from kalena_web.inventory.fields import ResourceVectorField
from kalena_web.inventory.models import Node, Workload


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


class WorkloadReservation(models.Model):
    """The live estimator state of one workload (docs/design.md §5), updated by the estimation loop.

    ``value`` is r after the last update (internal units); ``updated_s`` and ``last_sample_s``
    are Unix seconds (``last_sample_s`` None = never sampled: the ledgers read ``max(r, q)``);
    ``last_usage`` is the newest sample's usage vector; ``history`` the peak predictors' usage
    history (:func:`kalena_engine.predictors.pack_rows`; null while the policy's predictor is the
    asymmetric rule, which needs none).
    """

    workload = models.OneToOneField(Workload, on_delete=models.CASCADE, related_name="reservation")
    value = ResourceVectorField()
    updated_s = models.FloatField()
    last_sample_s = models.FloatField(null=True, blank=True)
    last_usage = ResourceVectorField(null=True, blank=True)
    history = models.BinaryField(null=True, blank=True)


class LiveNodeLedger(models.Model):
    """One live node's ledgers as of ``updated_s`` (docs/design.md §6), vectors in internal units.

    ``version`` increases with every change; a binding computed against an older version is
    stale (optimistic concurrency, docs/design.md §9). ``stale`` is set when the node's freshest sample
    is older than T_stale: its reservations then read ``max(r, q)`` and it takes no new batch.
    ``blueprint_violations`` is what the last estimation pass found when it removed all batch
    (:func:`kalena_engine.ledger.blueprint_violations`); any row there is a bug, surfaced loudly.

    ``usage`` is Σ u over every workload on the node, ``batch_usage`` Σ u over its batch (production
    usage is the difference); ``batch_throttled_mcpu`` is the batch pods' CFS throttling as a rate
    (:func:`kalena_web.ledger.mappers.throttled_rates`), mcpu. Both NULL on rows not recomputed since
    they were added, and ``batch_throttled_mcpu`` NULL while no batch pod on the node has reported
    two throttling counters.
    """

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="live_ledger")
    version = models.PositiveBigIntegerField(default=0)
    capacity = ResourceVectorField()
    prod_request = ResourceVectorField()
    prod_reservation = ResourceVectorField()
    batch_request = ResourceVectorField()
    batch_reservation = ResourceVectorField()
    usage = ResourceVectorField()
    batch_usage = ResourceVectorField(null=True, blank=True)
    batch_throttled_mcpu = models.FloatField(null=True, blank=True)
    last_sample_s = models.FloatField(null=True, blank=True)
    stale = models.BooleanField(default=True)
    updated_s = models.FloatField(default=0.0)
    #: ids of the production workloads the blueprint placed on this node (recorded at import;
    #: None: not recorded, only the request ledger is checked)
    blueprint_workloads = models.JSONField(null=True, blank=True)
    #: the last estimation pass's blueprint check (docs/design.md §6): ``BlueprintViolation.to_dict()``
    #: rows with workload names, empty when removing all batch leaves the blueprint state
    blueprint_violations = models.JSONField(default=list, blank=True)
    blueprint_checked_s = models.FloatField(null=True, blank=True)


class EstimationRun(models.Model):
    """One estimation run over one node shard (docs/design.md §8; :mod:`kalena_web.ledger.estimation`).

    It consumed ``batches`` stored sample batches (``samples`` samples, ids
    ``first_sample_id``–``last_sample_id``; ``applied`` of them moved a reservation — the rest
    were older than the workload's last sample or no longer on the node) and recomputed
    ``nodes`` node ledgers. ``applied_s`` is just before its commit, ``committed_s`` just after
    (NULL if the worker died in between); ``max_lag_s`` = ``applied_s`` − the oldest consumed
    batch's send time. Unix seconds.
    """

    shard = models.PositiveSmallIntegerField()
    started_s = models.FloatField()
    applied_s = models.FloatField()
    committed_s = models.FloatField(null=True, blank=True)
    batches = models.PositiveIntegerField(default=0)
    samples = models.PositiveIntegerField(default=0)
    applied = models.PositiveIntegerField(default=0)
    nodes = models.PositiveIntegerField(default=0)
    first_sample_id = models.BigIntegerField(null=True, blank=True)
    last_sample_id = models.BigIntegerField(null=True, blank=True)
    max_lag_s = models.FloatField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["shard", "-id"], name="ledger_estimationrun_recent")]
