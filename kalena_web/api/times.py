"""Times in API answers: ISO 8601 (UTC, ``Z``) beside the epoch seconds they come from."""

from __future__ import annotations

from datetime import datetime, timezone


def iso(epoch_s: float | None) -> str | None:
    """``1764590400.5`` → ``"2025-12-01T12:00:00.500Z"``; None stays None. Millisecond precision."""
    if epoch_s is None:
        return None
    return datetime.fromtimestamp(epoch_s, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
