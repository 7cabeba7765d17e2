"""What the watch tells the control plane about a production pod (docs/design.md §14, §15): its
controller, labels, annotations and start, read from pod JSON shaped as the controllers make it;
owner references it cannot read make an explained extra, never a skipped pod."""

from __future__ import annotations

import pytest

from agents.orchestrators.events import PodRunning, ProductionSeen
from agents.orchestrators.kubernetes.objects import MalformedObject, pod_events, timestamp_s
from agents.orchestrators.kubernetes.testpods import bare_pod, deployment_pod, job_pod, statefulset_pod

T0 = 1_764_000_000.0


@pytest.mark.parametrize("pod, owner", [
    pytest.param(deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n1", started_s=T0),
                 "ReplicaSet/web-7d9c5b6f4", id="deployment"),
    pytest.param(statefulset_pod("shop", "db", 1, "n1", started_s=T0), "StatefulSet/db", id="statefulset"),
    pytest.param(job_pod("shop", "report", "28h4k", "n1", started_s=T0), "Job/report", id="job"),
    pytest.param(bare_pod("shop", "debug", "n1", started_s=T0), "", id="bare"),
])
def test_a_production_pod_carries_its_controller_annotations_and_start(pod, owner) -> None:
    pod["metadata"].setdefault("annotations", {})["kalena.naughtian.io/reclaim"] = "disabled"
    (event,) = pod_events("MODIFIED", pod)
    assert isinstance(event, ProductionSeen)
    assert (event.owner, event.owner_error, event.start_s) == (owner, "", T0)
    assert event.annotations == {"kalena.naughtian.io/reclaim": "disabled"}
    assert event.labels == pod["metadata"]["labels"]
    assert event.at_s == timestamp_s(pod["metadata"]["creationTimestamp"])


def test_only_the_controlling_owner_reference_counts() -> None:
    pod = deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n1")
    pod["metadata"]["ownerReferences"].insert(0, {"apiVersion": "v1", "kind": "ConfigMap", "name": "gc-anchor",
                                                  "uid": "u-1"})
    (event,) = pod_events("ADDED", pod)
    assert event.owner == "ReplicaSet/web-7d9c5b6f4"


@pytest.mark.parametrize("refs, problem", [
    pytest.param("web-7d9c5b6f4", "metadata.ownerReferences: expected a list, got str 'web-7d9c5b6f4'",
                 id="not-a-list"),
    pytest.param([{"kind": "ReplicaSet", "controller": True}],
                 "metadata.ownerReferences[0]: a controller reference needs a kind and a name", id="no-name"),
    pytest.param([{"kind": "ReplicaSet", "name": "a", "controller": True},
                  {"kind": "ReplicaSet", "name": "b", "controller": True}],
                 "metadata.ownerReferences: 2 controller references (Kubernetes allows one)", id="two-controllers"),
    pytest.param([{"kind": "ReplicaSet", "name": "a", "controller": "yes"}],
                 "metadata.ownerReferences[0].controller: expected true or false, got str 'yes'", id="not-a-bool"),
])
def test_unreadable_owner_references_make_an_explained_production_pod(refs, problem) -> None:
    pod = deployment_pod("shop", "web", "7d9c5b6f4", "x2k9q", "n1", started_s=T0)
    pod["metadata"]["ownerReferences"] = refs
    (event,) = pod_events("ADDED", pod)
    assert isinstance(event, ProductionSeen)
    assert (event.owner, event.owner_error, event.start_s) == ("", problem, T0)


def test_a_batch_pod_with_unreadable_owner_references_is_still_refused() -> None:
    pod = job_pod("batch", "train", "a1b2c", "n1")
    pod["metadata"]["labels"]["kalena.naughtian.io/tier"] = "batch"
    assert isinstance(pod_events("ADDED", pod)[0], PodRunning)
    pod["metadata"]["ownerReferences"] = [{"kind": 7, "name": "train", "controller": True}]
    with pytest.raises(MalformedObject, match=r"ownerReferences\[0\]\.kind"):
        pod_events("ADDED", pod)
