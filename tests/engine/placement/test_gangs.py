"""Gangs: Kuberina inline ``gang``, IR v1 ``groups`` (min_members, colocate) and the batch
``kalena.naughtian.io/min-member`` annotation — all-or-nothing within one pass."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from kalena_engine.errors import InputError
from kalena_engine.kuberina import parse_workloads
from kalena_engine.placement import (
    MIN_MEMBER_ANNOTATION, BatchTemplate, Gang, gang_pass_minimum, min_member_from_annotations, pending_from_workloads,
    schedule_batch,
)
from kalena_engine.policy import Policy
from tests.engine.placement.builders import Entry, Node, pending, placements, snapshot

RNG = np.random.default_rng


@pytest.mark.parametrize("naive", [False, True], ids=["optimised", "naive"])
def test_a_gang_that_cannot_fit_takes_nothing_and_leaves_no_debit(naive: bool) -> None:
    # Two nodes of 4 free cores. Gang of 3 entries × 2 pods × 2 cores needs 12 cores (min 6): only 8 exist.
    # The entry queued after it (4 × 2 cores) must find all 8 cores untouched.
    nodes = [Node("a", slack_cpu=4), Node("b", slack_cpu=4)]
    entries = [Entry(f"g{i}", 2, cpu=2, gang=0, queued_s=0.0) for i in range(3)] + [Entry("after", 4, cpu=2, queued_s=1.0)]
    result = schedule_batch(snapshot(nodes), pending(entries, gangs=[Gang("trainer", 6)]), Policy(), rng=RNG(0), naive=naive)
    assert result.remaining.tolist() == [2, 2, 2, 0]
    assert {e for e, _, _ in placements(result)} == {3}  # only the later entry
    assert result.placed == 4 and result.stats.gang_rollbacks == 1
    records = {r.workload: r for r in result.why_pending()}
    assert set(records) == {"g0", "g1", "g2"}
    gang = records["g0"].gang
    assert (gang.gang, gang.placeable, gang.min_member) == ("trainer", 4, 6)
    # once the gang rolled back, "after" took all 8 cores: what binds each member now is cpu, 2 cores short
    # on both nodes
    assert records["g0"].binding == "cpu"
    (short,) = records["g0"].to_dict()["shortfall"]
    assert (short["dim"], float(short["amount"]), short["nodes"]) == ("cpu", 2.0, 2)


def test_a_gang_that_fits_is_placed_whole_and_min_member_allows_a_partial_gang() -> None:
    nodes = [Node("a", slack_cpu=4), Node("b", slack_cpu=4)]
    whole = schedule_batch(snapshot(nodes), pending([Entry("g", 4, cpu=2, gang=0)], gangs=[Gang("g", 4)]), Policy(), rng=RNG(0))
    assert whole.placed == 4
    # min 3 of 5: 4 fit, so 4 are placed and 1 waits
    partial = schedule_batch(snapshot(nodes), pending([Entry("g", 5, cpu=2, gang=0)], gangs=[Gang("g", 3)]), Policy(), rng=RNG(0))
    assert partial.placed == 4 and partial.pending == 1


def test_min_member_annotation_makes_a_template_a_gang() -> None:
    assert min_member_from_annotations({MIN_MEMBER_ANNOTATION: "3"}) == 3
    assert min_member_from_annotations({}) is None
    with pytest.raises(InputError, match="min-member.*'three' is not a positive integer"):
        min_member_from_annotations({MIN_MEMBER_ANNOTATION: "three"})
    nodes = [Node("a", slack_cpu=4)]
    tpl = BatchTemplate("batch/mpi", min_member=3)
    # two entries of the same template (6 pods, min 3) on 4 cores of 2-core pods: 2 fit < 3 → nothing
    result = schedule_batch(snapshot(nodes), pending([Entry("mpi-a", 3, cpu=2), Entry("mpi-b", 3, cpu=2)], [tpl]),
                            Policy(), rng=RNG(0))
    assert result.placed == 0
    assert result.why_pending()[0].gang.min_member == 3


WORKLOADS = """
apiVersion: kuberina.io/v1
kind: Workloads
namespaces:
  batch:
    - name: ps
      replicas: 1
      requests: {cpu: 2, ram: 2}
      gang: trainer
    - name: worker
      replicas: 3
      requests: {cpu: 2, ram: 2}
      gang: trainer
    - name: etl
      replicas: 2
      requests: {cpu: 1, ram: 1}
    - name: shard
      replicas: 4
      requests: {cpu: 1, ram: 1}
groups:
  - name: shards
    members: [batch/shard]
    min_members: 2
    colocate: true
"""


def test_kuberina_inline_gang_and_ir_v1_group() -> None:
    workloads = parse_workloads(yaml.safe_load(WORKLOADS), source="w.yaml")
    queue = pending_from_workloads(workloads)
    assert list(queue.ids) == ["batch/ps", "batch/worker", "batch/etl", "batch/shard"]
    names = {g.name: g for g in queue.gangs}
    assert names["trainer"].min_member == 4 and names["shards"] == Gang("shards", 2, True)
    # the trainer gang (ps + 3 workers, 4 × 2 cores) fits 8 + 2 cores; etl takes 2 of what is left
    nodes = [Node("a", slack_cpu=8), Node("b", slack_cpu=2)]
    result = schedule_batch(snapshot(nodes), queue, Policy(), rng=RNG(0))
    got = placements(result)
    assert sum(c for e, _, c in got if e in (0, 1)) == 4
    # 6 cores free but only 3 identical trainer pods' worth: the whole gang waits, nothing debited
    result = schedule_batch(snapshot([Node("a", slack_cpu=6)]), queue, Policy(), rng=RNG(0))
    assert result.remaining[:2].tolist() == [1, 3] and result.remaining[2] == 0


@pytest.mark.parametrize(("free", "placed"), [
    ((1, 1, 3), 3),   # c takes 3 of the 4 shards together; the fourth waits
    ((1, 1, 1), 0),   # 3 cores in total, but no node holds min 2 together
    ((2, 5, 1), 4),   # b holds all four
], ids=["colocated_on_c", "no_node_holds_two", "all_on_b"])
def test_colocated_group(free, placed) -> None:
    workloads = parse_workloads(yaml.safe_load(WORKLOADS), source="w.yaml")
    queue = pending_from_workloads(workloads, pods=[f"batch/shard-{i:04d}" for i in range(4)])
    nodes = [Node(name, slack_cpu=c) for name, c in zip("abc", free, strict=True)]
    result = schedule_batch(snapshot(nodes), queue, Policy(), rng=RNG(0))
    assert result.placed == placed
    assert len({n for _, n, _ in placements(result)}) == (1 if placed else 0)


@pytest.mark.parametrize(("min_member", "members", "running", "expected"), [
    pytest.param(None, 4, 0, 4, id="no min_member: the gang's size"),
    pytest.param(3, 4, 0, 3, id="declared 3 of 4"),
    pytest.param(3, 4, 2, 1, id="2 running count toward 3: 1 more"),
    pytest.param(None, 4, 4, 1, id="all running (a requeued member): 1"),
    pytest.param(5, 3, 0, 5, id="more than submitted: waits for members"),
])
def test_gang_pass_minimum(min_member, members: int, running: int, expected: int) -> None:
    assert gang_pass_minimum(min_member=min_member, members=members, running=running) == expected
