"""What node agents send, as stored (protocol: :mod:`agents.link.protocol`; docs/design.md §1, §12).

* :class:`AgentToken` — a node's bearer token, stored as a SHA-256 digest only.
* :class:`AgentStatus` — one row per node: the agent's last ``hello``, connection state and
  counters (accepted samples, batches, duplicates).
* :class:`IngestBatch` — one row per stored agent message (``samples``, ``action``, ``gap``):
  ``(node, batch_id)`` is unique, which is how a resent message is recognised. A ``samples``
  batch waits for estimation while ``estimation_run`` is NULL (see
  :mod:`kalena_web.ledger.estimation`).
* :class:`Sample` — one workload's usage at one time: the 8 dimensions as float columns in
  internal units (``NULL`` = not measured), raw memory usage, CFS counters and PSI avg10s.
* :class:`NodeSample` — the node's working set and PSI (cpu/memory/io some/full avg10, %) per
  ``samples`` message.
* :class:`MitigationEvent` — every ``action`` message (throttle, evict, hold, …) with its
  reason, trigger and numbers.
* :class:`RejectedSamples` / :class:`RefusedConnection` — counts per node and reason of what
  was refused (reasons: :mod:`kalena_web.telemetry.validation`).

Times are Unix seconds (float); ``ts`` is the agent's clock, ``*_s`` written by the server.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from kalena_web.inventory.models import Node, Workload

#: Sample usage columns, in the canonical order of docs/design.md §2 (= the protocol's usage keys).
USAGE_COLUMNS = ("cpu_mcpu", "ram_bytes", "gpu_devices", "storage_bytes", "disk_read_bps", "disk_write_bps",
                 "net_in_bps", "net_out_bps")
#: PSI columns: ``psi_<resource>_<some|full>_avg10`` in percent.
PSI_COLUMNS = ("psi_cpu_some_avg10", "psi_cpu_full_avg10", "psi_memory_some_avg10", "psi_memory_full_avg10",
               "psi_io_some_avg10", "psi_io_full_avg10")


class AgentToken(models.Model):
    """A per-node bearer token. Only ``digest`` (SHA-256 hex of the whole token) is kept; the
    plaintext is shown once, when created. ``prefix`` (the token's first characters) lets an
    operator tell tokens apart. A token with ``revoked_at`` set is refused."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="agent_tokens")
    prefix = models.CharField(max_length=16)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                                   related_name="+")
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["node_id", "-id"]
        permissions = [("manage_agent_tokens", "Create and revoke node agent tokens")]

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class AgentStatus(models.Model):
    """The agent of one node as the server last saw it (``hello`` fields, connection, counters)."""

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="agent_status")
    connected = models.BooleanField(default=False)
    connections = models.PositiveIntegerField(default=0)
    peer = models.CharField(max_length=100, blank=True)
    agent_version = models.CharField(max_length=40, blank=True)
    sampling_interval_s = models.FloatField(null=True, blank=True)
    cgroup_version = models.PositiveSmallIntegerField(null=True, blank=True)
    signal_sources = models.JSONField(default=dict, blank=True)
    last_hello_s = models.FloatField(null=True, blank=True)
    last_disconnect_s = models.FloatField(null=True, blank=True)
    last_batch_s = models.FloatField(null=True, blank=True)
    last_sample_s = models.FloatField(null=True, blank=True)
    batches = models.PositiveBigIntegerField(default=0)
    accepted_samples = models.PositiveBigIntegerField(default=0)
    duplicate_batches = models.PositiveBigIntegerField(default=0)
    policy_version = models.PositiveIntegerField(null=True, blank=True)  # the cluster policy version it applies


class IngestBatch(models.Model):
    """One stored agent message (see module doc). ``ts`` is the agent's send time;
    ``received_s`` when the frame arrived; ``stored_s`` when the write transaction ran.
    ``estimation_run``: NULL = samples waiting for estimation; 0 = nothing to estimate (action,
    gap, or every sample rejected); else the :class:`~kalena_web.ledger.models.EstimationRun` id
    that applied it (a plain integer, so pruning runs never makes a batch pending again)."""

    SAMPLES, ACTION, GAP = "samples", "action", "gap"
    KINDS = [(SAMPLES, "samples"), (ACTION, "action"), (GAP, "gap")]

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_index=False)
    batch_id = models.CharField(max_length=300)  # validation.MAX_BATCH_ID_CHARS
    kind = models.CharField(max_length=8, choices=KINDS)
    shard = models.PositiveSmallIntegerField()
    ts = models.FloatField()
    received_s = models.FloatField()
    stored_s = models.FloatField()
    samples = models.PositiveIntegerField(default=0)
    rejected = models.PositiveIntegerField(default=0)
    estimation_run = models.BigIntegerField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "batch_id"], name="telemetry_batch_unique")]
        indexes = [
            models.Index(fields=["shard", "id"], name="telemetry_batch_pending",
                         condition=models.Q(estimation_run__isnull=True)),
            models.Index(fields=["stored_s"], name="telemetry_batch_stored"),
        ]


