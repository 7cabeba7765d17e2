"""What one sharded ``kalena watch`` instance decides (issue 32): the cycle's view of its share
(:class:`ShardView`) and the write of its decisions (:func:`assume_whole`). The map and the
membership — vnodes, the ring, the share Leases — are :mod:`.shards`.

**Pods: hashed, decided on own nodes first, re-checked at assume.** A pending pod is considered
by one instance at a time: the one acting on its vnode (:class:`ShardView`). It is decided first
on the instance's own nodes (the other shards' nodes stay in the snapshot with their resident
pods, so topology spread, the pairing blacklist and namespace caps count every shard's pods, but
take nothing); pods left over — no fit on its own nodes, or a gang that needs nodes of two shards
— are decided again on the whole cluster, Gödel-style: the write of the decision
(:func:`assume_whole`) re-checks every node's ledger version under row locks and takes a gang
whole or not at all, so a decision on another shard's node that raced its owner's is refused and
retried; it re-checks the rules over many nodes — namespace caps, topology spread — in the record
too (:class:`ClusterWideCheck`), since two shards' passes can run at once. See docs/scheduler.md
"Sharding" for why pods are hashed rather than claimed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from kalena_web.scheduling.shards import VNODES, h64, pod_vnode, vnode_of


@dataclass(frozen=True)
class _Record:
    """A why-pending record of a sharded pass: the engine's, its entry moved, naming the shard."""

    entry: int
    inner: object
    shard: str

    def to_dict(self) -> dict:
        return {**self.inner.to_dict(), "shard": self.shard}


@dataclass
class ShardedResult:
    """The two phases' decisions as one engine result (``bindings`` arrays, ``why_pending()``)."""

    bindings: object
    records: tuple

    def why_pending(self) -> tuple:
        return self.records


@dataclass
class _Bindings:
    entry: np.ndarray
    node: np.ndarray
    count: np.ndarray
    version: np.ndarray

    def __len__(self) -> int:
        return len(self.entry)


