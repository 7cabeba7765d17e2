"""Collector failures, cause by cause: the pure classification of what readers raise; each
collector against real inputs that fail as a workload ends (a temp-dir cgroupfs losing a group, a
fake Docker engine and cAdvisor/kubelet servers answering with empty, cut-short, 404/409 or
malformed bodies through the real clients); the once-per-workload-and-cause log; the loop living
through a collector's defect; and ``/metrics`` exporting the counts."""

from __future__ import annotations

import copy
import errno
import json
import logging
import math
import shutil
from pathlib import Path

import docker
import httpx
import pytest
import requests
from prometheus_client import generate_latest

from agents.cgroups.backend import CgroupV2
from agents.collectors.cadvisor import CadvisorCollector
from agents.collectors.cgroup import CgroupCollector
from agents.collectors.docker_stats import DockerStatsCollector
from agents.collectors.failures import CAUSES, CollectorFailure, FailureLog, attempt, classify
from agents.collectors.kubelet import KubeletClient, KubeletTelemetry
from agents.collectors.telemetry import CgroupTelemetry
from agents.discovery.docker import DockerSource
from agents.errors import TelemetryError
from agents.health import AgentMetrics
from agents.model import KIND_DOCKER, Workload
from kalena_engine.resources import RAM, zeros
from tests.agents.conftest import load_fixture, make_v2_tree, v2_files
from tests.agents.rig import GIB, Rig

T0 = 1_000_000.0
STATS = load_fixture("docker_stats_v1.json")


def _json_error(text: str) -> json.JSONDecodeError:
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        return exc
    raise AssertionError(text)


def _requests_json_error(text: str) -> requests.exceptions.JSONDecodeError:
    exc = _json_error(text)
    return requests.exceptions.JSONDecodeError(exc.msg, exc.doc, exc.pos)


def _telemetry_from(exc: BaseException) -> TelemetryError:
    try:
        raise TelemetryError("not JSON", source="http://node/x") from exc
    except TelemetryError as error:
        return error


def _status(code: int) -> httpx.HTTPStatusError:
    request = httpx.Request("GET", "http://cadvisor/api")
    return httpx.HTTPStatusError("status", request=request, response=httpx.Response(code, request=request))


