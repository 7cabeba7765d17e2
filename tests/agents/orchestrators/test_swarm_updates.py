"""Swarm batch services on a real single-node Swarm (the private engine of scripts/services,
listen port in this worktree's range): the spec Kalena writes, limit updates made with the
service's spec version (a stale version is read again, never lost), and re-placement as a new
service for the next attempt with the old one removed."""

from __future__ import annotations

import pytest

from agents.orchestrators import BatchSpec, StaleBinding
from agents.orchestrators.docker import SwarmOrchestrator

pytestmark = pytest.mark.docker
SWARM_PORT = 22378


@pytest.fixture
def swarm(docker_client):
    docker_client.swarm.init(advertise_addr="127.0.0.1", listen_addr=f"127.0.0.1:{SWARM_PORT}")
    try:
        yield SwarmOrchestrator(docker_client)
    finally:
        for service in docker_client.services.list():
            service.remove()
        docker_client.swarm.leave(force=True)
        # task containers Swarm created but never started outlive the swarm: nothing is left behind
        for container in docker_client.containers.list(all=True, filters={"label": "kalena.naughtian.io/workload"}):
            container.remove(force=True)


def spec(attempt: int = 0) -> BatchSpec:
    return BatchSpec(id="batch/upd-0", image="kalena/busybox:test", request_mcpu=250, request_bytes=2**26,
                     limit_mcpu=500, limit_bytes=2**27, command=("sleep", "600"), attempt=attempt, grace_s=12)


def services(client) -> dict[str, dict]:
    return {s.name: s.attrs for s in client.services.list(filters={"label": "kalena.naughtian.io/workload=batch/upd-0"})}


def test_limits_updated_with_the_spec_version_and_replacement_removes_the_old_service(swarm, docker_client) -> None:
    (node,) = swarm.nodes()
    swarm.bind(spec(), node)
    (attrs,) = services(docker_client).values()
    template = attrs["Spec"]["TaskTemplate"]
    assert template["Resources"]["Limits"] == {"NanoCPUs": 500_000_000, "MemoryBytes": 2**27}
    assert "Reservations" not in template["Resources"] or not template["Resources"]["Reservations"]
    assert template["ContainerSpec"]["StopGracePeriod"] == 12 * 10**9
    assert template["ContainerSpec"]["Labels"]["kalena.naughtian.io/request-memory"] == str(2**26)
    version = attrs["Version"]["Index"]

    # someone else updates the service first: our update must not be made against their version blindly
    stale = docker_client.services.get(attrs["ID"])
    stale.update(labels={**attrs["Spec"]["Labels"], "touched": "yes"})
    swarm.update_limits("batch/upd-0", limit_mcpu=800, limit_bytes=2**28)
    (after,) = services(docker_client).values()
    assert after["Version"]["Index"] > version + 1  # both updates landed
    assert after["Spec"]["TaskTemplate"]["Resources"]["Limits"] == {"NanoCPUs": 800_000_000, "MemoryBytes": 2**28}
    assert after["Spec"]["Labels"]["touched"] == "yes"

    with pytest.raises(StaleBinding, match="already placed"):
        swarm.bind(spec(), node)  # the same attempt again: a duplicate, refused
    swarm.bind(spec(attempt=1), node)  # the next attempt: a new service, the old one removed
    assert sorted(services(docker_client)) == ["kalena-batch-upd-0-a1"]