@dataclass
class ShardView:
    """What one sharded instance decides (the cycle's one hook, :mod:`.cycle`): the pods hashed
    to its active vnodes, on its own nodes first and then the whole cluster (module doc).
    ``active()`` answers the vnodes it may decide on now (:meth:`ShareMember.active`)."""

    identity: str
    active: Callable[[], frozenset[int]]
    locked: Callable[[], Iterable[int]] = lambda: ()
    vnodes: int = VNODES
    _node_vnode: dict[str, int] = field(default_factory=dict)
    _pod_vnode: dict[tuple[str, str], int] = field(default_factory=dict)
    #: pods decided per phase since made: ``own`` (on own nodes) and ``spill`` (the whole cluster)
    decided: dict[str, int] = field(default_factory=lambda: {"own": 0, "spill": 0})
    #: pod name → the vnode it was decided under, for the last pass (binding fence)
    decided_vnode: dict[str, int] = field(default_factory=dict)
    _holds: tuple[frozenset[int], Callable[[str, str], bool]] | None = None

    def node_vnode(self, name: str) -> int:
        v = self._node_vnode.get(name)
        if v is None:
            v = self._node_vnode[name] = vnode_of(name, self.vnodes)
        return v

    def owns_vnode(self, vnode: int) -> bool:
        return vnode in self.active()

    def owns_pod(self, name: str, gang: str = "", active: frozenset[int] | None = None) -> bool:
        return pod_vnode(name, gang, self.vnodes) in (self.active() if active is None else active)

    def pod_v(self, name: str, gang: str = "") -> int:
        key = (name, gang)
        v = self._pod_vnode.get(key)
        if v is None:
            if len(self._pod_vnode) > 500_000:
                self._pod_vnode.clear()
            v = self._pod_vnode[key] = pod_vnode(name, gang, self.vnodes)
        return v

    def holds(self) -> Callable[[str, str], bool]:
        """The test ``(pod name, gang) → hashed to a vnode active now`` (the share read once:
        the scheduler cache's ``holds``, so the queue reads only these pods whole). The same
        test object while the share is unchanged (the queue keeps its answers per pod for it)."""
        active = self.active()
        if self._holds is None or self._holds[0] != active:
            self._holds = (active, lambda name, gang: self.pod_v(name, gang) in active)
        return self._holds[1]

    def mine(self, rows: Sequence) -> list:
        """The pending rows hashed to the active vnodes (queue order kept)."""
        active = self.active()
        return [r for r in rows if self.pod_v(r.name, r.gang) in active]

    def decide(self, snap, considered: Sequence, policy, rng) -> tuple[ShardedResult, list[list[int]]]:
        """Decide ``considered`` (pending rows in queue order) as this shard: the rows whose
        vnode is active, on own nodes, then the rest of them on the whole cluster except the
        nodes phase 1 placed on and this instance's locked nodes. Returns the combined result
        and its ``pods_of_entry``."""
        from kalena_engine.placement import schedule_batch
        from kalena_web.scheduling import mappers

        active = self.active()
        mine = [r for r in considered if self.pod_v(r.name, r.gang) in active]
        if len(self.decided_vnode) > 200_000:
            self.decided_vnode.clear()
        self.decided_vnode.update((r.name, self.pod_v(r.name, r.gang)) for r in mine)
        empty = _Bindings(*(np.zeros(0, dtype=np.int64) for _ in range(4)))
        if not mine:
            return ShardedResult(bindings=empty, records=()), []
        rows = snap.rows
        node_v = np.array([self.node_vnode(r.name) for r in rows], dtype=np.int64)
        own = np.isin(node_v, np.fromiter(active, dtype=np.int64, count=len(active)))
        _, image_sizes = mappers.node_images(rows)
        pending, pods_of_entry = mappers.pending_batch(mine, image_sizes)
        cluster = snap.cluster
        first = schedule_batch(dataclasses.replace(cluster, ready=cluster.ready & own), pending, policy, rng=rng)
        b = first.bindings
        taken = np.zeros(len(pods_of_entry), dtype=np.int64)
        np.add.at(taken, np.asarray(b.entry, dtype=np.int64), np.asarray(b.count, dtype=np.int64))
        left_ids = {i for e, ids in enumerate(pods_of_entry) for i in ids[int(taken[e]):]}
        self.decided["own"] += int(taken.sum())
        parts = [(np.asarray(b.entry, dtype=np.int64), np.asarray(b.node, dtype=np.int64),
                  np.asarray(b.count, dtype=np.int64), np.asarray(b.version, dtype=np.int64))]
        records: list = []
        if left_ids:
            rest = [r for r in mine if r.pod_id in left_ids]
            pending2, pods2 = mappers.pending_batch(rest, image_sizes)
            used = np.zeros(len(rows), dtype=bool)
            used[np.asarray(b.node, dtype=np.int64)] = True
            locked = list(self.locked())  # this instance's vnodes not synced yet: no decision on them
            held = np.isin(node_v, np.array(locked, dtype=np.int64)) if locked else np.zeros(len(rows), bool)
            second = schedule_batch(_after(cluster, b, pending, ready=cluster.ready & ~used & ~held), pending2,
                                    policy, rng=rng)
            b2 = second.bindings
            offset = len(pods_of_entry)
            parts.append((np.asarray(b2.entry, dtype=np.int64) + offset, np.asarray(b2.node, dtype=np.int64),
                          np.asarray(b2.count, dtype=np.int64), np.asarray(b2.version, dtype=np.int64)))
            self.decided["spill"] += int(np.sum(b2.count))
            # phase 1's entries keep the pods it placed (their first ``taken``); the rest are phase 2's
            pods_of_entry = [ids[:int(taken[e])] for e, ids in enumerate(pods_of_entry)] + [list(p) for p in pods2]
            records = [_Record(entry=r.entry + offset, inner=r, shard=self.identity) for r in second.why_pending()]
        bindings = _Bindings(*(np.concatenate([p[k] for p in parts]) for k in range(4)))
        return ShardedResult(bindings=bindings, records=tuple(records)), [list(p) for p in pods_of_entry]

    def gangs_of(self, considered: Sequence) -> dict[int, str]:
        """pod id → gang of the gang members among ``considered``."""
        return {r.pod_id: r.gang for r in considered if r.gang}


def _after(cluster, bindings, pending, *, ready):
    """``cluster`` with phase 1's placements in it — residents (spread, anti-affinity and the
    namespace caps count them), slack and the kubelet's room debited — and ``ready`` as the
    node mask (phase 2 places on no node phase 1 placed on: one ledger version per node)."""
    from kalena_engine.placement import BatchResidents, KubeletRoom

    if len(bindings) == 0:
        return dataclasses.replace(cluster, ready=ready)
    entry = np.asarray(bindings.entry, dtype=np.int64)
    node = np.asarray(bindings.node, dtype=np.int64)
    count = np.asarray(bindings.count, dtype=np.int64)
    debit = np.zeros_like(cluster.slack)
    np.add.at(debit, node, np.asarray(bindings.request, dtype=np.float64) * count[:, None])
    old = cluster.batch
    offset = len(old.templates)
    batch = BatchResidents(node=np.concatenate([old.node, node]).astype(np.int64),
                           count=np.concatenate([old.count, count]).astype(np.int64),
                           template=np.concatenate([old.template, offset + np.asarray(pending.template)[entry]])
                           .astype(np.int64),
                           templates=tuple(old.templates) + tuple(pending.templates))
    has_batch = cluster.has_batch.copy()
    has_batch[node] = True
    kubelet = cluster.kubelet
    if kubelet is not None:
        kubelet = KubeletRoom(room=kubelet.room - debit, releasing=kubelet.releasing)
    return dataclasses.replace(cluster, ready=ready, slack=cluster.slack - debit, batch=batch, has_batch=has_batch,
                               kubelet=kubelet)


