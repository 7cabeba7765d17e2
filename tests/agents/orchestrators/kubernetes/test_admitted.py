"""When the kubelet has admitted a bound batch pod (docs/design.md §14's published floor counts only
those), read from pod JSON as the API server holds it at each step."""

from __future__ import annotations

import pytest

from agents.orchestrators.events import PodRunning
from agents.orchestrators.kubernetes.objects import pod_events
from agents.orchestrators.kubernetes.testserver import pod

CREATED = "2026-12-02T06:00:00Z"
STARTED = "2026-12-02T06:00:03Z"


def bound(phase: str = "Pending", **status) -> dict:
    obj = pod("batch", "train-0", "n1", tier="batch", owner_kind="Job", owner_name="train", phase=phase)
    obj["metadata"].update(uid="0b6c7c1e-2f7e-4d55-9d2a-5f0d8c1a7e11", creationTimestamp=CREATED)
    # the scheduler's part, set by the Binding: PodScheduled only
    obj["status"] = {"phase": phase, "conditions": [{"type": "PodScheduled", "status": "True"}], **status}
    return obj


ACKNOWLEDGED = dict(  # what the kubelet writes once it accepted the pod, before the image is pulled
    startTime=STARTED, qosClass="BestEffort",
    conditions=[{"type": "PodReadyToStartContainers", "status": "False"}, {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "False"}, {"type": "ContainersReady", "status": "False"},
                {"type": "PodScheduled", "status": "True"}],
    containerStatuses=[{"name": "main", "ready": False, "restartCount": 0,
                        "state": {"waiting": {"reason": "ContainerCreating"}}}])


@pytest.mark.parametrize("obj, admitted", [
    pytest.param(bound(), False, id="bound-only: the kubelet has not acknowledged it"),
    pytest.param(bound(**ACKNOWLEDGED), True, id="pending-acknowledged: startTime set, image being pulled"),
    pytest.param(bound("Running", startTime=STARTED), True, id="running"),
    pytest.param(bound("Unknown", startTime=STARTED), True, id="unknown-after-start: the node stopped reporting"),
])
def test_a_bound_pod_is_admitted_once_the_kubelet_acknowledged_it(obj, admitted) -> None:
    [event] = pod_events("MODIFIED", obj)
    assert isinstance(event, PodRunning) and (event.node, event.admitted) == ("n1", admitted)
