"""Archive loop task (docs/design.md §8: periodic rollups, retention)."""

from __future__ import annotations

from celery import shared_task

from kalena_web.archive.live import RollupReport, fold_hours, node_snapshot_rollup, node_volatility, retention_apply
from kalena_web.archive.samples import samples_rollup
from kalena_web.control.loops import run_for_clusters
from kalena_web.policy.selectors import current_policy


def archive_pass(cluster, now_s: float) -> RollupReport:
    """One archive run for a live cluster: raw samples into minutes, node snapshot, hour
    folding, volatility, retention."""
    report = RollupReport()
    policy = current_policy(cluster_id=cluster.id).policy
    report.workload_rows = samples_rollup(cluster=cluster, now_s=now_s, policy=policy.estimator)
    report.node_rows = node_snapshot_rollup(cluster=cluster, now_s=now_s)
    report.hour_rows = fold_hours(cluster=cluster, now_s=now_s)
    node_volatility(cluster=cluster, now_s=now_s, policy=policy.placement)
    report.deleted = retention_apply(cluster=cluster, now_s=now_s)
    return report


@shared_task(name="kalena.archive.rollup", acks_late=True, ignore_result=True)
def rollup(cluster_id: int | None = None, now_s: float | None = None) -> dict[str, str]:
    """Roll the live archive forward for every live cluster (per-cluster lock)."""
    return run_for_clusters("archive", archive_pass, now_s=now_s, cluster_id=cluster_id)
