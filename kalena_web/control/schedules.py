"""Every periodic schedule of the control plane, in one place (docs/design.md §8).

Celery beat reads :func:`beat_schedule`; the embedded runner (:mod:`kalena_web.control.embedded`)
runs the same table on a thread. Estimation is also triggered by every stored sample batch; its
periodic run is the sweep that marks nodes whose telemetry went stale (case C1).
"""

from __future__ import annotations

#: task name → period in seconds.
PERIODS_S: dict[str, float] = {
    "kalena.ledger.sweep": 10.0,          # estimation sweep: stale telemetry, shards with work left
    "kalena.scheduling.schedule": 5.0,    # place pending batch (also event-driven)
    "kalena.control.escalate": 15.0,      # escalation: non-converging nodes, eviction storms
    "kalena.replan.drift": 600.0,         # drift metric and re-plan recommendations
    "kalena.archive.rollup": 20.0,        # node snapshots, raw → 1 min → 1 h rollups, retention
    "kalena.kubehooks.publish": 5.0,      # Kubernetes: published batch-cpu/batch-memory per node
}


def beat_schedule() -> dict[str, dict]:
    """The Celery beat schedule built from :data:`PERIODS_S`."""
    return {name: {"task": name, "schedule": period, "options": {"expires": period}}
            for name, period in PERIODS_S.items()}
