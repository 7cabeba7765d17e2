"""The pure Docker modules on real engine JSON: labels ⇄ identity and request, the engines list,
engine events and re-lists → watch events (nothing missed or doubled across re-lists and a
control-plane restart, older attempts never touch the current one, lost engines rescheduled at
the docs/design.md §14 rate), and Swarm task states → Kalena's lifecycle.

``fixtures/docker_engine_lifecycle.json`` was recorded from the private engine of
scripts/services (see its ``_recorded``): four pods bound with DockerOrchestrator — one exits 0,
one exits 3, one is killed with SIGTERM, one runs out of memory.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from agents.orchestrators.base import BatchSpec
from agents.orchestrators.docker.engines import EngineConfigError, parse_engines
from agents.orchestrators.docker.labels import (
    LabelError, container_name, cpu_shares_from_mcpu, identity_of, labels_for,
)
from agents.orchestrators.docker.lifecycle import Lifecycle
from agents.orchestrators.docker.swarm import service_events, task_event
from agents.orchestrators.events import NodeSeen, PodFinished, PodGone, PodRefused, PodRunning, Resynced

RECORDED = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "docker_engine_lifecycle.json").read_text())
EVENTS = RECORDED["events"]
INSPECT = RECORDED["inspect"]


def pod_events(events):
    return [e for e in events if not isinstance(e, Resynced)]


# --- labels -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("request_mcpu", "shares"), [
    (500, 512),    # 500 × 1024 / 1000
    (1000, 1024),  # one core = Docker's default weight
    (1, 2),        # 1.024 rounds to 1, floored at 2 (kubelet's MinShares)
    (0, 2),
])
def test_cpu_shares_follow_the_request(request_mcpu, shares) -> None:
    assert cpu_shares_from_mcpu(request_mcpu) == shares


def test_names_differ_per_attempt_and_labels_round_trip() -> None:
    assert container_name("batch/job-1", 2) == "kalena-batch-job-1-a2"
    assert container_name("batch/job-1", 0) != container_name("batch/job-1", 1)
    spec = BatchSpec(id="batch/job-1", request_mcpu=250, request_bytes=2**25, limit_mcpu=500, limit_bytes=2**26,
                     priority=4, labels={"team": "ml", "kalena.naughtian.io/tier": "service"})
    labels = labels_for(spec, attempt=3, grace_s=7)
    assert labels["team"] == "ml" and labels["kalena.naughtian.io/tier"] == "batch"  # Kalena's label wins
    who = identity_of(labels, container="c")
    assert (who.ref, who.attempt, who.tier, who.priority) == ("batch/job-1", 3, "batch", 4)
    assert (who.request_mcpu, who.request_bytes, who.grace_s) == (250, 2**25, 7)


@pytest.mark.parametrize(("labels", "named"), [
    ({"kalena.naughtian.io/workload": "Not A Ref"}, "kalena.naughtian.io/workload"),
    ({"kalena.naughtian.io/workload": "a/b", "kalena.naughtian.io/tier": "gold"}, "kalena.naughtian.io/tier"),
    ({"kalena.naughtian.io/workload": "a/b", "kalena.naughtian.io/attempt": "x"}, "kalena.naughtian.io/attempt"),
    ({"kalena.naughtian.io/workload": "a/b", "kalena.naughtian.io/request-cpu": "lots"}, "request-cpu"),
    ({"kalena.naughtian.io/workload": "a/b", "kalena.naughtian.io/termination-grace-seconds": "-1"},
     "termination-grace-seconds"),
])
def test_malformed_labels_name_the_container_and_label(labels, named) -> None:
    with pytest.raises(LabelError, match=f"container 'web-1'.*{named}"):
        identity_of(labels, container="web-1")


def test_containers_without_the_workload_label_are_not_kalenas() -> None:
    assert identity_of({"kalena.naughtian.io/tier": "batch"}, container="x") is None


# --- engines ------------------------------------------------------------------------------------

def test_engines_from_configuration() -> None:
    engines = parse_engines({"KALENA_DOCKER_ENGINES": "node-a=unix:///v/a.sock, unix:///v/b.sock,"
                                                       "node-c=tcp://10.0.0.3:2376",
                             "KALENA_DOCKER_TLS_CA": "/tls/ca.pem", "KALENA_DOCKER_TLS_CERT": "/tls/cert.pem",
                             "KALENA_DOCKER_TLS_KEY": "/tls/key.pem"})
    assert [(e.node, e.url) for e in engines] == [("node-a", "unix:///v/a.sock"), ("", "unix:///v/b.sock"),
                                                 ("node-c", "tcp://10.0.0.3:2376")]
    assert engines[2].tls_ca == "/tls/ca.pem" and engines[2].tls_verify
    assert parse_engines({"DOCKER_HOST": "unix:///d.sock"})[0].url == "unix:///d.sock"


@pytest.mark.parametrize(("text", "message"), [
    ("node-a=tcp://10.1.2.3:2376", "needs TLS"),
    ("node-a=http://x", "accepted"),
    ("Node_A=unix:///a.sock", "DNS-1123"),
    ("a=unix:///a.sock,a=unix:///b.sock", "node 'a' given twice"),
    ("unix:///a.sock,,unix:///b.sock", "entry 2"),
])
def test_bad_engine_lists_are_refused_with_the_entry(text, message) -> None:
    with pytest.raises(EngineConfigError, match=message):
        parse_engines({"KALENA_DOCKER_ENGINES": text})


# --- events → watch events ----------------------------------------------------------------------

def test_recorded_events_map_onto_the_lifecycle() -> None:
    store = Lifecycle()
    out = pod_events(store.resync("vm", [], at_s=0.0))
    for message in EVENTS:
        out += store.event("vm", message)
    running = sorted(e.ref for e in out if isinstance(e, PodRunning))
    assert running == ["batch/fails", "batch/killed", "batch/ok", "batch/oom"]
    finished = {e.ref: e for e in out if isinstance(e, PodFinished)}
    assert (finished["batch/ok"].outcome, finished["batch/ok"].exit_code) == ("succeeded", 0)
    assert (finished["batch/fails"].outcome, finished["batch/fails"].exit_code) == ("failed", 3)
    assert (finished["batch/killed"].outcome, finished["batch/killed"].reason) == ("evicted", "Killed (signal 15)")
    assert finished["batch/oom"].outcome == "oom"
    assert "request 16777216" not in finished["batch/oom"].reason  # the request label, not the reservation
    assert "request 33554432 bytes" in finished["batch/oom"].reason
    # destroying a finished container is housekeeping: no PodGone; each pod finished exactly once
    assert not [e for e in out if isinstance(e, PodGone)]
    assert len(finished) == 4 and len([e for e in out if isinstance(e, PodFinished)]) == 4
    assert all(e.at_s > 1.7e9 for e in out)  # the engine's own event time


def test_a_relist_after_the_events_adds_nothing() -> None:
    store = Lifecycle()
    store.resync("vm", [], at_s=0.0)
    for message in EVENTS[:12]:  # up to the killed pod's die
        store.event("vm", message)
    again = pod_events(store.resync("vm", list(INSPECT.values()), at_s=1.0))
    # only what the events had not said yet: the oom pod's end
    assert [(type(e).__name__, e.ref) for e in again] == [("PodFinished", "batch/oom")]


def test_a_restarted_control_plane_rebuilds_from_labels_without_doubles() -> None:
    store = Lifecycle()
    first = pod_events(store.resync("vm", list(INSPECT.values()), at_s=1.0))
    assert sorted((e.ref, e.outcome) for e in first) == [
        ("batch/fails", "failed"), ("batch/killed", "failed"), ("batch/ok", "succeeded"), ("batch/oom", "oom")]
    # the stream opened before the list replays what the list already showed: nothing new
    replayed = [e for m in EVENTS for e in store.event("vm", m)]
    assert replayed == []


def test_bad_events_and_unknown_containers_are_skipped_with_their_name() -> None:
    store = Lifecycle()
    store.resync("vm", [], at_s=0.0)
    bad = copy.deepcopy(EVENTS[1])
    bad["Actor"]["Attributes"]["kalena.naughtian.io/workload"] = "NOT/ok!"
    assert store.event("vm", bad) == []
    unknown = copy.deepcopy(next(m for m in EVENTS if m["Action"] == "die"))
    unknown["Actor"]["ID"] = "f" * 64
    assert store.event("vm", unknown) == []
    assert store.event("vm", {"Type": "network", "Action": "connect"}) == []
    assert store.event("vm", {"Type": "container", "Action": "die"}) == []
    assert any("kalena-batch-ok-a0" in m and "namespace/pod" in m for m in store.errors)
    assert any("never listed" in m for m in store.errors)


def _running(ref: str, attempt: int, cid: str) -> dict:
    name = container_name(ref, attempt)
    attrs = copy.deepcopy(INSPECT["kalena-batch-killed-a0"])
    attrs["Id"], attrs["Name"] = cid, "/" + name
    attrs["Config"]["Labels"].update({"kalena.naughtian.io/workload": ref, "kalena.naughtian.io/attempt": str(attempt)})
    attrs["State"].update(Status="running", Running=True, ExitCode=0, FinishedAt="0001-01-01T00:00:00Z")
    return attrs


def _exited(attrs: dict, code: int) -> dict:
    attrs = copy.deepcopy(attrs)
    attrs["State"].update(Status="exited", Running=False, ExitCode=code, FinishedAt="2026-12-01T11:00:00Z")
    return attrs


def test_an_engine_restart_requeues_each_pod_once() -> None:
    store = Lifecycle()
    pods = [_running(f"batch/p{i}", 0, f"{i:064x}") for i in range(3)]
    store.resync("a", pods, at_s=1.0)
    store.node_down("a", at_s=2.0)
    back = pod_events(store.resync("a", [_exited(p, 255) for p in pods], at_s=3.0))
    assert sorted((e.ref, e.outcome, e.reason) for e in back) == [
        (f"batch/p{i}", "evicted", "EngineRestart") for i in range(3)]
    assert pod_events(store.resync("a", [_exited(p, 255) for p in pods], at_s=4.0)) == []


def test_an_older_attempt_never_touches_the_current_one() -> None:
    store = Lifecycle()
    old = _running("batch/job", 0, "a" * 64)
    store.resync("a", [old], at_s=1.0)
    store.resync("b", [], at_s=1.0)
    store.event("a", {"Type": "container", "Action": "die", "Actor": {"ID": "a" * 64, "Attributes": {
        "exitCode": "143"}}, "timeNano": int(2e18)})
    new = _running("batch/job", 1, "b" * 64)
    assert pod_events(store.resync("b", [new], at_s=3.0)) == [PodRunning(ref="batch/job", node="b", at_s=3.0)]
    # the late destroy of attempt 0 on engine a does not make the pod gone
    assert store.event("a", {"Type": "container", "Action": "destroy", "Actor": {"ID": "a" * 64, "Attributes": {}},
                             "timeNano": int(4e18)}) == []
    # a copy of attempt 0 still running somewhere is stale: the watcher stops it
    store.resync("c", [_running("batch/job", 0, "c" * 64)], at_s=5.0)
    assert ("c", "c" * 64) in store.stale
    assert store.current("batch/job").container_id == "b" * 64


def test_lost_engines_are_rescheduled_one_node_per_ten_seconds() -> None:
    store = Lifecycle(lost_after_s=40.0)
    for node in ("a", "b"):
        store.node_up(NodeSeen(name=node, ready=True, schedulable=True, allocatable=(1000.0,) * 8))
        store.resync(node, [_running(f"batch/{node}{i}", 0, f"{node}{i}".ljust(64, "0")) for i in range(2)], at_s=0.0)
    down = store.node_down("a", at_s=100.0) + store.node_down("b", at_s=100.0)
    assert [(e.name, e.ready) for e in down] == [("a", False), ("b", False)]
    assert store.node_down("a", at_s=101.0) == []  # once
    assert store.due(139.0) == []  # not yet lost_after_s
    first = store.due(140.0)
    assert sorted((e.ref, e.outcome, e.reason) for e in first) == [
        ("batch/a0", "evicted", "NodeLost"), ("batch/a1", "evicted", "NodeLost")]
    assert store.due(145.0) == []  # 0.1 node per second
    assert sorted(e.ref for e in store.due(150.0)) == ["batch/b0", "batch/b1"]
    # engine a returns with its copies still running: they are stopped, nothing is emitted twice
    store.node_up(NodeSeen(name="a", ready=True, schedulable=True, allocatable=(1000.0,) * 8))
    again = pod_events(store.resync("a", [_running(f"batch/a{i}", 0, f"a{i}".ljust(64, "0")) for i in range(2)],
                                    at_s=160.0))
    assert again == []
    assert sorted(cid for node, cid in store.stale if node == "a") == ["a0".ljust(64, "0"), "a1".ljust(64, "0")]


# --- Swarm tasks --------------------------------------------------------------------------------

def _task(state: str, *, err: str = "", code: int | None = None, index: int = 10) -> dict:
    # the shape of GET /tasks (Docker Engine API, Task object)
    status = {"Timestamp": "2026-12-01T11:00:00Z", "State": state, "Message": state, "Err": err}
    if code is not None:
        status["ContainerStatus"] = {"ContainerID": "c" * 64, "PID": 0, "ExitCode": code}
    return {"ID": "t1", "Version": {"Index": index}, "NodeID": "n1", "DesiredState": "running", "Status": status}


@pytest.mark.parametrize(("state", "err", "code", "expected"), [
    ("pending", "", None, None),
    ("preparing", "", None, None),
    ("running", "", None, PodRunning(ref="b/j", node="vm", at_s=1.0)),
    ("complete", "", 0, PodFinished(ref="b/j", node="vm", outcome="succeeded", reason="Completed", exit_code=0,
                                    at_s=1.0)),
    ("failed", "task: non-zero exit (3)", 3, PodFinished(ref="b/j", node="vm", outcome="failed",
                                                         reason="task: non-zero exit (3)", exit_code=3, at_s=1.0)),
    ("shutdown", "", 143, PodFinished(ref="b/j", node="vm", outcome="evicted", reason="Shutdown", exit_code=143,
                                      at_s=1.0)),
    ("rejected", "no suitable node (insufficient resources on 1 node)", None,
     PodRefused(ref="b/j", node="vm", reason="no suitable node (insufficient resources on 1 node)", at_s=1.0)),
    ("orphaned", "", None, PodFinished(ref="b/j", node="vm", outcome="evicted", reason="NodeLost", at_s=1.0)),
])
def test_swarm_task_states(state, err, code, expected) -> None:
    assert task_event(_task(state, err=err, code=code), ref="b/j", node="vm", at_s=1.0) == expected


def test_swarm_services_use_their_newest_task_and_skip_foreign_labels() -> None:
    services = [
        {"Spec": {"Name": "kalena-b-j-a0", "Labels": {"kalena.naughtian.io/workload": "b/j"}},
         "Tasks": [_task("failed", err="x", code=1, index=5), _task("running", index=9)]},
        {"Spec": {"Name": "web", "Labels": {"kalena.naughtian.io/workload": 7}}, "Tasks": [_task("running")]},
    ]
    events, errors = service_events(services, hostnames={"n1": "vm"}, at_s=2.0)
    assert events == [PodRunning(ref="b/j", node="vm", at_s=2.0)]
    assert len(errors) == 1 and "'web'" in errors[0]


def test_other_containers_are_production_on_their_node() -> None:
    store = Lifecycle()
    web = _running("web/api-0", 0, "d" * 64)
    labels = web["Config"]["Labels"]
    for key in [k for k in labels if k.startswith("kalena.naughtian.io/")]:
        del labels[key]
    labels.update({"kalena.naughtian.io/tier": "service", "kalena.naughtian.io/request-cpu": "800m"})
    web["Name"] = "/api-0"
    (seen, _) = store.resync("a", [web], at_s=1.0)
    assert (seen.ref, seen.node, seen.requests[0], seen.limits[1]) == ("a/api-0", "a", 800.0, 64 * 2**20)
    assert "a/api-0" in store.resync("a", [web], at_s=2.0)[-1].pods  # listed again: no new event, still held
    gone = store.event("a", {"Type": "container", "Action": "die", "Actor": {"ID": "d" * 64, "Attributes": {}},
                             "timeNano": int(3e18)})
    assert gone == [PodGone(ref="a/api-0", at_s=3e9)]
    started = {"Type": "container", "Action": "start", "Actor": {"ID": "e" * 64, "Attributes": {"name": "db"}},
               "timeNano": int(4e18)}
    assert store.event("a", started) == [] and store.inspect_wanted == [("a", "e" * 64)]  # the watcher inspects it
