"""Reading the ingest tables in order without skipping a row that commits late.

Ingest writes run concurrently (one group-commit writer per server process), so row ids are
assigned in insert order but become visible in commit order: a reader that remembered "the
last id I saw" could pass over a lower id that commits a moment later and never read it. The
archive's cursors therefore count **sample batches** (:class:`IngestBatch`, whose rows commit
with their samples and actions) and only move over batches that are *settled*: stored at
least ``SETTLE_S`` ago and below every batch of the cluster stored more recently. A write's
transaction lasts well under ``SETTLE_S`` (one group write holds at most 20,000 samples), so
every batch below that bound has committed or never will.
"""

from __future__ import annotations

from django.db.models import Min

from kalena_web.inventory.models import Cluster
from kalena_web.telemetry.models import IngestBatch

SETTLE_S = 15.0


def settled_batches(*, cluster: Cluster, after: int, now_s: float, kinds: tuple[str, ...],
                    max_samples: int | None = None, max_batches: int = 20_000) -> list[int]:
    """Ids (ascending) of ``cluster``'s batches of ``kinds`` after ``after`` that are settled
    at ``now_s`` (s); at most ``max_batches``, and — when ``max_samples`` is given — only as
    many as keep their samples within it (at least one batch). Moving a cursor to the last id
    returned never skips a batch."""
    recent = IngestBatch.objects.filter(node__cluster=cluster, id__gt=after, stored_s__gt=now_s - SETTLE_S)
    bound = recent.aggregate(low=Min("id"))["low"]
    batches = IngestBatch.objects.filter(node__cluster=cluster, id__gt=after, kind__in=kinds)
    if bound is not None:
        batches = batches.filter(id__lt=bound)
    rows = list(batches.order_by("id").values_list("id", "samples")[:max_batches])
    if max_samples is None:
        return [r[0] for r in rows]
    out, total = [], 0
    for batch_id, samples in rows:
        if out and total + samples > max_samples:
            break
        out.append(batch_id)
        total += samples
    return out
