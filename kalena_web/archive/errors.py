"""Errors of the archive: every message says what was wrong and what would be accepted."""

from __future__ import annotations

from kalena_engine.errors import KalenaError


class ArchiveError(KalenaError):
    """Base of the archive's errors."""


class RunNameInvalid(ArchiveError):
    """A run name that cannot be used in URLs and on the command line."""


class RunExists(ArchiveError):
    """A run of that name is already persisted (use ``--replace`` to overwrite it)."""


class NotFound(ArchiveError):
    """Something named in a request does not exist (pages answer 404 with this message)."""


class RunNotFound(NotFound):
    """No persisted run has that name."""


class NodeNotFound(NotFound):
    """The run's cluster has no node of that name."""


class WorkloadNotFound(NotFound):
    """The run has no workload (batch task or production pod) of that name."""


class RecordingInconsistent(ArchiveError):
    """The event stream and the engine's state disagree while recording (a bug; nothing is
    written, the persist transaction rolls back)."""
