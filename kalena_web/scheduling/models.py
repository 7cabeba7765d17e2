"""Live batch pods and their why-pending records (docs/design.md §9).

A batch pod's identity, request, limit, priority and labels are its inventory
:class:`~kalena_web.inventory.models.Workload` (kind ``batch``, one pod per row); its node is
``Workload.node`` once bound. :class:`BatchPod` adds the scheduling state.
"""

from __future__ import annotations

from django.db import models

from kalena_web.inventory.models import Cluster, Workload


class BatchPod(models.Model):
    """Scheduling state of one live batch pod.

    ``state``: ``pending`` (queued), ``bound`` (placed; its reservation counts on the node at
    its request until it reports), ``completed`` (ended: ``outcome`` says succeeded, failed,
    oom or evicted), ``refused`` (the node refused it at admission, e.g. ``OutOfcpu``: never a
    completion), ``deleted``. Times are Unix seconds. ``bound_version`` is the node's ledger
    version the binding was accepted against.

    ``source``: ``rest`` (submitted through the API; an evicted one is requeued) or ``watch``
    (a pod object the orchestrator's watch reported, docs/design.md §14: it is never requeued — its
    owner's replacement is a new pod — and never taken through the REST submit path).
    ``gone``: the orchestrator no longer holds the object. ``reason``: the orchestrator's words
    for the last change (``Completed``, ``OutOfcpu``, a refused binding). ``grace_s``: the
    pod's termination grace (Kubernetes ``terminationGracePeriodSeconds``) used to evict it.
    ``noticed_s``: when the last ``FailedScheduling`` event was emitted for it (at most one a
    minute per pod).
    """

    PENDING, BOUND, COMPLETED, REFUSED, DELETED = "pending", "bound", "completed", "refused", "deleted"
    STATES = [(PENDING, "pending"), (BOUND, "bound"), (COMPLETED, "completed"), (REFUSED, "refused"),
              (DELETED, "deleted")]
    TERMINAL = (COMPLETED, REFUSED, DELETED)
    REST, WATCH = "rest", "watch"

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="batch_pods")
    workload = models.OneToOneField(Workload, on_delete=models.CASCADE, related_name="batch")
    state = models.CharField(max_length=12, choices=STATES, default=PENDING)
    image = models.CharField(max_length=300, blank=True)
    command = models.JSONField(default=list, blank=True)
    gang = models.CharField(max_length=200, blank=True)
    min_member = models.PositiveIntegerField(null=True, blank=True)
    submitted_s = models.FloatField()
    queued_s = models.FloatField()
    bound_s = models.FloatField(null=True, blank=True)
    ended_s = models.FloatField(null=True, blank=True)
    bound_version = models.PositiveBigIntegerField(null=True, blank=True)
    requeues = models.PositiveIntegerField(default=0)
    source = models.CharField(max_length=8, default=REST)
    outcome = models.CharField(max_length=16, blank=True)
    reason = models.CharField(max_length=300, blank=True)
    gone = models.BooleanField(default=False)
    running_s = models.FloatField(null=True, blank=True)
    grace_s = models.FloatField(default=30.0)
    noticed_s = models.FloatField(null=True, blank=True)
    #: the node it was bound to when it ended (completed or deleted while bound); the workload's
    #: ``node`` is cleared then, and the console's batch list still shows where it ran
    ran_on = models.CharField(max_length=253, blank=True, default="")
    #: the watched object's ``metadata.uid`` (``""``: submitted through REST, or not known)
    uid = models.CharField(max_length=64, blank=True, default="")
    #: when the watch first saw the node accept it (Kubernetes: the kubelet admitted it —
    #: ``Running``, or ``Pending`` with ``status.startTime``); None while only bound. Only
    #: admitted pods raise the published batch floor (docs/design.md §14)
    admitted_s = models.FloatField(null=True, blank=True)
    #: bindings the orchestrator refused in a row (the engine could not run the container:
    #: image not pullable, …); sets the backoff before the next attempt (:mod:`.lifecycle`)
    refusals = models.PositiveIntegerField(default=0)
    #: Unix s before which the pod is not tried again (kube-scheduler's backoffQ); None: no backoff
    retry_s = models.FloatField(null=True, blank=True)
    #: nodes that refused to run it: node name → Unix s until which another node that fits is
    #: preferred (the pod is kept off it while any other ready node takes batch)
    refused_on = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [models.Index(fields=["cluster", "state", "queued_s"], name="scheduling_pod_queue")]
        permissions = [("operate_batch", "Can submit and delete batch pods (operator role)")]


class WhyPending(models.Model):
    """The latest why-pending record of a pending batch pod (engine ``WhyPending.to_dict()``,
    quantities in IR units): the binding constraint, nodes excluded per reason, smallest
    shortfall per dimension and the request reduction that would fit."""

    pod = models.OneToOneField(BatchPod, on_delete=models.CASCADE, related_name="why_pending")
    time_s = models.FloatField()
    binding = models.CharField(max_length=60)
    record = models.JSONField()
