"""Pure parsers of kernel files and unit conversions: good input gives the documented numbers,
bad input an error naming the file, line and what was expected."""

from __future__ import annotations

import math

import pytest

from agents.cgroups import parse
from agents.collectors.psi import parse_psi, read_psi
from agents.errors import DiscoveryError, TelemetryError
from agents.units import (
    k8s_resources_vector,
    mcpu_from_ns,
    mcpu_from_quota,
    mcpu_from_us,
    parse_k8s_quantity,
    quota_us_from_mcpu,
    unix_s_from_rfc3339,
    working_set_bytes,
)
from kalena_engine.resources import CPU, GPU, RAM, STORAGE

PSI = "some avg10=1.50 avg60=0.20 avg300=0.00 total=1234\nfull avg10=0.25 avg60=0.00 avg300=0.00 total=99\n"


def test_parse_psi_reads_both_lines() -> None:
    stats = parse_psi(PSI)
    assert (stats.some.avg10_pct, stats.some.total_us) == (1.5, 1234)
    assert stats.full is not None and (stats.full.avg10_pct, stats.full.total_us) == (0.25, 99)
    # older kernels print no 'full' line for cpu
    assert parse_psi(PSI.splitlines()[0]).full is None


@pytest.mark.parametrize(("text", "problem"), [
    pytest.param("sometimes avg10=1 avg60=1 avg300=1 total=1\n", "unexpected line", id="unknown line kind"),
    pytest.param("some avg10=1 avg60=1 total=1\n", "missing avg300", id="missing field"),
    pytest.param("some avg10=x avg60=1 avg300=1 total=1\n", "non-numeric", id="non-numeric"),
    pytest.param("full avg10=1 avg60=1 avg300=1 total=1\n", "no 'some' line", id="no some line"),
])
def test_parse_psi_rejects_malformed_text_naming_source_and_line(text: str, problem: str) -> None:
    with pytest.raises(TelemetryError) as info:
        parse_psi(text, source="/proc/pressure/memory")
    assert problem in str(info.value) and "/proc/pressure/memory" in str(info.value)


def test_read_psi_reads_the_real_kernel_file() -> None:
    stats = read_psi("/proc/pressure/cpu")
    assert stats.some.total_us >= 0 and 0 <= stats.some.avg10_pct <= 100


def test_cgroup_file_parsers() -> None:
    assert parse.parse_flat_keyed("nr_periods 10\nnr_throttled 2\n", source="cpu.stat") == {"nr_periods": 10, "nr_throttled": 2}
    assert parse.parse_cpu_max("40000 100000\n", source="cpu.max") == (40000, 100000)
    assert parse.parse_cpu_max("max 100000", source="cpu.max") == (None, 100000)
    assert parse.format_cpu_max(40000, 100000) == "40000 100000"
    assert parse.parse_int_or_max("-1", source="cpu.cfs_quota_us") is None
    # v1 blkio: 4096 read + 8192 written on sda, 100 read on sdb; Total lines ignored
    blkio = "8:0 Read 4096\n8:0 Write 8192\n8:0 Total 12288\n8:16 Read 100\n8:16 Write 0\nTotal 12388\n"
    assert parse.parse_blkio_bytes(blkio, source="blkio") == (4196, 8192)
    assert parse.parse_io_stat("8:0 rbytes=10 wbytes=20 rios=1 wios=2\n8:16 rbytes=5 wbytes=0\n", source="io.stat") == (15, 20)
    assert parse.parse_proc_cgroup("4:memory:/docker/abc\n1:cpu,cpuacct:/docker/abc\n0::/docker/abc\n", source="p") == {
        "memory": "docker/abc", "cpu": "docker/abc", "cpuacct": "docker/abc", "": "docker/abc"}
    net = ("Inter-|   Receive                                                |  Transmit\n"
           " face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
           "    lo:     500       5    0    0    0     0          0         0      500       5    0    0    0     0       0          0\n"
           "  eth0:    1000      10    0    0    0     0          0         0     2000      20    0    0    0     0       0          0\n")
    assert parse.parse_net_dev(net, source="net/dev") == (1000, 2000)


