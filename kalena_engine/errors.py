"""The engine's exception tree.

Every message says what was wrong, where (file, line, field, node or pod) and, where there is
a fixed set of acceptable values, what would have been accepted.
"""

from __future__ import annotations


class KalenaError(Exception):
    """Base of every error the engine raises on purpose."""


class InputError(KalenaError):
    """An input file or value could not be used.

    Attributes:
        source: the file (or other origin) the value came from.
        line: 1-based line in ``source`` where the YAML gives one, else ``None``.
        field: dotted path to the offending field, e.g. ``nodes[3].allocatable.ram``.
        problem: what was wrong.
        accepted: what would have been accepted, or ``""``.
    """

    def __init__(
        self, problem: str, *, source: str = "", line: int | None = None,
        field: str = "", accepted: str = "",
    ) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.problem = problem
        self.accepted = accepted
        super().__init__(self._render())

    def _render(self) -> str:
        """``source:line: field: problem (accepted: …)``; without a source (a REST body, a form,
        a command-line value) the message starts at the field, e.g. ``name: 'batch/a' exists …``."""
        where = self.source
        if self.line is not None:
            where = f"{where or '<input>'}:{self.line}"
        text = f"{where}: " if where else ""
        if self.field:
            text += f"{self.field}: "
        text += self.problem
        if self.accepted:
            text += f" (accepted: {self.accepted})"
        return text


class IRError(InputError):
    """A Kuberina IR document (infrastructure, workloads, blueprint) is malformed."""


class BlueprintRefused(IRError):
    """A blueprint that must not be applied (its metadata says infeasible)."""


class TraceError(InputError):
    """A trace file cannot be read at all (row-level anomalies are counted, not raised)."""


class PolicyError(InputError):
    """A policy document (docs/design.md §10 policy file) is malformed: unknown key, wrong type or a
    value out of range. ``field`` is the dotted key, ``accepted`` the range or the keys."""


class InvariantViolation(KalenaError):
    """A ledger invariant that must always hold did not (a bug, surfaced loudly)."""
