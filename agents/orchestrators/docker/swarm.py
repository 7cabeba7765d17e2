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

    ``node`` is the task's node name (:func:`node_name` of ``NodeID``), ``""`` when unassigned.
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


#: The label naming a Swarm node (Swarm node label, else the engine's ``dockerd --label``).
NODE_LABEL = "kalena.naughtian.io/node"


def node_name(node: Mapping[str, Any]) -> str:
    """A Swarm node's name in Kalena (``GET /nodes`` JSON): its label ``kalena.naughtian.io/node``
    (``Spec.Labels``, else the engine's labels ``Description.Engine.Labels``), else its node ID.
    Never the hostname: nodes on one machine (or cloned images) share it.

    Example: ``{"ID": "x1", "Spec": {"Labels": {"kalena.naughtian.io/node": "lab-1"}}}`` → ``"lab-1"``.
    """
    labels = (node.get("Spec") or {}).get("Labels") or {}
    engine = ((node.get("Description") or {}).get("Engine") or {}).get("Labels") or {}
    return str(labels.get(NODE_LABEL) or engine.get(NODE_LABEL) or node.get("ID", ""))


def node_state(node: Mapping[str, Any]) -> tuple[bool, bool]:
    """``(ready, schedulable)`` of a Swarm node: ready when ``Status.State`` is ``ready``;
    schedulable when also ``Spec.Availability`` is ``active`` (``drain`` and ``pause`` take no
    new tasks: Kalena's cordon)."""
    ready = (node.get("Status") or {}).get("State") == "ready"
    return ready, ready and (node.get("Spec") or {}).get("Availability", "active") == "active"


def node_figures(node: Mapping[str, Any]) -> tuple[float, float, dict[str, str]]:
    """``(cpu mcpu, memory bytes, labels)`` of a Swarm node as the managers report it:
    ``Description.Resources`` (``NanoCPUs`` / 10⁶ mcpu, ``MemoryBytes``) and the engine's and
    node's labels (the node's win) — the engine's allocatable labels, when present, are applied
    by the caller as for a standalone engine."""
    description = node.get("Description") or {}
    resources = description.get("Resources") or {}
    labels = {**((description.get("Engine") or {}).get("Labels") or {}), **((node.get("Spec") or {}).get("Labels") or {})}
    return float(resources.get("NanoCPUs") or 0) / 1e6, float(resources.get("MemoryBytes") or 0), labels


#: Task states whose container has ended (or never will start).
ENDED = frozenset({"complete", "failed", "shutdown", "orphaned", "remove"})


def task_inspect(task: Mapping[str, Any]) -> dict[str, Any] | None:
    """A task as the container inspect :class:`~agents.orchestrators.docker.lifecycle.Lifecycle`
    reads (``Id``, ``Name``, ``Config.Labels``, ``State``, ``HostConfig.Memory``), for a node whose
    engine the watcher cannot reach: the managers' task list stands for the engine's list.

    ``Id`` is the task's container (``Status.ContainerStatus.ContainerID``, the same id the
    engine's own list gives), else ``task:<task id>`` while none is made. Task states (see the
    module table): waiting → ``created``, ``running`` → ``running``, ended → ``exited`` with the
    container's exit code (``complete`` without one: 0; others: 1); ``shutdown``, ``orphaned`` and
    ``remove`` carry ``State.Killed`` (the task was stopped, not failed: ``evicted``); an OOM
    error sets ``OOMKilled``. ``rejected`` and tasks without Kalena's labels → None.
    """
    status = task.get("Status") or {}
    state = str(status.get("State", ""))
    labels = ((task.get("Spec") or {}).get("ContainerSpec") or {}).get("Labels") or {}
    if ID_LABEL not in labels or state == "rejected" or not state:
        return None
    container = status.get("ContainerStatus") or {}
    cid = str(container.get("ContainerID") or f"task:{task.get('ID', '')}")
    code = container.get("ExitCode")
    err = str(status.get("Err") or "")
    docker_state: dict[str, Any] = {"Status": "created" if state in WAITING else "running" if state == "running"
                                    else "exited"}
    if state in ENDED:
        docker_state["ExitCode"] = code if isinstance(code, int) and not isinstance(code, bool) else (
            0 if state == "complete" else 1)
        docker_state["FinishedAt"] = str(status.get("Timestamp") or "")
        docker_state["OOMKilled"] = "oom" in err.lower()
        if state in ("shutdown", "orphaned", "remove"):
            docker_state["Killed"] = {"shutdown": "Shutdown", "orphaned": "NodeLost", "remove": "Removed"}[state]
    limits = (((task.get("Spec") or {}).get("Resources") or {}).get("Limits") or {})
    return {"Id": cid, "Name": f"/{labels.get(ID_LABEL, '')}", "Config": {"Labels": dict(labels)},
            "State": docker_state, "HostConfig": {"Memory": int(limits.get("MemoryBytes") or 0)},
            "ServiceID": str(task.get("ServiceID", "")), "NodeID": str(task.get("NodeID", ""))}
