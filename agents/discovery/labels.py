"""Workload classification from labels and annotations (docs/design.md §4).

=====================================  ==========  =========================================
key                                    where       values (default)
=====================================  ==========  =========================================
``kalena.naughtian.io/tier``           label       ``service`` (default) | ``batch``
``kalena.naughtian.io/priority``       annotation  integer ≥ 0 (0): batch eviction order
``kalena.naughtian.io/slack-cpu``      annotation  ``allow`` (default) | ``deny``
``kalena.naughtian.io/slack-memory``   annotation  ``allow`` | ``deny`` (default)
``kalena.naughtian.io/reclaim``        annotation  ``disabled`` pins r at the request
``kalena.naughtian.io/startup-grace-s``  annotation  seconds ≥ 0: this workload's startup grace
=====================================  ==========  =========================================

The per-workload overrides (reclaim, startup grace; docs/design.md §4, §5) are read by
:func:`kalena_engine.overrides.workload_overrides` — the control plane's reading too — from the
annotations over the labels.

Docker has no annotations: container labels serve as both. DaemonSet pods (and containers
labelled ``kalena.naughtian.io/daemonset: "true"``) are tier ``daemonset``: never throttled,
never evicted. Job/CronJob-owned pods without a tier label are ``batch`` only when the operator
enables inference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agents.errors import DiscoveryError
from kalena_engine.overrides import RECLAIM, OverrideError, WorkloadOverrides, workload_overrides

PREFIX = "kalena.naughtian.io/"
TIER = PREFIX + "tier"
PRIORITY = PREFIX + "priority"
SLACK_CPU = PREFIX + "slack-cpu"
SLACK_MEMORY = PREFIX + "slack-memory"
DAEMONSET = PREFIX + "daemonset"
GRACE = PREFIX + "termination-grace-seconds"

TIERS = ("service", "batch")


@dataclass(frozen=True)
class Classification:
    """Tier, priority, slack switches and per-workload overrides of one workload."""

    tier: str
    priority: int
    slack_cpu: bool
    slack_memory: bool
    reclaim_disabled: bool
    startup_grace_s: float | None = None   # None: the policy's startup grace


def _switch(value: object, key: str, default: bool, source: str) -> bool:
    if value is None:
        return default
    text = str(value).strip().lower()
    if text not in ("allow", "deny"):
        raise DiscoveryError(f"{value!r} is not allow or deny", source=source, field=key, accepted="allow, deny")
    return text == "allow"


def _tier(labels: Mapping[str, str], source: str, job_owned: bool, infer_jobs: bool) -> str:
    value = labels.get(TIER)
    if value is None:
        return "batch" if (job_owned and infer_jobs) else "service"
    tier = str(value).strip().lower()
    if tier not in TIERS:
        raise DiscoveryError(f"unknown tier {value!r}", source=source, field=TIER, accepted=", ".join(TIERS))
    return tier


def _priority(annotations: Mapping[str, str], source: str) -> int:
    raw = annotations.get(PRIORITY, "0")
    try:
        priority = int(str(raw).strip())
    except ValueError:
        priority = -1
    if priority < 0:
        raise DiscoveryError(f"priority {raw!r} is not an integer ≥ 0", source=source, field=PRIORITY,
                             accepted="a non-negative integer such as 0 or 10")
    return priority


def _overrides(labels: Mapping[str, str], annotations: Mapping[str, str], source: str) -> WorkloadOverrides:
    try:
        return workload_overrides({**labels, **annotations}, source=source)
    except OverrideError as exc:
        raise DiscoveryError(exc.problem, source=exc.source, field=exc.field, accepted=exc.accepted) from None


def classify(labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None, *, source: str,
             daemonset: bool = False, job_owned: bool = False, infer_jobs: bool = False,
             errors: list[str] | None = None) -> Classification:
    """Classify one workload.

    Each key is checked on its own. With ``errors=None`` a malformed value raises
    :class:`~agents.errors.DiscoveryError` (naming ``source`` — the workload — the key and the
    accepted values); with a list, the message is appended and that key takes its default
    (an unknown tier reads ``service``: never throttled, never evicted by priority), so one bad
    annotation never makes a workload disappear from the ledgers.

    Example: labels ``{tier: batch}``, annotations ``{priority: "3"}`` →
    ``Classification("batch", 3, slack_cpu=True, slack_memory=False, reclaim_disabled=False)``;
    with ``{kalena.naughtian.io/startup-grace-s: "0"}`` too, ``startup_grace_s=0.0``.
    """
    labels = labels or {}
    annotations = annotations or {}

    def checked(fn, default):  # type: ignore[no-untyped-def]
        try:
            return fn()
        except DiscoveryError as exc:
            if errors is None:
                raise
            errors.append(str(exc))
            return default

    tier = checked(lambda: _tier(labels, source, job_owned, infer_jobs), "service")
    overrides = workload_overrides({**labels, **annotations}, source=source, errors=errors) if errors is not None \
        else _overrides(labels, annotations, source)
    if daemonset or str(labels.get(DAEMONSET, "")).lower() == "true":
        tier = "daemonset"
    return Classification(
        tier=tier,
        priority=checked(lambda: _priority(annotations, source), 0),
        slack_cpu=checked(lambda: _switch(annotations.get(SLACK_CPU), SLACK_CPU, True, source), True),
        slack_memory=checked(lambda: _switch(annotations.get(SLACK_MEMORY), SLACK_MEMORY, False, source), False),
        reclaim_disabled=overrides.reclaim_disabled, startup_grace_s=overrides.startup_grace_s,
    )
