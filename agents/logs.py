"""Structured log lines for the control plane and the agent (one format for both).

Every line carries ``timestamp`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``, plus
``cluster`` / ``node`` / ``pod`` where the code knows them: passed as ``extra={...}`` on the call,
or bound for a block with :func:`log_context` (a loop binds its cluster, the agent its node).
``KALENA_LOG_FORMAT`` picks ``json`` (the default: one JSON object per line, python-json-logger)
or ``text`` (human-readable, the same fields in ``key=value`` form after the message).

No credential reaches a log line, whatever the level: :class:`RedactCredentials` replaces what
follows ``Authorization:`` or ``Bearer`` with ``[redacted]`` (at debug level the WebSocket client
prints every handshake header, the agent's link token among them).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

from pythonjsonlogger.json import JsonFormatter

FORMATS = ("json", "text")
CONTEXT_FIELDS = ("cluster", "node", "pod")

_context: contextvars.ContextVar[dict[str, str]] = contextvars.ContextVar("kalena_log_context", default={})


@contextlib.contextmanager
def log_context(**fields: str) -> Iterator[None]:
    """Bind ``cluster`` / ``node`` / ``pod`` to every log line written inside the block (this
    thread or task only)."""
    token = _context.set({**_context.get(), **{k: str(v) for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Copies the bound context (and any process-wide defaults, e.g. the agent's node) onto each
    record, without overriding what a call passed in ``extra``."""

    def __init__(self, defaults: dict[str, str] | None = None) -> None:
        super().__init__()
        self.defaults = dict(defaults or {})

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in {**self.defaults, **_context.get()}.items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


#: ``Authorization: Bearer <token>``, ``Authorization: <token>``, ``Bearer <token>``: group 1 is kept.
_CREDENTIAL = re.compile(r"(?i)(authorization[\"']?\s*[:=]\s*[\"']?(?:bearer\s+|basic\s+|token\s+)?|\bbearer\s+)"
                         r"([^\s\"',;]+)")
REDACTED = "[redacted]"


class RedactCredentials(logging.Filter):
    """Rewrites a record whose message carries a credential (see module docstring) so that the
    credential is ``[redacted]``; every record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            text = record.getMessage()
        except (TypeError, ValueError):   # a malformed call: logging reports it when formatting
            return True
        redacted = _CREDENTIAL.sub(lambda m: m.group(1) + REDACTED, text)
        if redacted != text:
            record.msg, record.args = redacted, None
        return True


def _iso(record: logging.LogRecord) -> str:
    ms = int(record.msecs)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{ms:03d}Z"


class KalenaJsonFormatter(JsonFormatter):
    """One JSON object per line: timestamp, level, logger, message, context and extras."""

    def __init__(self) -> None:
        super().__init__("%(message)s", rename_fields={"levelname": "level", "name": "logger"})

    def add_fields(self, log_record: dict[str, Any], record: logging.LogRecord, message_dict: dict[str, Any]) -> None:
        super().add_fields(log_record, record, message_dict)
        log_record["timestamp"] = _iso(record)
        log_record["level"] = record.levelname
        log_record["logger"] = record.name


class KalenaTextFormatter(logging.Formatter):
    """``2026-12-01T10:00:00.000Z WARNING kalena.agent: message cluster=… node=…``."""

    def format(self, record: logging.LogRecord) -> str:
        line = f"{_iso(record)} {record.levelname} {record.name}: {record.getMessage()}"
        context = " ".join(f"{k}={getattr(record, k)}" for k in CONTEXT_FIELDS if getattr(record, k, None))
        if context:
            line += " " + context
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def logging_config(*, fmt: str, level: str, defaults: dict[str, str] | None = None) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` dictionary for ``fmt`` (one of :data:`FORMATS`).

    Raises:
        ValueError: ``fmt`` is not one of :data:`FORMATS` (the message names the setting).
    """
    if fmt not in FORMATS:
        raise ValueError(f"KALENA_LOG_FORMAT={fmt!r}: expected one of {', '.join(FORMATS)}")
    formatter = "agents.logs.KalenaJsonFormatter" if fmt == "json" else "agents.logs.KalenaTextFormatter"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": "agents.logs.ContextFilter", "defaults": defaults or {}},
                    "redact": {"()": "agents.logs.RedactCredentials"}},
        "formatters": {"kalena": {"()": formatter}},
        "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "kalena",
                                 "filters": ["context", "redact"]}},
        "root": {"handlers": ["console"], "level": level},
    }


def configure(*, fmt: str, level: str, defaults: dict[str, str] | None = None) -> None:
    """Apply :func:`logging_config` to this process (the agent; Django applies ``LOGGING``)."""
    import logging.config

    logging.config.dictConfig(logging_config(fmt=fmt, level=level, defaults=defaults))
