"""A container removed between the engine's list and its inspect (a batch pod finishing and being
removed, a production container replaced) is gone, never an error: the watcher's re-list, a
placement's look for earlier attempts, an eviction and the workload list go on with the rest.

A stand-in engine (a real HTTP server answering the Engine API through the real Docker SDK)
lists two Kalena containers and answers 404 for the inspect of one, exactly what an engine says
when the removal lands between the two calls; the same race on the real private engine is run
with containers removed as they are listed.
"""

from __future__ import annotations

import threading

import docker
import pytest

from agents.orchestrators.base import ID_LABEL
from agents.orchestrators.docker import DockerOrchestrator, Engine, EngineConfig

HERE, GONE = "1" * 64, "2" * 64
API = "/v1.41"


@pytest.fixture
def engine(json_server) -> Engine:
    labels = {ID_LABEL: "batch/train", "kalena.naughtian.io/tier": "batch", "kalena.naughtian.io/attempt": "0"}
    json_server.routes[f"{API}/_ping"] = b"OK"
    json_server.routes[f"{API}/containers/json"] = [{"Id": GONE, "Labels": labels}, {"Id": HERE, "Labels": labels}]
    json_server.routes[f"{API}/containers/{GONE}/json"] = {"message": f"No such container: {GONE}"}
    json_server.status[f"{API}/containers/{GONE}/json"] = 404
    json_server.routes[f"{API}/containers/{HERE}/json"] = {
        "Id": HERE, "Name": "/kalena-batch-train-0", "Config": {"Labels": labels},
        "State": {"Status": "running", "Pid": 4242}, "HostConfig": {}}
    json_server.routes[f"{API}/containers/{HERE}/stop"] = {}
    json_server.routes[f"{API}/containers/{HERE}"] = {}
    url = json_server.url.replace("http://", "tcp://")
    return Engine(EngineConfig(url=url, node="node-a"), client=docker.DockerClient(base_url=url, version="1.41"))


def test_a_container_removed_between_list_and_inspect_is_left_out_of_every_list(engine: Engine, json_server) -> None:
    assert [c["Id"] for c in engine.all_containers()] == [HERE]
    assert [c["Id"] for c in engine.kalena_containers("batch/train")] == [HERE]
    orchestrator = DockerOrchestrator([engine])
    assert [(w.id, w.node) for w in orchestrator.workloads()] == [("batch/train", "node-a")]
    orchestrator.evict("batch/train", grace_s=0, reason="test")  # the one still there is stopped and removed
    assert ("POST", f"{API}/containers/{HERE}/stop?t=0") in [(m, p) for m, p, *_ in json_server.requests]
    assert ("DELETE", f"{API}/containers/{HERE}?v=False&link=False&force=True") in \
        [(m, p) for m, p, *_ in json_server.requests]


@pytest.mark.docker
def test_lists_on_the_real_engine_survive_containers_removed_as_they_are_listed(docker_client) -> None:
    """Short-lived labelled containers are removed in a loop while the engine's lists run: no
    list raises, and every container listed is one the engine inspected."""
    label = f"{ID_LABEL}=race/pod"
    engine = Engine.of_client(docker_client)
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            while not stop.is_set():
                container = docker_client.containers.create("kalena/busybox:test", ["true"], labels={ID_LABEL: "race/pod"},
                                                            network_mode="none")
                container.remove(force=True)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=churn, daemon=True) for _ in range(2)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(150):
            for attrs in engine.kalena_containers("race/pod") + engine.all_containers():
                assert attrs["Id"] and "State" in attrs
    finally:
        stop.set()
        for thread in threads:
            thread.join(30)
        for container in docker_client.containers.list(all=True, filters={"label": label}, ignore_removed=True):
            container.remove(force=True)
    assert errors == []
