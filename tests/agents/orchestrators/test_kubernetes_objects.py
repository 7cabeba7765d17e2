"""Kubernetes API JSON (kubectl -o json shapes) → Kalena's watch events (objects.py, pure)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from agents.orchestrators.events import NodeSeen, PodFinished, PodGone, PodPending, PodRefused, PodRunning, ProductionSeen
from agents.orchestrators.kubernetes.objects import MalformedObject, node_event, normalize_image, pod_events

DATA = Path(__file__).parent / "data"
GIB, MIB = 2**30, 2**20


def load(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def test_a_job_pod_waiting_for_kalena_is_pending_with_effective_requests() -> None:
    (event,) = pod_events("ADDED", load("pod-job-pending.json"))
    assert isinstance(event, PodPending)
    # cpu: max(1500m + 100m, init 2000m) = 2000 mcpu; memory: max(6 Gi + 64 Mi, init 1 Gi)
    assert event.requests[0] == 2000 and event.requests[1] == 6 * GIB + 64 * MIB
    assert event.requests[3] == 10 * GIB                       # ephemeral-storage
    assert event.limits[0] == 2000 and event.limits[1] == 8 * GIB  # max(2 cores, 2 cores init)
    assert (event.ref, event.owner, event.priority, event.grace_s) == ("ml/train-x7k2p", "Job/train", 2, 45.0)
    assert event.image == "docker.io/pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime"
    assert event.at_s == 1795939200.0  # 2026-11-29T08:00:00Z
    assert event.constraints["node_selector"] == {"kubernetes.io/arch": "amd64"}
    assert {"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"} in event.constraints["tolerations"]
    assert event.constraints["anti_affinity_terms"][0]["labelSelector"] == {"matchLabels": {"job-name": "train"}}


@pytest.mark.parametrize("name, cls, fields", [
    ("pod-outofcpu.json", PodRefused, {"reason": "OutOfcpu", "node": "worker-3"}),
    ("pod-evicted.json", PodFinished, {"outcome": "evicted", "exit_code": 143, "node": "worker-1"}),
    ("pod-oomkilled.json", PodFinished, {"outcome": "oom", "reason": "OOMKilled", "exit_code": 137}),
])
def test_terminal_batch_pods(name, cls, fields) -> None:
    (event,) = pod_events("MODIFIED", load(name))
    assert isinstance(event, cls)
    assert {k: getattr(event, k) for k in fields} == fields


@pytest.mark.parametrize("reason", ["NodeAffinity", "UnexpectedAdmissionError"])
def test_other_kubelet_admission_refusals_are_refusals_not_failures(reason) -> None:
    pod = load("pod-outofcpu.json")
    pod["status"]["reason"] = reason
    (event,) = pod_events("MODIFIED", pod)
    assert isinstance(event, PodRefused) and event.reason == reason


def test_phases_of_a_bound_batch_pod() -> None:
    pod = load("pod-evicted.json")
    pod["status"] = {"phase": "Running", "startTime": "2026-11-29T08:00:05Z"}
    assert pod_events("MODIFIED", pod) == [PodRunning("ml/train-e2e4f", "worker-1", at_s=1795939205.0)]
    pod["status"] = {"phase": "Succeeded", "containerStatuses": [
        {"name": "t", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}
    (done,) = pod_events("MODIFIED", pod)
    assert (done.outcome, done.exit_code) == ("succeeded", 0)
    assert pod_events("DELETED", pod) == [PodGone("ml/train-e2e4f")]


def test_production_daemonset_and_other_schedulers() -> None:
    prod = load("pod-evicted.json")
    prod["metadata"]["labels"] = {"app": "web"}
    prod["spec"]["schedulerName"] = "default-scheduler"
    prod["status"] = {"phase": "Running"}
    (seen,) = pod_events("ADDED", prod)
    assert isinstance(seen, ProductionSeen) and seen.node == "worker-1" and seen.requests[0] == 1000
    prod["status"] = {"phase": "Succeeded"}
    assert pod_events("MODIFIED", prod) == [PodGone("ml/train-e2e4f", at_s=seen.at_s)]
    ds = copy.deepcopy(prod)
    ds["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "calico", "controller": True}]
    ds["status"] = {"phase": "Running"}
    (daemon,) = pod_events("ADDED", ds)  # the control plane decides: Phase 0's or an explained extra
    assert isinstance(daemon, ProductionSeen) and (daemon.owner, daemon.node) == ("DaemonSet/calico", "worker-1")
    ds["metadata"]["labels"] = {"kalena.naughtian.io/tier": "batch"}  # a DaemonSet's pod is never batch
    assert isinstance(pod_events("ADDED", ds)[0], ProductionSeen)
    other = load("pod-job-pending.json")
    other["spec"]["schedulerName"] = "default-scheduler"  # extender mode: kube-scheduler's pod, not Kalena's queue
    assert pod_events("ADDED", other) == []


def test_a_node_with_cordon_taints_images_and_extended_resources() -> None:
    seen = node_event(load("node-worker.json"))
    assert isinstance(seen, NodeSeen)
    assert (seen.name, seen.ready, seen.schedulable) == ("worker-1", True, False)
    assert seen.allocatable[0] == 7910 and seen.allocatable[1] == 32498568 * 1024 and seen.allocatable[2] == 1
    assert seen.allocatable[3] == 95551679124 and all(math.isinf(v) for v in seen.allocatable[4:])
    assert {"key": "gpu", "value": "a100", "effect": "NoSchedule"} in seen.taints
    assert seen.image_bytes["docker.io/library/busybox:1.36"] == 2160000
    assert normalize_image("busybox:1.36") in seen.images and normalize_image("pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime") in seen.images
    assert seen.labels["topology.kubernetes.io/zone"] == "eu-west-1a"


@pytest.mark.parametrize("edit, field", [
    (lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu="lots"), "spec.containers[0].resources.requests.cpu"),
    (lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(memory="-1Gi"), "requests.memory"),
    (lambda p: p["metadata"].pop("name"), "metadata.name"),
    (lambda p: p["metadata"].update(creationTimestamp="yesterday"), "metadata.creationTimestamp"),
    (lambda p: p["metadata"]["annotations"].update({"kalena.naughtian.io/min-member": "two"}), "min-member"),
    (lambda p: p["spec"].update(terminationGracePeriodSeconds="soon"), "terminationGracePeriodSeconds"),
    (lambda p: p["spec"].update(containers=[]), "spec.containers"),
])
def test_malformed_pods_name_the_object_and_field(edit, field) -> None:
    pod = load("pod-job-pending.json")
    edit(pod)
    with pytest.raises(MalformedObject) as err:
        pod_events("ADDED", pod)
    assert field in str(err.value)
    if field != "metadata.name":
        assert err.value.name == "ml/train-x7k2p"


@pytest.mark.parametrize("fixture, edit, field", [
    ("pod-job-pending.json", lambda p: p["spec"].update(containers="not-a-list"), "spec.containers: expected a list"),
    ("pod-job-pending.json", lambda p: p["spec"]["containers"].append("sidecar"), "spec.containers[2]: expected a mapping"),
    ("pod-job-pending.json", lambda p: p["spec"]["containers"][0].update(resources="1 cpu"),
     "spec.containers[0].resources: expected a mapping"),
    ("pod-job-pending.json", lambda p: p["spec"]["containers"][0].update(image=7), "spec.containers[0].image: expected a string"),
    ("pod-job-pending.json", lambda p: p["metadata"].update(labels=["a", "b"]), "metadata.labels: expected a mapping"),
    ("pod-job-pending.json", lambda p: p["metadata"]["labels"].update(app=["a", "b"]), "metadata.labels.app: expected a string"),
    ("pod-job-pending.json", lambda p: p["metadata"]["annotations"].update(note=3), "metadata.annotations.note"),
    ("pod-job-pending.json", lambda p: p["spec"].update(nodeSelector={"zone": 1}), "spec.nodeSelector.zone"),
    ("pod-job-pending.json", lambda p: p["metadata"].update(ownerReferences=["Job/x"]), "metadata.ownerReferences[0]"),
    ("pod-job-pending.json", lambda p: p["spec"].update(tolerations=["gpu"]), "spec.tolerations[0]: expected a mapping"),
    ("pod-job-pending.json", lambda p: p["spec"].update(affinity={"podAntiAffinity": []}),
     "spec.affinity.podAntiAffinity: expected a mapping"),
    ("pod-job-pending.json", lambda p: p["spec"].update(topologySpreadConstraints=[{"maxSkew": "1"}]),
     "spec.topologySpreadConstraints[0].maxSkew: expected an integer"),
    ("pod-job-pending.json", lambda p: p.update(status="Pending"), "status: expected a mapping"),
    ("pod-evicted.json", lambda p: p["status"].update(conditions="DisruptionTarget"), "status.conditions: expected a list"),
    ("pod-oomkilled.json", lambda p: p["status"]["containerStatuses"][0]["state"].update(terminated=True),
     "status.containerStatuses[0].state.terminated: expected a mapping"),
    ("pod-oomkilled.json", lambda p: p["status"]["containerStatuses"][0]["state"]["terminated"].update(exitCode="137"),
     "exitCode: expected an integer"),
    ("pod-job-pending.json", lambda p: p["spec"].update(tolerations=[{"key": "gpu", "operator": "Maybe"}]),
     "spec.tolerations[0].operator: 'Maybe' is not one of"),
    ("pod-job-pending.json", lambda p: p["spec"].update(topologySpreadConstraints=[{"maxSkew": 1,
                                                                                   "whenUnsatisfiable": "Maybe"}]),
     "whenUnsatisfiable: 'Maybe' is not one of"),
    ("pod-job-pending.json", lambda p: p["status"].update(phase="Runnning"), "status.phase: 'Runnning'"),
    ("pod-job-pending.json", lambda p: p["metadata"].update(deletionTimestamp="soon"), "metadata.deletionTimestamp"),
    ("pod-job-pending.json", lambda p: p["metadata"]["annotations"].update({"kalena.naughtian.io/min-member": "-3"}),
     "min-member: '-3' is not a positive integer"),
    ("pod-job-pending.json", lambda p: p["spec"]["containers"][0]["resources"]["requests"].update(cpu=True),
     "requests.cpu: True is not a Kubernetes quantity"),
])
def test_a_field_of_the_wrong_type_names_the_pod_and_the_field(fixture, edit, field) -> None:
    pod = load(fixture)
    name = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    edit(pod)
    with pytest.raises(MalformedObject) as err:
        pod_events("MODIFIED", pod)
    assert field in str(err.value) and err.value.name == name


@pytest.mark.parametrize("edit, field", [
    (lambda n: n["status"].update(conditions={"Ready": "True"}), "status.conditions: expected a list"),
    (lambda n: n["status"].update(allocatable=["16"]), "status.allocatable: expected a mapping"),
    (lambda n: n["status"]["images"][0].update(names="busybox"), "status.images[0].names: expected a list"),
    (lambda n: n["status"]["images"][0].update(sizeBytes="big"), "status.images[0].sizeBytes: expected a number"),
    (lambda n: n["spec"].update(taints="NoSchedule"), "spec.taints: expected a list"),
    (lambda n: n.update(spec=[]), "spec: expected a mapping"),
    (lambda n: n["spec"].update(unschedulable="false"), "spec.unschedulable: expected"),
    (lambda n: n["spec"].update(taints=[{"key": "gpu", "effect": "Sometimes"}]), "spec.taints[0].effect"),
])
def test_a_node_field_of_the_wrong_type_names_the_node_and_the_field(edit, field) -> None:
    node = load("node-worker.json")
    edit(node)
    with pytest.raises(MalformedObject) as err:
        node_event(node)
    assert field in str(err.value) and err.value.name == "worker-1"


def test_a_required_node_affinity_reaches_the_constraints() -> None:
    pod = load("pod-job-pending.json")
    terms = [{"matchExpressions": [{"key": "accelerator", "operator": "In", "values": ["a100", "h100"]}]},
             {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-7"]}]}]
    pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": terms}, "preferredDuringSchedulingIgnoredDuringExecution": []}}
    (event,) = pod_events("ADDED", pod)
    assert event.constraints["node_affinity"] == terms
    pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"][0]["values"] = "a100"
    with pytest.raises(MalformedObject) as err:
        pod_events("ADDED", pod)
    assert "nodeSelectorTerms[0].matchExpressions[0].values: expected a list" in str(err.value)


def test_a_deletion_needs_only_the_name() -> None:
    pod = load("pod-job-pending.json")
    pod["spec"]["containers"] = "not-a-list"
    assert pod_events("DELETED", pod) == [PodGone("ml/train-x7k2p")]


def test_image_names_are_normalised_like_kube_scheduler() -> None:
    assert normalize_image("busybox") == "docker.io/library/busybox:latest"
    assert normalize_image("pytorch/pytorch:2.4") == "docker.io/pytorch/pytorch:2.4"
    assert normalize_image("ghcr.io/org/app:1") == "ghcr.io/org/app:1"
    assert normalize_image("localhost:5000/app") == "localhost:5000/app:latest"
