"""The estimation loop's reads and writes, in plain SQL: a run touches thousands of rows a
second, and the ORM's per-row work (expression trees for ``bulk_update``, per-field
converters) cost more than the estimation itself. One statement per table and run on
PostgreSQL (``unnest`` of arrays); ``executemany`` on SQLite. Vectors are the JSON lists of
:class:`~kalena_web.inventory.fields.ResourceVectorField` (``null`` = +inf).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson
from django.db import connection

from kalena_engine.overrides import KEYS
from kalena_web.inventory.fields import encode_vector
from kalena_web.inventory.models import Workload
from kalena_web.ledger.mappers import WorkloadColumns
from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
from kalena_web.telemetry.models import USAGE_COLUMNS, Sample

LEDGER_VECTORS = ("prod_request", "prod_reservation", "batch_request", "batch_reservation", "usage", "batch_usage")


def _pg() -> bool:
    return connection.vendor == "postgresql"


def _ids(ids: Sequence[int]) -> tuple[str, list]:
    """``= ANY(%s)`` with one array on PostgreSQL, ``IN (…)`` elsewhere."""
    if _pg():
        return "= ANY(%s)", [list(ids)]
    return f"IN ({', '.join(['%s'] * len(ids))})", list(ids)


def _label(key: str) -> str:
    """SQL reading one label value as text (PostgreSQL jsonb ``->>``, SQLite ``json_extract``)."""
    return f"w.labels->>'{key}'" if _pg() else f"json_extract(w.labels, '$.\"{key}\"')"


def load_workloads(node_ids: Sequence[int]) -> WorkloadColumns:
    """Workloads placed on ``node_ids`` that have a reservation, ordered by id, as the columns of
    :class:`~kalena_web.ledger.mappers.WorkloadColumns` (one statement; vectors stay JSON text
    for :func:`~kalena_web.ledger.mappers.live_workloads` to decode in one step; of the labels
    only the per-workload override keys are read, :data:`kalena_engine.overrides.KEYS`)."""
    if not node_ids:
        return WorkloadColumns.empty()
    cast = "::text" if _pg() else ""
    clause, params = _ids(node_ids)
    overrides = ", ".join(_label(k) for k in KEYS)
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT w.id, w.node_id, w.kind, w.request{cast}, w."limit"{cast}, w.start_s, '
            f"r.value{cast}, r.updated_s, r.last_sample_s, r.last_usage{cast}, w.name, w.priority, "
            f"{overrides} "
            f"FROM {Workload._meta.db_table} w JOIN {WorkloadReservation._meta.db_table} r ON r.workload_id = w.id "
            f"WHERE w.node_id {clause} ORDER BY w.id", params)
        rows = cursor.fetchall()
    if not rows:
        return WorkloadColumns.empty()
    cols = list(zip(*rows))
    return WorkloadColumns(
        ids=cols[0], node_ids=cols[1], kinds=cols[2], request=cols[3], limit=cols[4], start_s=cols[5],
        value=cols[6], updated_s=cols[7], last_sample_s=cols[8], last_usage=cols[9], names=cols[10],
        priorities=cols[11], overrides=dict(zip(KEYS, cols[12:12 + len(KEYS)])))


def load_samples(batch_ids: Sequence[int]) -> list[tuple]:
    """``(id, workload_id, node_id, ts, 8 usage)`` of the samples of ``batch_ids``."""
    clause, params = _ids(batch_ids)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, workload_id, node_id, ts, {', '.join(USAGE_COLUMNS)} "
                       f"FROM {Sample._meta.db_table} WHERE batch_id {clause}", params)
        return cursor.fetchall()


def load_throttle_counters(workload_ids: Sequence[int], *, since_s: float) -> list[tuple]:
    """``(workload_id, node_id, ts, cpu_throttled_time_us)`` of the samples of ``workload_ids`` taken
    at or after ``since_s`` that carry a throttling counter, by workload then time (one statement,
    on the ``(workload, ts)`` index)."""
    if not len(workload_ids):
        return []
    clause, params = _ids([int(w) for w in workload_ids])
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT workload_id, node_id, ts, cpu_throttled_time_us FROM {Sample._meta.db_table} "
                       f"WHERE workload_id {clause} AND ts >= %s AND cpu_throttled_time_us IS NOT NULL "
                       f"ORDER BY workload_id, ts", [*params, float(since_s)])
        return cursor.fetchall()


def write_reservations(rows: Sequence[tuple[int, Sequence[float], float, float, Sequence[float]]]) -> None:
    """``(workload_id, value, updated_s, last_sample_s, last_usage)`` per reservation."""
    if not rows:
        return
    table = WorkloadReservation._meta.db_table
    dump = [(w, orjson.dumps(encode_vector(v)).decode(), u, s, orjson.dumps(encode_vector(lu)).decode())
            for w, v, u, s, lu in rows]
    with connection.cursor() as cursor:
        if _pg():
            cursor.execute(
                f"UPDATE {table} AS r SET value = v.value, updated_s = v.updated_s, last_sample_s = v.last_sample_s, "
                f"last_usage = v.last_usage FROM (SELECT unnest(%s::bigint[]) AS workload_id, "
                f"unnest(%s::jsonb[]) AS value, unnest(%s::float8[]) AS updated_s, "
                f"unnest(%s::float8[]) AS last_sample_s, unnest(%s::jsonb[]) AS last_usage) AS v "
                f"WHERE r.workload_id = v.workload_id", [list(col) for col in zip(*dump)])
        else:
            cursor.executemany(f"UPDATE {table} SET value = %s, updated_s = %s, last_sample_s = %s, last_usage = %s "
                               f"WHERE workload_id = %s", [(v, u, s, lu, w) for w, v, u, s, lu in dump])


def load_histories(workload_ids: Sequence[int]) -> dict[int, bytes]:
    """``{workload id: stored peak history}`` of those that have one."""
    if not len(workload_ids):
        return {}
    return {w: bytes(h) for w, h in WorkloadReservation.objects.filter(
        workload_id__in=[int(i) for i in workload_ids], history__isnull=False).values_list("workload_id", "history")}


def write_histories(rows: Sequence[tuple[int, bytes]]) -> None:
    """Store each ``(workload id, peak history bytes)``."""
    table = WorkloadReservation._meta.db_table
    if rows:
        with connection.cursor() as cursor:
            cursor.executemany(f"UPDATE {table} SET history = %s WHERE workload_id = %s", [(h, w) for w, h in rows])


def write_ledgers(ledgers: Sequence[LiveNodeLedger]) -> None:
    """Store the vectors, ``batch_throttled_mcpu``, ``last_sample_s``, ``stale``, ``version``,
    ``updated_s`` and the blueprint check (``blueprint_violations``, ``blueprint_checked_s``) of
    ``ledgers``."""
    if not ledgers:
        return
    table = LiveNodeLedger._meta.db_table
    rows = [(led.node_id, *(orjson.dumps(encode_vector(getattr(led, f))).decode() for f in LEDGER_VECTORS),
             led.batch_throttled_mcpu, led.last_sample_s, bool(led.stale), int(led.version), float(led.updated_s),
             orjson.dumps(led.blueprint_violations or []).decode(), led.blueprint_checked_s) for led in ledgers]
    scalars = ("batch_throttled_mcpu", "last_sample_s", "stale", "version", "updated_s", "blueprint_violations",
               "blueprint_checked_s")
    sets = ", ".join(f"{f} = v.{f}" for f in (*LEDGER_VECTORS, *scalars))
    with connection.cursor() as cursor:
        if _pg():
            vectors = ", ".join(f"unnest(%s::jsonb[]) AS {f}" for f in LEDGER_VECTORS)
            cursor.execute(
                f"UPDATE {table} AS l SET {sets} FROM (SELECT unnest(%s::bigint[]) AS node_id, {vectors}, "
                f"unnest(%s::float8[]) AS batch_throttled_mcpu, unnest(%s::float8[]) AS last_sample_s, "
                f"unnest(%s::bool[]) AS stale, unnest(%s::bigint[]) AS version, unnest(%s::float8[]) AS updated_s, "
                f"unnest(%s::jsonb[]) AS blueprint_violations, unnest(%s::float8[]) AS blueprint_checked_s) AS v "
                f"WHERE l.node_id = v.node_id", [list(col) for col in zip(*rows)])
        else:
            fields = ", ".join(f"{f} = %s" for f in (*LEDGER_VECTORS, *scalars))
            cursor.executemany(f"UPDATE {table} SET {fields} WHERE node_id = %s", [(*r[1:], r[0]) for r in rows])
