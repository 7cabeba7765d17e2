"""Docker stats, cAdvisor (v1.3, v2.0) and kubelet /stats/summary: hand-written fixtures from
the documented field names (each cites its document), served by a real local HTTP server where
the agent talks HTTP. Numbers in comments show the arithmetic."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

from agents.collectors.cadvisor import CadvisorCollector, parse_v13_container, parse_v20_stats
from agents.collectors.docker_stats import parse_docker_stats, sample_from_point
from agents.collectors.kubelet import KubeletClient, KubeletTelemetry, parse_kubelet_summary
from agents.collectors.rates import RateTracker
from agents.errors import TelemetryError
from agents.model import KIND_KUBERNETES, Workload
from kalena_engine.resources import CPU, DISK_READ, DISK_WRITE, NET_IN, NET_OUT, RAM, STORAGE, zeros
from tests.agents.conftest import load_fixture

MIB = 2**20


def workload(wid: str, cgroup: str = "") -> Workload:
    return Workload(wid, wid, KIND_KUBERNETES, "service", 0, zeros(), zeros() + math.inf, 0.0, 30.0, cgroup)


def test_docker_stats_fixture() -> None:
    point = parse_docker_stats(load_fixture("docker_stats_v1.json"), source="fixture")
    assert point.cpu_mcpu == pytest.approx(500.0)                  # (5.5e9 − 5.0e9) ns in 1 s
    assert point.working_set_bytes == 200 * MIB                    # 300 MiB usage − 100 MiB inactive file
    assert point.throttling.nr_throttled == 20 and point.throttling.throttled_time_us == 1.5e6
    assert (point.io_read_bytes, point.io_write_bytes) == (4096, 8192)
    assert point.name == "batch-worker"


def test_docker_stats_rates_across_two_documents() -> None:
    doc = load_fixture("docker_stats_v1.json")
    rates = RateTracker()
    first = sample_from_point(parse_docker_stats(doc, source="d"), "c1", rates)
    assert math.isnan(first.usage[NET_IN])                          # one document: no network rate yet
    later = copy.deepcopy(doc)
    later["read"], later["preread"] = "2024-05-01T10:00:12.000000000Z", "2024-05-01T10:00:11.000000000Z"
    later["networks"]["eth0"]["rx_bytes"] = 1000 + 10 * 500         # +5,000 B in 10 s
    later["blkio_stats"]["io_service_bytes_recursive"][0]["value"] = 4096 + 10 * 1024
    second = sample_from_point(parse_docker_stats(later, source="d"), "c1", rates)
    assert second.usage[NET_IN] == pytest.approx(500.0) and second.usage[DISK_READ] == pytest.approx(1024.0)


def test_docker_stats_cgroup_v2_memory_key() -> None:
    doc = load_fixture("docker_stats_v1.json")
    doc["memory_stats"]["stats"] = {"inactive_file": 50 * MIB, "anon": 250 * MIB}
    assert parse_docker_stats(doc, source="d").working_set_bytes == 250 * MIB   # 300 − 50 MiB


@pytest.mark.parametrize(("mutate", "field"), [
    pytest.param(lambda d: d["cpu_stats"]["cpu_usage"].pop("total_usage"), "cpu_stats.cpu_usage.total_usage", id="missing cpu"),
    pytest.param(lambda d: d["memory_stats"].__setitem__("usage", "lots"), "memory_stats.usage", id="string memory"),
    pytest.param(lambda d: d.__setitem__("read", "soon"), "read", id="bad time"),
])
def test_malformed_docker_stats_name_the_field(mutate, field: str) -> None:
    doc = load_fixture("docker_stats_v1.json")
    mutate(doc)
    with pytest.raises(TelemetryError) as info:
        parse_docker_stats(doc, source="docker:/containers/3f2a/stats")
    assert field in str(info.value) and "docker:/containers/3f2a/stats" in str(info.value)


def test_cadvisor_v13_fixture() -> None:
    sample = parse_v13_container(load_fixture("cadvisor_v13_container.json"), "default/web-0", source="f")
    assert sample.usage[CPU] == pytest.approx(500.0)                # 5e9 ns over 10 s
    assert sample.usage[RAM] == 200 * MIB
    assert sample.usage[DISK_READ] == pytest.approx(1000.0)         # 10,000 B in 10 s
    assert sample.usage[DISK_WRITE] == pytest.approx(500.0)
    assert (sample.usage[NET_IN], sample.usage[NET_OUT]) == pytest.approx((10_000.0, 5_000.0))
    assert sample.cpu_throttling.nr_throttled == 100 and sample.ts_s == pytest.approx(1714557610.0)


def test_cadvisor_v20_prefers_instantaneous_cpu() -> None:
    doc = load_fixture("cadvisor_v20_stats.json")
    sample = parse_v20_stats(doc, "default/web-0", "/kubepods/burstable/pod1234", source="f")
    assert sample.usage[CPU] == pytest.approx(250.0)                # cpu_inst 2.5e8 nanocores
    assert sample.usage[RAM] == 300 * MIB
    with pytest.raises(TelemetryError, match="no stats for '/other'"):
        parse_v20_stats(doc, "x", "/other", source="f")


@pytest.mark.parametrize("api", ["v1.3", "v2.0"])
def test_cadvisor_collector_over_http(json_server, api: str) -> None:
    json_server.routes["/api/v1.3/containers/kubepods/burstable/pod1234"] = load_fixture("cadvisor_v13_container.json")
    json_server.routes["/api/v2.0/stats/kubepods/burstable/pod1234"] = load_fixture("cadvisor_v20_stats.json")
    json_server.routes["/api/v2.0/stats/kubepods/besteffort/broken"] = b"{not json"
    json_server.routes["/api/v1.3/containers/kubepods/besteffort/broken"] = b"{not json"
    collector = CadvisorCollector(json_server.url, api)
    result = collector.collect([workload("default/web-0", "kubepods/burstable/pod1234"),
                                workload("default/gone", "kubepods/besteffort/gone"),
                                workload("default/broken", "kubepods/besteffort/broken")], 0.0)
    assert result.samples["default/web-0"].usage[CPU] == pytest.approx(500.0 if api == "v1.3" else 250.0)
    assert result.gone == {"default/gone"}                          # 404: the container is gone
    assert {f.workload: f.cause for f in result.failures} == {"default/gone": "gone", "default/broken": "malformed"}
    broken = next(str(f) for f in result.failures if f.workload == "default/broken")
    assert "not JSON" in broken and "broken" in broken


def test_kubelet_summary_fixture() -> None:
    summary = parse_kubelet_summary(load_fixture("kubelet_summary.json"), source="f")
    web = summary.pods["default/web-0"]
    assert web.usage[CPU] == pytest.approx(750.0)                   # 7.5e8 nanocores
    assert web.usage[RAM] == 512 * MIB and web.usage[STORAGE] == 2**30
    assert web.ts_s == pytest.approx(1714557598.0)                  # the older of cpu (10:00:00) and memory (09:59:58)
    assert web.psi["cpu"].some.avg10_pct == 5.0
    assert summary.node.working_set_bytes == 8 * 2**30
    assert summary.node.psi["memory"].some.avg10_pct == 30.0 and summary.node.psi["memory"].full.avg10_pct == 1.0
    assert summary.pods["batch/job-a-xyz"].usage[CPU] == pytest.approx(1500.0)


def test_malformed_summary_names_the_pod_field() -> None:
    doc = load_fixture("kubelet_summary.json")
    doc["pods"][1]["memory"]["workingSetBytes"] = -5
    with pytest.raises(TelemetryError) as info:
        parse_kubelet_summary(doc, source="https://node:10250/stats/summary")
    assert "pods[1]" in str(info.value) and "memory.workingSetBytes" in str(info.value)


def test_kubelet_telemetry_over_http_with_bearer_token(json_server, tmp_path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    json_server.routes["/stats/summary"] = load_fixture("kubelet_summary.json")
    telemetry = KubeletTelemetry(KubeletClient(json_server.url, token_file=str(token)))
    result = telemetry.collect([workload("default/web-0"), workload("batch/job-a-xyz"), workload("x/absent")], 0.0)
    assert set(result.samples) == {"default/web-0", "batch/job-a-xyz"} and not result.failures
    assert json_server.requests[-1][2]["Authorization"] == "Bearer s3cret"
    assert telemetry.last_node.working_set_bytes == 8 * 2**30
    json_server.routes["/stats/summary"] = b"<html>"
    broken = telemetry.collect([workload("default/web-0")], 0.0)
    assert broken.samples == {} and [(f.workload, f.cause) for f in broken.failures] == [("", "malformed")]
    assert "not JSON" in str(broken.failures[0])


def test_rate_tracker_handles_resets() -> None:
    rates = RateTracker()
    assert math.isnan(rates.rate("k", 0.0, 100.0))
    assert rates.rate("k", 5.0, 600.0) == 100.0                     # 500 in 5 s
    assert math.isnan(rates.rate("k", 6.0, 10.0))                    # counter reset
    assert rates.rate("k", 8.0, 30.0) == 10.0
    assert np.isnan(rates.rate("k", 8.0, 40.0))                      # time did not advance
