"""The durable write of ingest entries: many agent messages in one transaction (group commit).

:func:`store_entries` writes, in one transaction:

1. the :class:`IngestBatch` rows, ``INSERT … ON CONFLICT (node, batch_id) DO NOTHING RETURNING``
   — a message stored before (a resend after a lost ack) returns nothing and is marked
   ``duplicate``: none of its rows are written again, it is simply acknowledged again;
2. the samples of the new batches — PostgreSQL ``COPY … FROM STDIN`` (psycopg 3), plain
   ``executemany`` on SQLite — and their node samples;
3. mitigation events, the rejection counters (upserts) and each node's agent counters.

After the commit (``transaction.on_commit``) estimation is requested for the shards that
received samples (:func:`kalena_web.ledger.tasks.estimation_request`). If anything fails the
transaction rolls back whole and the caller acknowledges nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from django.db import connection, transaction

from kalena_web.telemetry.ingest import Entry
from kalena_web.telemetry.models import (
    PSI_COLUMNS, USAGE_COLUMNS, AgentStatus, IngestBatch, MitigationEvent, NodeSample, RejectedSamples, Sample,
)

log = logging.getLogger(__name__)

SAMPLE_COLUMNS = ("batch_id", "node_id", "workload_id", "ts", *USAGE_COLUMNS, "memory_usage_bytes", "cpu_nr_periods",
                  "cpu_nr_throttled", "cpu_throttled_time_us", *PSI_COLUMNS)
NODE_SAMPLE_COLUMNS = ("batch_id", "node_id", "ts", "working_set_bytes", *PSI_COLUMNS)
BATCH_COLUMNS = ("node_id", "batch_id", "kind", "shard", "ts", "received_s", "stored_s", "samples", "rejected",
                 "estimation_run")
BATCH_COLUMN_TYPES = ("bigint", "text", "text", "integer", "double precision", "double precision",
                      "double precision", "integer", "integer", "bigint")


def _copy_or_insert(table: str, columns: Sequence[str], rows: Iterable[tuple], cursor) -> None:
    """Append ``rows`` to ``table``: COPY on PostgreSQL, a multi-row INSERT elsewhere."""
    if connection.vendor == "postgresql":
        with cursor.cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return
    marks = ", ".join(["%s"] * len(columns))
    cursor.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", list(rows))


def _pending(e: Entry) -> bool:
    """Whether estimation must apply the batch: it carries samples, or at least a node sample
    (a node without workloads is fresh too)."""
    return e.kind == IngestBatch.SAMPLES and (bool(e.samples) or e.node_sample is not None)


def _insert_batches(entries: list[Entry], *, stored_s: float, cursor) -> dict[tuple[int, str], int]:
    """Insert the batch rows; returns ``{(node_id, batch_id): id}`` of those newly inserted."""
    table = IngestBatch._meta.db_table
    inserted: dict[tuple[int, str], int] = {}
    if connection.vendor == "postgresql":  # one statement of constant text: arrays, unnested
        columns: list[list] = [[] for _ in BATCH_COLUMNS]
        for e in entries:
            pending = _pending(e)
            for column, value in zip(columns, (e.node_id, e.batch_id, e.kind, e.shard, e.ts, e.received_s, stored_s,
                                               len(e.samples), e.rejected_samples, None if pending else 0)):
                column.append(value)
        arrays = ", ".join(f"%s::{kind}[]" for kind in BATCH_COLUMN_TYPES)
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(BATCH_COLUMNS)}) SELECT * FROM unnest({arrays}) "
            f"ON CONFLICT (node_id, batch_id) DO NOTHING RETURNING id, node_id, batch_id", columns)
        return {(node_id, batch_id): row_id for row_id, node_id, batch_id in cursor.fetchall()}
    for start in range(0, len(entries), 500):
        chunk = entries[start:start + 500]
        params: list = []
        for e in chunk:
            pending = _pending(e)
            params += [e.node_id, e.batch_id, e.kind, e.shard, e.ts, e.received_s, stored_s, len(e.samples),
                       e.rejected_samples, None if pending else 0]
        values = ", ".join([f"({', '.join(['%s'] * len(BATCH_COLUMNS))})"] * len(chunk))
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(BATCH_COLUMNS)}) VALUES {values} "
            f"ON CONFLICT (node_id, batch_id) DO NOTHING RETURNING id, node_id, batch_id", params)
        for row_id, node_id, batch_id in cursor.fetchall():
            inserted[(node_id, batch_id)] = row_id
    return inserted


def _count_rejections(entries: list[Entry], *, now_s: float, cursor) -> None:
    totals: dict[tuple[int, str], list] = {}
    for e in entries:
        for reason, (samples, messages, detail) in e.rejected.items():
            t = totals.setdefault((e.node_id, reason), [0, 0, ""])
            t[0] += samples
            t[1] += messages
            t[2] = detail
    if not totals:
        return
    table = RejectedSamples._meta.db_table
    cursor.executemany(
        f"INSERT INTO {table} (node_id, reason, samples, messages, first_s, last_s, last_detail) "
        f"VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (node_id, reason) DO UPDATE SET "
        f"samples = {table}.samples + excluded.samples, messages = {table}.messages + excluded.messages, "
        f"last_s = excluded.last_s, last_detail = excluded.last_detail",
        [(node, reason, s, m, now_s, now_s, d[:500]) for (node, reason), (s, m, d) in sorted(totals.items())])


def _count_agents(entries: list[Entry], *, now_s: float, cursor) -> None:
    per_node: dict[int, list] = {}
    for e in entries:
        if e.batch_id is None:
            continue
        t = per_node.setdefault(e.node_id, [0, 0, 0, None])
        t[0] += 0 if e.duplicate else 1
        t[1] += 0 if e.duplicate else len(e.samples)
        t[2] += 1 if e.duplicate else 0
        if not e.duplicate and e.last_sample_s is not None and (t[3] is None or e.last_sample_s > t[3]):
            t[3] = e.last_sample_s
    if not per_node:
        return
    table = AgentStatus._meta.db_table
    rows = [(node, b, a, d, last) for node, (b, a, d, last) in sorted(per_node.items())]
    if connection.vendor == "postgresql":  # one statement for every node of the write
        values = ", ".join(["(%s::bigint, %s::bigint, %s::bigint, %s::bigint, %s::double precision)"] * len(rows))
        cursor.execute(
            f"UPDATE {table} AS s SET batches = s.batches + v.b, accepted_samples = s.accepted_samples + v.a, "
            f"duplicate_batches = s.duplicate_batches + v.d, last_batch_s = %s, last_sample_s = CASE "
            f"WHEN s.last_sample_s IS NULL OR s.last_sample_s < v.last THEN v.last ELSE s.last_sample_s END "
            f"FROM (VALUES {values}) AS v (node, b, a, d, last) WHERE s.node_id = v.node",
            [now_s, *(x for row in rows for x in row)])
        return
    cursor.executemany(
        f"UPDATE {table} SET batches = batches + %s, accepted_samples = accepted_samples + %s, "
        f"duplicate_batches = duplicate_batches + %s, last_batch_s = %s, last_sample_s = CASE "
        f"WHEN last_sample_s IS NULL OR last_sample_s < %s THEN %s ELSE last_sample_s END WHERE node_id = %s",
        [(b, a, d, now_s, last, last, node) for node, b, a, d, last in rows])


def store_entries(entries: list[Entry], *, now_s: float, estimate: bool = True) -> set[int]:
    """Store ``entries`` in one transaction (see module doc); returns the shards that received
    samples. Sets ``entry.duplicate`` for messages stored before (also within ``entries``: the
    first one wins). ``estimate=False`` leaves the new batches pending without requesting
    estimation (a benchmark pre-filling the queue).

    Raises:
        django.db.Error: nothing was written; acknowledge nothing.
    """
    seen: set[tuple[int, str]] = set()
    fresh: list[Entry] = []
    for e in entries:
        e.duplicate = False
        if e.batch_id is None:
            continue
        key = (e.node_id, e.batch_id)
        if key in seen:
            e.duplicate = True
        else:
            seen.add(key)
            fresh.append(e)
    shards: set[int] = set()
    with transaction.atomic(), connection.cursor() as cursor:
        inserted = _insert_batches(fresh, stored_s=now_s, cursor=cursor) if fresh else {}
        samples: list[tuple] = []
        node_samples: list[tuple] = []
        events: list[MitigationEvent] = []
        for e in fresh:
            batch_pk = inserted.get((e.node_id, e.batch_id))
            if batch_pk is None:
                e.duplicate = True
                continue
            if _pending(e):
                shards.add(e.shard)
            if e.samples:
                samples.extend((batch_pk, *row) for row in e.samples)
            if e.node_sample is not None:
                node_samples.append((batch_pk, e.node_id, *e.node_sample))
            if e.action is not None:
                events.append(MitigationEvent(batch_id=batch_pk, node_id=e.node_id, **e.action))
        if samples:
            _copy_or_insert(Sample._meta.db_table, SAMPLE_COLUMNS, samples, cursor)
        if node_samples:
            _copy_or_insert(NodeSample._meta.db_table, NODE_SAMPLE_COLUMNS, node_samples, cursor)
        if events:
            MitigationEvent.objects.bulk_create(events)
        _count_rejections([e for e in entries if not e.duplicate], now_s=now_s, cursor=cursor)
        _count_agents(entries, now_s=now_s, cursor=cursor)
        if shards and estimate:
            transaction.on_commit(lambda: _request_estimation(shards), robust=True)
    return shards


def _request_estimation(shards: set[int]) -> None:
    from kalena_web.ledger.tasks import estimation_request

    estimation_request(shards=sorted(shards))


def store_unstorable(entry: Entry, *, error: str, now_s: float) -> None:
    """Store ``entry`` as refused when its own rows cannot be written (a data error the checks
    did not foresee): its batch row (so a resend is recognised) and an ``unstorable`` count.
    Its samples are not stored; it is acknowledged with the reason."""
    entry.samples, entry.node_sample, entry.action = [], None, None
    entry.reject("unstorable", error[:500], samples=0, messages=1)
    store_entries([entry], now_s=now_s)
