"""Swarm nodes and tasks as Kalena reads them, without an engine: node names (never the
hostname), availability, and the managers' task list standing in for an engine's container list
(tests/agents/orchestrators/test_swarm_nodes.py runs the same on a real three-node Swarm)."""

from __future__ import annotations

from agents.orchestrators.base import BatchSpec
from agents.orchestrators.docker.labels import labels_for
from agents.orchestrators.docker.lifecycle import Lifecycle
from agents.orchestrators.docker.swarm import node_name, node_state, task_inspect
from agents.orchestrators.docker.swarm_watch import SwarmWatcher, placed_task
from agents.orchestrators.events import PodFinished, PodRefused, PodRunning

HOST = "same-host"


def node(node_id: str, *, label: str = "", engine_label: str = "", state: str = "ready",
         availability: str = "active") -> dict:
    return {"ID": node_id, "Spec": {"Labels": {"kalena.naughtian.io/node": label} if label else {},
                                    "Availability": availability, "Role": "worker"},
            "Description": {"Hostname": HOST, "Engine": {"Labels": {"kalena.naughtian.io/node": engine_label}
                                                         if engine_label else {}}},
            "Status": {"State": state}}


def test_nodes_sharing_a_hostname_get_distinct_names_from_label_engine_label_or_id() -> None:
    nodes = [node("id-a", label="lab-1"), node("id-b", engine_label="lab-2"), node("id-c")]
    assert [node_name(n) for n in nodes] == ["lab-1", "lab-2", "id-c"]
    assert node_name(node("id-d", label="by-node", engine_label="by-engine")) == "by-node"


def test_drain_and_pause_are_unschedulable_and_down_is_not_ready() -> None:
    assert node_state(node("a")) == (True, True)
    assert node_state(node("a", availability="drain")) == (True, False)
    assert node_state(node("a", availability="pause")) == (True, False)
    assert node_state(node("a", state="down")) == (False, False)


def task(state: str, *, index: int, container: str = "c1", exit_code: int | None = None, err: str = "") -> dict:
    spec = BatchSpec(id="batch/job", request_mcpu=100, request_bytes=2**24, limit_mcpu=200, limit_bytes=2**25)
    status = {"State": state, "Err": err, "Timestamp": "2026-01-01T00:00:00Z"}
    if container:
        status["ContainerStatus"] = {"ContainerID": container} | ({"ExitCode": exit_code} if exit_code is not None
                                                                  else {})
    return {"ID": f"t{index}", "ServiceID": "s1", "NodeID": "id-a", "Version": {"Index": index}, "Status": status,
            "Spec": {"ContainerSpec": {"Labels": labels_for(spec, attempt=0, grace_s=5)},
                     "Resources": {"Limits": {"MemoryBytes": 2**25}}}}


def replay(*states: dict) -> list:
    """Feed successive task lists of one node to the watcher's store; the events they give."""
    store = Lifecycle()
    out = []
    for t in states:
        out += [e for e in store.resync("lab-1", [task_inspect(t)], at_s=1.0, unobserved_exit_evicts=False)
                if isinstance(e, PodRunning | PodFinished)]
    return out


def test_a_task_list_says_running_then_each_ending() -> None:
    assert replay(task("running", index=2), task("complete", index=3, exit_code=0)) == [
        PodRunning(ref="batch/job", node="lab-1", at_s=1.0),
        PodFinished(ref="batch/job", node="lab-1", outcome="succeeded", reason="Completed", exit_code=0, at_s=1.0)]
    failed = replay(task("running", index=2), task("failed", index=3, exit_code=3, err="task: non-zero exit (3)"))
    assert failed[-1].outcome == "failed" and failed[-1].exit_code == 3  # the task's own outcome, not an eviction
    stopped = replay(task("running", index=2), task("shutdown", index=3, exit_code=143))
    assert (stopped[-1].outcome, stopped[-1].reason) == ("evicted", "Shutdown")


def test_a_waiting_task_is_held_without_an_event_and_a_rejected_one_is_not_a_container() -> None:
    assert replay(task("preparing", index=1, container="")) == []
    assert task_inspect(task("preparing", index=1, container=""))["Id"] == "task:t1"
    assert task_inspect(task("rejected", index=1, container="")) is None


def test_after_a_drain_the_task_that_ran_says_the_pods_state_not_swarms_pending_replacement() -> None:
    ran = task("shutdown", index=5, exit_code=143)
    replacement = task("pending", index=7, container="")
    assert placed_task([replacement, ran]) is ran
    assert placed_task([replacement]) is replacement


class RejectingSwarm:
    """The managers' lists of a one-node Swarm whose batch services' tasks were rejected, and
    the services a watcher removes (recorded in order with the events it handed on)."""

    engines: list = []

    def __init__(self, log: list) -> None:
        self.log, self.listed = log, []

    def node_list(self) -> list[dict]:
        return [node("id-a", label="node-a")]

    def services(self) -> list[dict]:
        return self.listed

    def remove_service(self, service_id: str) -> None:
        self.log.append(("removed", service_id))
        self.listed = [s for s in self.listed if s["ID"] != service_id]


def rejected_service(service_id: str, attempt: int) -> dict:
    t = task("rejected", index=attempt + 1, container="", err="No such image: kalena/none:missing") | {
        "ServiceID": service_id}
    return {"ID": service_id, "Spec": {"Labels": {"kalena.naughtian.io/workload": "batch/job",
                                                  "kalena.naughtian.io/attempt": str(attempt)}}, "Tasks": [t]}


def test_a_rejected_attempt_is_refused_once_then_its_service_removed_and_a_later_one_refused_too() -> None:
    log: list = []
    swarm = RejectingSwarm(log)
    watcher = SwarmWatcher(swarm, emit=lambda e: log.append(e), clock=lambda: 100.0)
    swarm.listed = [rejected_service("s0", 0)]
    watcher.relist()
    watcher.relist()  # listed again before it is removed: told once
    watcher._act()
    refused = [e for e in log if isinstance(e, PodRefused)]
    assert refused == [PodRefused(ref="batch/job", node="node-a", reason="No such image: kalena/none:missing",
                                  at_s=100.0)]
    assert log.index(("removed", "s0")) > log.index(refused[0]) and swarm.listed == []
    swarm.listed = [rejected_service("s1", 1)]  # the pod's next attempt, refused as well
    watcher.relist()
    watcher._act()
    assert [e.ref for e in log if isinstance(e, PodRefused)] == ["batch/job", "batch/job"]
    assert ("removed", "s1") in log and swarm.listed == []
