"""Path and query parameters shared by the API's routers, with the bounds the server enforces
written into the OpenAPI schema: a value the schema allows is a value the API accepts.

A name in the URL is one path segment (no ``/``) without NUL (:class:`NulRefusedMiddleware
<kalena_web.console.middleware.NulRefusedMiddleware>` refuses a NUL anywhere in the URL); a batch
pod's ``namespace/pod`` name is two of them (``…/batch/{namespace}/{pod}``); ids are positive
64-bit integers; times are ISO 8601.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated

from ninja import Path, Query
from pydantic import BeforeValidator

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


#: an ISO 8601 date or time (a date is its midnight; no zone is UTC)
IsoTime = Annotated[datetime, BeforeValidator(_iso_time)]


def text(max_length: int, description: str, default: str = ""):
    """A free-text query parameter (a filter): at most ``max_length`` characters, no NUL;
    ``""`` (the default) filters nothing."""
    return Query(default, pattern=TEXT, max_length=max_length, description=description)
