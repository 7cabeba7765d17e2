"""The stacks' watch service: `kalena watch --cluster NAME --create` creates the empty live
cluster on a first start and registers the engine as its node (the process the stacks give the
engine socket), refuses an engine that does not answer before creating anything, and
`kalena serve --no-watch` — the console in the stacks — never watches."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.config import ConfigError, engine_node_name
from kalena_web.cli import main as kalena
from kalena_web.cli.benchenv import free_port
from kalena_web.inventory.models import Cluster, Node
from tests.agents.conftest import docker_socket
from tests.web.telemetry.conftest import services, wait_until  # noqa: F401 - the fixture

DOCKER = docker_socket()  # KALENA_TEST_DOCKER_HOST, else this checkout's var/dockerd engine


def test_watch_refuses_an_engine_that_does_not_answer_and_creates_nothing(db, settings, tmp_path, capsys) -> None:
    settings.KALENA_ORCHESTRATOR = "docker"
    settings.KALENA_DOCKER_ENGINES = f"node-a={DOCKER},node-b=unix://{tmp_path}/gone.sock"
    assert kalena(["watch", "--cluster", "stack", "--create"]) == 2
    err = capsys.readouterr().err
    assert f"1 of 2 engine(s) do not answer: unix://{tmp_path}/gone.sock" in err and "nothing was started" in err
    assert not Cluster.objects.filter(name="stack").exists()
    settings.KALENA_ORCHESTRATOR = "kubernetes"
    assert kalena(["watch", "--cluster", "stack", "--create"]) == 2
    assert "--create is for Docker and Swarm" in capsys.readouterr().err
    assert not Cluster.objects.filter(name="stack").exists()


class FakeEngineClient:
    """A ``docker.DockerClient`` stand-in answering ``ping`` and ``info`` as an engine would."""

    def __init__(self, info: dict) -> None:
        self._info = info

    def ping(self) -> bool:
        return True

    def info(self) -> dict:
        return self._info


def test_watch_refuses_two_unlabelled_engines_that_would_get_the_same_node_name(
        db, settings, monkeypatch, capsys) -> None:
    """Two engines on one host, neither labelled: both answer ``docker info`` with the host's
    name (and the lab's engines even with the same engine ID), so both would be node 'lab-host'."""
    from agents.orchestrators.docker import Engine
    from agents.orchestrators.docker.engines import EngineConfig
    from kalena_web.control import orchestrators

    same = {"Name": "lab-host", "ID": "ABCD:EF01", "Labels": []}
    engines = {
        "unlabelled": [Engine(EngineConfig(url="unix:///run/a/docker.sock"), client=FakeEngineClient(same)),
                       Engine(EngineConfig(url="unix:///run/b/docker.sock"), client=FakeEngineClient(same))],
        "labelled": [Engine(EngineConfig(url="unix:///run/a/docker.sock"), client=FakeEngineClient(
                         {**same, "Labels": ["kalena.naughtian.io/node=lab-a"]})),
                     Engine(EngineConfig(url="unix:///run/b/docker.sock"), client=FakeEngineClient(
                         {**same, "Labels": ["kalena.naughtian.io/node=lab-b"]}))],
    }
    settings.KALENA_ORCHESTRATOR = "docker"
    monkeypatch.setattr(orchestrators, "docker_engines", lambda: engines["unlabelled"])
    assert kalena(["watch", "--cluster", "stack", "--create"]) == 2
    err = capsys.readouterr().err
    assert ("node 'lab-host': unix:///run/a/docker.sock (named by docker info Name) and "
            "unix:///run/b/docker.sock (named by docker info Name)") in err
    assert "dockerd --label kalena.naughtian.io/node=NAME" in err and "nothing was started or created" in err
    assert not Cluster.objects.filter(name="stack").exists()
    # labelled, the same two engines are two nodes: the check passes
    from kalena_web.cli.watch import engines_answer

    monkeypatch.setattr(orchestrators, "docker_engines", lambda: engines["labelled"])
    engines_answer()
    assert [e.node for e in engines["labelled"]] == ["lab-a", "lab-b"]


def test_watch_creates_the_cluster_and_registers_the_engine_and_serve_no_watch_does_not(
        transactional_db, services, tmp_path) -> None:
    services.env.update(KALENA_ORCHESTRATOR="docker", KALENA_DOCKER_ENGINES=DOCKER)
    port = free_port()
    console = services.procs.start("console", [str(Path(sys.executable).parent / "kalena"), "serve", "--host",
                                               "127.0.0.1", "--port", str(port), "--no-watch"])
    from kalena_web.cli.benchenv import wait_port

    wait_port(port, proc=console)
    services.procs.start("watch", [str(Path(sys.executable).parent / "kalena"), "watch", "--cluster", "stack",
                                   "--create"])
    name = engine_node_name(DOCKER)
    wait_until(lambda: Node.objects.filter(cluster__name="stack", cluster__kind=Cluster.LIVE, name=name).exists(),
               timeout_s=60, what="the watch service registering the engine as a node")
    assert "created the empty live cluster 'stack'" in services.log("watch")
    # the console saw the same cluster and engine the whole time and never started a watch of its own
    assert console.poll() is None
    said = services.log("console")
    assert not any(w in said for w in ("watch running", "the watch waits", "the watch cannot start")), said
    # a second start of the watch finds the cluster and creates nothing new
    services.procs.stop("watch")
    services.procs.start("watch2", [str(Path(sys.executable).parent / "kalena"), "watch", "--cluster", "stack",
                                    "--create"])
    wait_until(lambda: "watching for cluster stack" in services.log("watch2"), timeout_s=60, what="the second start")
    assert Cluster.objects.filter(name="stack").count() == 1 and "created" not in services.log("watch2")


def test_the_agent_names_its_node_as_the_watcher_does(tmp_path) -> None:
    import docker

    info = docker.DockerClient(base_url=DOCKER).info()
    labels = dict(x.split("=", 1) for x in info.get("Labels") or [] if "=" in x)
    expected = labels.get("kalena.naughtian.io/node") or (
        info["Swarm"]["NodeID"] if (info.get("Swarm") or {}).get("LocalNodeState") == "active" else info["Name"])
    assert engine_node_name(DOCKER) == expected
    with pytest.raises(ConfigError, match=f"the engine at unix://{tmp_path}/gone.sock does not answer"):
        engine_node_name(f"unix://{tmp_path}/gone.sock")
