"""Archive models: a recorded replay run and everything it produced.

A :class:`Run` is one named replay. Its inventory (cluster, nodes, workloads) is its own, so
runs coexist and are compared side by side. Time series are stored in chunks of consecutive
steps as compressed float64 arrays (layouts in :mod:`kalena_web.archive.series`); batch
lifecycle is stored per group of identical pods, never per pod instance.
"""

from __future__ import annotations

from django.db import models

from kalena_web.inventory.fields import ResourceVectorField
from kalena_web.inventory.models import Cluster, Node, Workload

RUN_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class Run(models.Model):
    """One persisted replay: its configuration, summary and shape of its time axis.

    Replay time of step ``k`` is ``start_s + k · step_s`` (seconds from replay start).
    ``persist_seconds`` is the wall time of loading nothing but simulating and writing.
    """

    name = models.CharField(max_length=64, unique=True)
    cluster = models.OneToOneField(Cluster, on_delete=models.CASCADE, related_name="run")
    created_at = models.DateTimeField(auto_now_add=True)
    config = models.JSONField(default=dict)
    summary = models.JSONField(default=dict)
    start_s = models.FloatField(default=0.0)
    step_s = models.FloatField()
    steps = models.PositiveIntegerField()
    chunk_steps = models.PositiveIntegerField()
    persist_seconds = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "name"]

    def __str__(self) -> str:
        return self.name


class SeriesChunk(models.Model):
    """``steps`` consecutive steps from ``first_step``; ``data`` is :func:`series.encode` output."""

    chunk = models.PositiveIntegerField()
    first_step = models.PositiveIntegerField()
    steps = models.PositiveIntegerField()
    data = models.BinaryField()

    class Meta:
        abstract = True


class NodeSeries(SeriesChunk):
    """One chunk of one node's aggregates, layout ``(steps, NODE_SERIES, 8)``."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="node_series")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="series", db_index=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["node", "chunk"], name="archive_nodeseries_unique_chunk")]


class WorkloadSeries(SeriesChunk):
    """One chunk of one production pod's usage and reservation on cpu and ram."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="workload_series")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="workload_series", db_index=False)
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="series", db_index=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workload", "chunk"], name="archive_workloadseries_unique_chunk"),
        ]
        indexes = [models.Index(fields=["node", "workload", "chunk"], name="archive_wls_node")]


class ClusterSeries(SeriesChunk):
    """One chunk of cluster-wide figures, layout ``(steps, CLUSTER_SERIES)``."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="cluster_series", db_index=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "chunk"], name="archive_clusterseries_unique_chunk")]


class BatchEvent(models.Model):
    """One lifecycle event of a group of identical batch pods, as the engine emitted it.

    ``kind``: submitted | placed | evicted | completed (and production_evicted, which the
    engine never does by design but would record). ``step`` is the replay step that emitted
    it; ``time_s`` the event's own time (a completion falls between steps). For evictions
    ``reason`` is limit_breach or priority and ``detail`` carries the numbers (internal units).
    """

    SUBMITTED, PLACED, EVICTED, COMPLETED = "submitted", "placed", "evicted", "completed"
    PRODUCTION_EVICTED = "production_evicted"
    KINDS = [(k, k.replace("_", " ")) for k in (SUBMITTED, PLACED, EVICTED, COMPLETED, PRODUCTION_EVICTED)]

    # Single-column FK indexes are left out where a composite index below starts with the same
    # column: every index is maintained on each of the ~160k inserts of a day's run.
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events", db_index=False)
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="events", db_index=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, null=True, blank=True, related_name="events",
                             db_index=False)
    kind = models.CharField(max_length=24, choices=KINDS)
    step = models.PositiveIntegerField()
    time_s = models.FloatField()
    count = models.PositiveIntegerField()
    reason = models.CharField(max_length=32, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["workload", "time_s"], name="archive_event_workload"),
            models.Index(fields=["run", "kind", "time_s"], name="archive_event_kind"),
            models.Index(fields=["node", "kind", "time_s"], name="archive_event_node"),
        ]


class BatchPlacement(models.Model):
    """Instances of one batch task that ran on one node from ``start_s`` to ``end_s``.

    Derived from the event stream and the engine's running groups: identical pods placed
    together and ended together (``end_kind`` completed or evicted) are one row; ``running``
    means still running when the run ended (``end_s`` is then the engine's projected end —
    throttling included — or null when none was known). A node's running batch at time
    ``t`` is the rows with ``start_s ≤ t < end_s``.
    """

    COMPLETED, EVICTED, RUNNING = "completed", "evicted", "running"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="placements")
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="placements")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="placements", db_index=False)
    count = models.PositiveIntegerField()
    start_s = models.FloatField()
    end_s = models.FloatField(null=True, blank=True)
    end_kind = models.CharField(max_length=16)

    class Meta:
        indexes = [models.Index(fields=["node", "start_s"], name="archive_placement_node")]


class TaskOutcome(models.Model):
    """What became of one batch task over the run (instances unless named otherwise).
    ``why_pending``: for a task with pods still pending at the end, the scheduler's last
    why-pending record (engine ``WhyPending.to_dict()``, IR units)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="outcomes", db_index=False)
    workload = models.OneToOneField(Workload, on_delete=models.CASCADE, related_name="outcome")
    submitted = models.PositiveIntegerField(default=0)
    placed = models.PositiveIntegerField(default=0)
    evicted = models.PositiveIntegerField(default=0)
    completed = models.PositiveIntegerField(default=0)
    running_at_end = models.PositiveIntegerField(default=0)
    pending_at_end = models.PositiveIntegerField(default=0)
    eviction_events = models.PositiveIntegerField(default=0)
    nodes = models.PositiveIntegerField(default=0)
    first_placed_s = models.FloatField(null=True, blank=True)
    finished_s = models.FloatField(null=True, blank=True)
    why_pending = models.JSONField(null=True, blank=True)

    class Meta:
        indexes = [models.Index(fields=["run", "evicted"], name="archive_outcome_evicted")]


