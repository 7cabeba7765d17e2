"""The lab's exception tree: every refusal says what, where and what would be accepted."""

from __future__ import annotations

from kalena_engine.errors import InputError


class LabError(InputError):
    """``kalena lab`` cannot do what was asked; nothing was left half-started."""


class BudgetRefused(LabError):
    """The nodes asked for do not fit the lab's share of the machine.

    Attributes (besides :class:`InputError`'s): ``dim`` (``"cpu"`` or ``"memory"``), ``asked``
    (nodes × per node, mcpu or bytes) and ``budget`` (same unit).
    """

    def __init__(self, problem: str, *, dim: str, asked: float, budget: float, field: str, accepted: str) -> None:
        self.dim, self.asked, self.budget = dim, asked, budget
        super().__init__(problem, source="kalena lab up", field=field, accepted=accepted)


class LabRunning(LabError):
    """A lab is recorded as up in the state directory (a second ``up`` is refused)."""
