"""Typed access into telemetry JSON documents with errors that name the field.

``need(doc, "cpu_stats.cpu_usage.total_usage", source=url)`` returns the number or raises
:class:`~agents.errors.TelemetryError` with ``source`` and the dotted field; ``opt`` returns
``None`` for an absent field but still rejects a present field of the wrong type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.errors import TelemetryError

_MISSING = object()


def _walk(doc: Any, path: str, source: str) -> Any:
    node = doc
    walked: list[str] = []
    for key in path.split("."):
        walked.append(key)
        if node is None:
            return _MISSING
        if not isinstance(node, Mapping):
            raise TelemetryError(f"expected an object, got {type(node).__name__}", source=source,
                                 field=".".join(walked[:-1]) or "<document>")
        if key not in node:
            return _MISSING
        node = node[key]
    return node


def _check(value: Any, kind: str, path: str, source: str) -> Any:
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TelemetryError(f"expected a number, got {value!r}", source=source, field=path)
        if value < 0:
            raise TelemetryError(f"expected a number ≥ 0, got {value!r}", source=source, field=path)
        return float(value)
    if kind == "string":
        if not isinstance(value, str):
            raise TelemetryError(f"expected a string, got {value!r}", source=source, field=path)
        return value
    if kind == "object":
        if not isinstance(value, Mapping):
            raise TelemetryError(f"expected an object, got {type(value).__name__}", source=source, field=path)
        return value
    if kind == "list":
        if not isinstance(value, list):
            raise TelemetryError(f"expected a list, got {type(value).__name__}", source=source, field=path)
        return value
    raise ValueError(kind)


def need(doc: Any, path: str, kind: str = "number", *, source: str) -> Any:
    """The value at dotted ``path`` checked to be ``number`` (≥ 0, returned as float),
    ``string``, ``object`` or ``list``; a missing field raises."""
    value = _walk(doc, path, source)
    if value is _MISSING or value is None:
        raise TelemetryError("missing", source=source, field=path)
    return _check(value, kind, path, source)


def opt(doc: Any, path: str, kind: str = "number", *, source: str) -> Any:
    """Like :func:`need` but an absent (or null) field gives ``None``."""
    value = _walk(doc, path, source)
    if value is _MISSING or value is None:
        return None
    return _check(value, kind, path, source)
