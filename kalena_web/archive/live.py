"""The live usage archive (docs/design.md §8 archive loop): 1-minute rollups of every node's ledgers
and every workload's samples, folded into 1-hour rollups, with retention, and each node's
production volatility for the scheduler.

Retention (settings ``KALENA_RETENTION_*_S``): raw samples 1 day, 1-minute rollups 7 days,
1-hour rollups 90 days, loop runs 1 day. Everything here is idempotent: a bucket is upserted
(re-running a minute replaces its row), and folding an hour reads only closed minutes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from django.conf import settings
from django.db import transaction

from kalena_engine.archive import downsample
from kalena_engine.placement import PlacementPolicy, VolatilityTracker
from kalena_web.archive.models import UsageRollup
from kalena_web.control.models import LoopRun, NodeCondition
from kalena_web.inventory.mappers import vector
from kalena_web.inventory.models import Cluster, Workload
from kalena_web.ledger.models import LiveNodeLedger

MINUTE, HOUR = UsageRollup.MINUTE, UsageRollup.HOUR


def retention_s() -> dict[str, float]:
    """Seconds each resolution is kept (see module doc)."""
    return {
        "raw": float(getattr(settings, "KALENA_RETENTION_RAW_S", 86_400)),
        MINUTE: float(getattr(settings, "KALENA_RETENTION_MINUTE_S", 7 * 86_400)),
        HOUR: float(getattr(settings, "KALENA_RETENTION_HOUR_S", 90 * 86_400)),
        "loops": float(getattr(settings, "KALENA_RETENTION_LOOPS_S", 86_400)),
    }


@dataclass
class RollupReport:
    node_rows: int = 0
    workload_rows: int = 0
    hour_rows: int = 0
    deleted: int = 0


def node_snapshot_rollup(*, cluster: Cluster, now_s: float) -> int:
    """Fold every node's current ledgers into its 1-minute row for ``now_s``'s minute: the
    latest snapshot wins for ledgers, usage is averaged over snapshots and its peak kept; batch
    usage and the batch throttling rate are averaged the same way (from the minute's first
    snapshot that has them: a ledger not yet recomputed since they were added has none)."""
    bucket = np.floor(now_s / 60.0) * 60.0
    ledgers = list(LiveNodeLedger.objects.filter(node__cluster=cluster).select_related("node"))
    limits = _limits_by_node(cluster)
    existing = {r.node_id: r for r in UsageRollup.objects.filter(cluster=cluster, resolution=MINUTE, bucket_s=bucket,
                                                                   node__isnull=False)}
    create, update = [], []
    for led in ledgers:
        usage = vector(led.usage)
        request = vector(led.prod_request) + vector(led.batch_request)
        reservation = vector(led.prod_reservation) + vector(led.batch_reservation)
        row = existing.get(led.node_id)
        if row is None:
            create.append(UsageRollup(
                cluster=cluster, resolution=MINUTE, bucket_s=bucket, node_id=led.node_id, samples=1,
                usage_mean=usage.tolist(), usage_peak=usage.tolist(), reservation=reservation.tolist(),
                request=request.tolist(), limit=limits.get(led.node_id, np.zeros(8)).tolist(),
                batch_request=list(led.batch_request), prod_reservation=list(led.prod_reservation),
                batch_usage=None if led.batch_usage is None else list(led.batch_usage),
                batch_throttled_mcpu=led.batch_throttled_mcpu))
            continue
        n = row.samples
        if led.batch_usage is not None:
            row.batch_usage = _running_mean(row.batch_usage, vector(led.batch_usage), n).tolist()
        if led.batch_throttled_mcpu is not None:
            row.batch_throttled_mcpu = float(_running_mean(row.batch_throttled_mcpu, led.batch_throttled_mcpu, n))
        row.usage_mean = ((vector(row.usage_mean) * n + usage) / (n + 1)).tolist()
        row.usage_peak = np.maximum(vector(row.usage_peak), usage).tolist()
        row.samples = n + 1
        row.reservation, row.request = reservation.tolist(), request.tolist()
        row.limit = limits.get(led.node_id, np.zeros(8)).tolist()
        row.batch_request, row.prod_reservation = list(led.batch_request), list(led.prod_reservation)
        update.append(row)
    with transaction.atomic():
        UsageRollup.objects.bulk_create(create, batch_size=500)
        UsageRollup.objects.bulk_update(update, ["usage_mean", "usage_peak", "samples", "reservation", "request",
                                                 "limit", "batch_request", "prod_reservation", "batch_usage",
                                                 "batch_throttled_mcpu"], batch_size=500)
    return len(create) + len(update)


def _running_mean(mean, value, n: int):
    """``mean`` of ``n`` snapshots with ``value`` folded in; a missing mean (None: the earlier
    snapshots lacked it) starts afresh at ``value``. Vectors or scalars."""
    if mean is None:
        return np.asarray(value, dtype=np.float64)
    return (np.asarray(mean, dtype=np.float64) * n + np.asarray(value, dtype=np.float64)) / (n + 1)


def _weighted_mean(items: list[UsageRollup], field: str):
    """Sample-weighted mean of ``field`` over the rows that have it (None when none does)."""
    have = [(r.samples or 1, getattr(r, field)) for r in items if getattr(r, field) is not None]
    if not have:
        return None
    weights = np.array([w for w, _ in have], dtype=np.float64)
    values = np.array([v for _, v in have], dtype=np.float64)
    return np.tensordot(weights, values, axes=1) / weights.sum()


def _limits_by_node(cluster: Cluster) -> dict[int, np.ndarray]:
    out: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(8))
    for node_id, limit in Workload.objects.filter(cluster=cluster, node__isnull=False).values_list("node_id", "limit"):
        out[node_id] = out[node_id] + np.nan_to_num(vector(limit), posinf=0.0)
    return dict(out)


def fold_hours(*, cluster: Cluster, now_s: float) -> int:
    """Fold closed minutes of every closed hour not folded yet into 1-hour rows (upsert); node
    rows' batch usage and throttling rate are count-weighted means over the minutes that have them."""
    hour_now = np.floor(now_s / 3600.0) * 3600.0
    last = (UsageRollup.objects.filter(cluster=cluster, resolution=HOUR).order_by("-bucket_s")
            .values_list("bucket_s", flat=True).first())
    start = (last + 3600.0) if last is not None else None
    minutes = UsageRollup.objects.filter(cluster=cluster, resolution=MINUTE, bucket_s__lt=hour_now)
    if start is not None:
        minutes = minutes.filter(bucket_s__gte=start)
    groups: dict[tuple[str, int], list[UsageRollup]] = defaultdict(list)
    for row in minutes.order_by("bucket_s"):
        key = ("node", row.node_id) if row.node_id else ("workload", row.workload_id)
        groups[key].append(row)
    rows = []
    for (kind, entity), items in groups.items():
        times = np.array([r.bucket_s for r in items])
        buckets = downsample(times, np.array([vector(r.usage_mean) for r in items]), 3600.0,
                             counts=np.array([max(r.samples, 1) for r in items]),
                             peaks=np.array([vector(r.usage_peak) for r in items]))
        for b, start_s in enumerate(buckets.start_s):
            inside = [r for r in items if np.floor(r.bucket_s / 3600.0) * 3600.0 == start_s]
            last_row = inside[-1]
            batch_usage, throttled = _weighted_mean(inside, "batch_usage"), _weighted_mean(inside, "batch_throttled_mcpu")
            rows.append(UsageRollup(
                cluster=cluster, resolution=HOUR, bucket_s=float(start_s),
                node_id=entity if kind == "node" else None, workload_id=entity if kind == "workload" else None,
                samples=int(buckets.count[b]), usage_mean=buckets.mean[b].tolist(), usage_peak=buckets.peak[b].tolist(),
                reservation=np.max([vector(r.reservation) for r in inside], axis=0).tolist(),
                request=last_row.request, limit=last_row.limit, batch_request=last_row.batch_request,
                prod_reservation=last_row.prod_reservation,
                batch_usage=None if batch_usage is None else batch_usage.tolist(),
                batch_throttled_mcpu=None if throttled is None else float(throttled),
                above_request=sum(r.above_request for r in inside), above_limit=sum(r.above_limit for r in inside)))
    with transaction.atomic():
        for row in rows:  # hours are few: one upsert each keeps re-runs idempotent
            UsageRollup.objects.update_or_create(
                cluster=cluster, resolution=HOUR, bucket_s=row.bucket_s, node_id=row.node_id,
                workload_id=row.workload_id,
                defaults={f: getattr(row, f) for f in ("samples", "usage_mean", "usage_peak", "reservation", "request",
                                                        "limit", "batch_request", "prod_reservation", "batch_usage",
                                                        "batch_throttled_mcpu", "above_request", "above_limit")})
    return len(rows)


