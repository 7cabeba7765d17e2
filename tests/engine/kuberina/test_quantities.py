"""Case C8: Kuberina quantities are parsed by the planner's rules."""

from __future__ import annotations

import pytest

from kalena_engine.errors import IRError
from kalena_engine.kuberina.quantity import parse_quantity
from kalena_engine.kuberina.workloads import unrolled_names
from kalena_engine.kuberina.yamlio import Where

W = Where("test.yaml", "nodes[a].allocatable", 7)


@pytest.mark.parametrize(
    ("dim", "value", "expected"),
    [
        pytest.param("cpu", "300m", 0.3, id="cpu 300m = 0.3 cores"),
        pytest.param("cpu", 4, 4.0, id="cpu bare number in cores"),
        pytest.param("ram", "512Mi", 0.5, id="ram 512Mi = 0.5 GiB"),
        pytest.param("ram", "16Gi", 16.0, id="ram 16Gi"),
        pytest.param("ram", "1Ti", 1024.0, id="ram 1Ti = 1024 GiB"),
        pytest.param("storage", "200Gi", 200.0, id="storage binary"),
        pytest.param("disk_read", "500M", 500.0, id="disk 500M = 500 MB/s"),
        pytest.param("net_in", "1G", 1000.0, id="network 1G = 1000 MB/s"),
        pytest.param("net_out", "1000k", 1.0, id="1000k = 1 MB/s"),
        pytest.param("gpu", 8, 8.0, id="gpu devices"),
    ],
)
def test_quantity_follows_planner_rules(dim: str, value: object, expected: float) -> None:
    assert parse_quantity(dim, value, W) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("dim", "value", "accepted_words"),
    [
        pytest.param("ram", "16G", ("Ki", "Mi", "Gi", "Ti"), id="ram 16G is decimal: rejected"),
        pytest.param("disk_write", "5Gi", ("k", "M", "G"), id="disk 5Gi is binary: rejected"),
        pytest.param("cpu", "two", ("300m",), id="not a number"),
        pytest.param("cpu", -1, ("cores",), id="negative"),
        pytest.param("ram", True, ("GiB",), id="a boolean is not a quantity"),
    ],
)
def test_bad_quantity_names_field_value_and_accepted(dim: str, value: object, accepted_words: tuple[str, ...]) -> None:
    with pytest.raises(IRError) as caught:
        parse_quantity(dim, value, W)
    message = str(caught.value)
    assert "test.yaml:7" in message
    assert "nodes[a].allocatable" in message
    assert repr(value) in message
    for word in accepted_words:
        assert word in message


@pytest.mark.parametrize(
    ("replicas", "names"),
    [
        pytest.param(1, ["web-0"], id="replicas 1 -> name-0"),
        pytest.param(3, ["web-0000", "web-0001", "web-0002"], id="replicas 3 -> 4-digit suffixes"),
        pytest.param(0, [], id="replicas 0 -> no pods"),
    ],
)
def test_replica_unrolling(replicas: int, names: list[str]) -> None:
    assert unrolled_names("web", replicas) == names
