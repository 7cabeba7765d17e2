"""Scheduling sharded across ``kalena watch`` instances (issue 32; seed 002's first method).

**The map.** Objects hash to a fixed number of virtual nodes (:data:`VNODES`, 256; a two-level
hash: the object → vnode label never changes, so adding or removing instances relabels
nothing): a node by its name, a pending pod by its gang (every member of a gang hashes alike)
or else its name (:func:`vnode_of`, :func:`pod_vnode`). Vnodes go to instances by consistent
hashing (:class:`Ring`: :data:`POINTS` = 128 points per instance on a 64-bit ring; a vnode
belongs to the first instance point clockwise of its own position), so adding or removing an
instance moves only the vnodes it gains or loses.

**Membership and shares.** Each instance holds one ``coordination.k8s.io/v1`` Lease
(``kalena-shard-<identity>``, labelled with the cluster) carrying its share — the vnodes it
claims, as a 64-hex-digit bitmap annotation (:class:`ShareMember`). Every ``retry_period_s`` it
lists the cluster's member Leases, counts as live those renewed within their
``leaseDurationSeconds`` *as observed locally* (client-go's rule, clock skew does not matter),
computes the ring over the live members and renews its own Lease with its new claim:

1. *Stop first.* A vnode the ring no longer gives it leaves its acting set at once, before the
   Lease is written without it; so a claim the others read is never narrower than what the
   instance acts on.
2. *Claim.* It claims a vnode the ring gives it only when no other live Lease claims it (or it
   claimed it already).
3. *Confirm (read after write).* A claimed vnode becomes acting only once a list made *after*
   the Lease write that claimed it shows no other live claim on it. Two instances that claim
   the same vnode at once cannot both miss each other's write (the API server is linearizable),
   so at most one acts; the one the ring does not favour drops it at its next round.
4. *Lock until synced.* A vnode that becomes acting is *locked* (no pod of it is decided, no
   node of it is placed on) until the instance has re-listed pods and nodes from the API server
   at a ``resourceVersion`` not older than its claim's write and applied that vnode's objects
   (:meth:`ShareMember.sync_needed` / :meth:`ShareMember.synced`) — the paper's lock and store
   version, so no decision is made on state the old owner's watch left behind.
5. *Fencing.* The instance acts at all only within ``renew_deadline_s`` of its last successful
   renewal; others treat its Lease as live for ``lease_duration_s`` > ``renew_deadline_s`` after
   they last saw it change, so a dead or partitioned instance has stopped before its vnodes move.
   A clean stop clears the Lease (:meth:`ShareMember.release`): its vnodes move at the others' next
   rounds.

What a sharded instance decides, and how, is :mod:`.shard_view`.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone

import numpy as np

log = logging.getLogger(__name__)

VNODES = 256
POINTS = 128
SHARD_LABEL = "kalena.naughtian.io/scheduler-shards"
SHARE_ANNOTATION = "kalena.naughtian.io/vnodes"


def h64(text: str) -> int:
    """A stable 64-bit hash (BLAKE2b): the same in every process and on every machine."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def vnode_of(key: str, vnodes: int = VNODES) -> int:
    """The virtual node of an object key (a node name, a pod's ``namespace/name`` or gang key)."""
    return h64(key) % vnodes


def pod_key(name: str, gang: str = "") -> str:
    """What a pending pod is hashed by: its gang (all members alike) or else its name."""
    return f"gang:{gang}" if gang else name


def pod_vnode(name: str, gang: str = "", vnodes: int = VNODES) -> int:
    return vnode_of(pod_key(name, gang), vnodes)


