"""One way to page, sort and filter every list under ``/api/``.

A list endpoint takes ``page: Query[SortQuery]`` (a :func:`list_query` class) beside its own
filters and returns ``page_of(rows, page, request, response)``: the answer stays a JSON array (older clients and
the ``kalena`` CLI read it as one) and the totals travel in headers, as the GitHub and
Kubernetes-style APIs do:

* ``X-Total-Count``: rows matching the filters, all pages together;
* ``X-Page``, ``X-Page-Size``: this page;
* ``Link``: ``<…?page=3&page_size=50>; rel="next"``, and ``prev``/``first``/``last``.

``sort`` names one of the endpoint's sort fields, ``-`` first for descending
(``sort=-queued``): a closed set the OpenAPI schema lists as an enum, so a field not offered is a
422 naming the ones that are. ``page`` past the last gives an empty array with the same totals.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal
from urllib.parse import urlencode

from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from ninja import Field, Schema
from pydantic import create_model

from kalena_web.api.errors import ApiError

MAX_PAGE_SIZE = 1000


class ListQuery(Schema):
    """Paging parameters shared by every list (a list with a choice of order adds ``sort``
    through :func:`list_query`)."""

    page: int = Field(1, ge=1, le=1_000_000, description="1-based page number")
    page_size: int = Field(100, ge=1, le=MAX_PAGE_SIZE, description=f"rows per page (at most {MAX_PAGE_SIZE})")


def list_query(name: str, sorts: Sequence[str], default: str) -> type[ListQuery]:
    """Paging parameters plus ``sort``, one of ``sorts`` or its ``-`` form (descending), e.g.
    ``list_query("BatchListQuery", ("queued", "name"), "queued")`` accepts ``queued``,
    ``-queued``, ``name``, ``-name`` and nothing else — the schema lists them as an enum and
    anything else is a 422 naming them. ``default`` is the order when ``sort`` is not given."""
    values = tuple(v for field in sorts for v in (field, f"-{field}"))
    assert default in values, f"default sort {default!r} is not one of {values}"
    return create_model(name, __base__=ListQuery, sort=(Literal[values], Field(  # type: ignore[valid-type]
        default, description=f"one of {', '.join(sorts)}; '-' first for descending (default {default})")))


def with_page_size(query: ListQuery, page_size: int | None) -> ListQuery:
    """``query`` with ``page_size`` replaced by an older client's ``limit`` when it gave one."""
    return query if page_size is None else query.model_copy(update={"page_size": page_size})


def order_by(query: ListQuery, fields: dict[str, tuple[str, ...]], default: str) -> tuple[str, ...]:
    """The ORM ordering for ``query.sort`` from ``fields`` (sort name → ORM fields, ending on a
    unique one so pages never overlap). Raises :class:`ApiError` (400) naming the sort fields."""
    raw = getattr(query, "sort", None) or default
    descending = raw.startswith("-")
    name = raw.lstrip("-")
    if name not in fields:
        raise ApiError(400, f"cannot sort by {name!r}; sort fields: {', '.join(sorted(fields))} "
                            "(prefix '-' for descending)", code="invalid_sort")
    return tuple(("-" + f if descending else f) for f in fields[name])


def page_of(rows: QuerySet | Sequence, query: ListQuery, request: HttpRequest, response: HttpResponse) -> list:
    """This page of ``rows`` (already filtered and ordered), with the total and links in headers."""
    total = rows.count() if isinstance(rows, QuerySet) else len(rows)
    start = (query.page - 1) * query.page_size
    items = list(rows[start:start + query.page_size])
    last = max(1, -(-total // query.page_size))
    response["X-Total-Count"] = str(total)
    response["X-Page"] = str(query.page)
    response["X-Page-Size"] = str(query.page_size)
    response["Access-Control-Expose-Headers"] = "X-Total-Count, X-Page, X-Page-Size, Link"

    def link(page: int, rel: str) -> str:
        params = {k: v for k, v in request.GET.items() if k not in ("page", "page_size")}
        params.update(page=page, page_size=query.page_size)
        return f'<{request.path}?{urlencode(params)}>; rel="{rel}"'

    links = [link(1, "first"), link(last, "last")]
    if query.page < last:
        links.append(link(query.page + 1, "next"))
    if 1 < query.page <= last + 1:
        links.append(link(min(query.page - 1, last), "prev"))
    response["Link"] = ", ".join(links)
    return items


def sort_items(items: Sequence, query: ListQuery, keys: dict[str, Callable], default: str) -> list:
    """An in-memory list (rows already built from bulk queries) sorted by ``query.sort`` from
    ``keys`` (sort name → key function; ``None`` values last), stable. Raises :class:`ApiError`
    (400) naming the sort fields."""
    raw = getattr(query, "sort", None) or default
    descending = raw.startswith("-")
    name = raw.lstrip("-")
    if name not in keys:
        raise ApiError(400, f"cannot sort by {name!r}; sort fields: {', '.join(sorted(keys))} "
                            "(prefix '-' for descending)", code="invalid_sort")
    key = keys[name]
    present = [i for i in items if key(i) is not None]
    missing = [i for i in items if key(i) is None]
    return sorted(present, key=key, reverse=descending) + missing