@pytest.mark.parametrize(("exc", "on_missing", "cause"), [
    pytest.param(_requests_json_error(""), "cgroup_removed", "empty_body", id="Docker stats answered with no body"),
    pytest.param(_requests_json_error("  \n"), "cgroup_removed", "empty_body", id="whitespace only is empty"),
    pytest.param(_requests_json_error('{"id": "abc", "read": "2024-'), "cgroup_removed", "truncated",
                 id="JSON ends inside a string: cut short"),
    pytest.param(_json_error('{"pods": [{"podRef": {}}'), "cgroup_removed", "truncated", id="JSON missing its last ]}"),
    pytest.param(_json_error("{not json}"), "cgroup_removed", "malformed", id="complete but not JSON"),
    pytest.param(_json_error('{"ok": tr'), "cgroup_removed", "truncated", id="cut inside a literal"),
    pytest.param(_json_error('{"usage": 1.'), "cgroup_removed", "truncated", id="cut inside a number"),
    pytest.param(_json_error('{"usage": 1, }'), "cgroup_removed", "malformed", id="a syntax error before the end"),
    pytest.param(_json_error("<html>"), "cgroup_removed", "malformed", id="an HTML error page"),
    pytest.param(_telemetry_from(_json_error("")), "gone", "empty_body", id="TelemetryError from an empty body"),
    pytest.param(_telemetry_from(_json_error('{"a": [1, 2')), "gone", "truncated", id="TelemetryError from a cut body"),
    pytest.param(TelemetryError("missing", source="f", field="memory_stats.usage"), "cgroup_removed", "malformed",
                 id="a document without a field"),
    pytest.param(docker.errors.NotFound("no such container"), "cgroup_removed", "gone", id="engine 404"),
    pytest.param(docker.errors.APIError("removal in progress", response=type("R", (), {"status_code": 409})()),
                 "cgroup_removed", "gone", id="engine 409 while removing"),
    pytest.param(docker.errors.APIError("denied", response=type("R", (), {"status_code": 403})()),
                 "cgroup_removed", "permission", id="engine 403"),
    pytest.param(docker.errors.APIError("boom", response=type("R", (), {"status_code": 500})()),
                 "cgroup_removed", "http_status", id="engine 500"),
    pytest.param(_status(404), "gone", "gone", id="cAdvisor 404"),
    pytest.param(_status(401), "gone", "permission", id="kubelet 401"),
    pytest.param(_status(503), "gone", "http_status", id="kubelet 503"),
    pytest.param(requests.exceptions.ChunkedEncodingError("incomplete chunked read"), "cgroup_removed", "truncated",
                 id="stream cut mid-chunk (requests)"),
    pytest.param(httpx.RemoteProtocolError("peer closed connection without sending complete message body"),
                 "gone", "truncated", id="body cut short (httpx)"),
    pytest.param(requests.exceptions.ConnectionError("refused"), "cgroup_removed", "unreachable", id="engine down"),
    pytest.param(httpx.ConnectTimeout("timed out"), "gone", "unreachable", id="kubelet timed out"),
    pytest.param(FileNotFoundError(errno.ENOENT, "No such file"), "cgroup_removed", "cgroup_removed",
                 id="cgroup directory removed"),
    pytest.param(OSError(errno.ENODEV, "No such device"), "cgroup_removed", "cgroup_removed",
                 id="read of an open file in a removed cgroup"),
    pytest.param(FileNotFoundError(errno.ENOENT, "No such file"), "gone", "gone", id="/proc/<pid> gone"),
    pytest.param(ProcessLookupError(errno.ESRCH, "No such process"), "cgroup_removed", "gone", id="ESRCH"),
    pytest.param(PermissionError(errno.EACCES, "Permission denied"), "cgroup_removed", "permission", id="EACCES"),
    pytest.param(OSError(errno.EPERM, "Operation not permitted"), "cgroup_removed", "permission", id="EPERM"),
    pytest.param(OSError(errno.EIO, "I/O error"), "cgroup_removed", "read_error", id="EIO"),
    pytest.param(KeyError("usage"), "cgroup_removed", "unexpected", id="a defect"),
])
def test_classify(exc: BaseException, on_missing: str, cause: str) -> None:
    assert classify(exc, on_missing=on_missing) == cause
    assert cause in CAUSES


def test_attempt_turns_a_defect_into_an_unexpected_failure_with_its_traceback() -> None:
    def read() -> float:
        return {}["usage"]

    failure = attempt("docker_stats", "w1", "docker:abc", read)
    assert isinstance(failure, CollectorFailure) and failure.cause == "unexpected"
    assert failure.exc is not None and failure.exc.__traceback__ is not None
    assert attempt("docker_stats", "w1", "docker:abc", lambda: 42.0) == 42.0
    with pytest.raises(KeyboardInterrupt):   # not an Exception: never swallowed
        attempt("docker_stats", "w1", "docker:abc", lambda: (_ for _ in ()).throw(KeyboardInterrupt()))


# --- the cgroup collector on a temp-dir cgroupfs ----------------------------------------------------


def _workload(wid: str, cgroup: str = "", *, kind: str = "process", ref: str = "") -> Workload:
    return Workload(id=wid, name=wid, kind=kind, tier="batch", priority=0, request=zeros(), limit=zeros() + math.inf,
                    start_s=0.0, grace_s=10.0, cgroup=cgroup or f"kubepods/{wid}", runtime_ref=ref)


