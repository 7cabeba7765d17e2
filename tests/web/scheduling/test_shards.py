"""Scheduling sharded by node (issue 32): the ring (balance, minimal movement, with numbers) and
every placement rule holding across shards — a gang over two shards' nodes, a namespace cap,
topology spread and the pairing blacklist counting every shard's pods, and why-pending written
by whichever shard tried last."""

from __future__ import annotations

import numpy as np
import pytest

from kalena_web.control.orchestrators import orchestrator_for
from kalena_engine.placement.policy import PlacementPolicy
from kalena_engine.policy import Policy
from kalena_engine.resources import CPU, RAM, ir_vector
from kalena_web.ledger.models import LiveNodeLedger
from kalena_web.scheduling.models import BatchPod, WhyPending
from kalena_web.scheduling.queue import PendingQueue
from kalena_web.scheduling.services import batch_submit, scheduling_pass
from kalena_web.scheduling.shard_view import ShardView, assume_whole
from kalena_web.scheduling.shards import POINTS, VNODES, Ring, bitmap, from_bitmap, pod_vnode, vnode_of

NODES = ["thinkcentre-alpha", "thinkcentre-beta", "thinkcentre-gamma"]
ALL = frozenset(range(VNODES))


# -- the ring ---------------------------------------------------------------------------------

def test_the_hash_is_stable_and_a_vnode_set_survives_its_lease_annotation() -> None:
    # BLAKE2b, not Python's salted hash(): every process and machine agrees
    assert vnode_of("thinkcentre-alpha") == vnode_of("thinkcentre-alpha") == int.from_bytes(
        __import__("hashlib").blake2b(b"thinkcentre-alpha", digest_size=8).digest(), "big") % VNODES
    assert pod_vnode("ns/a-0", "mpi") == pod_vnode("ns/a-1", "mpi")   # a gang hashes as one
    share = frozenset({0, 7, 128, 255})
    assert from_bitmap(bitmap(share)) == share and len(bitmap(share)) == VNODES // 4
    assert from_bitmap("not hex") == frozenset()


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_the_ring_shares_out_every_vnode_evenly(n) -> None:
    ring = Ring([f"kalena-{i}" for i in range(n)])
    shares = [len(s) for s in ring.assignment().values()]
    assert sum(shares) == VNODES and len(ring.assignment()) == n
    fair = VNODES / n
    # 128 points per instance, vnodes evenly placed: measured largest/fair share 1.00 (n=1), 1.05 (2),
    # 1.07 (3), 1.11 (5), 1.28 (8); smallest/fair 1.00, 0.95, 0.94, 0.86, 0.81
    assert max(shares) <= 1.3 * fair and min(shares) >= 0.75 * fair, shares


def test_adding_or_removing_an_instance_moves_only_its_vnodes() -> None:
    three = Ring(["a", "b", "c"])
    four = Ring(["a", "b", "c", "d"])
    moved = [v for v in range(VNODES) if three.owner_of(v) != four.owner_of(v)]
    assert all(four.owner_of(v) == "d" for v in moved)         # only to the newcomer
    assert set(moved) == four.vnodes_of("d")
    assert 0.15 * VNODES <= len(moved) <= 0.35 * VNODES        # ≈ 1/4 of them (measured 54 of 256)
    two = Ring(["a", "c"])
    moved = [v for v in range(VNODES) if three.owner_of(v) != two.owner_of(v)]
    assert set(moved) == three.vnodes_of("b")                  # only the leaver's
    assert POINTS >= 100


def test_a_ring_needs_a_member() -> None:
    with pytest.raises(ValueError, match="at least one member"):
        Ring([])


# -- every rule across shards ------------------------------------------------------------------

def submit(cluster, name, cpu=1.0, ram=0.5, **kw):
    v = ir_vector(cpu=cpu, ram=ram)
    return batch_submit(cluster=cluster, name=name, owner=kw.pop("owner", name), request={"cpu": v[CPU], "ram": v[RAM]},
                        now_s=1000.0, **kw)


