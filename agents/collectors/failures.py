"""Collector failures: one read of one workload (or of a whole source) that did not give a
sample, classified by cause, counted and logged once — never the end of the agent.

The rule: whatever a collector reads — a Docker stats answer, a cgroup file, a cAdvisor or kubelet
document, a container's inspect data — can fail for one workload because that workload is ending
while it is read. Such a failure costs that workload this round's sample (it ages toward T_stale)
and nothing else: the agent keeps sampling the other workloads and keeps enforcing. Every read
goes through :func:`attempt`, the one place a collector's failure is caught: the exception types
the readers are known to raise (:data:`EXPECTED_ERRORS`) become a :class:`CollectorFailure` with
a cause from :func:`classify`; anything else is a defect in a collector and becomes cause
``unexpected`` with its traceback kept, so it is logged loudly without taking the node's
protection down with it. :class:`FailureLog` counts failures by collector and cause (exported as
``kalena_agent_collector_errors_total``) and logs each workload + cause once, repeats at most
once per ``repeat_log_s`` with how many were suppressed.

Causes:

==================  ===============================================================================
``empty_body``      the answer had no body (Docker stats of a container stopped mid-request)
``truncated``       the body ended early (JSON cut short, an incomplete chunked or sized read)
``malformed``       a complete answer that is not the expected document (wrong field, not JSON)
``gone``            the container, pod or process ended between listing and reading (HTTP 404/409,
                    ``/proc/<pid>`` gone, a stats document of a container no longer running)
``cgroup_removed``  the workload's cgroup went away mid-read (ENOENT, ENOTDIR, ENODEV)
``permission``      EACCES/EPERM, HTTP 401/403
``unreachable``     the engine, kubelet or cAdvisor did not answer (refused, reset, timed out)
``http_status``     any other non-2xx answer
``read_error``      any other operating-system error (EIO, …)
``unexpected``      anything else: a defect, logged with its traceback
==================  ===============================================================================
"""

from __future__ import annotations

import errno
import http.client
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import docker
import httpx
import requests
import urllib3

from agents.errors import TelemetryError

log = logging.getLogger("kalena.agent.collectors")

EMPTY_BODY = "empty_body"
TRUNCATED = "truncated"
MALFORMED = "malformed"
GONE = "gone"
CGROUP_REMOVED = "cgroup_removed"
PERMISSION = "permission"
UNREACHABLE = "unreachable"
HTTP_STATUS = "http_status"
READ_ERROR = "read_error"
UNEXPECTED = "unexpected"
CAUSES = (EMPTY_BODY, TRUNCATED, MALFORMED, GONE, CGROUP_REMOVED, PERMISSION, UNREACHABLE, HTTP_STATUS,
          READ_ERROR, UNEXPECTED)
#: causes that mean the workload ended: the collector also reports it in ``Collection.gone``.
ENDED = frozenset({GONE, CGROUP_REMOVED})

#: What a reader is known to raise. ``requests.RequestException`` (docker-py's transport, and its
#: ``JSONDecodeError`` for an empty or cut body) is an ``OSError``; ``json.JSONDecodeError`` is
#: named for readers that decode with :mod:`json` itself (httpx).
EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    TelemetryError, OSError, json.JSONDecodeError, docker.errors.DockerException, httpx.HTTPError,
    http.client.HTTPException, urllib3.exceptions.HTTPError)

_REMOVED_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ENODEV})
_PERMISSION_ERRNOS = frozenset({errno.EACCES, errno.EPERM})

T = TypeVar("T")


@dataclass(frozen=True)
class CollectorFailure:
    """One read that gave no sample.

    ``collector`` is the source's metric name (``docker_stats``, ``cgroup``, ``cadvisor``,
    ``kubelet_summary``, ``discovery_docker``…); ``workload`` the workload id (``""`` for the whole
    source); ``ref`` what the operator searches for (a short container id, a cgroup, a URL);
    ``detail`` the reader's own message; ``exc`` the exception, kept for an ``unexpected`` one's
    traceback."""

    collector: str
    workload: str
    ref: str
    cause: str
    detail: str
    exc: BaseException | None = None

    def __str__(self) -> str:
        where = self.ref or self.workload or "(whole source)"
        return f"{self.collector}: {where}: {self.cause}: {self.detail}"


def _status_cause(status: int | None) -> str:
    if status in (401, 403):
        return PERMISSION
    if status in (404, 409, 410):
        return GONE          # Docker answers 409 for a container being removed
    return HTTP_STATUS


def _json_cause(exc: json.JSONDecodeError) -> str:
    """``empty_body`` for no text; ``truncated`` when the decoder stopped because the text ended —
    at the end itself, inside a string that never closes, or in a literal or number the end cut
    (``tr``, ``1.``); ``malformed`` for a syntax error before the end."""
    body = (exc.doc or "").rstrip()
    if not body:
        return EMPTY_BODY
    rest = body[exc.pos:]
    if (exc.pos >= len(body) or exc.msg.startswith("Unterminated string")
            or any(literal.startswith(rest) for literal in ("true", "false", "null"))
            or not rest.strip(".eE+-")):
        return TRUNCATED
    return MALFORMED


def _os_cause(exc: OSError, *, on_missing: str) -> str:
    if isinstance(exc, ConnectionError | TimeoutError):
        return UNREACHABLE
    if isinstance(exc, ProcessLookupError) or exc.errno == errno.ESRCH:
        return GONE
    if exc.errno in _PERMISSION_ERRNOS:
        return PERMISSION
    if exc.errno in _REMOVED_ERRNOS:
        return on_missing
    return READ_ERROR