@pytest.mark.parametrize(("damage", "cause"), [
    pytest.param(lambda d: shutil.rmtree(d), "cgroup_removed", id="group removed before the read"),
    pytest.param(lambda d: (d / "cpu.stat").unlink(), "cgroup_removed", id="removed between memory and cpu files"),
    pytest.param(lambda d: (d / "memory.current").write_text(""), "malformed", id="empty memory.current"),
    pytest.param(lambda d: (d / "memory.current").write_text("12ab\n"), "malformed", id="garbage memory.current"),
    pytest.param(lambda d: ((d / "memory.current").unlink(), (d / "memory.current").mkdir()), "read_error",
                 id="memory.current is a directory (EISDIR)"),
])
def test_cgroup_collector_skips_the_damaged_workload_only(tmp_path: Path, damage, cause: str) -> None:
    root = make_v2_tree(tmp_path / "cg", {"kubepods/ok": v2_files(memory_bytes=GIB),
                                          "kubepods/bad": v2_files(memory_bytes=GIB)})
    damage(root / "kubepods" / "bad")
    telemetry = CgroupTelemetry(CgroupCollector(CgroupV2(root), tmp_path / "proc"))
    result = telemetry.collect([_workload("ok"), _workload("bad")], T0)
    assert set(result.samples) == {"ok"} and result.samples["ok"].usage[RAM] == GIB
    assert [(f.collector, f.workload, f.ref, f.cause) for f in result.failures] == [
        ("cgroup", "bad", "kubepods/bad", cause)]
    assert result.gone == ({"bad"} if cause == "cgroup_removed" else set())


# --- Docker stats through the real docker client, against a fake engine ----------------------------


def _stats(cid: str, **changes) -> dict:
    doc = copy.deepcopy(STATS)
    doc["id"] = cid
    doc.update(changes)
    return doc


def test_docker_stats_each_cause_costs_only_its_container(json_server) -> None:
    good, answers = "a" * 64, {
        "b" * 64: (200, b""),                                                         # stopped mid-request
        "c" * 64: (200, json.dumps(_stats("c" * 64)).encode()[:300]),                # cut short
        "d" * 64: (404, {"message": "No such container: ddd"}),
        "e" * 64: (409, {"message": "removal of container eee is already in progress"}),
        "f" * 64: (200, _stats("f" * 64, read="0001-01-01T00:00:00Z", memory_stats={})),   # no longer running
        "0" * 64: (200, {k: v for k, v in _stats("0" * 64).items() if k != "memory_stats"}),
    }
    json_server.routes[f"/v1.41/containers/{good}/stats"] = _stats(good)
    for cid, (status, body) in answers.items():
        json_server.routes[f"/v1.41/containers/{cid}/stats"] = body
        json_server.status[f"/v1.41/containers/{cid}/stats"] = status
    client = docker.DockerClient(base_url=json_server.url.replace("http://", "tcp://"), version="1.41")
    collector = DockerStatsCollector(client)
    try:
        result = collector.collect([_workload(c, kind=KIND_DOCKER, ref=c) for c in [good, *answers]], T0)
    finally:
        collector.close()
    assert set(result.samples) == {good}
    assert {f.workload[0]: f.cause for f in result.failures} == {
        "b": "empty_body", "c": "truncated", "d": "gone", "e": "gone", "f": "gone", "0": "malformed"}
    assert result.gone == {"d" * 64, "e" * 64, "f" * 64}
    assert all(f.collector == "docker_stats" and f.ref.startswith("docker:/containers/") for f in result.failures)


def test_docker_discovery_skips_a_container_gone_between_list_and_inspect(json_server, tmp_path: Path) -> None:
    here, gone = "1" * 64, "2" * 64
    json_server.routes["/v1.41/containers/json"] = [{"Id": gone}, {"Id": here}]
    json_server.routes[f"/v1.41/containers/{gone}/json"] = {"message": f"No such container: {gone}"}
    json_server.status[f"/v1.41/containers/{gone}/json"] = 404
    json_server.routes[f"/v1.41/containers/{here}/json"] = {
        "Id": here, "Name": "/web", "Config": {"Labels": {"kalena.naughtian.io/tier": "batch"}},
        "HostConfig": {"Memory": 0}, "State": {"Pid": 4242, "StartedAt": "2026-12-01T10:00:00Z", "Status": "running"}}
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "cgroup").write_text("4:memory:/docker/web\n")
    source = DockerSource(docker.DockerClient(base_url=json_server.url.replace("http://", "tcp://"), version="1.41"),
                          proc_root=tmp_path, cgroup_version=1)
    result = source.discover(T0)
    assert [w.id for w in result.workloads] == [here] and result.workloads[0].cgroup == "docker/web"
    assert [(f.collector, f.workload, f.cause) for f in result.failures] == [("discovery_docker", gone, "gone")]