def named(prefix: str, vnodes: frozenset[int], gang: str = "", count: int = 1) -> list[str]:
    """``count`` pod names ``prefix-i`` hashed into ``vnodes`` (a gang: every name, its gang is)."""
    if gang:
        assert pod_vnode("", gang) in vnodes, "pick another gang name"
        return [f"{prefix}-{i}" for i in range(count)]
    return [n for n in (f"{prefix}-{i}" for i in range(10_000)) if pod_vnode(n) in vnodes][:count]


def shards(owner_of_alpha: str = "a") -> tuple[frozenset[int], frozenset[int]]:
    """Two shards: A acts on alpha's vnode and half of the rest; B on the others (beta, gamma)."""
    node_v = {n: vnode_of(n) for n in NODES}
    assert len(set(node_v.values())) == 3
    a = frozenset(v for v in ALL if v % 2 == 0 and v not in (node_v[NODES[1]], node_v[NODES[2]])) | {node_v[NODES[0]]}
    return a, ALL - a


def one_pass(cluster, view: ShardView, policy: Policy | None = None):
    return scheduling_pass(cluster=cluster, orchestrator=orchestrator_for(cluster), policy=policy or Policy(), now_s=1001.0,
                           rng=np.random.default_rng(0), shard=view)


def placed(cluster, prefix: str) -> dict[str, str]:
    return dict(BatchPod.objects.filter(cluster=cluster, state=BatchPod.BOUND, workload__name__startswith=prefix)
                .values_list("workload__name", "workload__node__name"))


def slack_cores(cluster) -> dict[str, float]:
    return {led.node.name: (np.array(led.capacity) - np.array(led.prod_reservation)
                            - np.array(led.batch_reservation))[CPU] / 1000.0
            for led in LiveNodeLedger.objects.filter(node__cluster=cluster).select_related("node")}


@pytest.mark.django_db
def test_a_gang_that_fits_only_on_two_shards_nodes_is_placed_whole(live) -> None:
    a, b = shards()
    view = ShardView(identity="kalena-a", active=lambda: a)
    slack = slack_cores(live)
    # each member needs more than half of the largest slack: one member per node at most, so a
    # gang of 2 needs alpha (A's) and a node of B
    cores = float(np.floor(min(sorted(slack.values())[-2:]) * 10) / 10)
    assert cores > max(slack.values()) / 2
    gang = next(g for g in (f"mpi{i}" for i in range(1000)) if pod_vnode("", g) in a)
    for name in named("batch/pair", a, gang=gang, count=2):
        submit(live, name, cpu=cores, ram=0.1, owner="pair", gang=gang)
    report = one_pass(live, view)
    where = placed(live, "batch/pair")
    assert report.placed == 2 and len(set(where.values())) == 2, where
    assert NODES[0] in where.values() or any(n in where.values() for n in NODES[1:])
    assert set(where.values()) - {NODES[0]}, "a node of the other shard took a member"
    assert view.decided["spill"] == 2   # decided on the whole cluster: alpha alone could not hold it


@pytest.mark.django_db
def test_a_gang_over_two_shards_is_none_when_one_node_moved_meanwhile(live) -> None:
    a, _ = shards()
    gang = next(g for g in (f"g{i}" for i in range(1000)) if pod_vnode("", g) in a)
    pods = [submit(live, n, cpu=1.0, ram=0.1, owner="g", gang=gang) for n in named("batch/g", a, gang=gang, count=2)]
    queue = PendingQueue()
    queue.sync(cluster=live)
    held = queue.by_id()
    ledgers = {led.node.name: led for led in LiveNodeLedger.objects.filter(node__cluster=live).select_related("node")}
    alpha, beta = ledgers[NODES[0]], ledgers[NODES[1]]
    LiveNodeLedger.objects.filter(id=beta.id).update(version=beta.version + 1)   # the other shard bound there
    accepted = assume_whole([(alpha.node_id, alpha.version, [held[pods[0].id]]),
                             (beta.node_id, beta.version, [held[pods[1].id]])], now_s=1001.0,
                            gang_of={p.id: gang for p in pods})
    assert accepted == {}
    assert BatchPod.objects.filter(id__in=[p.id for p in pods], state=BatchPod.PENDING).count() == 2
    assert LiveNodeLedger.objects.get(id=alpha.id).version == alpha.version   # alpha debited nothing


