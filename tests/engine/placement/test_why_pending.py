"""Why-pending records: the binding constraint, nodes excluded per reason, the smallest
shortfall per dimension and the smallest request reduction that fits a node."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kalena_engine.kuberina.model import Taint
from kalena_engine.placement import BatchTemplate, Evictions, schedule_batch
from kalena_engine.placement import reasons as R
from kalena_engine.policy import Policy
from kalena_engine.resources import GIB
from tests.engine.placement.builders import Entry, Node, pending, snapshot

TEMPLATE = BatchTemplate("batch/etl", namespace="batch", node_selector={"pool": "batch"})
POOL = {"pool": "batch"}


def _record(nodes, entries=(Entry("etl-1", 3, cpu=2, ram=4),), template=TEMPLATE):
    result = schedule_batch(snapshot(nodes), pending(list(entries), [template]), Policy(), rng=np.random.default_rng(0))
    return result, result.why_pending()


def test_every_reason_is_counted_and_the_smallest_reduction_found() -> None:
    # request 2 cores / 4 GiB
    nodes = [
        Node("a", labels=POOL, ready=False),                           # node_not_ready
        Node("b", labels={"pool": "web"}),                             # node_selector
        Node("c", labels=POOL, taints=(Taint("dedicated", "db"),)),   # taint
        Node("d", labels=POOL, slack_cpu=1, slack_ram=3),             # cpu 1 core short, ram 1 GiB short
        Node("e", labels=POOL, slack_cpu=8, slack_ram=2),             # ram 2 GiB short
    ]
    result, [record] = _record(nodes)
    assert result.placed == 0
    assert record.excluded == {"node_not_ready": 1, "node_selector": 1, "taint": 1, "cpu": 1, "ram": 2}
    assert record.nodes_total == 5 and record.pending == 3
    cpu, ram = record.shortfall_of("cpu"), record.shortfall_of("ram")
    assert (cpu.node, cpu.amount, cpu.nodes) == ("d", pytest.approx(1000.0), 1)   # 2 − 1 cores
    assert (ram.node, ram.amount, ram.nodes) == ("d", pytest.approx(1 * GIB), 2)   # 4 − 3 GiB (e: 4 − 2)
    # relative reductions: d needs max(1/2, 1/4) = 0.5 (sum 0.75), e needs 2/4 = 0.5 (sum 0.5) → e
    assert record.reduction.node == "e" and record.reduction.by == {"ram": pytest.approx(2 * GIB)}
    assert record.reduction.fits_nodes == 1  # (2 cores, 2 GiB) fits e only (d lacks a core)
    assert record.binding == "ram"
    kinds = [r.kind for r in record.rejections]
    assert kinds[:3] == ["node_not_ready", "node_selector", "taint"]
    assert R.SelectorMismatch("b", "pool", "batch", "web") in record.rejections
    assert R.Insufficient("e", "ram", 4 * GIB, 2 * GIB) in record.rejections


def test_rule_only_exclusions_name_the_rule_and_offer_no_reduction() -> None:
    nodes = [Node(n, labels=POOL, taints=(Taint("dedicated", "db"),)) for n in "abc"] + [Node("d", labels={})]
    _, [record] = _record(nodes)
    assert record.binding == "taint" and record.excluded == {"node_selector": 1, "taint": 3}
    assert record.reduction is None and record.shortfall == ()


def test_empty_cluster() -> None:
    _, [record] = _record([])
    assert record.binding == "no_nodes" and record.nodes_total == 0


def test_records_are_json_ready_in_ir_units() -> None:
    _, [record] = _record([Node("d", labels=POOL, slack_cpu=1, slack_ram=3)])
    data = json.loads(json.dumps(record.to_dict()))
    assert data["request"] == {"cpu": 2.0, "ram": 4.0}
    assert data["binding"] == "cpu" and data["units"]["ram"] == "GiB"
    assert data["reduction"] == {"by": {"cpu": 1.0, "ram": 1.0}, "node": "d", "fits_nodes": 1}
    assert {"kind": "cpu", "node": "d", "dim": "cpu", "unit": "cores", "requested": 2.0, "free": 1.0,
            "shortfall": 1.0} in data["rejections"]
    assert data["owner"] == "batch/etl" and data["namespace"] == "batch" and data["pending"] == 3


def test_entries_of_one_class_share_the_analysis_with_their_own_ids() -> None:
    entries = [Entry("t1", 1, cpu=2, ram=4, queued_s=0), Entry("t2", 2, cpu=2, ram=4, queued_s=1)]
    _, records = _record([Node("d", labels=POOL, slack_cpu=1, slack_ram=3)], entries)
    assert [(r.workload, r.pending) for r in records] == [("t1", 1), ("t2", 2)]
    assert records[0].excluded == records[1].excluded and records[0].reduction == records[1].reduction


def test_stale_node_and_cooldown_are_reasons() -> None:
    ev = Evictions(owner=np.array(["batch/etl"], dtype=object), node=np.array([1]), time_s=np.array([50.0]))
    snap = snapshot([Node("a", labels=POOL, fresh=False), Node("b", labels=POOL)], now_s=100.0, evictions=ev)
    result = schedule_batch(snap, pending([Entry("etl", 1, cpu=1, ram=1)], [TEMPLATE]), Policy(), rng=np.random.default_rng(0))
    [record] = result.why_pending()
    assert record.excluded == {"telemetry_stale": 1, "cooldown": 1}
    cooldown = next(r for r in record.rejections if r.kind == "cooldown")
    assert (cooldown.node, cooldown.owner, cooldown.until_s) == ("b", "batch/etl", 650.0)