#: Half-lives of 1-minute rows :func:`node_volatility` folds: older rows weigh below 2⁻⁴.
VOLATILITY_HALF_LIVES = 4.0


def node_volatility(*, cluster: Cluster, now_s: float, policy: PlacementPolicy | None = None) -> None:
    """Each node's production-reservation volatility → ``NodeCondition.volatility`` (the
    scheduler's penalty, docs/design.md §9), with the engine's
    :class:`~kalena_engine.placement.VolatilityTracker` — the same exponentially weighted σ the
    replay's scheduler uses (half-life ``volatility_half_life_s``, 1 h by default).

    The tracker is folded afresh on every run over the 1-minute rows of the last
    :data:`VOLATILITY_HALF_LIVES` half-lives, all nodes at once in bucket order; a node missing
    from a bucket keeps its last value (no gap resets its variance). Nodes with fewer than two
    rows keep their volatility.
    """
    policy = policy or PlacementPolicy()
    since = now_s - VOLATILITY_HALF_LIVES * policy.volatility_half_life_s
    ledgers = {led.node_id: vector(led.capacity) for led in LiveNodeLedger.objects.filter(node__cluster=cluster)}
    nodes = sorted(ledgers)
    column = {n: i for i, n in enumerate(nodes)}
    by_bucket: dict[float, list[tuple[int, np.ndarray]]] = defaultdict(list)
    seen = np.zeros(len(nodes), dtype=np.int64)
    for node_id, bucket, prod in UsageRollup.objects.filter(
            cluster=cluster, resolution=MINUTE, node__isnull=False, bucket_s__gte=since,
            bucket_s__lte=now_s).values_list("node_id", "bucket_s", "prod_reservation"):
        if prod is not None and node_id in column:
            by_bucket[bucket].append((column[node_id], vector(prod)))
            seen[column[node_id]] += 1
    if not by_bucket:
        return
    tracker = VolatilityTracker(policy.volatility_half_life_s)
    values = np.full((len(nodes), 8), np.nan)
    for bucket in sorted(by_bucket):
        for col, prod in by_bucket[bucket]:
            values[col] = prod
        tracker.update(bucket, values)
    ratio = tracker.ratio(np.array([ledgers[n] for n in nodes]))
    with transaction.atomic():
        for col, node_id in enumerate(nodes):
            if seen[col] >= 2:
                NodeCondition.objects.filter(node_id=node_id).update(volatility=float(ratio[col]))


def retention_apply(*, cluster: Cluster, now_s: float) -> int:
    """Delete what is older than its retention (see module doc); returns rows deleted."""
    keep = retention_s()
    deleted = 0
    for resolution in (MINUTE, HOUR):
        deleted += UsageRollup.objects.filter(cluster=cluster, resolution=resolution,
                                              bucket_s__lt=now_s - keep[resolution]).delete()[0]
    deleted += LoopRun.objects.filter(cluster=cluster, started_s__lt=now_s - keep["loops"]).delete()[0]
    return deleted