@pytest.mark.django_db
def test_a_namespace_cap_counts_the_pods_every_shard_placed(live) -> None:
    a, b = shards()
    policy = Policy(placement=PlacementPolicy(namespace_batch_caps=(("capped", 3),)))
    for name in named("capped/b", b, count=2):
        submit(live, name, cpu=0.2)
    assert one_pass(live, ShardView(identity="kalena-b", active=lambda: b), policy).placed == 2
    for name in named("capped/a", a, count=3):
        submit(live, name, cpu=0.2)
    report = one_pass(live, ShardView(identity="kalena-a", active=lambda: a), policy)
    assert report.placed == 1            # 2 on B's shard + 1 = the cap of 3
    assert BatchPod.objects.filter(cluster=live, state=BatchPod.BOUND, workload__namespace="capped").count() == 3
    why = WhyPending.objects.filter(pod__workload__name__startswith="capped/a").first()
    assert why.binding == "namespace_cap" and why.record["shard"] == "kalena-a"


@pytest.mark.django_db
def test_a_namespace_cap_holds_when_two_shards_passes_run_at_once(live, monkeypatch) -> None:
    """The cap counts every shard's pods, and two shards' passes can overlap: here B's whole
    pass runs between A's decision and A's write, on nodes other than A's. A decided 3 pods
    with 0 running in its snapshot; at its write B has already bound 3, so the cap's re-check in
    the record lets none of A's pods through. They stay pending, and A's next pass finds the cap reached."""
    a, b = shards()
    policy = Policy(placement=PlacementPolicy(namespace_batch_caps=(("capped", 3),)))
    for name in named("capped/a", a, count=3) + named("capped/b", b, count=3):
        submit(live, name, cpu=0.2)
    view_a, view_b = ShardView(identity="kalena-a", active=lambda: a), ShardView(identity="kalena-b", active=lambda: b)
    b_runs_between_a_decision_and_its_write(monkeypatch, live, view_a, view_b, policy, decided_by_a=3)
    report = one_pass(live, view_a, policy)
    assert report.placed == 0 and report.stale == 3
    assert BatchPod.objects.filter(cluster=live, state=BatchPod.BOUND, workload__namespace="capped").count() == 3
    assert BatchPod.objects.filter(cluster=live, state=BatchPod.PENDING, workload__name__startswith="capped/a").count() == 3
    assert one_pass(live, view_a, policy).placed == 0
    why = WhyPending.objects.filter(pod__workload__name__startswith="capped/a").first()
    assert why.binding == "namespace_cap" and why.record["shard"] == "kalena-a"


def b_runs_between_a_decision_and_its_write(monkeypatch, live, view_a, view_b, policy, decided_by_a: int) -> None:
    """Shard B's whole pass runs after A decided and before A writes (two passes at once)."""
    decide = ShardView.decide

    def decide_then_b_runs(self, snap, considered, policy, rng):
        out = decide(self, snap, considered, policy, rng)
        if self is view_a:
            assert int(np.sum(out[0].bindings.count)) == decided_by_a
            monkeypatch.setattr(ShardView, "decide", decide)
            assert one_pass(live, view_b, policy).placed > 0
        return out

    monkeypatch.setattr(ShardView, "decide", decide_then_b_runs)


@pytest.mark.django_db
def test_topology_spread_holds_when_two_shards_passes_run_at_once(live, monkeypatch) -> None:
    """Spread over rooms, max skew 1: alpha (A's) and beta (B's) in room 1, gamma (B's, cordoned)
    in room 2. Each shard, from the same empty namespace, may put one pod in room 1 (1 − 0 ≤ 1);
    B's pass binds one on beta while A's decision for alpha waits to be written. Both written,
    room 1 would hold 2 against room 2's 0. A's write finds a pod of the namespace bound that its
    snapshot did not count and leaves its pod pending; its next pass, on the record, keeps it
    pending for the spread."""
    from kalena_web.control.models import NodeCondition
    from kalena_web.inventory.models import Node

    a, b = shards()
    for name, room in zip(NODES, ("room-1", "room-1", "room-2"), strict=True):
        Node.objects.filter(cluster=live, name=name).update(labels={"example.com/room": room})
    NodeCondition.objects.filter(node__cluster=live, node__name=NODES[2]).update(schedulable=False)
    spread = {"spread": [{"maxSkew": 1, "topologyKey": "example.com/room",
                          "labelSelector": {"matchLabels": {"app": "web"}}}]}
    for name in named("web/a", a, count=1) + named("web/b", b, count=1):
        submit(live, name, cpu=0.2, labels={"app": "web"}, constraints=spread, owner="web")
    view_a, view_b = ShardView(identity="kalena-a", active=lambda: a), ShardView(identity="kalena-b", active=lambda: b)
    b_runs_between_a_decision_and_its_write(monkeypatch, live, view_a, view_b, Policy(), decided_by_a=1)
    report = one_pass(live, view_a, Policy())
    assert report.placed == 0 and report.stale == 1, report
    assert placed(live, "web/") == {named("web/b", b, count=1)[0]: NODES[1]}
    one_pass(live, view_a, Policy())
    assert placed(live, "web/") == {named("web/b", b, count=1)[0]: NODES[1]}
    why = WhyPending.objects.get(pod__workload__name__startswith="web/a")
    assert why.binding == "topology_spread", why.binding