# --- cAdvisor and kubelet answers cut short ---------------------------------------------------------


def test_cadvisor_answers_cut_short_or_empty(json_server) -> None:
    whole = json.dumps(load_fixture("cadvisor_v20_stats.json")).encode()
    json_server.routes["/api/v2.0/stats/kubepods/burstable/pod1234"] = whole
    json_server.routes["/api/v2.0/stats/kubepods/cut"] = whole[: len(whole) // 2]
    json_server.routes["/api/v2.0/stats/kubepods/empty"] = b""
    result = CadvisorCollector(json_server.url).collect(
        [_workload("default/web-0", "kubepods/burstable/pod1234"), _workload("cut"), _workload("empty")], T0)
    assert set(result.samples) == {"default/web-0"}
    assert {f.workload: f.cause for f in result.failures} == {"cut": "truncated", "empty": "empty_body"}


def test_kubelet_summary_cut_short_is_one_failure_and_a_bad_pod_only_its_own(json_server) -> None:
    summary = load_fixture("kubelet_summary.json")
    telemetry = KubeletTelemetry(KubeletClient(json_server.url))
    pods = [_workload("default/web-0"), _workload("batch/job-a-xyz")]
    whole = json.dumps(summary).encode()
    json_server.routes["/stats/summary"] = whole[: len(whole) - 40]
    cut = telemetry.collect(pods, T0)
    assert cut.samples == {} and [(f.collector, f.workload, f.cause) for f in cut.failures] == [
        ("kubelet_summary", "", "truncated")]
    summary["pods"][1]["memory"]["workingSetBytes"] = -5
    json_server.routes["/stats/summary"] = summary
    one_bad = telemetry.collect(pods, T0)
    assert set(one_bad.samples) == {"default/web-0"}
    assert [(f.workload, f.cause) for f in one_bad.failures] == [("batch/job-a-xyz", "malformed")]
    assert "pods[1]" in one_bad.failures[0].detail and "memory.workingSetBytes" in one_bad.failures[0].detail


# --- counted always, logged once per workload and cause ---------------------------------------------


def test_failure_log_counts_every_failure_and_logs_each_workload_and_cause_once(caplog) -> None:
    now = [0.0]
    counted: list[tuple[str, str]] = []
    failures = FailureLog(on_count=lambda c, k: counted.append((c, k)), repeat_log_s=600.0, clock=lambda: now[0])
    empty = CollectorFailure("docker_stats", "w1", "docker:/containers/aaa/stats", "empty_body", "Expecting value")
    caplog.set_level(logging.INFO, logger="kalena.agent.collectors")
    written = [failures.record(empty) for _ in range(50)]           # one per sample round, 50 rounds
    assert written == [True] + [False] * 49 and len(counted) == 50
    assert len(caplog.records) == 1 and caplog.records[0].levelname == "WARNING"
    assert "docker:/containers/aaa/stats" in caplog.messages[0] and "empty_body" in caplog.messages[0]
    # another cause of the same container, or the same cause of another container: a line each
    assert failures.record(CollectorFailure("docker_stats", "w1", "docker:aaa", "gone", "404"))
    assert failures.record(CollectorFailure("docker_stats", "w2", "docker:bbb", "empty_body", ""))
    assert caplog.records[-2].levelname == "INFO"                   # gone: a workload ending is routine
    now[0] = 601.0                                                   # a repeat after the window says how many
    assert failures.record(empty) and "49 more since the last line" in caplog.messages[-1]
    failures.forget("w2")                                            # left the node: a new failure logs again
    assert failures.record(CollectorFailure("docker_stats", "w2", "docker:bbb", "empty_body", ""))
    # 50 rounds of w1 + w2 + w1 after the window + w2 after forget = 53
    assert failures.counts == {("docker_stats", "empty_body"): 53, ("docker_stats", "gone"): 1}
    assert failures.total("docker_stats") == 54 and failures.total(cause="gone") == 1


def test_an_unexpected_failure_is_logged_with_its_traceback_once(caplog) -> None:
    failures = FailureLog()
    caplog.set_level(logging.INFO, logger="kalena.agent.collectors")
    for _ in range(3):
        failures.record(attempt("cadvisor", "w1", "http://cadvisor/x", lambda: {}["usage"]))
    assert len(caplog.records) == 1 and caplog.records[0].levelname == "ERROR"
    assert caplog.records[0].exc_info is not None and "KeyError" in caplog.text and "Traceback" in caplog.text
    assert failures.counts == {("cadvisor", "unexpected"): 3}


def test_metrics_export_collector_errors_by_collector_and_cause() -> None:
    metrics = AgentMetrics()
    failures = FailureLog(on_count=metrics.collector_error)
    for cause in ("empty_body", "empty_body", "gone"):
        failures.record(CollectorFailure("docker_stats", "w1", "", cause, ""))
    text = generate_latest(metrics.registry).decode()
    assert 'kalena_agent_collector_errors_total{cause="empty_body",collector="docker_stats"} 2.0' in text
    assert 'kalena_agent_collector_errors_total{cause="gone",collector="docker_stats"} 1.0' in text


# --- the loop lives through a collector's defect and keeps enforcing --------------------------------


class _DefectiveFor(CgroupCollector):
    """A cgroup collector with a bug for one workload (an index error a parser might have)."""

    def __init__(self, *args, broken: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.broken = broken

    def sample(self, workload, now_s, *, memory_only=False):
        if workload.id == self.broken:
            return [][0]
        return super().sample(workload, now_s, memory_only=memory_only)


class _Broken:
    """A telemetry whose ``collect`` itself fails (as a whole source would)."""

    name = "cadvisor"

    def collect(self, workloads, now_s, *, memory_only=False):
        raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")

    def forget(self, workload_id):
        pass

    def exclude_psi(self, workload_ids):
        pass


def test_the_loop_keeps_throttling_through_one_workloads_defect(tmp_path: Path, caplog) -> None:
    rig = Rig(tmp_path, capacity={"cpu": 4000.0, "ram": 64 * GIB})
    try:
        rig.add("s", tier="service", requests={"cpu": "3600m"}, limits={"cpu": "3600m"}, start_time=T0 - 10_000)
        rig.add("b", tier="batch", requests={"cpu": "1"}, limits={"cpu": "1"}, start_time=T0 - 10_000)
        rig.add("x", tier="batch", requests={"cpu": "100m"}, start_time=T0 - 10_000)
        counted: list[tuple[str, str]] = []
        loop = rig.build(on_collector_error=lambda c, k: counted.append((c, k)))
        loop.telemetry = CgroupTelemetry(_DefectiveFor(rig.fs, rig.proc_root, broken="x"))
        caplog.set_level(logging.INFO, logger="kalena.agent.collectors")
        loop.tick(T0, 0.0)
        rig.set_files("s", usage_usec=32_000_000, procs=f"{rig.procs['s'].pid}\n")
        rig.set_files("b", usage_usec=10_000_000, procs=f"{rig.procs['b'].pid}\n", cpu_max=rig.file("b", "cpu.max"))
        for step in range(1, 4):
            loop.tick(T0 + 10 * step, 10.0 * step)
        # S uses 3.2 cores: r_S = min(3.6, 1.15 × 3.2) = 3.6 → B's budget 4 − 3.6 − x's 0.1 request ≤ 0.4 core
        assert rig.file("b", "cpu.max") != "max 100000" and rig.actions("throttle")
        assert counted == [("cgroup", "unexpected")] * 4 and loop.table.by_id["s"].sample is not None
        errors = [r for r in caplog.records if r.levelname == "ERROR"]
        assert len(errors) == 1 and errors[0].exc_info[0] is IndexError and "x" in errors[0].getMessage()
        # a whole source failing: no samples this round, still no exception out of tick
        loop.telemetry = _Broken()
        loop.tick(T0 + 40, 40.0)
        assert counted[-1] == ("cadvisor", "truncated") and loop.collector_failures.total("cadvisor") == 1
    finally:
        rig.close()
