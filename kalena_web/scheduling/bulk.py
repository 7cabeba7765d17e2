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


_SQL_TYPES = {"postgresql": {"int": "BIGINT", "float": "DOUBLE PRECISION", "vector": "JSONB", "text": "TEXT",
                             "json": "JSONB", "bool": "BOOLEAN"},
              "sqlite": {"int": "INTEGER", "float": "REAL", "vector": "TEXT", "text": "TEXT", "json": "TEXT",
                         "bool": "INTEGER"}}


def update_by_id(table: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]],
                  chunk: int = 1000) -> None:
    """``UPDATE table SET c1 = v1, … WHERE id = k`` for every row ``(k, v1, …)`` in one
    statement per ``chunk`` (a VALUES list joined by id; PostgreSQL and SQLite alike) —
    Django's ``bulk_update`` builds a CASE per row and column, which is slow for thousands of
    rows. ``columns``: ``(name, kind)`` with kind ``int``, ``float``, ``bool``, ``text``, ``json``
    (a ``JSONField``'s value) or ``vector`` (a
    :class:`~kalena_web.inventory.fields.ResourceVectorField`, stored as its JSON)."""
    if connection.vendor == "postgresql":
        _update_by_json(table, columns, rows, chunk)
        return
    types = _SQL_TYPES.get(connection.vendor, _SQL_TYPES["postgresql"])
    quote = connection.ops.quote_name
    casts = ", ".join(["CAST(%s AS BIGINT)"] + [f"CAST(%s AS {types[kind]})" for _, kind in columns])
    names = ", ".join(["k"] + [f"v{j}" for j in range(len(columns))])
    sets = ", ".join(f"{quote(name)} = v.v{j}" for j, (name, _) in enumerate(columns))
    encode = [_sqlite_encoder(kind) for _, kind in columns]
    for i in range(0, len(rows), chunk):
        part = rows[i:i + chunk]
        sql = (f"WITH v({names}) AS (VALUES {', '.join([f'({casts})'] * len(part))}) "
               f"UPDATE {quote(table)} SET {sets} FROM v WHERE {quote(table)}.{quote('id')} = v.k")
        params = [x for row in part for x in [row[0], *(f(v) for f, v in zip(encode, row[1:], strict=True))]]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)


def _sqlite_encoder(kind: str):
    """How a value of ``kind`` is bound on SQLite (JSON as its text)."""
    if kind == "vector":
        return lambda v: None if v is None else json.dumps(encode_vector(v))
    if kind == "json":
        return lambda v: None if v is None else json.dumps(v)
    return lambda v: v


def insert_rows(table: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]],
                chunk: int = 1000) -> None:
    """``INSERT INTO table (c1, …) VALUES (…), …`` for every row, one statement per ``chunk``
    (the columns not named take their database default or NULL) — Django's ``bulk_create``
    builds a model instance and compiles every field per row. ``columns`` as in
    :func:`update_by_id`; None stays NULL."""
    if connection.vendor == "postgresql":
        _insert_by_json(table, columns, rows, chunk)
        return
    types = _SQL_TYPES.get(connection.vendor, _SQL_TYPES["postgresql"])
    quote = connection.ops.quote_name
    casts = ", ".join(f"CAST(%s AS {types[kind]})" for _, kind in columns)
    names = ", ".join(quote(name) for name, _ in columns)
    encode = [_sqlite_encoder(kind) for _, kind in columns]
    for i in range(0, len(rows), chunk):
        part = rows[i:i + chunk]
        sql = f"INSERT INTO {quote(table)} ({names}) VALUES {', '.join([f'({casts})'] * len(part))}"
        params = [f(v) for row in part for f, v in zip(encode, row, strict=True)]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)


def _json_rows(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]], keyed: bool) -> str:
    """The rows as one JSON array of objects (``k``, ``v0``, …): one parameter, encoded by the
    C JSON encoder — thousands of parameters cost the driver more than the statement costs
    the database."""
    kinds = [kind for _, kind in columns]
    out = []
    for row in rows:
        values = row[1:] if keyed else row
        item = {f"v{j}": (None if v is None else encode_vector(v)) if kind == "vector" else v
                for j, (kind, v) in enumerate(zip(kinds, values, strict=True))}
        if keyed:
            item["k"] = row[0]
        out.append(item)
    return json.dumps(out)


def _record_types(columns: Sequence[tuple[str, str]]) -> str:
    types = _SQL_TYPES["postgresql"]
    return ", ".join(f"v{j} {types[kind]}" for j, (_, kind) in enumerate(columns))


def _update_by_json(table: str, columns, rows, chunk: int) -> None:
    quote = connection.ops.quote_name
    sets = ", ".join(f"{quote(name)} = v.v{j}" for j, (name, _) in enumerate(columns))
    sql = (f"UPDATE {quote(table)} SET {sets} FROM jsonb_to_recordset(%s::jsonb) AS v(k BIGINT, {_record_types(columns)}) "
           f"WHERE {quote(table)}.{quote('id')} = v.k")
    for i in range(0, len(rows), chunk):
        with connection.cursor() as cursor:
            cursor.execute(sql, [_json_rows(columns, rows[i:i + chunk], keyed=True)])


def _insert_by_json(table: str, columns, rows, chunk: int) -> None:
    quote = connection.ops.quote_name
    names = ", ".join(quote(name) for name, _ in columns)
    picks = ", ".join(f"v.v{j}" for j in range(len(columns)))
    sql = (f"INSERT INTO {quote(table)} ({names}) SELECT {picks} "
           f"FROM jsonb_to_recordset(%s::jsonb) AS v({_record_types(columns)})")
    for i in range(0, len(rows), chunk):
        with connection.cursor() as cursor:
            cursor.execute(sql, [_json_rows(columns, rows[i:i + chunk], keyed=False)])