class Sample(models.Model):
    """One workload's usage sample (internal units; NULL = not measured). Memory is the working
    set; ``memory_usage_bytes`` the raw usage including page cache."""

    batch = models.ForeignKey(IngestBatch, on_delete=models.CASCADE, related_name="sample_rows")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_index=False)
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="+", db_index=False)
    ts = models.FloatField()
    cpu_mcpu = models.FloatField(null=True)
    ram_bytes = models.FloatField(null=True)
    gpu_devices = models.FloatField(null=True)
    storage_bytes = models.FloatField(null=True)
    disk_read_bps = models.FloatField(null=True)
    disk_write_bps = models.FloatField(null=True)
    net_in_bps = models.FloatField(null=True)
    net_out_bps = models.FloatField(null=True)
    memory_usage_bytes = models.FloatField(null=True)
    cpu_nr_periods = models.BigIntegerField(null=True)
    cpu_nr_throttled = models.BigIntegerField(null=True)
    cpu_throttled_time_us = models.FloatField(null=True)
    psi_cpu_some_avg10 = models.FloatField(null=True)
    psi_cpu_full_avg10 = models.FloatField(null=True)
    psi_memory_some_avg10 = models.FloatField(null=True)
    psi_memory_full_avg10 = models.FloatField(null=True)
    psi_io_some_avg10 = models.FloatField(null=True)
    psi_io_full_avg10 = models.FloatField(null=True)

    class Meta:
        indexes = [models.Index(fields=["workload", "ts"], name="telemetry_sample_series")]


class NodeSample(models.Model):
    """The node-level reading of one ``samples`` message: working set (bytes) and PSI avg10 (%)."""

    batch = models.ForeignKey(IngestBatch, on_delete=models.CASCADE, related_name="+", db_index=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="+", db_index=False)
    ts = models.FloatField()
    working_set_bytes = models.FloatField(null=True)
    psi_cpu_some_avg10 = models.FloatField(null=True)
    psi_cpu_full_avg10 = models.FloatField(null=True)
    psi_memory_some_avg10 = models.FloatField(null=True)
    psi_memory_full_avg10 = models.FloatField(null=True)
    psi_io_some_avg10 = models.FloatField(null=True)
    psi_io_full_avg10 = models.FloatField(null=True)

    class Meta:
        indexes = [models.Index(fields=["node", "ts"], name="telemetry_nodesample_series")]


class MitigationEvent(models.Model):
    """One ``action`` message: what the agent did on its node, why, and the numbers.

    ``workload`` is the inventory workload the agent's ``workload.id`` maps to (NULL when it is
    not in the inventory, e.g. a DaemonSet); ``workload_ref`` keeps the agent's id.
    ``numbers`` and ``result`` are the message's objects as sent (internal units).
    """

    batch = models.OneToOneField(IngestBatch, on_delete=models.CASCADE, related_name="mitigation")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="mitigation_events", db_index=False)
    ts = models.FloatField()
    action = models.CharField(max_length=24)
    reason = models.CharField(max_length=40)
    workload = models.ForeignKey(Workload, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    workload_ref = models.CharField(max_length=300, blank=True)
    workload_name = models.CharField(max_length=300, blank=True)
    tier = models.CharField(max_length=16, blank=True)
    priority = models.IntegerField(null=True, blank=True)
    trigger_source = models.CharField(max_length=24)
    trigger_resource = models.CharField(max_length=16, blank=True)
    trigger_scope = models.CharField(max_length=300, blank=True)
    numbers = models.JSONField(default=dict)
    result_ok = models.BooleanField()
    result = models.JSONField(default=dict)

    class Meta:
        indexes = [models.Index(fields=["node", "ts"], name="telemetry_mitigation_node")]


class RejectedSamples(models.Model):
    """Samples (and whole messages) refused from one node for one reason: counts, first and
    last time, and the last problem as text (what and where)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="rejected_samples", db_index=False)
    reason = models.CharField(max_length=32)
    samples = models.PositiveBigIntegerField(default=0)
    messages = models.PositiveBigIntegerField(default=0)
    first_s = models.FloatField()
    last_s = models.FloatField()
    last_detail = models.CharField(max_length=500, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "reason"], name="telemetry_rejected_unique")]


class RefusedConnection(models.Model):
    """Agent connections refused before or at ``hello``, per reason (``node`` NULL when the
    token named no node: missing or unknown token)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    reason = models.CharField(max_length=32)
    count = models.PositiveBigIntegerField(default=0)
    last_s = models.FloatField()
    last_peer = models.CharField(max_length=100, blank=True)
    last_detail = models.CharField(max_length=300, blank=True)
