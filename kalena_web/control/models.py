"""Live node conditions and the control loops' bookkeeping (docs/design.md §8)."""

from __future__ import annotations

from django.db import models

from kalena_web.inventory.models import Cluster, Node


class NodeCondition(models.Model):
    """Whether a live node may take batch, and why not (shown in the console and the API).

    ``slack_ineligible_until_s`` (Unix s) is set by escalation for a cooldown;
    ``pressure_since_s`` is the start of the node's current unbroken non-compressible pressure
    episode with Σ r > C (from the agent's reports), None when there is none. ``volatility`` is
    σ of the node's production reservation over capacity in the last hour (the archive loop
    keeps it; the scheduler's volatility penalty reads it).

    From the orchestrator's watch (docs/design.md §14; all default to "takes batch" for a cluster no
    watch feeds): ``ready`` (Kubernetes' Ready condition), ``schedulable`` (not cordoned),
    ``gone`` (the node left the cluster), ``images`` (image name → size in bytes cached on the
    node: the image-locality score), ``seen_s`` (the orchestrator's time of the last change).
    A node takes new batch only when ready, schedulable and not gone.
    """

    node = models.OneToOneField(Node, on_delete=models.CASCADE, related_name="condition")
    ready = models.BooleanField(default=True)
    schedulable = models.BooleanField(default=True)
    gone = models.BooleanField(default=False)
    images = models.JSONField(default=dict, blank=True)
    seen_s = models.FloatField(null=True, blank=True)
    pressure_since_s = models.FloatField(null=True, blank=True)
    slack_ineligible_until_s = models.FloatField(default=0.0)
    ineligible_reason = models.CharField(max_length=300, blank=True)
    volatility = models.FloatField(default=0.0)
    updated_s = models.FloatField(default=0.0)


class LoopRun(models.Model):
    """One run of a control loop, for the operator: what ran, when, for how long, what it did."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="loop_runs", null=True, blank=True)
    loop = models.CharField(max_length=40)
    started_s = models.FloatField()
    finished_s = models.FloatField()
    outcome = models.CharField(max_length=20)   # done | skipped (lock held) | failed
    detail = models.JSONField(default=dict)

    class Meta:
        indexes = [models.Index(fields=["loop", "-started_s"], name="control_looprun_recent")]
        ordering = ["-started_s"]


class Escalation(models.Model):
    """One escalation (docs/design.md §8): the node's batch was drained and the node made
    slack-ineligible until ``until_s``. ``reason``: ``not_converged`` | ``eviction_storm``."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="escalations")
    time_s = models.FloatField()
    reason = models.CharField(max_length=30)
    detail = models.CharField(max_length=300)
    drained = models.JSONField(default=list)
    until_s = models.FloatField()

    class Meta:
        ordering = ["-time_s"]


class MetricSeries(models.Model):
    """One cumulative counter or histogram series of ``/metrics/cluster``, kept in the database
    so every process serves the same monotonic values whichever worker observed them, and a
    restart loses nothing (Prometheus' rules for counters).

    ``key`` is the metric name and its sorted labels (unique); ``count`` the counter's value or
    the histogram's observation count; ``total`` the histogram's sum; ``buckets`` per-bucket
    (not cumulative) counts aligned with the metric's declared upper bounds, the last one +Inf.
    """

    key = models.CharField(max_length=400, unique=True)
    name = models.CharField(max_length=120)
    labels = models.JSONField(default=dict)
    count = models.FloatField(default=0.0)
    total = models.FloatField(default=0.0)
    buckets = models.JSONField(default=list)
class ProductionPlacement(models.Model):
    """A live production pod's claim on a workload, and where it actually runs, as the
    orchestrator's watch reports it, against where the blueprint put it (docs/design.md §14: fidelity
    and drift live; docs/design.md §15: production identity).

    ``pod`` is the live pod (``namespace/name`` as its controller named it) holding
    ``workload``: a blueprint entry (``identity`` ``mapped`` or ``moved``) or, for a pod that
    maps to no entry, a workload of its own (``extra``, ``blueprint_node`` None, charged as
    production at r = q on ``seen_node`` until it reports; ``reason`` says why, as
    :class:`kalena_engine.kuberina.identity.ExtraReason` data). The claim is kept across
    restarts and re-lists, so entries never reshuffle. ``declaration`` is ``namespace/name`` of
    the declaration the pod belongs to (``""`` when none); ``started_s`` the pod's start (Unix s,
    None when the orchestrator gives none). ``finding`` is True when the pod runs where the
    blueprint did not put it — a fidelity finding shown in the console and fed to drift.
    ``seen_s``: the orchestrator's time of the observation (Unix s). ``rule``: how the pod found
    its entry (:data:`kalena_engine.kuberina.identity.REPLICA`, ``ORDINAL``, ``LABEL``, ``NAME``;
    ``""`` for an extra or a claim older than this field): only ``replica`` and ``ordinal``
    claims let a re-plan's adoption renumber their declaration's replicas.
    """

    MAPPED, MOVED, EXTRA = "mapped", "moved", "extra"

    workload = models.OneToOneField("inventory.Workload", on_delete=models.CASCADE, related_name="placement")
    seen_node = models.ForeignKey(Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    blueprint_node = models.ForeignKey(Node, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    finding = models.BooleanField(default=False)
    seen_s = models.FloatField()
    pod = models.CharField(max_length=300, blank=True, db_index=True)
    identity = models.CharField(max_length=16, default=MAPPED)
    declaration = models.CharField(max_length=300, blank=True)
    reason = models.JSONField(default=dict, blank=True)
    started_s = models.FloatField(null=True, blank=True)
    rule = models.CharField(max_length=16, blank=True, default="")

    @property
    def reason_text(self) -> str:
        """The operator's sentence for an ``extra`` (``""`` otherwise)."""
        from kalena_engine.kuberina.identity import REASON_CODES, ExtraReason

        if not self.reason or self.reason.get("code") not in REASON_CODES:
            return ""
        return ExtraReason.from_dict(self.reason).text()


class EvictionRetry(models.Model):
    """An eviction the orchestrator refused for now (a PodDisruptionBudget's 429, docs/design.md §14):
    the pod still runs and keeps its reservation; the drain retries it with backoff at
    ``next_s`` (Unix s). ``refusal`` is the orchestrator's message (it names the budget)."""

    pod = models.OneToOneField("scheduling.BatchPod", on_delete=models.CASCADE, related_name="eviction_retry")
    cause = models.CharField(max_length=60)
    detail = models.CharField(max_length=300, blank=True)
    attempts = models.PositiveIntegerField(default=1)
    first_s = models.FloatField()
    next_s = models.FloatField()
    refusal = models.CharField(max_length=500)
    #: the last attempt timed out: it may have landed (a pod then gone is recorded as evicted)
    uncertain = models.BooleanField(default=False)
