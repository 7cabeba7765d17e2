"""Pod and container status from the engine's containers, as the kubelet writes them (pure:
``docker inspect`` JSON in, ``core/v1`` status JSON out).

Container state (``ContainerStatus.state``): the engine's ``State.Running`` → ``running``
(``startedAt``); an exited container → ``terminated`` with ``exitCode``, ``reason`` ``OOMKilled``
when the engine saw the kernel's OOM kill (``State.OOMKilled``), else ``Completed`` (0) or
``Error``; a container waiting for its restart back-off → ``waiting`` ``CrashLoopBackOff`` with
the previous run as ``lastState``. ``restartCount`` is the attempt number.

Pod phase (kubelet ``getPhase``): Pending before any container ran; Running while a container
runs or will be restarted (``restartPolicy`` Always, or OnFailure after a failure); once every
container has terminated for good: Succeeded when all exited 0, else Failed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def rfc3339(docker_time: str | None) -> str | None:
    """The engine's nanosecond timestamp → Kubernetes' second-precision RFC 3339
    (``2026-12-02T12:40:01.123456789Z`` → ``2026-12-02T12:40:01Z``); the zero time → ``None``."""
    if not docker_time or docker_time.startswith("0001-"):
        return None
    return docker_time.split(".")[0].rstrip("Z") + "Z"


def terminated_state(inspect: Mapping[str, Any]) -> dict[str, Any]:
    """``{"terminated": {...}}`` of an exited container."""
    state = inspect.get("State") or {}
    code = int(state.get("ExitCode") or 0)
    reason = "OOMKilled" if state.get("OOMKilled") else ("Completed" if code == 0 else "Error")
    return {"terminated": {"exitCode": code, "reason": reason, "startedAt": rfc3339(state.get("StartedAt")),
                           "finishedAt": rfc3339(state.get("FinishedAt")), "containerID": f"docker://{inspect['Id']}"}}


def container_status(name: str, image: str, inspect: Mapping[str, Any] | None, *, restarts: int,
                     last: Mapping[str, Any] | None = None, waiting: tuple[str, str] | None = None) -> dict[str, Any]:
    """One ``ContainerStatus``: from ``inspect`` (``None``: not created yet), ``restarts``, the
    previous run's terminated state ``last`` and a ``waiting`` ``(reason, message)`` override."""
    out: dict[str, Any] = {"name": name, "image": image, "imageID": "", "restartCount": restarts,
                           "ready": False, "started": False, "lastState": dict(last or {})}
    if inspect is None and waiting is None and last:   # it never started, for good (e.g. StartError)
        out["state"], out["lastState"] = dict(last), {}
        return out
    if waiting is not None or inspect is None:
        reason, message = waiting or ("ContainerCreating", "")
        out["state"] = {"waiting": {"reason": reason, **({"message": message} if message else {})}}
        return out
    state = inspect.get("State") or {}
    out["containerID"] = f"docker://{inspect['Id']}"
    out["imageID"] = f"docker://{inspect.get('Image', '')}"
    if state.get("Running"):
        out["state"] = {"running": {"startedAt": rfc3339(state.get("StartedAt"))}}
        out["ready"] = out["started"] = True
    elif state.get("Status") == "created":
        out["state"] = {"waiting": {"reason": "ContainerCreating"}}
    else:
        out["state"] = terminated_state(inspect)
    return out


def pod_phase(statuses: list[Mapping[str, Any]], restart_policy: str) -> str:
    """The pod's phase from its container statuses (module doc)."""
    if not statuses:
        return "Pending"
    running = sum(1 for s in statuses if "running" in s["state"])
    waiting = [s for s in statuses if "waiting" in s["state"]]
    terminated = [s["state"]["terminated"] for s in statuses if "terminated" in s["state"]]
    if running:
        return "Running"
    if waiting:
        started_before = any(s.get("lastState") for s in waiting) or terminated
        return "Running" if started_before else "Pending"
    if restart_policy == "Always":
        return "Running"
    if all(t["exitCode"] == 0 for t in terminated):
        return "Succeeded"
    return "Running" if restart_policy == "OnFailure" else "Failed"


def conditions(phase: str, statuses: list[Mapping[str, Any]], previous: list[Mapping[str, Any]], *,
               now: str) -> list[dict]:
    """``Initialized``, ``ContainersReady``, ``Ready`` (and ``PodScheduled`` True), keeping each
    condition's ``lastTransitionTime`` while its status holds (``now``: RFC 3339, for a change)."""
    ready = bool(statuses) and all(s.get("ready") for s in statuses) and phase == "Running"
    wanted = {"PodScheduled": True, "Initialized": True, "ContainersReady": ready, "Ready": ready}
    before = {c.get("type"): c for c in previous}
    out = []
    for kind, value in wanted.items():
        text = "True" if value else "False"
        old = before.get(kind)
        item: dict[str, Any] = {"type": kind, "status": text, "lastProbeTime": None,
                                "lastTransitionTime": old.get("lastTransitionTime") if old and old.get("status") == text
                                else now}
        if not value and kind in ("Ready", "ContainersReady"):
            item["reason"] = "PodCompleted" if phase in ("Succeeded", "Failed") else "ContainersNotReady"
        out.append(item)
    return out
