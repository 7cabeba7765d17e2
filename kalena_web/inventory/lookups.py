"""``field__any=values``: membership in a long list of values, bound as one array.

Django's ``__in`` gives every value its own placeholder and prepares each one through the
field; for the thousands of pod and node ids one scheduling pass asks about at 5,000 nodes,
building, preparing and binding that list cost more CPU than PostgreSQL spent answering
(profiled: about a sixth of a pass). ``__any`` binds the values as one array parameter —
``column = ANY(%s)`` on PostgreSQL (its documented row-and-array comparison) — and falls back
to ``column IN (…)`` elsewhere (SQLite, the embedded default). Same rows as ``__in``: ``None``
matches nothing, an empty collection matches no row (and, as with ``__in``, sends no query).

Values: any iterable of plain values the column holds (ints, strings), or a numpy array;
not expressions or querysets (use ``__in`` for those). Registered on every field by
:class:`~kalena_web.inventory.apps.InventoryConfig`.
"""

from __future__ import annotations

from django.core.exceptions import EmptyResultSet
from django.db.models import Lookup


class AnyOf(Lookup):
    lookup_name = "any"
    prepare_rhs = False

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        raw = self.rhs.tolist() if hasattr(self.rhs, "tolist") else self.rhs
        values = [v for v in raw if v is not None]
        if not values:
            raise EmptyResultSet  # as ``__in``: no row matches, and no query is sent for it
        if connection.vendor == "postgresql":
            return f"{lhs} = ANY(%s)", [*lhs_params, values]
        return f"{lhs} IN ({', '.join(['%s'] * len(values))})", [*lhs_params, *values]
