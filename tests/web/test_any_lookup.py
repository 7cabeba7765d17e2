"""``field__any=values`` finds the rows ``field__in=values`` finds, with the values bound as one
array on PostgreSQL (one placeholder whatever their number)."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from kalena_web.inventory.models import Cluster, Node, Workload


@pytest.fixture
def workloads(db) -> list[Workload]:
    cluster = Cluster.objects.create(name="any", kind=Cluster.LIVE)
    zero = (0.0,) * 8
    node = Node.objects.create(cluster=cluster, name="n1", row=0, allocatable=zero, capacity=zero)
    return [Workload.objects.create(cluster=cluster, name=f"batch/w-{i}", kind=Workload.BATCH, row=i, request=zero, limit=zero,
                                    node=node if i % 2 else None) for i in range(300)]


def ids(queryset) -> list[int]:
    return sorted(queryset.values_list("id", flat=True))


@pytest.mark.parametrize("shape", [list, set, tuple, np.array])
def test_the_rows_of_in_for_ids_names_and_relations(workloads, shape) -> None:
    picked = [w.id for w in workloads[::3]] + [10**9]   # and an id no row has
    assert ids(Workload.objects.filter(id__any=shape(picked))) == ids(Workload.objects.filter(id__in=picked))
    assert len(ids(Workload.objects.filter(id__any=shape(picked)))) == 100
    names = [w.name for w in workloads[:250]]
    assert ids(Workload.objects.filter(name__any=set(names))) == ids(Workload.objects.filter(name__in=names))
    node_id = workloads[1].node_id
    assert ids(Workload.objects.filter(node__any=[node_id])) == ids(Workload.objects.filter(node_id=node_id))
    assert ids(Workload.objects.filter(node_id__any=[node_id, None])) == ids(Workload.objects.filter(node_id=node_id))


def test_nothing_and_none_match_no_row(workloads) -> None:
    assert not Workload.objects.filter(id__any=[]).exists()
    assert not Workload.objects.filter(id__any=np.array([], dtype=np.int64)).exists()
    assert not Workload.objects.filter(node_id__any=[None]).exists()   # NULL equals nothing, as with __in
    assert Workload.objects.exclude(id__any=[]).count() == 300


def test_one_placeholder_whatever_the_number_of_values(workloads) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the array parameter: PostgreSQL")
    with CaptureQueriesContext(connection) as seen:
        assert len(ids(Workload.objects.filter(id__any=[w.id for w in workloads]))) == 300
    assert "= ANY(" in seen.captured_queries[0]["sql"] and " IN (" not in seen.captured_queries[0]["sql"]


def test_an_empty_collection_sends_no_query(workloads) -> None:
    with CaptureQueriesContext(connection) as seen:
        assert Workload.objects.filter(id__any=set()).delete() == (0, {})
        assert list(Workload.objects.filter(name__any=[]).values_list("id", flat=True)) == []
    assert seen.captured_queries == []