@dataclass(frozen=True)
class ClusterWideCheck:
    """What the write of a pass re-checks of the rules that count pods on every node, as two
    shards' passes can run at once (each counting the other's pods as of its snapshot):
    ``cluster_id``; ``namespace_of`` (pod id → namespace); ``cap`` (namespace → running-batch
    cap, or None); ``spread`` (ids of the pods with a topology spread constraint, which counts
    the pods of their namespace); ``seen(namespace)`` → the ids of the namespace's bound pods
    the pass's snapshot counted. Not re-checked: an anti-affinity term over a topology wider
    than one node (it may match pods of every namespace)."""

    cluster_id: int
    namespace_of: dict[int, str]
    cap: Callable[[str], int | None]
    spread: frozenset[int]
    seen: Callable[[str], set[int]]


def assume_whole(groups: Sequence[tuple[int, int, Sequence]], *, now_s: float, gang_of: dict[int, str],
                 cluster_wide: ClusterWideCheck | None = None) -> dict[int, list]:
    """:func:`~kalena_web.scheduling.recording.assume_in_ledger`, a gang whole or not at all:
    in one transaction the decided nodes' ledgers are locked and their versions re-checked
    first; every pod of a gang with a member on a node whose version moved (another shard
    placed there meanwhile) is taken out before the write, so a gang split over two shards'
    nodes is bound whole or stays pending whole (Gödel's binder re-check). A rule confined to
    one node (the pairing blacklist, hostname anti-affinity) is covered by that version.

    ``cluster_wide``: the rules over many nodes are re-checked in the same transaction against
    the record too (:func:`_cluster_wide_refused`)."""
    from django.db import transaction

    from kalena_web.ledger.models import LiveNodeLedger
    from kalena_web.scheduling.recording import assume_in_ledger

    if not any(g[2] for g in groups):
        return {}
    with transaction.atomic():
        versions = dict(LiveNodeLedger.objects.select_for_update().filter(
            node_id__any=[g[0] for g in groups]).order_by("node_id").values_list("node_id", "version"))
        broken = {gang_of[p.id] for node_id, version, pods in groups if versions.get(node_id) != version
                  for p in pods if p.id in gang_of}
        if broken:
            groups = [(node_id, version, [p for p in pods if gang_of.get(p.id) not in broken])
                      for node_id, version, pods in groups]
        refused = _cluster_wide_refused(groups, gang_of, cluster_wide) if cluster_wide is not None else set()
        if refused:
            groups = [(node_id, version, [p for p in pods if p.id not in refused]) for node_id, version, pods in groups]
        return assume_in_ledger(groups, now_s=now_s)


def _cluster_wide_refused(groups, gang_of: dict[int, str], check: ClusterWideCheck) -> set[int]:
    """Ids of the pods of ``groups`` the write leaves pending, checked in the record inside the
    caller's transaction. Per namespace written, in name order, a transaction lock first
    (PostgreSQL's ``pg_advisory_xact_lock``): every pass's write of a namespace's pods goes
    one after the other, so what one counts the next sees. Then:

    * a capped namespace: its bound pods are counted, and the pods beyond the cap's room are
      refused (in the groups' order);
    * a namespace with pods under a topology spread constraint: if a pod of the
      namespace was bound that the pass's snapshot did not count (another shard's write since),
      those pods are refused — the skew they were decided on is no longer the record's.

    A gang's members go all together. Refused pods stay pending; the next pass decides them
    on the record as it is (why-pending names the rule if it now binds)."""
    from django.db import connection

    from kalena_web.scheduling.models import BatchPod

    writing: dict[str, list] = {}
    for _, _, pods in groups:
        for p in pods:
            namespace = check.namespace_of.get(p.id)
            if namespace is not None:
                writing.setdefault(namespace, []).append(p)
    refused: set = set()  # pod ids and gang names
    for namespace in sorted(writing):
        pods = writing[namespace]
        cap = check.cap(namespace)
        spread = [p for p in pods if p.id in check.spread]
        if cap is None and not spread:
            continue
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)",
                               [h64(f"cluster-wide/{check.cluster_id}/{namespace}") - (1 << 63)])
        # the pods the snapshot counts as residents: bound, on a node
        bound = BatchPod.objects.filter(cluster_id=check.cluster_id, state=BatchPod.BOUND, workload__namespace=namespace,
                                        workload__node__isnull=False)
        if cap is not None:
            refused |= {gang_of.get(p.id) or p.id for p in pods[max(0, cap - bound.count()):]}
        seen = check.seen(namespace)
        if spread and (bound.exclude(id__any=list(seen)) if seen else bound).exists():
            refused |= {gang_of.get(p.id) or p.id for p in spread}
    return {p.id for _, _, pods in groups for p in pods if (gang_of.get(p.id) or p.id) in refused}