@pytest.mark.parametrize(("fn", "text"), [
    pytest.param(parse.parse_flat_keyed, "nr_periods ten\n", id="flat keyed non-integer"),
    pytest.param(parse.parse_flat_keyed, "nr_periods 1 2\n", id="flat keyed three tokens"),
    pytest.param(parse.parse_cpu_max, "40000\n", id="cpu.max one token"),
    pytest.param(parse.parse_int, "lots\n", id="single value"),
    pytest.param(parse.parse_blkio_bytes, "8:0 Read\n", id="blkio short line"),
    pytest.param(parse.parse_proc_cgroup, "garbage\n", id="proc cgroup"),
])
def test_cgroup_parsers_reject_malformed_files(fn, text: str) -> None:
    with pytest.raises(TelemetryError) as info:
        fn(text, source="/sys/fs/cgroup/x/file")
    assert "/sys/fs/cgroup/x/file" in str(info.value)


@pytest.mark.parametrize(("value", "expected"), [
    pytest.param("500m", 0.5, id="millicores"), pytest.param("2", 2.0, id="cores"),
    pytest.param("64Mi", 64 * 2**20, id="binary suffix"), pytest.param("1G", 1e9, id="decimal suffix"),
    pytest.param("1e3", 1000.0, id="exponent"), pytest.param(3, 3.0, id="bare number"),
])
def test_kubernetes_quantities(value: object, expected: float) -> None:
    assert parse_k8s_quantity(value, source="pod", field="cpu") == pytest.approx(expected)


@pytest.mark.parametrize("value", ["5 cores", "1.5.2", "-1", "10Xi", True])
def test_bad_quantity_names_workload_field_and_accepted_forms(value: object) -> None:
    with pytest.raises(DiscoveryError) as info:
        parse_k8s_quantity(value, source="kubelet:default/web-0", field="spec.containers[0].resources.requests.cpu")
    text = str(info.value)
    assert "kubelet:default/web-0" in text and "requests.cpu" in text and "Mi" in text


def test_resource_vectors_in_internal_units() -> None:
    v = k8s_resources_vector({"cpu": "250m", "memory": "1Gi", "nvidia.com/gpu": 1, "ephemeral-storage": "2Gi",
                              "hugepages-2Mi": "2Mi"}, source="s", field="requests")
    assert (v[CPU], v[RAM], v[GPU], v[STORAGE]) == (250.0, 2**30, 1.0, 2 * 2**30)
    limits = k8s_resources_vector({"cpu": "1"}, source="s", field="limits", missing=math.inf)
    assert limits[CPU] == 1000.0 and math.isinf(limits[RAM])


def test_unit_conversions_worked_examples() -> None:
    assert mcpu_from_ns(2.5e9, 5.0) == 500.0          # 2.5 s of cpu in 5 s = half a core
    assert mcpu_from_us(32_000_000, 10.0) == 3200.0   # 32 s of cpu in 10 s = 3.2 cores
    assert quota_us_from_mcpu(400) == 40_000          # C6: 0.4 core at 100,000 µs
    assert quota_us_from_mcpu(1) == 1000              # the kernel's minimum quota
    assert mcpu_from_quota(150_000, 100_000) == 1500.0 and math.isinf(mcpu_from_quota(None, 100_000))
    assert working_set_bytes(300 * 2**20, 100 * 2**20) == 200 * 2**20
    assert working_set_bytes(100, 300) == 0.0
    assert unix_s_from_rfc3339("2024-01-02T03:04:05.5Z", source="s", field="f") == pytest.approx(1704164645.5)
    with pytest.raises(TelemetryError, match="read"):
        unix_s_from_rfc3339("yesterday", source="docker", field="read")


def test_parse_schedstat() -> None:
    assert parse.parse_schedstat("123456 7890 12\n", source="schedstat") == (123456, 7890)
    with pytest.raises(TelemetryError, match="/proc/1/task/1/schedstat"):
        parse.parse_schedstat("x y\n", source="/proc/1/task/1/schedstat")
