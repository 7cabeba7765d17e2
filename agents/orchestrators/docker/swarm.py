"""Swarm task states → Kalena's lifecycle (pure: task JSON in, watch events out).

A Swarm batch pod is a one-replica service with restart condition none, so it has one task per
attempt. Task ``Status.State`` (Docker Engine API, ``TaskState``) maps onto Kalena's lifecycle:

======================================================  ============================================
task state                                              Kalena
======================================================  ============================================
``new`` ``allocated`` ``pending`` ``assigned``          bound, not running (no event)
``accepted`` ``ready`` ``preparing`` ``starting``
``running``                                             ``PodRunning``
``complete``                                            ``PodFinished(succeeded, "Completed", 0)``
``failed`` (``ContainerStatus.ExitCode`` 137 after an   ``PodFinished(oom)`` when the task's error
OOM, else non-zero)                                     says so, else ``failed``
``shutdown`` (desired ``shutdown``: stopped by Kalena   ``PodFinished(evicted, "Shutdown")``
or the agent)
``rejected``                                            ``PodRefused(reason=Status.Err)``
``orphaned`` ``remove``                                 ``PodFinished(evicted, "NodeLost")``
======================================================  ============================================

The container events of a task's container (which carries Kalena's labels through
``container_labels``) drive the same lifecycle live on each engine
(:mod:`agents.orchestrators.docker.lifecycle`); this table is what the re-list of services
and tasks says, and the only source for states without a container (``rejected``, pending).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agents.orchestrators.base import ID_LABEL
from agents.orchestrators.events import PodFinished, PodRefused, PodRunning, WatchEvent

WAITING = frozenset({"new", "allocated", "pending", "assigned", "accepted", "ready", "preparing", "starting"})


def task_event(task: Mapping[str, Any], *, ref: str, node: str, at_s: float) -> WatchEvent | None:
    """The watch event one task's state says (see module table); None while it waits.

    ``node`` is the task's node name (the hostname of ``NodeID``), ``""`` when unassigned.
    """
    status = task.get("Status") or {}
    state = str(status.get("State", ""))
    container = status.get("ContainerStatus") or {}
    code = container.get("ExitCode")
    code = code if isinstance(code, int) and not isinstance(code, bool) else None
    err = str(status.get("Err") or "")
    if state in WAITING:
        return None
    if state == "running":
        return PodRunning(ref=ref, node=node, at_s=at_s)
    if state == "complete":
        return PodFinished(ref=ref, node=node, outcome="succeeded", reason="Completed", exit_code=code or 0, at_s=at_s)
    if state == "failed":
        if "oom" in err.lower():
            return PodFinished(ref=ref, node=node, outcome="oom", reason=f"OOMKilled: {err}", exit_code=code, at_s=at_s)
        return PodFinished(ref=ref, node=node, outcome="failed", reason=err or "Error", exit_code=code, at_s=at_s)
    if state == "shutdown":
        return PodFinished(ref=ref, node=node, outcome="evicted", reason="Shutdown", exit_code=code, at_s=at_s)
    if state == "rejected":
        return PodRefused(ref=ref, node=node, reason=err or "rejected", at_s=at_s)
    if state in ("orphaned", "remove"):
        return PodFinished(ref=ref, node=node, outcome="evicted", reason="NodeLost", exit_code=code, at_s=at_s)
    return None


def newest_task(tasks: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The service's latest task (highest ``Version.Index``): the one that says its state."""
    tasks = list(tasks)
    return max(tasks, key=lambda t: int((t.get("Version") or {}).get("Index", 0))) if tasks else None


def service_events(services: Iterable[Mapping[str, Any]], *, hostnames: Mapping[str, str],
                   at_s: float) -> tuple[list[WatchEvent], list[str]]:
    """Events of Kalena batch services (``Spec`` plus ``Tasks``) from their newest tasks, and a
    message per service whose labels are not Kalena's (skipped)."""
    events: list[WatchEvent] = []
    errors: list[str] = []
    for service in services:
        spec = service.get("Spec") or {}
        ref = (spec.get("Labels") or {}).get(ID_LABEL)
        if not isinstance(ref, str) or "/" not in ref:
            errors.append(f"swarm service {spec.get('Name', '?')!r}: label {ID_LABEL}={ref!r} is not namespace/pod; "
                          "skipped")
            continue
        task = newest_task(service.get("Tasks") or [])
        if task is None:
            continue
        event = task_event(task, ref=ref, node=hostnames.get(str(task.get("NodeID", "")), ""), at_s=at_s)
        if event is not None:
            events.append(event)
    return events, errors
