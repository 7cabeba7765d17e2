"""Search, filter, sort and paging of the console's lists — on the server, so a page costs the
same whatever the list's length: a queryset list is one ``COUNT`` and one page query (plus the
view's own ``select_related``), an in-memory list (live nodes, agents: rows already built from
bulk queries) is filtered, sorted and sliced in Python.

Query parameters (every list page): ``q`` (part of a name, case-insensitive, ≤ 200 characters),
one parameter per filter of the page's :class:`ListSpec`, ``sort`` (a key of the spec's sorts,
``-`` prefix for descending), ``page`` (1-based). A bad value answers 400 naming what is
accepted (:class:`~kalena_web.console.params.BadParameter`); a page past the end answers 404.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django.core.paginator import Page, Paginator
from django.db.models import Q, QuerySet
from django.http import QueryDict

from kalena_web.console import params

SEARCH_MAX = 200
Filter = Q | Callable[[Any], bool]


@dataclass(frozen=True)
class ListSpec:
    """What a list can be searched, filtered and sorted by.

    Attributes:
        search: fields the ``q`` text is looked for in (ORM paths ``workload__name``; on an
            in-memory list the same path read as attributes or indexes, ``workload.name``,
            ``slack[0]`` as ``slack__0``).
        filters: ``{parameter: {value: Q or predicate}}``; the first value of each is the default.
        sorts: ``{key: (field, …)}`` (ORM paths, or attribute paths on an in-memory list);
            the first key is the default order.
        labels: display names of filter values (``{"never_placed": "never placed"}``).
        per_page: rows per page.
        default_sort: the order when ``sort`` is absent (``-time`` for newest first); the first
            sort key when empty.
    """

    search: tuple[str, ...]
    sorts: Mapping[str, tuple[str, ...]]
    filters: Mapping[str, Mapping[str, Filter]] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    per_page: int = 50
    default_sort: str = ""


@dataclass
class Listing:
    """One page of a list and the choices that made it (for the controls and links)."""

    page: Page
    q: str
    sort: str
    descending: bool
    chosen: dict[str, str]
    spec: ListSpec
    base: dict[str, str]

    @property
    def sort_value(self) -> str:
        return f"-{self.sort}" if self.descending else self.sort

    def url(self, **changes: Any) -> str:
        """``?…`` for this list with ``changes`` applied (``page`` resets unless given)."""
        values = {**self.base, "q": self.q, **self.chosen, "sort": self.sort_value, "page": ""}
        values.update({k: "" if v is None else str(v) for k, v in changes.items()})
        return "?" + urlencode({k: v for k, v in values.items() if v not in ("", None)})

    def sort_url(self, key: str) -> str:
        """Sort by ``key`` ascending, or toggle its direction when it is the current sort."""
        return self.url(sort=f"-{key}" if key == self.sort and not self.descending else key)

    def sort_choices(self) -> list[tuple[str, str, bool]]:
        """``[(value, label, selected), …]`` for the sort select: each key ascending, then descending."""
        out = []
        for key in self.spec.sorts:
            label = key.replace("_", " ")
            out += [(key, f"{label} ↑", self.sort_value == key), (f"-{key}", f"{label} ↓", self.sort_value == f"-{key}")]
        return out

    def filter_choices(self) -> list[tuple[str, list[tuple[str, str, bool]]]]:
        """``[(parameter, [(value, label, selected), …]), …]`` for the filter selects."""
        return [(name, [(v, self.spec.labels.get(v, v.replace("_", " ")), v == self.chosen[name]) for v in values])
                for name, values in self.spec.filters.items()]


def _path_value(item: Any, path: str) -> Any:
    value = item
    for part in path.split("__"):
        if value is None:
            return None
        if part.isdigit():
            value = value[int(part)]
        else:
            value = value.get(part) if isinstance(value, Mapping) else getattr(value, part)
    return value


def _sort_key(path: str):
    def key(item: Any):
        value = _path_value(item, path)
        return (value is None, value if value is not None else 0)
    return key


def listing(rows: QuerySet | Sequence[Any], query: QueryDict, spec: ListSpec, *,
            keep: Mapping[str, str] | None = None) -> Listing:
    """Filter, search, sort and page ``rows`` by ``query``.

    ``keep``: other parameters the page's links must carry (e.g. the replay step).

    Raises:
        BadParameter: an unknown filter value or sort key, ``q`` too long, a page that is not a
            positive integer — naming what is accepted.
        django.core.paginator.InvalidPage: ``page`` past the last page.
    """
    chosen = {name: params.choice(query, name, accepted=tuple(values), default=next(iter(values)))
              for name, values in spec.filters.items()}
    q = (query.get("q") or "").strip()
    if len(q) > SEARCH_MAX:
        raise params.BadParameter(f"q: {len(q)} characters is longer than the {SEARCH_MAX} a search takes")
    raw_sort = query.get("sort") or spec.default_sort or next(iter(spec.sorts))
    descending = raw_sort.startswith("-")
    sort = raw_sort.removeprefix("-")
    if sort not in spec.sorts:
        raise params.BadParameter(f"sort={raw_sort!r} is not accepted (accepted: {', '.join(spec.sorts)}; "
                                  "prefix '-' for descending)")
    number = params.integer(query, "page", default=1, low=1)
    fields = spec.sorts[sort]
    if isinstance(rows, QuerySet):
        for name, value in chosen.items():
            rows = rows.filter(spec.filters[name][value])
        if q:
            match = Q()
            for path in spec.search:
                match |= Q(**{f"{path}__icontains": q})
            rows = rows.filter(match)
        rows = rows.order_by(*(f"-{f}" if descending else f for f in fields), "-pk" if descending else "pk")
    else:
        items = list(rows)
        for name, value in chosen.items():
            predicate = spec.filters[name][value]
            items = [r for r in items if predicate(r)]
        if q:
            needle = q.lower()
            items = [r for r in items if any(needle in str(_path_value(r, p) or "").lower() for p in spec.search)]
        for path in reversed(fields):
            items.sort(key=_sort_key(path), reverse=descending)
        rows = items
    page = Paginator(rows, spec.per_page, allow_empty_first_page=True).page(number)
    return Listing(page=page, q=q, sort=sort, descending=descending, chosen=chosen, spec=spec,
                   base=dict(keep or {}))


def everything(_row: Any) -> bool:
    """The "all" value of an in-memory filter."""
    return True


def attribute_is(path: str, expected: Any) -> Callable[[Any], bool]:
    """A predicate: the row's ``path`` (``a__b``) equals ``expected``."""
    return lambda row: _path_value(row, path) == expected
