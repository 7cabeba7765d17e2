"""Raw samples → 1-minute workload rollups (the live archive's first resolution).

Each run reads the samples of the sample batches settled since the cluster's ``samples`` cursor
(a batch id; :mod:`kalena_web.archive.cursors` says why not a sample id; bounded per run),
folds them per (workload, minute) — count-weighted mean, peak, samples above the request and
above the limit on any dimension — into the minute rows, and raises each row's reservation to
``max(the workload's current reservation, min(L, μ · peak usage))``. Unmeasured dimensions
(NULL) take no part in means and peaks. Idempotent: the cursor advances in the same
transaction as the rows it produced.
"""

from __future__ import annotations

import numpy as np
from django.db import transaction

from kalena_engine.policy import EstimatorPolicy
from kalena_web.archive.cursors import settled_batches
from kalena_web.archive.models import ArchiveCursor, UsageRollup
from kalena_web.inventory.mappers import vector
from kalena_web.inventory.models import Cluster, Workload
from kalena_web.ledger.models import WorkloadReservation
from kalena_web.telemetry.models import USAGE_COLUMNS, IngestBatch, Sample

MAX_SAMPLES_PER_RUN = 500_000


def samples_rollup(*, cluster: Cluster, now_s: float, policy: EstimatorPolicy | None = None,
                   limit: int = MAX_SAMPLES_PER_RUN) -> int:
    """Fold the samples of newly settled batches (at ``now_s``, s) into 1-minute workload rows;
    returns the samples folded."""
    policy = policy or EstimatorPolicy()
    with transaction.atomic():
        cursor, _ = ArchiveCursor.objects.select_for_update().get_or_create(cluster=cluster, name="samples")
        batches = settled_batches(cluster=cluster, after=cursor.position, now_s=now_s,
                                  kinds=(IngestBatch.SAMPLES,), max_samples=limit)
        if not batches:
            return 0
        rows = list(Sample.objects.filter(batch_id__gt=cursor.position, batch_id__lte=batches[-1],
                                          node__cluster=cluster).order_by("id")
                    .values_list("id", "workload_id", "ts", *USAGE_COLUMNS))
        if not rows:
            cursor.position = batches[-1]
            cursor.save(update_fields=["position"])
            return 0
        data = np.array([r[3:] for r in rows], dtype=np.float64)  # None → nan
        workload = np.array([r[1] for r in rows], dtype=np.int64)
        minute = np.floor(np.array([r[2] for r in rows]) / 60.0) * 60.0
        keys, inverse = np.unique(np.column_stack([workload, minute]), axis=0, return_inverse=True)
        inverse = inverse.ravel()
        ids = sorted({int(k[0]) for k in keys})
        limits = {w.id: (vector(w.request), np.nan_to_num(vector(w.limit), posinf=np.inf))
                  for w in Workload.objects.filter(id__in=ids).only("id", "request", "limit")}
        current = {wid: vector(v) for wid, v in
                   WorkloadReservation.objects.filter(workload_id__in=ids).values_list("workload_id", "value")}
        existing = {(r.workload_id, r.bucket_s): r for r in UsageRollup.objects.filter(
            cluster=cluster, resolution=UsageRollup.MINUTE, workload_id__in=ids,
            bucket_s__gte=float(minute.min()), bucket_s__lte=float(minute.max()))}
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(keys) + 1))
        create, update = [], []
        for k, (wid, bucket) in enumerate(keys):
            wid, bucket = int(wid), float(bucket)
            part = data[order[bounds[k]:bounds[k + 1]]]
            request, limit = limits[wid]
            measured = ~np.isnan(part)
            count = measured.sum(axis=0)
            total = np.where(measured, part, 0.0).sum(axis=0)
            peak = np.where(count > 0, np.nanmax(np.where(measured, part, -np.inf), axis=0), 0.0)
            filled = np.where(measured, part, 0.0)
            above_q = int(np.any(filled > request * (1 + 1e-9), axis=1).sum())
            above_l = int(np.any(filled > limit * (1 + 1e-9), axis=1).sum())
            reservation = np.maximum(current.get(wid, request), np.minimum(limit, policy.margin_ratio * peak))
            row = existing.get((wid, bucket))
            if row is None:
                n = int(len(part))
                create.append(UsageRollup(
                    cluster=cluster, resolution=UsageRollup.MINUTE, bucket_s=bucket, workload_id=wid, samples=n,
                    usage_mean=np.where(count > 0, total / np.maximum(count, 1), 0.0).tolist(),
                    usage_peak=peak.tolist(), reservation=reservation.tolist(), above_request=above_q,
                    above_limit=above_l))
                continue
            n_old = row.samples
            old_mean = vector(row.usage_mean)
            row.usage_mean = np.where(count > 0, (old_mean * n_old + total) / (n_old + np.maximum(count, 1)),
                                      old_mean).tolist()
            row.usage_peak = np.maximum(vector(row.usage_peak), peak).tolist()
            row.reservation = np.maximum(vector(row.reservation), reservation).tolist()
            row.samples = n_old + int(len(part))
            row.above_request += above_q
            row.above_limit += above_l
            update.append(row)
        UsageRollup.objects.bulk_create(create, batch_size=1000)
        UsageRollup.objects.bulk_update(update, ["usage_mean", "usage_peak", "reservation", "samples", "above_request",
                                                 "above_limit"], batch_size=1000)
        cursor.position = batches[-1]
        cursor.save(update_fields=["position"])
    return len(rows)