@pytest.mark.django_db
def test_topology_spread_counts_the_pods_on_every_shards_nodes(live) -> None:
    a, b = shards()
    spread = {"spread": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                          "labelSelector": {"matchLabels": {"app": "web"}}}]}
    for name in named("web/b", b, count=2):   # B places one on beta and one on gamma
        submit(live, name, cpu=0.2, labels={"app": "web"}, constraints=spread, owner="web")
    one_pass(live, ShardView(identity="kalena-b", active=lambda: b))
    assert set(placed(live, "web/b").values()) == set(NODES[1:])
    for name in named("web/a", a, count=3):
        submit(live, name, cpu=0.2, labels={"app": "web"}, constraints=spread, owner="web")
    one_pass(live, ShardView(identity="kalena-a", active=lambda: a))
    counts = {n: list(placed(live, "web/").values()).count(n) for n in NODES}
    # alpha takes 2 (0→1→2 while the others hold 1), the third goes to B's nodes: skew ≤ 1 over all
    # three; an A blind to B's pods would have put all three on alpha (3, 1, 1)
    assert sum(counts.values()) == 5 and max(counts.values()) - min(counts.values()) <= 1, counts


@pytest.mark.django_db
def test_the_pairing_blacklist_sees_the_other_shards_pods(live) -> None:
    a, b = shards()
    away = {"anti_affinity_terms": [{"labelSelector": {"matchLabels": {"pair": "noisy"}},
                                     "topologyKey": "kubernetes.io/hostname"}]}
    for name in named("noisy/b", b, count=2):   # B puts a noisy pod on beta and on gamma
        submit(live, name, cpu=0.2, labels={"pair": "noisy"}, owner="noisy")
    one_pass(live, ShardView(identity="kalena-b", active=lambda: b))
    noisy_nodes = set(placed(live, "noisy/b").values())
    for name in named("quiet/a", a, count=3):   # A's pods must not share a node with a noisy one
        submit(live, name, cpu=0.2, constraints=away, owner="quiet")
    one_pass(live, ShardView(identity="kalena-a", active=lambda: a))
    quiet_nodes = set(placed(live, "quiet/a").values())
    assert quiet_nodes and not quiet_nodes & noisy_nodes, (quiet_nodes, noisy_nodes)


@pytest.mark.django_db
def test_why_pending_names_the_constraint_and_the_shard_that_tried_last(live) -> None:
    a, b = shards()
    names = named("batch/huge", a & b or a, count=1) or named("batch/huge", a, count=1)
    submit(live, names[0], cpu=500.0, ram=0.1)
    one_pass(live, ShardView(identity="kalena-a", active=lambda: a))
    why = WhyPending.objects.get(pod__workload__name=names[0])
    assert why.binding == "cpu" and why.record["shard"] == "kalena-a"
    assert why.record["nodes_total"] == 3 and why.record["excluded"]["cpu"] == 3   # every shard's nodes
    # the share moves: the pod's vnode is B's now, and B's pass writes the record
    one_pass(live, ShardView(identity="kalena-b", active=lambda: b | {pod_vnode(names[0])}))
    why = WhyPending.objects.get(pod__workload__name=names[0])
    assert why.binding == "cpu" and why.record["shard"] == "kalena-b"


