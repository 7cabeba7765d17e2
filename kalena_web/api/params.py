"""Path and query parameters shared by the API's routers, with the bounds the server enforces
written into the OpenAPI schema: a value the schema allows is a value the API accepts.

A name in the URL is one path segment (no ``/``) without NUL (:class:`NulRefusedMiddleware
<kalena_web.console.middleware.NulRefusedMiddleware>` refuses a NUL anywhere in the URL); a batch
pod's ``namespace/pod`` name is two of them (``…/batch/{namespace}/{pod}``); ids are positive
64-bit integers; times are ISO 8601.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from ninja import Path, Query
from pydantic import AfterValidator, BeforeValidator

#: one URL path segment without NUL (cluster, node and run names)
SEGMENT = r"^[^/\x00]+$"
#: free text without NUL (filters)
TEXT = r"^[^\x00]*$"
ID_MAX = 2**63 - 1  # PostgreSQL bigint


ClusterName = Annotated[str, Path(pattern=SEGMENT, max_length=200, description="a live cluster's name")]
NodeName = Annotated[str, Path(pattern=SEGMENT, max_length=253, description="a node's name")]
RunName = Annotated[str, Path(pattern=SEGMENT, max_length=64, description="a persisted run's name")]
Namespace = Annotated[str, Path(pattern=SEGMENT, max_length=63, description="a batch pod's namespace")]
PodName = Annotated[str, Path(pattern=SEGMENT, max_length=253, description="a batch pod's name in its namespace")]
RowId = Annotated[int, Path(ge=1, le=ID_MAX)]


def _iso_time(value: object) -> object:
    """Only ISO 8601 text is a time here: pydantic would also read ``"12"`` as epoch seconds."""
    if isinstance(value, str) and not re.match(r"\d{4}-\d{2}-\d{2}", value):
        raise ValueError("not an ISO 8601 date or time (accepted: 2026-12-01 or 2026-12-01T12:00:00Z)")
    return value


def _as_utc(value: datetime) -> datetime:
    """The same instant in UTC (no zone is UTC). An instant the calendar cannot hold in UTC
    (``0001-01-01T00:00:00+05:00`` is in year 0) is the first or last UTC time there is: as a
    filter bound it selects the same rows, and the database is never handed an offset it
    refuses (PostgreSQL takes at most ±15:59; ISO 8601 allows ±23:59)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        edge = datetime.min if value.year == datetime.min.year else datetime.max
        return edge.replace(tzinfo=UTC)


#: an ISO 8601 date or time (a date is its midnight; no zone is UTC), as the instant in UTC
IsoTime = Annotated[datetime, BeforeValidator(_iso_time), AfterValidator(_as_utc)]


def text(max_length: int, description: str, default: str = ""):
    """A free-text query parameter (a filter): at most ``max_length`` characters, no NUL;
    ``""`` (the default) filters nothing."""
    return Query(default, pattern=TEXT, max_length=max_length, description=description)
