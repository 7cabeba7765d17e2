"""The lab's plan and CPU budget (pure): what fits half the machine, and the numbers a refusal gives."""

from __future__ import annotations

import pytest

from agents.lab.budget import lab_plan
from agents.lab.errors import BudgetRefused, LabError

GIB = 2**30


@pytest.mark.parametrize(("nodes", "cpu_mcpu", "cores", "fits"), [
    pytest.param(4, 250, 2, True, id="4x250m-on-2-cores: 1000 <= floor(2*1000*0.5)=1000"),
    pytest.param(5, 250, 2, False, id="5x250m-on-2-cores: 1250 > 1000"),
    pytest.param(2, 500, 2, True, id="2x500m-on-2-cores: 1000 <= 1000"),
    pytest.param(8, 250, 4, True, id="8x250m-on-4-cores: 2000 <= 2000"),
    pytest.param(3, 400, 2, False, id="3x400m-on-2-cores: 1200 > 1000"),
])
def test_cpu_budget_is_half_the_cores(nodes: int, cpu_mcpu: int, cores: int, fits: bool) -> None:
    kwargs = dict(name="lab", nodes=nodes, cpu_mcpu=cpu_mcpu, memory_bytes=256 * 2**20, host_cores=cores,
                  host_memory_bytes=16 * GIB)
    if fits:
        plan = lab_plan(**kwargs)
        assert plan.cpu_budget_mcpu == cores * 500
        assert sum(n.cpu_mcpu for n in plan.nodes) <= plan.cpu_budget_mcpu
    else:
        with pytest.raises(BudgetRefused) as refused:
            lab_plan(**kwargs)
        assert (refused.value.dim, refused.value.asked, refused.value.budget) == ("cpu", nodes * cpu_mcpu, cores * 500)
        assert f"{nodes} nodes × {cpu_mcpu} m = {nodes * cpu_mcpu} m" in str(refused.value)
        assert f"budget of {cores * 500} m" in str(refused.value)


def test_memory_budget_refusal_gives_the_numbers() -> None:
    # 4 nodes × 3072 MiB = 12288 MiB > floor(16 GiB × 0.5) = 8192 MiB
    with pytest.raises(BudgetRefused) as refused:
        lab_plan(name="lab", nodes=4, cpu_mcpu=100, memory_bytes=3 * GIB, host_cores=4, host_memory_bytes=16 * GIB)
    assert (refused.value.dim, refused.value.asked, refused.value.budget) == ("memory", 12 * GIB, 8 * GIB)
    assert "12288 MiB" in str(refused.value) and "8192 MiB" in str(refused.value)


def test_plan_names_addresses_quotas_and_cgroups() -> None:
    plan = lab_plan(name="demo", nodes=3, cpu_mcpu=250, memory_bytes=256 * 2**20, host_cores=2,
                    host_memory_bytes=8 * GIB)
    assert [(n.name, n.address, n.cgroup, n.cpu_quota_us) for n in plan.nodes] == [
        ("demo-1", "127.0.0.2", "kalena-demo/demo-1", 25_000),   # 250 m × 100 000 µs / 1000
        ("demo-2", "127.0.0.3", "kalena-demo/demo-2", 25_000),
        ("demo-3", "127.0.0.4", "kalena-demo/demo-3", 25_000),
    ]


@pytest.mark.parametrize(("kwargs", "field"), [
    pytest.param({"nodes": 0}, "--nodes", id="no-nodes"),
    pytest.param({"nodes": 254}, "--nodes", id="more-nodes-than-loopback-addresses"),
    pytest.param({"cpu_mcpu": 5}, "--cpu-m", id="under-the-cfs-floor"),
    pytest.param({"memory_bytes": 16 * 2**20}, "--memory-mib", id="under-32-MiB"),
    pytest.param({"name": "Bad_Name"}, "--name", id="bad-name"),
    pytest.param({"budget_ratio": 1.5}, "--budget-ratio", id="ratio-over-1"),
])
def test_bad_input_names_the_flag(kwargs: dict, field: str) -> None:
    base = dict(name="lab", nodes=2, cpu_mcpu=100, memory_bytes=64 * 2**20, host_cores=64, host_memory_bytes=64 * GIB)
    with pytest.raises(LabError) as refused:
        lab_plan(**{**base, **kwargs})
    assert refused.value.field == field


def test_a_subnet_moves_every_address_and_a_bad_one_is_refused() -> None:
    plan = lab_plan(name="side", nodes=2, cpu_mcpu=100, memory_bytes=64 * 2**20, host_cores=2,
                    host_memory_bytes=2**33, subnet="127.0.7")
    assert [n.address for n in plan.nodes] == ["127.0.7.2", "127.0.7.3"] and plan.console_address == "127.0.7.1"
    for bad in ("10.0.0", "127.0.300", "127.0.0.1", ""):
        with pytest.raises(LabError) as refused:
            lab_plan(name="side", nodes=1, cpu_mcpu=100, memory_bytes=64 * 2**20, host_cores=2,
                     host_memory_bytes=2**33, subnet=bad)
        assert refused.value.field == "--subnet"