def classify(exc: BaseException, *, on_missing: str = CGROUP_REMOVED) -> str:
    """The cause (module docstring) of one reader exception; pure.

    Args:
        exc: what the reader raised (a :class:`~agents.errors.TelemetryError` raised ``from`` a
            decode error is classified by that error).
        on_missing: the cause of a missing file: ``cgroup_removed`` for cgroup files, ``gone`` for
            ``/proc/<pid>`` files.

    Example: ``requests.JSONDecodeError('Expecting value', '', 0)`` (Docker's empty stats body) →
    ``empty_body``; ``json.loads('{"id": "ab')`` failing at the end of the text → ``truncated``;
    ``OSError(ENODEV)`` reading a cgroup file whose directory was removed → ``cgroup_removed``.
    """
    if isinstance(exc, TelemetryError):
        cause = exc.__cause__
        return classify(cause, on_missing=on_missing) if isinstance(cause, json.JSONDecodeError) else MALFORMED
    if isinstance(exc, json.JSONDecodeError):          # requests.JSONDecodeError included
        return _json_cause(exc)
    if isinstance(exc, docker.errors.NotFound):
        return GONE
    if isinstance(exc, docker.errors.APIError):
        return _status_cause(exc.status_code)
    if isinstance(exc, httpx.HTTPStatusError):
        return _status_cause(exc.response.status_code)
    if isinstance(exc, requests.HTTPError):
        return _status_cause(exc.response.status_code if exc.response is not None else None)
    if isinstance(exc, requests.exceptions.ChunkedEncodingError | requests.exceptions.ContentDecodingError
                  | httpx.RemoteProtocolError | httpx.DecodingError | http.client.IncompleteRead
                  | urllib3.exceptions.ProtocolError):
        return TRUNCATED
    if isinstance(exc, requests.RequestException | httpx.TransportError | docker.errors.DockerException
                  | urllib3.exceptions.HTTPError):
        return UNREACHABLE
    if isinstance(exc, OSError):
        return _os_cause(exc, on_missing=on_missing)
    return UNEXPECTED if not isinstance(exc, EXPECTED_ERRORS) else MALFORMED


def attempt(collector: str, workload: str, ref: str, read: Callable[[], T], *,
            on_missing: str = CGROUP_REMOVED) -> T | CollectorFailure:
    """``read()``, or the :class:`CollectorFailure` it raised (module docstring: the one place a
    collector's failure is caught). ``on_missing`` as in :func:`classify`."""
    try:
        return read()
    except EXPECTED_ERRORS as exc:
        return CollectorFailure(collector, workload, ref, classify(exc, on_missing=on_missing), str(exc) or repr(exc))
    except Exception as exc:  # noqa: BLE001 - a defect for one workload: counted and logged with its traceback
        return CollectorFailure(collector, workload, ref, UNEXPECTED, repr(exc), exc)


class FailureLog:
    """Counts failures by ``(collector, cause)`` and logs each ``(collector, workload, cause)``
    once; a repeat is logged again at most once per ``repeat_log_s`` with the number suppressed
    since. ``unexpected`` is logged at ERROR with its traceback; ``gone`` / ``cgroup_removed``
    (a workload ending, routine) at INFO; the rest at WARNING.

    Args:
        on_count: called with ``(collector, cause)`` for every failure (the agent's metrics).
        repeat_log_s: shortest interval between two lines for one workload and cause.
        max_keys: workloads remembered (oldest forgotten first): a bounded memory whatever the churn.
    """

    def __init__(self, *, on_count: Callable[[str, str], None] | None = None, repeat_log_s: float = 600.0,
                 max_keys: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.on_count = on_count
        self.repeat_log_s = repeat_log_s
        self.max_keys = max_keys
        self.clock = clock
        self.counts: dict[tuple[str, str], int] = {}
        self._logged: OrderedDict[tuple[str, str, str], list[Any]] = OrderedDict()   # key → [last log, suppressed]

    def record(self, failure: CollectorFailure) -> bool:
        """Count ``failure`` and log it unless its workload and cause were logged recently.
        Returns whether a line was written."""
        count_key = (failure.collector, failure.cause)
        self.counts[count_key] = self.counts.get(count_key, 0) + 1
        if self.on_count is not None:
            self.on_count(failure.collector, failure.cause)
        key = (failure.collector, failure.workload, failure.cause)
        now = self.clock()
        seen = self._logged.get(key)
        if seen is not None and now - seen[0] < self.repeat_log_s:
            seen[1] += 1
            return False
        suppressed = seen[1] if seen is not None else 0
        self._logged[key] = [now, 0]
        self._logged.move_to_end(key)
        while len(self._logged) > self.max_keys:
            self._logged.popitem(last=False)
        again = f" (again; {suppressed} more since the last line)" if seen is not None else ""
        message = "collector %s: %s: no sample (%s): %s%s"
        args = (failure.collector, failure.ref or failure.workload or "(whole source)", failure.cause,
                failure.detail, again)
        if failure.cause == UNEXPECTED:
            exc = failure.exc
            log.error(message, *args, exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None)
        elif failure.cause in ENDED:
            log.info(message, *args)
        else:
            log.warning(message, *args)
        return True

    def forget(self, workload: str) -> None:
        """A workload left the node: its next failure (a new container reusing the name) logs again."""
        for key in [k for k in self._logged if k[1] == workload]:
            del self._logged[key]

    def total(self, collector: str | None = None, cause: str | None = None) -> int:
        """Failures counted, optionally for one collector and/or cause."""
        return sum(n for (c, k), n in self.counts.items()
                   if (collector is None or c == collector) and (cause is None or k == cause))
