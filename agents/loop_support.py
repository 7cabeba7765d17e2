"""Small shared pieces of the mitigation loop."""

from __future__ import annotations

from typing import Any

from agents.pressure.events import PressureEvent

PERIODIC: dict[str, Any] = {"source": "periodic", "resource": None, "scope": None}


def trigger_of(event: PressureEvent | None) -> dict[str, Any]:
    """The ``trigger`` block of an action message: the event that caused it, or periodic."""
    if event is None:
        return dict(PERIODIC)
    return {"source": event.source, "resource": event.resource, "scope": event.scope}
