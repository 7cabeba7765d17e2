"""One contract suite for every orchestrator adapter (ports and adapters): the fake,
Kubernetes, standalone Docker and Docker Swarm (the last two on the real private engine and a real
single-node Swarm that scripts/services starts).

The Kubernetes adapter runs against the wire-faithful test API server
(:mod:`agents.orchestrators.kubernetes.testserver`) — no Kubernetes API server can run here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from kubernetes import client as k8s

from agents.orchestrators import (
    BatchSpec, FakeOrchestrator, Orchestrator, OrchestratorError, StaleBinding, WorkloadGone, drain_batch,
)
from agents.orchestrators.docker import DockerOrchestrator, SwarmOrchestrator, container_name
from agents.orchestrators.kubernetes import KubernetesOrchestrator
from agents.orchestrators.kubernetes.testserver import TestAPIServer, node, pod

IMAGE = "kalena/busybox:test"


@dataclass
class Harness:
    """An adapter plus how to make its world: ``prepare`` a pending batch workload (Kubernetes
    needs the pod to exist before it is bound), ``add_service`` a production workload."""

    adapter: Orchestrator
    prepare: Callable[[BatchSpec], None]
    add_service: Callable[[str, str], None]
    nodes: list[str]


def fake_harness() -> Iterator[Harness]:
    fake = FakeOrchestrator(node_names=["node-a", "node-b"])
    yield Harness(fake, lambda spec: None, fake.add_service, ["node-a", "node-b"])


def kubernetes_harness() -> Iterator[Harness]:
    with TestAPIServer() as api:
        for n in ("node-a", "node-b"):
            api.create("nodes", node(n))
        api.create("nodes", node("node-c", ready=False))
        api.create_pod(pod("kube-system", "calico-node-x1", "node-a", owner_kind="DaemonSet"))
        config = k8s.Configuration(host=api.url)
        adapter = KubernetesOrchestrator(k8s.ApiClient(config))

        def prepare(spec: BatchSpec) -> None:
            api.create_pod(pod(spec.namespace, spec.name, tier="batch", priority=str(spec.priority)))

        def add_service(workload_id: str, node: str) -> None:
            ns, name = workload_id.split("/")
            api.create_pod(pod(ns, name, node))

        yield Harness(adapter, prepare, add_service, ["node-a", "node-b"])


def docker_harness(client) -> Iterator[Harness]:
    """Standalone Docker on the private engine of scripts/services (the engine is the node)."""
    adapter = DockerOrchestrator(client)
    started: list[str] = []

    def add_service(workload_id: str, node: str) -> None:
        name = container_name(workload_id)
        started.append(name)
        client.containers.run(IMAGE, ["sleep", "600"], name=name, detach=True, init=True, network_mode="none",
                              labels={"kalena.naughtian.io/workload": workload_id})

    try:
        yield Harness(adapter, lambda spec: started.append(container_name(spec.id)), add_service, [adapter.node])
    finally:
        for name in started:
            try:
                client.containers.get(name).remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass


def swarm_harness(client) -> Iterator[Harness]:
    """A single-node Swarm on the private engine (TESTBED recipe); left again afterwards."""
    client.swarm.init(advertise_addr="127.0.0.1", listen_addr="127.0.0.1:22377", force_new_cluster=False)
    adapter = SwarmOrchestrator(client)
    (host,) = adapter.nodes()
    try:
        yield Harness(adapter, lambda spec: None, lambda workload_id, node: client.services.create(
            IMAGE, ["sleep", "600"], name=container_name(workload_id),
            labels={"kalena.naughtian.io/workload": workload_id}), [host])
    finally:
        for service in client.services.list():
            service.remove()
        client.swarm.leave(force=True)


HARNESSES = {"fake": fake_harness, "kubernetes": kubernetes_harness, "docker": docker_harness, "swarm": swarm_harness}


@pytest.fixture(params=sorted(HARNESSES))
def harness(request) -> Iterator[Harness]:
    if request.param in ("docker", "swarm"):
        client = request.getfixturevalue("docker_client")
        yield from HARNESSES[request.param](client)
    else:
        yield from HARNESSES[request.param]()


def _eventually(read: Callable[[], list], timeout_s: float = 30.0) -> list:
    """Poll ``read`` until it returns something (Swarm schedules its tasks asynchronously)."""
    import time

    deadline = time.monotonic() + timeout_s
    while True:
        got = read()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.3)


def spec(name: str, priority: int = 3) -> BatchSpec:
    return BatchSpec(id=f"batch/{name}", image="kalena/busybox:test", request_mcpu=500, request_bytes=2**28,
                     limit_mcpu=1000, limit_bytes=2**28, priority=priority, command=("sleep", "600"))


def test_nodes_lists_ready_nodes(harness: Harness) -> None:
    assert sorted(harness.adapter.nodes()) == sorted(harness.nodes)  # kubernetes: node-c is NotReady


def test_bind_places_batch_with_its_priority(harness: Harness) -> None:
    s = spec("job-1", priority=3)
    harness.prepare(s)
    target = harness.nodes[-1]
    harness.adapter.bind(s, target)
    (ref,) = _eventually(lambda: [w for w in harness.adapter.workloads(target) if w.id == s.id and w.node])
    assert ref.tier == "batch" and ref.priority == 3 and ref.node == target
    if len(harness.nodes) > 1:
        assert s.id not in {w.id for w in harness.adapter.workloads(harness.nodes[0])}


def test_second_binding_is_stale_never_a_duplicate(harness: Harness) -> None:
    s = spec("job-2")
    harness.prepare(s)
    harness.adapter.bind(s, harness.nodes[0])
    with pytest.raises(StaleBinding, match="job-2"):
        harness.adapter.bind(s, harness.nodes[-1])
    assert [w.node for w in _eventually(lambda: [w for w in harness.adapter.workloads() if w.id == s.id and w.node])] \
        == [harness.nodes[0]]


def test_evict_removes_and_unknown_is_an_error(harness: Harness) -> None:
    s = spec("job-3")
    harness.prepare(s)
    harness.adapter.bind(s, harness.nodes[0])
    harness.adapter.evict(s.id, grace_s=5, reason="priority")
    assert s.id not in {w.id for w in harness.adapter.workloads()}
    with pytest.raises(OrchestratorError, match="job-3"):
        harness.adapter.evict(s.id, grace_s=5, reason="priority")


def test_drain_takes_only_batch(harness: Harness) -> None:
    node = harness.nodes[0]
    harness.add_service("web/api-0", node)
    for name in ("job-4", "job-5"):
        s = spec(name)
        harness.prepare(s)
        harness.adapter.bind(s, node)
    _eventually(lambda: [w for w in harness.adapter.workloads(node) if w.id in ("batch/job-4", "batch/job-5")][1:])
    evicted = drain_batch(harness.adapter, node, grace_s=5, reason="escalation: not_converged")
    assert sorted(evicted) == ["batch/job-4", "batch/job-5"]
    left = {w.id: w.tier for w in _eventually(lambda: [w for w in harness.adapter.workloads(node)
                                                       if w.id == "web/api-0"])}
    assert left.get("web/api-0") == "service"
    assert all(tier != "batch" for tier in left.values())


def test_kubernetes_requests_use_the_binding_and_eviction_subresources() -> None:
    with TestAPIServer() as api:
        api.create("nodes", node("node-a"))
        api.create_pod(pod("batch", "job-9", tier="batch", priority="1", labels={"job": "job-9"}))
        adapter = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)))
        adapter.bind(spec("job-9"), "node-a")
        # the event thread posts the Scheduled Event (and may read the pod for its uid) at any
        # time: only this thread's writes are compared
        def writes() -> list:
            return [r for r in api.requests if "/events" not in r[1] and r[0] != "GET"]

        method, path, body = writes()[-1]
        assert (method, path) == ("POST", "/api/v1/namespaces/batch/pods/job-9/binding")
        assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "node-a"}
        api.add_pdb("batch", "job-9-budget", {"job": "job-9"}, max_unavailable=0)
        with pytest.raises(OrchestratorError, match="429.*disruption budget"):
            adapter.evict("batch/job-9", grace_s=30, reason="priority")
        api.store.delete("poddisruptionbudgets", "batch/job-9-budget")
        adapter.evict("batch/job-9", grace_s=30, reason="priority")
        method, path, body = writes()[-1]
        assert path == "/api/v1/namespaces/batch/pods/job-9/eviction"
        assert body["kind"] == "Eviction" and body["deleteOptions"]["gracePeriodSeconds"] == 30


def test_an_eviction_never_reaches_a_pod_recreated_under_the_name_it_was_decided_for() -> None:
    """The watch saw ``batch/job-9`` with one uid; the pod is deleted and re-created under its
    name before the watch reports it: the Eviction carries the uid it was decided for, the API
    server refuses it (409), the adapter answers "gone", and the new pod runs on untouched."""
    import threading

    with TestAPIServer() as api:
        api.create("nodes", node("node-a"))
        api.create_pod(pod("batch", "job-9", tier="batch", priority="1", node_name="node-a"))
        adapter = KubernetesOrchestrator(k8s.ApiClient(k8s.Configuration(host=api.url)))
        stop = threading.Event()
        for event in adapter.watch(stop):
            if adapter.watchers[-1].uids.get("batch/job-9"):
                break
        stop.set()
        old_uid = adapter.watchers[-1].uids["batch/job-9"]
        api.store.delete("pods", "batch/job-9")
        api.create_pod(pod("batch", "job-9", tier="batch", priority="1", node_name="node-a"))
        new_uid = api.get("pods", "batch/job-9")["metadata"]["uid"]
        assert new_uid != old_uid
        with pytest.raises(WorkloadGone, match="re-created under its name"):
            adapter.evict("batch/job-9", grace_s=30, reason="priority")
        evictions = [r for r in api.requests if r[1].endswith("/eviction")]
        assert evictions[-1][2]["deleteOptions"]["preconditions"] == {"uid": old_uid}
        survivor = api.get("pods", "batch/job-9")
        assert survivor["metadata"]["uid"] == new_uid and not survivor["metadata"].get("deletionTimestamp")
        assert not any(c.get("type") == "DisruptionTarget" for c in survivor.get("status", {}).get("conditions") or [])
