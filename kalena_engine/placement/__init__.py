"""Batch placement into the reservation ledger (docs/design.md §6, §9).

Entry point (the control plane's scheduling loop and the replay share it)::

    from kalena_engine.placement import schedule_batch, SlackLedger, requeue

    result = schedule_batch(snapshot, pending, policy, rng=rng)   # ClusterSnapshot, PendingBatch
    outcome = ledger.bind(result.bindings)                         # optimistic concurrency
    still_pending = requeue(result.remaining, outcome)             # stale bindings come back
    records = result.why_pending()                                 # WhyPending per unplaced entry

See ``docs/scheduler.md`` for the filters, scores, scale techniques and the why-pending schema.
"""

from kalena_engine.placement.binding import BindOutcome, SlackLedger, requeue
from kalena_engine.placement.cache import ScoreCache
from kalena_engine.placement.explain import Reduction, Shortfall, WhyPending
from kalena_engine.placement.kuberina_batch import pending_from_workloads
from kalena_engine.placement.ledger_view import IN_FLIGHT, PHASES, RUNNING, TERMINAL, reservation_slack
from kalena_engine.placement.model import (
    MIN_MEMBER_ANNOTATION, BatchResidents, BatchTemplate, Bindings, ClusterSnapshot, Evictions, Gang,
    KubeletRoom, NodeTable, PendingBatch, ProductionPods, gang_pass_minimum, min_member_from_annotations,
)
from kalena_engine.placement.policy import PlacementPolicy
from kalena_engine.placement.scheduler import PassResult, PassStats, schedule_batch
from kalena_engine.placement.selectors import (
    HOSTNAME, AntiAffinityTerm, Image, LabelSelector, NodeRequirement, NodeSelectorTerm, Requirement, SpreadConstraint,
)
from kalena_engine.placement.volatility import VolatilityTracker, volatility_ratio

__all__ = [
    "HOSTNAME", "IN_FLIGHT", "MIN_MEMBER_ANNOTATION", "PHASES", "RUNNING", "TERMINAL", "AntiAffinityTerm",
    "BatchResidents", "BatchTemplate", "BindOutcome", "Bindings", "ClusterSnapshot", "Evictions", "Gang", "Image", "KubeletRoom",
    "LabelSelector", "NodeRequirement", "NodeSelectorTerm", "NodeTable", "PassResult", "PassStats", "PendingBatch", "PlacementPolicy", "ProductionPods",
    "Reduction", "Requirement", "ScoreCache", "Shortfall", "SlackLedger", "SpreadConstraint", "VolatilityTracker",
    "WhyPending", "gang_pass_minimum", "min_member_from_annotations", "pending_from_workloads", "requeue", "reservation_slack", "schedule_batch",
    "volatility_ratio",
]
