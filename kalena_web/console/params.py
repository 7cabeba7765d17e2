"""Query-parameter parsing for console pages. Every rejection says what was wrong and what is
accepted; the page answers 400 with that message and changes nothing."""

from __future__ import annotations

import re

from django.http import QueryDict


class BadParameter(ValueError):
    """A query parameter a page cannot use."""


def integer(query: QueryDict, name: str, *, default: int, low: int, high: int | None = None) -> int:
    """``?name=`` as an integer in ``[low, high]``, or ``default`` when absent.

    Raises:
        BadParameter: not an integer, or out of range.
    """
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadParameter(f"{name}={raw!r} is not an integer") from None
    if value < low or (high is not None and value > high):
        bound = f"{low}–{high}" if high is not None else f"≥ {low}"
        raise BadParameter(f"{name}={value} is out of range (accepted: {bound})")
    return value


_CLOCK = re.compile(r"^(?:(\d+)d\s*)?(\d{1,3}):([0-5]\d)$")


def step_of(query: QueryDict, *, steps: int, step_s: float, start_s: float, default: int) -> int:
    """The step a page shows: ``?step=`` (0-based) or ``?at=HH:MM`` (replay time, ``1d 02:30``
    past a day, rounded to the nearest step), else ``default``.

    Raises:
        BadParameter: both given, malformed, or outside the run.
    """
    if query.get("step") not in (None, "") and query.get("at") not in (None, ""):
        raise BadParameter("give either step or at, not both")
    raw = query.get("at")
    if raw in (None, ""):
        return integer(query, "step", default=default, low=0, high=steps - 1)
    match = _CLOCK.match(raw.strip())
    if not match:
        raise BadParameter(f"at={raw!r} is not a replay time (accepted: HH:MM, e.g. 13:45, or 1d 02:30)")
    days, hours, minutes = int(match.group(1) or 0), int(match.group(2)), int(match.group(3))
    seconds = days * 86_400 + hours * 3600 + minutes * 60
    step = round((seconds - start_s) / step_s)
    if not 0 <= step < steps:
        end = start_s + (steps - 1) * step_s
        raise BadParameter(f"at={raw!r} is outside the run (it covers 00:00 to {int(end // 3600):02d}:{int(end % 3600 // 60):02d})")
    return step


def choice(query: QueryDict, name: str, *, accepted: list[str] | tuple[str, ...], default: str) -> str:
    """``?name=`` from ``accepted``, else ``default``.

    Raises:
        BadParameter: naming the accepted values.
    """
    raw = query.get(name)
    if raw in (None, ""):
        return default
    if raw not in accepted:
        raise BadParameter(f"{name}={raw!r} is not accepted (accepted: {', '.join(accepted)})")
    return raw
