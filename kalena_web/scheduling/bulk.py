"""Batched writes: one ``UPDATE … FROM (VALUES …)`` statement per table for many rows."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import connection

from kalena_web.inventory.fields import encode_vector

def set_by_id(table: str, column: str, pairs: list[tuple[int, int]], chunk: int = 1000) -> None:
    """``UPDATE table SET column = v WHERE id = k`` for every ``(k, v)`` integer pair
    (:func:`update_by_id`)."""
    update_by_id(table, [(column, "int")], pairs, chunk=chunk)


_SQL_TYPES = {"postgresql": {"int": "BIGINT", "float": "DOUBLE PRECISION", "vector": "JSONB", "text": "TEXT"},
              "sqlite": {"int": "INTEGER", "float": "REAL", "vector": "TEXT", "text": "TEXT"}}


def update_by_id(table: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]],
                  chunk: int = 1000) -> None:
    """``UPDATE table SET c1 = v1, … WHERE id = k`` for every row ``(k, v1, …)`` in one
    statement per ``chunk`` (a VALUES list joined by id; PostgreSQL and SQLite alike) —
    Django's ``bulk_update`` builds a CASE per row and column, which is slow for thousands of
    rows. ``columns``: ``(name, kind)`` with kind ``int``, ``float``, ``text`` or ``vector`` (a
    :class:`~kalena_web.inventory.fields.ResourceVectorField`, stored as its JSON)."""
    types = _SQL_TYPES.get(connection.vendor, _SQL_TYPES["postgresql"])
    quote = connection.ops.quote_name
    casts = ", ".join(["CAST(%s AS BIGINT)"] + [f"CAST(%s AS {types[kind]})" for _, kind in columns])
    names = ", ".join(["k"] + [f"v{j}" for j in range(len(columns))])
    sets = ", ".join(f"{quote(name)} = v.v{j}" for j, (name, _) in enumerate(columns))
    encode = [(lambda v: json.dumps(encode_vector(v))) if kind == "vector" else (lambda v: v) for _, kind in columns]
    for i in range(0, len(rows), chunk):
        part = rows[i:i + chunk]
        sql = (f"WITH v({names}) AS (VALUES {', '.join([f'({casts})'] * len(part))}) "
               f"UPDATE {quote(table)} SET {sets} FROM v WHERE {quote(table)}.{quote('id')} = v.k")
        params = [x for row in part for x in [row[0], *(f(v) for f, v in zip(encode, row[1:], strict=True))]]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