@pytest.mark.django_db
def test_one_scheduler_binds_a_gang_whole_or_not_at_all_when_a_node_moves_under_it(live, monkeypatch) -> None:
    """Without shards too: a member's node whose ledger version moved between the decision and
    the write (an agent or another writer) keeps the whole gang pending, not the other half bound."""
    from kalena_web.scheduling import cycle

    slack = slack_cores(live)
    cores = float(np.floor(min(sorted(slack.values())[-2:]) * 10) / 10)
    assert cores > max(slack.values()) / 2     # one member per node: the gang spans two nodes
    pods = [submit(live, f"batch/whole-{i}", cpu=cores, ram=0.1, owner="whole", gang="whole") for i in range(2)]
    write = cycle.assume_whole

    def move_one_node_then_write(groups, *, now_s, gang_of, cluster_wide):
        assert len(groups) == 2 and set(gang_of.values()) == {"whole"}, (groups, gang_of)
        LiveNodeLedger.objects.filter(node_id=groups[0][0]).update(version=groups[0][1] + 1)
        return write(groups, now_s=now_s, gang_of=gang_of, cluster_wide=cluster_wide)

    monkeypatch.setattr(cycle, "assume_whole", move_one_node_then_write)
    report = scheduling_pass(cluster=live, orchestrator=orchestrator_for(live), policy=Policy(), now_s=1001.0,
                             rng=np.random.default_rng(0))
    assert report.assumed == 0 and report.stale == 2, report
    assert BatchPod.objects.filter(id__in=[p.id for p in pods], state=BatchPod.PENDING).count() == 2


@pytest.mark.django_db
def test_a_shards_queue_reads_whole_only_the_pods_of_its_active_vnodes(live) -> None:
    """The queue of a sharded instance holds only the pods hashed to its active vnodes (the others'
    pods are never read whole); a vnode it gains brings its pods in at the next snapshot, one it
    loses takes them out."""
    from kalena_web.scheduling.cache import SchedulerCache

    a, b = shards()
    mine, theirs = named("batch/mine", a, count=3), named("batch/theirs", b, count=4)
    for name in mine + theirs:
        submit(live, name, cpu=0.1, ram=0.1)
    share = {"active": a}
    view = ShardView(identity="kalena-a", active=lambda: share["active"])
    cache = SchedulerCache(cluster=live, holds=view.holds)
    snap = cache.snapshot(now_s=1001.0, cooldown_s=600.0)
    assert sorted(r.name for r in snap.pending) == sorted(mine)
    assert cache.queue.full_reads == 3
    # B's share moves to this instance: its pods are read whole now, A's are not read again
    share["active"] = ALL
    snap = cache.snapshot(now_s=1002.0, cooldown_s=600.0)
    assert sorted(r.name for r in snap.pending) == sorted(mine + theirs) and cache.queue.full_reads == 7
    share["active"] = b
    snap = cache.snapshot(now_s=1003.0, cooldown_s=600.0)
    assert sorted(r.name for r in snap.pending) == sorted(theirs) and cache.queue.full_reads == 7


@pytest.mark.django_db
def test_a_sharded_pass_decides_the_same_pods_whether_or_not_its_queue_holds_the_others(live) -> None:
    """A queue holding only the share's pods changes nothing the pass decides: each instance binds
    exactly its own pods, and all of them."""
    from kalena_web.scheduling.cache import SchedulerCache
    from kalena_web.scheduling.cycle import scheduling_pass as cycle_pass

    a, b = shards()
    mine, theirs = named("batch/m", a, count=3), named("batch/t", b, count=3)
    for name in mine + theirs:
        submit(live, name, cpu=0.1, ram=0.1)
    orch = orchestrator_for(live)
    for active, names in ((a, mine), (b, theirs)):
        view = ShardView(identity="x", active=lambda active=active: active)
        cache = SchedulerCache(cluster=live, holds=view.holds)
        report = cycle_pass(cluster=live, orchestrator=orch, policy=Policy(), now_s=1001.0,
                            rng=np.random.default_rng(0), cache=cache, shard=view)
        assert report.placed == len(names) and set(placed(live, "batch/")) >= set(names)
    assert set(placed(live, "batch/")) == set(mine + theirs)