# --- The live usage archive (docs/design.md §3 export, §8 archive loop, §9 why-evicted) ------------------


class EvictionRecord(models.Model):
    """Why one live workload was evicted (docs/design.md §9 "why evicted").

    ``cause``: ``limit_breach`` | ``priority`` (the agent's local mitigation) or ``escalation``
    (a drain). ``detail`` holds the node condition (dimension, working set, capacity, Σ r before
    and after, acute), whose reservations rose before it (workload, from, to), the priority
    comparison with the batch left on the node, and whether the limit-breach override applied.
    ``source_key`` makes recording idempotent (the agent's event id, or the drain's).
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="eviction_records")
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="eviction_records")
    workload = models.ForeignKey(Workload, on_delete=models.SET_NULL, null=True, blank=True,
                                 related_name="eviction_records")
    workload_name = models.CharField(max_length=300)
    time_s = models.FloatField()
    cause = models.CharField(max_length=20)
    tier = models.CharField(max_length=16, default="batch")
    priority = models.IntegerField(default=0)
    dimension = models.CharField(max_length=16, blank=True)
    detail = models.JSONField(default=dict)
    source_key = models.CharField(max_length=120, unique=True)

    class Meta:
        ordering = ["-time_s"]
        indexes = [models.Index(fields=["cluster", "-time_s"], name="archive_eviction_recent"),
                   models.Index(fields=["node", "-time_s"], name="archive_eviction_node")]


class UsageRollup(models.Model):
    """One bucket of a live workload's or node's series at a resolution (``1m`` or ``1h``).

    Workload rows: ``usage_mean``/``usage_peak`` over the bucket's samples, ``reservation`` the
    reservation the estimator held when the bucket was folded (normally within a minute of its
    end) raised to ``min(L, μ · peak usage)`` (so a rise inside the bucket is not lost), ``above_request``/``above_limit`` samples with usage above the request /
    limit on any dimension. Node rows: the node's ledgers at the bucket's last snapshot —
    ``request`` Σ q, ``limit`` Σ L, ``reservation`` Σ r, ``usage_mean``/``usage_peak`` Σ u,
    ``batch_request`` Σ q of batch, ``prod_reservation`` Σ r of production, ``batch_usage`` Σ u of
    batch and ``batch_throttled_mcpu`` the batch pods' cpu throttling rate (both means over the
    snapshots, like ``usage_mean``; NULL on rows written before they were recorded). Vectors ``(8,)``
    in internal units; ``samples`` counts samples (workload) or snapshots (node) folded in.
    """

    MINUTE, HOUR = "1m", "1h"
    WIDTH_S = {MINUTE: 60.0, HOUR: 3600.0}

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="rollups", db_index=False)
    resolution = models.CharField(max_length=2)
    bucket_s = models.FloatField()
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, null=True, blank=True, related_name="rollups",
                                 db_index=False)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, null=True, blank=True, related_name="rollups",
                             db_index=False)
    samples = models.PositiveIntegerField(default=0)
    usage_mean = ResourceVectorField()
    usage_peak = ResourceVectorField()
    reservation = ResourceVectorField()
    request = ResourceVectorField(null=True, blank=True)
    limit = ResourceVectorField(null=True, blank=True)
    batch_request = ResourceVectorField(null=True, blank=True)
    prod_reservation = ResourceVectorField(null=True, blank=True)
    batch_usage = ResourceVectorField(null=True, blank=True)
    batch_throttled_mcpu = models.FloatField(null=True, blank=True)
    above_request = models.PositiveIntegerField(default=0)
    above_limit = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["resolution", "workload", "bucket_s"], name="archive_rollup_workload",
                                    condition=models.Q(workload__isnull=False)),
            models.UniqueConstraint(fields=["resolution", "node", "bucket_s"], name="archive_rollup_node",
                                    condition=models.Q(node__isnull=False)),
        ]
        indexes = [models.Index(fields=["cluster", "resolution", "bucket_s"], name="archive_rollup_time")]


class ArchiveCursor(models.Model):
    """How far an archive step has read an append-only table, per cluster: ``name`` is
    ``samples`` (raw samples rolled into minutes) or ``evictions`` (agent eviction actions
    turned into why-evicted records); ``position`` the last row id done."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="archive_cursors")
    name = models.CharField(max_length=20)
    position = models.BigIntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="archive_cursor_unique")]