class Ring:
    """Consistent hashing of vnodes ``0 … vnodes-1`` onto ``members`` with ``points`` points
    each (positions: BLAKE2b of ``member#i``; vnode ``v`` sits at ``v · 2⁶⁴ / vnodes``, evenly; its
    owner: the first member point at or clockwise after it).

    Raises:
        ValueError: no member, or ``points`` < 1.
    """

    def __init__(self, members: Iterable[str], *, vnodes: int = VNODES, points: int = POINTS) -> None:
        self.members = tuple(sorted(set(members)))
        if not self.members:
            raise ValueError("a ring needs at least one member")
        if points < 1:
            raise ValueError(f"points={points}: need at least 1 point per member")
        self.vnodes, self.points = vnodes, points
        pos = np.array([h64(f"{m}#{i}") for m in self.members for i in range(points)], dtype=np.uint64)
        who = np.repeat(np.arange(len(self.members)), points)
        order = np.argsort(pos, kind="stable")
        pos, who = pos[order], who[order]
        # vnodes sit evenly around the ring (their labels are already a hash): only the members'
        # points are random, so a share's size varies by the arcs alone
        where = (np.arange(vnodes, dtype=np.uint64) * np.uint64(2**64 // vnodes))
        idx = np.searchsorted(pos, where, side="left") % len(pos)
        #: ``(vnodes,)`` index into :attr:`members` of each vnode's owner
        self.owner = who[idx]

    def owner_of(self, vnode: int) -> str:
        return self.members[int(self.owner[vnode])]

    def vnodes_of(self, member: str) -> frozenset[int]:
        if member not in self.members:
            return frozenset()
        return frozenset(int(v) for v in np.flatnonzero(self.owner == self.members.index(member)))

    def assignment(self) -> dict[str, frozenset[int]]:
        return {m: self.vnodes_of(m) for m in self.members}


def bitmap(vnodes: Iterable[int], size: int = VNODES) -> str:
    """Vnode set → hex bitmap (``size`` / 4 digits), the share annotation's form."""
    bits = 0
    for v in vnodes:
        bits |= 1 << int(v)
    return f"{bits:0{size // 4}x}"


def from_bitmap(text: str | None, size: int = VNODES) -> frozenset[int]:
    """Hex bitmap → vnode set; an unreadable annotation is the empty set (claims nothing)."""
    try:
        bits = int(text or "0", 16)
    except ValueError:
        return frozenset()
    return frozenset(v for v in range(size) if bits >> v & 1)


def _micro_time() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:50] or "x"


@dataclass
class _Seen:
    record: tuple
    at: float
    duration_s: float
    claims: frozenset[int]
    holder: str


@dataclass
class ShareMember:
    """One instance's membership Lease and share (module doc, steps 1–5).

    ``api`` has ``lease_list(namespace, label_selector) -> list[dict]`` and ``lease_write(namespace,
    lease, create=bool) -> dict`` (an :class:`~agents.orchestrators.base.OrchestratorError` on a
    conflict or failure) — :class:`~agents.orchestrators.kubernetes.KubernetesOrchestrator`.
    ``clock`` is monotonic seconds. ``on_change`` is called (from the membership thread) when the
    acting set changed.
    """

    api: object
    cluster: str
    identity: str
    namespace: str = "kube-system"
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    vnodes: int = VNODES
    points: int = POINTS
    clock: Callable[[], float] = time.monotonic
    on_change: Callable[[], object] | None = None

    members: tuple[str, ...] = ()
    claimed: frozenset[int] = frozenset()    # as last written in the Lease
    acting: frozenset[int] = frozenset()     # confirmed: this instance may act on them (once synced)
    locked: dict[int, str] = field(default_factory=dict)  # acting vnode → resourceVersion to sync past
    rounds: int = 0
    moves: list[tuple[float, frozenset[int], frozenset[int]]] = field(default_factory=list)  # (t, gained, lost)
    #: every round: (wall time, round, live members, acting vnodes) — tests and benchmarks
    history: list[tuple[float, int, tuple[str, ...], frozenset[int]]] = field(default_factory=list)
    _renewed_at: float | None = None
    _written: frozenset[int] = frozenset()
    _written_rv: str = ""
    _resource_version: str = ""
    _seen: dict[str, _Seen] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: (claimed, acting, their union) as :meth:`watched` last made it
    _watched: tuple = (None, None, frozenset())

    def __post_init__(self) -> None:
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError("need retry_period_s < renew_deadline_s < lease_duration_s")
        self.name = f"kalena-shard-{_slug(self.cluster)}-{_slug(self.identity)}"

    # -- what the scheduler asks --------------------------------------------------------------

    def may_act(self) -> bool:
        """Renewed within ``renew_deadline_s`` (fencing, step 5)."""
        return self._renewed_at is not None and self.clock() < self._renewed_at + self.renew_deadline_s

    # the scheduler treats "leading" as "a member that may act" (ClusterScheduler's elector port)
    is_leader = may_act

    def valid_for_s(self) -> float:
        return 0.0 if self._renewed_at is None else max(0.0, self._renewed_at + self.renew_deadline_s - self.clock())

    def active(self) -> frozenset[int]:
        """Vnodes this instance may decide on now: acting, synced, and renewed in time."""
        if not self.may_act():
            return frozenset()
        with self._lock:
            return frozenset(v for v in self.acting if v not in self.locked)

    def watched(self) -> frozenset[int]:
        """Vnodes whose watch events this instance applies: what it claims or acts on. Asked
        for every watch line and event, so the union is kept until either set is replaced."""
        with self._lock:
            held = self._watched
            if held[0] is not self.claimed or held[1] is not self.acting:
                held = self._watched = (self.claimed, self.acting, self.claimed | self.acting)
            return held[2]

    def sync_needed(self) -> dict[int, str]:
        """Locked vnodes and the resourceVersion each must be synced past (step 4)."""
        with self._lock:
            return dict(self.locked)

    def synced(self, vnodes: Iterable[int], resource_version: str) -> None:
        """The store was re-listed at ``resource_version`` and these vnodes' objects applied:
        unlock those whose claim was written at or before it."""
        with self._lock:
            for v in vnodes:
                need = self.locked.get(v)
                if need is not None and _rv_le(need, resource_version):
                    del self.locked[v]

    # -- one round ----------------------------------------------------------------------------

    def _live_others(self, leases: list[dict], now: float) -> dict[str, _Seen]:
        live: dict[str, _Seen] = {}
        names = set()
        for lease in leases:
            meta, spec = lease.get("metadata") or {}, lease.get("spec") or {}
            name = meta.get("name") or ""
            names.add(name)
            if name == self.name:
                continue
            holder = spec.get("holderIdentity") or ""
            record = (holder, spec.get("renewTime"), (meta.get("annotations") or {}).get(SHARE_ANNOTATION))
            seen = self._seen.get(name)
            if seen is None or seen.record != record:
                seen = _Seen(record=record, at=now, duration_s=float(spec.get("leaseDurationSeconds") or
                                                                     self.lease_duration_s),
                             claims=from_bitmap(record[2], self.vnodes), holder=holder)
                self._seen[name] = seen
            if holder and now < seen.at + seen.duration_s:
                live[name] = seen
        for gone in [n for n in self._seen if n not in names]:
            del self._seen[gone]
        return live

    def step(self) -> bool:
        """One round (module doc); returns whether this instance may act after it."""
        from agents.orchestrators.base import OrchestratorError

        now = self.clock()
        try:
            leases = self.api.lease_list(self.namespace, f"{SHARD_LABEL}={_slug(self.cluster)}")
        except OrchestratorError as exc:
            log.warning("shard %s: listing members failed: %s", self.identity, exc)
            return self.may_act()
        mine = next((lease for lease in leases if (lease.get("metadata") or {}).get("name") == self.name), None)
        others = self._live_others(leases, now)
        members = sorted({s.holder for s in others.values()} | {self.identity})
        ring = Ring(members, vnodes=self.vnodes, points=self.points)
        want = ring.vnodes_of(self.identity)
        taken = frozenset().union(*[s.claims for s in others.values()]) if others else frozenset()
        changed = False
        with self._lock:
            # 1. stop first: what the ring no longer gives, or another live member claims that
            #    this one has not confirmed yet, leaves the acting set before the Lease is written
            lost = self.acting - want
            if lost:
                self.acting = self.acting - lost
                for v in lost:
                    self.locked.pop(v, None)
                changed = True
            # 3. confirm what the previous write claimed, now that this list (after it) shows no rival
            if self.may_act():
                gained = (self._written & want) - taken - self.acting
                if gained:
                    self.acting = self.acting | gained
                    for v in gained:
                        self.locked[v] = self._written_rv
                    changed = True
            else:
                gained = frozenset()
                if self.acting:  # renewals failed for renew_deadline_s: act on nothing, confirm again
                    lost = lost | self.acting
                    self.acting, self.locked = frozenset(), {}
                    changed = True
            # 2. claim: what the ring gives and no other live member claims (or already claimed)
            claim = want & (self._written | (frozenset(range(self.vnodes)) - taken))
            self.claimed = claim | self.acting
        if lost or gained:
            self.moves.append((time.time(), gained, lost))
        if changed and self.on_change is not None:
            self.on_change()
        stamp = _micro_time()
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace,
                             "labels": {SHARD_LABEL: _slug(self.cluster)},
                             "annotations": {SHARE_ANNOTATION: bitmap(self.claimed, self.vnodes)}},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": int(-(-self.lease_duration_s // 1)),
                         "renewTime": stamp}}
        if mine is not None:
            body["metadata"]["resourceVersion"] = mine["metadata"]["resourceVersion"]
            body["spec"]["acquireTime"] = (mine.get("spec") or {}).get("acquireTime") or stamp
        else:
            body["spec"]["acquireTime"] = stamp
        try:
            written = self.api.lease_write(self.namespace, body, create=mine is None)
        except OrchestratorError as exc:
            log.info("shard %s: renewal failed: %s", self.identity, exc)
            return self.may_act()
        self._renewed_at = now
        self._written = self.claimed
        self._written_rv = str((written.get("metadata") or {}).get("resourceVersion") or "")
        self.members = tuple(members)
        self.rounds += 1
        self.history.append((time.time(), self.rounds, self.members, self.acting))
        if len(self.history) > 10_000:
            del self.history[:5_000]
        return True

    def release(self) -> None:
        """Clean stop: act on nothing, then clear the Lease so the others take the share at once."""
        from agents.orchestrators.base import OrchestratorError

        with self._lock:
            self.acting, self.locked, self.claimed = frozenset(), {}, frozenset()
        self._renewed_at = None
        try:
            leases = self.api.lease_list(self.namespace, f"{SHARD_LABEL}={_slug(self.cluster)}")
            mine = next((lease for lease in leases if (lease.get("metadata") or {}).get("name") == self.name), None)
            if mine is not None:
                mine.setdefault("metadata", {}).setdefault("annotations", {})[SHARE_ANNOTATION] = bitmap((), self.vnodes)
                mine["spec"]["holderIdentity"] = ""
                mine["spec"]["leaseDurationSeconds"] = 1
                self.api.lease_write(self.namespace, mine, create=False)
        except OrchestratorError as exc:
            log.info("shard %s: release failed (the Lease expires on its own): %s", self.identity, exc)

    def run(self, stop: threading.Event) -> None:
        """A round every ``retry_period_s`` until ``stop`` (does not release)."""
        while not stop.is_set():
            try:
                self.step()
            except Exception:  # noqa: BLE001 - one failed round is a missed renewal
                log.exception("shard %s: round failed", self.identity)
            stop.wait(self.retry_period_s)


def _rv_le(a: str, b: str) -> bool:
    """resourceVersion ``a`` ≤ ``b``: numerically when both are integers (etcd's and the test
    server's are), else only when equal (Kubernetes calls them opaque)."""
    if a == b or not a:
        return True
    try:
        return int(a) <= int(b)
    except ValueError:
        return False
