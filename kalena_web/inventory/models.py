"""Inventory models: what a cluster is made of.

A replay run records its own :class:`Cluster` (its nodes and workloads as the replay saw them),
so runs on different infrastructure files coexist and deleting a run removes exactly its
inventory. Vectors are in internal units (mcpu, bytes; docs/design.md §2).
"""

from __future__ import annotations

from django.db import models

from kalena_web.inventory.fields import ResourceVectorField


class Cluster(models.Model):
    """A set of nodes and the workloads placed on them.

    ``kind`` is ``replay`` for the cluster a recorded replay ran on (one per run) and ``live``
    for a cluster the control plane runs (imported from Kuberina IR, fed by node agents; its
    name is unique among live clusters; ``workloads_document`` keeps the Kuberina workloads file
    it was imported from, verbatim, for the export back).

    ``name`` is the infrastructure's name (e.g. ``irina-186-3d``); ``sources`` maps input kind
    (infra, workloads, blueprint, usage_dir, batch_trace) to the file it came from.
    ``daemonsets``: the names of the DaemonSets the infrastructure's Phase 0 deducted from every
    node's capacity (docs/design.md §3) — their pods are never charged; a DaemonSet pod of any other
    DaemonSet is an explained extra. ``[]`` for a cluster whose nodes come from the watch (no
    Phase 0); None for a live cluster imported before they were kept (every DaemonSet counted
    as deducted, as then).
    """

    REPLAY = "replay"
    LIVE = "live"
    KINDS = [(REPLAY, "recorded replay"), (LIVE, "live cluster")]

    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=8, choices=KINDS, default=REPLAY)
    sources = models.JSONField(default=dict)
    workloads_document = models.TextField(blank=True)
    daemonsets = models.JSONField(null=True, blank=True, default=None)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name"], condition=models.Q(kind="live"),
                                    name="inventory_cluster_unique_live_name"),
        ]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """One node. ``row`` is its position in the engine's node axis (``(n, 8)`` arrays).

    ``allocatable`` is what the infrastructure file declares; ``capacity`` is post-Phase-0
    ``C_n`` (allocatable minus DaemonSets), the only capacity any ledger uses (docs/design.md §3).
    ``active``: the blueprint placed production here; ``takes_batch``: batch may be placed here.
    """

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    row = models.PositiveIntegerField()
    name = models.CharField(max_length=253)
    zone = models.CharField(max_length=100, blank=True)
    rack = models.CharField(max_length=100, blank=True)
    labels = models.JSONField(default=dict)
    taints = models.JSONField(default=list)
    allocatable = ResourceVectorField()
    capacity = ResourceVectorField()
    active = models.BooleanField(default=False)
    takes_batch = models.BooleanField(default=False)

    class Meta:
        ordering = ["cluster", "row"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="inventory_node_unique_name"),
            models.UniqueConstraint(fields=["cluster", "row"], name="inventory_node_unique_row"),
        ]

    def __str__(self) -> str:
        return self.name


class Workload(models.Model):
    """A production pod (placed by the blueprint) or a batch task (a group of identical pods).

    ``name`` is the pod id (``namespace/pod``) or the batch task id (``job/task``); ``owner``
    the declaration or job. ``row`` is the position in the engine's production-pod or task
    axis. Vectors are per instance: ``request``, ``limit`` and, for batch (whose usage the trace
    does not record and the replay models as a fraction of the request), ``usage``.
    Live clusters also keep ``labels`` (docs/design.md §4: tier, priority, slack-cpu, …), placement
    ``constraints`` (``anti_affinity``: Kuberina pod ids; ``anti_affinity_terms``: required
    pod anti-affinity label-selector terms, a production pod's as the watch read them; for batch
    also ``node_selector``, ``tolerations``, ``spread``) and ``start_s`` (Unix seconds; None =
    running since before Kalena saw it, so no startup grace).
    """

    PRODUCTION = "production"
    BATCH = "batch"
    KINDS = [(PRODUCTION, "production pod"), (BATCH, "batch task")]

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="workloads")
    kind = models.CharField(max_length=16, choices=KINDS)
    row = models.PositiveIntegerField()
    name = models.CharField(max_length=300)
    namespace = models.CharField(max_length=100, blank=True)
    owner = models.CharField(max_length=200, blank=True)
    tier = models.CharField(max_length=16, default="service")
    priority = models.IntegerField(default=0)
    node = models.ForeignKey(Node, on_delete=models.CASCADE, null=True, blank=True, related_name="production")
    instances = models.PositiveIntegerField(default=1)
    arrival_s = models.FloatField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    request = ResourceVectorField()
    limit = ResourceVectorField()
    usage = ResourceVectorField(null=True, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    constraints = models.JSONField(default=dict, blank=True)
    start_s = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "kind", "row"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "kind", "name"], name="inventory_workload_unique_name"),
        ]
        indexes = [models.Index(fields=["node", "kind"], name="inventory_workload_node_kind"),
                   # a declaration's replicas (production identity joins a live pod to them)
                   models.Index(fields=["cluster", "namespace", "owner"], name="inventory_workload_declaration")]

    def __str__(self) -> str:
        return self.name
