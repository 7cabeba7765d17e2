"""The pass's snapshot from node rows: the same slack whether a row holds the selector's arrays,
plain lists, or no ledger yet (``None``: zeros), and the flags derived from the same columns."""

from __future__ import annotations

import numpy as np

from kalena_engine.placement import BatchResidents, Evictions, ProductionPods
from kalena_web.scheduling import mappers
from kalena_web.scheduling.mappers import NodeRow


def row(i: int, *, batch_request, prod=(1.0,) * 8, as_array=True) -> NodeRow:
    convert = np.asarray if as_array else list
    return NodeRow(id=i, name=f"n{i}", zone="z", rack="r", labels={}, taints=[], takes_batch=True,
                   capacity=convert([8.0] * 8), prod_request=convert(prod), prod_reservation=convert(prod),
                   batch_request=None if batch_request is None else convert(batch_request),
                   batch_reservation=None if batch_request is None else convert(batch_request),
                   version=1, stale=False, ready=True, ineligible_until_s=0.0, volatility=0.0)


def snapshot(rows):
    empty = np.zeros(0, dtype=np.int64)
    return mappers.snapshot(
        rows, now_s=0.0,
        production=ProductionPods(ids=(), node=empty, namespaces=(), labels=(),
                                  terms=mappers.production_terms([], ()), names=()),
        batch=BatchResidents(node=empty, count=empty, template=empty, templates=()),
        evictions=Evictions(owner=np.zeros(0, dtype=object), node=empty, time_s=np.zeros(0)))


def test_arrays_lists_and_a_missing_ledger_give_the_same_slack() -> None:
    half = [0.5] * 8
    arrays = snapshot([row(0, batch_request=half), row(1, batch_request=None)])
    lists = snapshot([row(0, batch_request=half, as_array=False), row(1, batch_request=None, as_array=False)])
    for snap in (arrays, lists):
        assert snap.slack.shape == (2, 8)
        assert snap.slack[0, 0] == 8.0 - 1.0 - 0.5 and snap.slack[1, 0] == 8.0 - 1.0  # None: no batch reserved
        assert snap.has_batch.tolist() == [True, False] and snap.has_production.tolist() == [True, True]
    assert np.array_equal(arrays.slack, lists.slack)


def test_a_node_with_only_batch_has_no_production() -> None:
    snap = snapshot([row(0, batch_request=[1.0] * 8, prod=[0.0] * 8)])
    assert snap.has_production.tolist() == [False] and snap.has_batch.tolist() == [True]


def test_a_row_kept_between_passes_gives_its_table_entry_once_and_a_row_read_again_its_new_one() -> None:
    import dataclasses

    kept = dataclasses.replace(row(0, batch_request=None), labels={"zone": "a"},
                               taints=[{"key": "gpu", "value": "yes", "effect": "NoSchedule"}])
    first = mappers.node_table([kept, row(1, batch_request=None)])
    again = mappers.node_table([kept, row(1, batch_request=None)])
    assert again.labels[0] is first.labels[0] and again.taints[0] is first.taints[0]  # made once for the kept row
    assert [t.key for t in again.taints[0]] == ["gpu"] and again.labels[0] == {"zone": "a"}
    read_again = dataclasses.replace(kept, labels={"zone": "b"}, taints=[])  # its key moved: a new row
    table = mappers.node_table([read_again, row(1, batch_request=None)])
    assert table.labels[0] == {"zone": "b"} and table.taints[0] == () and table.names == ("n0", "n1")
