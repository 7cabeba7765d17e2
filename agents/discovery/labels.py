"""Workload classification from labels and annotations (DESIGN §4).

=====================================  ==========  =========================================
key                                    where       values (default)
=====================================  ==========  =========================================
``kalena.naughtian.io/tier``           label       ``service`` (default) | ``batch``
``kalena.naughtian.io/priority``       annotation  integer ≥ 0 (0): batch eviction order
``kalena.naughtian.io/slack-cpu``      annotation  ``allow`` (default) | ``deny``
``kalena.naughtian.io/slack-memory``   annotation  ``allow`` | ``deny`` (default)
``kalena.naughtian.io/reclaim``        annotation  ``disabled`` pins r at the request
=====================================  ==========  =========================================

Docker has no annotations: container labels serve as both. DaemonSet pods (and containers
labelled ``kalena.naughtian.io/daemonset: "true"``) are tier ``daemonset``: never throttled,
never evicted. Job/CronJob-owned pods without a tier label are ``batch`` only when the operator
enables inference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from agents.errors import DiscoveryError

PREFIX = "kalena.naughtian.io/"
TIER = PREFIX + "tier"
PRIORITY = PREFIX + "priority"
SLACK_CPU = PREFIX + "slack-cpu"
SLACK_MEMORY = PREFIX + "slack-memory"
RECLAIM = PREFIX + "reclaim"
DAEMONSET = PREFIX + "daemonset"
GRACE = PREFIX + "termination-grace-seconds"

TIERS = ("service", "batch")


@dataclass(frozen=True)
class Classification:
    """Tier, priority and slack/reclaim switches of one workload."""

    tier: str
    priority: int
    slack_cpu: bool
    slack_memory: bool
    reclaim_disabled: bool


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


def _reclaim_disabled(annotations: Mapping[str, str], source: str) -> bool:
    value = annotations.get(RECLAIM)
    if value is None:
        return False
    text = str(value).strip().lower()
    if text not in ("disabled", "enabled"):
        raise DiscoveryError(f"{value!r} is not a reclaim setting", source=source, field=RECLAIM,
                             accepted="disabled, enabled")
    return text == "disabled"


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
    ``Classification("batch", 3, slack_cpu=True, slack_memory=False, reclaim_disabled=False)``.
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
    if daemonset or str(labels.get(DAEMONSET, "")).lower() == "true":
        tier = "daemonset"
    return Classification(
        tier=tier,
        priority=checked(lambda: _priority(annotations, source), 0),
        slack_cpu=checked(lambda: _switch(annotations.get(SLACK_CPU), SLACK_CPU, True, source), True),
        slack_memory=checked(lambda: _switch(annotations.get(SLACK_MEMORY), SLACK_MEMORY, False, source), False),
        reclaim_disabled=checked(lambda: _reclaim_disabled(annotations, source), False),
    )
