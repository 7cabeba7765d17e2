"""``ResourceVectorField``: one 8-dimension resource vector (docs/design.md §2) in internal units.

Stored as a JSON list of eight numbers in the canonical order (cpu mcpu, ram bytes, gpu devices,
storage bytes, disk read/write and net in/out bytes/s). JSON has no infinity and PostgreSQL's
jsonb refuses it, so an unconstrained (+inf) dimension is stored as ``null`` and read back as
``inf``. The Python value is a plain ``list[float]``; ``mappers.py`` turns it into numpy.
"""

from __future__ import annotations

import math

from django.core.exceptions import ValidationError
from django.db import models

from kalena_engine.resources import N_DIMS


def encode_vector(values) -> list[float | None]:
    """Eight floats → JSON-safe list (``inf`` → ``None``).

    Raises:
        ValidationError: not eight numbers, or a NaN / −inf among them.
    """
    out: list[float | None] = []
    items = list(values)
    if len(items) != N_DIMS:
        raise ValidationError(f"a resource vector has {N_DIMS} dimensions, got {len(items)}")
    for value in items:
        value = float(value)
        if math.isnan(value) or value == -math.inf:
            raise ValidationError(f"resource vector entries must be finite or +inf, got {value}")
        out.append(None if value == math.inf else value)
    return out


def decode_vector(stored) -> list[float] | None:
    """JSON list → eight floats (``None`` → ``inf``)."""
    if stored is None:
        return None
    return [math.inf if v is None else float(v) for v in stored]


class ResourceVectorField(models.JSONField):
    """A model field holding one ``(8,)`` resource vector in internal units (see module doc)."""

    description = "8-dimension resource vector (internal units; null = unconstrained)"

    def from_db_value(self, value, expression, connection):
        return decode_vector(super().from_db_value(value, expression, connection))

    def get_prep_value(self, value):
        return super().get_prep_value(None if value is None else encode_vector(value))
