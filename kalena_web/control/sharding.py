"""A sharded scheduler instance: ``kalena watch --shards`` (issue 32).

:class:`ShardedScheduler` is :class:`~kalena_web.control.leading.ClusterScheduler` with a
share instead of the cluster's one Lease (:class:`~kalena_web.scheduling.shards.ShareMember`,
renewed on its own thread): while it may act it runs the watch, applying only the events of the
nodes and pods of the vnodes it claims (the reconciler's ``owns``), and scheduling passes that
decide only the pods of its active vnodes, own nodes first
(:class:`~kalena_web.scheduling.shard_view.ShardView`). Before each pass it syncs the vnodes it has
just gained — a re-list of nodes and pods from the API server at a resourceVersion not older
than its claim, their objects applied — and only then unlocks them. Its binding calls are
fenced per pod: a pod whose vnode left the share is not bound (it goes back to the queue for the
new owner). The batch-capacity publisher runs here for the nodes of the active vnodes (every
:data:`PUBLISH_PERIOD_S`, and at the pass that unlocked vnodes gained since its last run); cluster-wide chores (the agents' evictions, the PodDisruptionBudget
retries) run on the instance that holds vnode 0.
"""

from __future__ import annotations

import logging
import time

from agents.orchestrators import OrchestratorError
from kalena_web.control.leading import ClusterScheduler
from kalena_web.control.reconciler import Reconciler
from kalena_web.control.watching import watch_start
from kalena_web.scheduling.binder import BindingPool
from kalena_web.scheduling.cache import SchedulerCache
from kalena_web.scheduling.shard_view import ShardView
from kalena_web.scheduling.shards import ShareMember, vnode_of

log = logging.getLogger(__name__)

PUBLISH_PERIOD_S = 5.0  # the batch-capacity publisher's period for the shard's nodes


class ShareMoved(OrchestratorError):
    """Not bound: the pod's vnode left this instance's share after it was decided."""


class _Fenced:
    """The orchestrator, with every binding call checked against the share first."""

    def __init__(self, orchestrator, view: ShardView) -> None:
        self._orchestrator, self._view = orchestrator, view

    def bind(self, spec, node: str) -> None:
        v = self._view.decided_vnode.get(spec.id)
        if v is not None and v not in self._view.active():
            raise ShareMoved(f"{spec.id}: its vnode {v} left the share of {self._view.identity} before binding")
        self._orchestrator.bind(spec, node)

    def __getattr__(self, name):
        return getattr(self._orchestrator, name)


class ShardedScheduler(ClusterScheduler):
    """One sharded instance for ``cluster`` (module doc); ``member`` is its share."""

    def __init__(self, *, member: ShareMember, **kwargs) -> None:
        super().__init__(elector=member, **kwargs)
        self.member = member
        self.shard = ShardView(identity=member.identity, active=member.active,
                               locked=lambda: self.member.sync_needed().keys(), vnodes=member.vnodes)
        member.on_change = self.wake.set
        # the pod watch translates only the pods of the watched vnodes: the others' events, which the
        # reconciler would drop (:meth:`owns`), are not checked and turned into events at all
        if hasattr(self.orchestrator, "watch_pods_of"):
            self.orchestrator.watch_pods_of = lambda ref: self.owns("pod", ref)
        self._published_at = -PUBLISH_PERIOD_S
        self._published_share: frozenset[int] = frozenset()  # the active vnodes at the last publication
        #: (wall time, vnodes) of each sync: when a gained share was unlocked
        self.syncs: list[tuple[float, frozenset[int]]] = []
        self._handovers: list[float] = []  # monotonic times from which gained shares' bindings are settled

    def owns(self, kind: str, ref: str) -> bool:
        return vnode_of(ref, self.member.vnodes) in self.member.watched()

    def _start_watch(self) -> None:
        # the queue holds (and reads whole) only the pods of the active vnodes, and the watch hands
        # over the pods it queued (those of the vnodes it watches) whole, as the single scheduler's does
        self.cache = SchedulerCache(cluster=self.cluster, holds=self.shard.holds, warm=True)
        reconciler = Reconciler(cluster=self.cluster, wake=lambda _cluster_id: self.wake.set(), owns=self.owns,
                                listeners=[self.cache.watch_feed])
        self.binder = BindingPool(_Fenced(self.orchestrator, self.shard), keep_going=self.may_act,
                                  on_answer=lambda pod_id, _bound: self.cache.in_flight.pop(pod_id, None),
                                  on_acknowledged=self.cache.acknowledge)
        self._synced = False
        self._watch_started = time.monotonic()
        self.watch = watch_start(cluster=self.cluster, orchestrator=self.orchestrator, reconciler=reconciler)
        self.stats.leader_since_s.append(time.time())

    def sync_shares(self) -> int:
        """Unlock the vnodes gained since the last pass: list nodes and pods from the API server
        (at a version not older than the claim), apply their objects, unlock. Returns how many
        vnodes were unlocked."""
        from agents.orchestrators.kubernetes.watch import KubernetesWatcher

        need = self.member.sync_needed()
        if not need or self.watch is None:
            return 0
        wanted = frozenset(need)
        events: list = []
        versions = []
        scratch = KubernetesWatcher(self.orchestrator)  # translates the lists; its own state is thrown away
        try:
            for resource in ("nodes", "pods"):
                versions.append(scratch._relist(resource, events.append, resynced=False))
        except (OrchestratorError, RuntimeError) as exc:
            log.info("shard %s: sync of %d vnodes failed (retried next pass): %s", self.member.identity, len(wanted),
                     exc)
            return 0
        n = self.member.vnodes
        mine = [e for e in events if vnode_of(getattr(e, "ref", None) or getattr(e, "name", ""), n) in wanted]
        self.watch.reconciler.apply_many(mine)
        self.member.synced(wanted, versions[0])
        # the old owner stopped acting before this instance confirmed the share; a call it had
        # started lands within its request timeout: settle its unconfirmed bindings after that
        self._handovers.append(time.monotonic() + float(getattr(self.orchestrator, "timeout_s", 10.0)))
        self.syncs.append((time.time(), wanted))
        return len(wanted)

    def _settle_unconfirmed(self, now: float, older_than_s: float | None = None) -> int:
        """As the single scheduler, and for a while after a share was gained, sooner: the pods
        the old owner bound in the record whose binding never reached the API are asked about
        (and requeued) once the old owner's last call has had its request timeout to land —
        not after the 30 s of the unconfirmed check. Calls still in this instance's pool are
        never asked about."""
        timeout = float(getattr(self.orchestrator, "timeout_s", 10.0))
        fast = any(due <= time.monotonic() <= due + 30.0 for due in self._handovers)
        self._handovers = [due for due in self._handovers if time.monotonic() <= due + 30.0]
        return super()._settle_unconfirmed(now, older_than_s=timeout if fast else older_than_s)

    def run_pass(self, now_s: float | None = None, *, wait_for_bindings: bool = True):
        self.sync_shares()
        report = super().run_pass(now_s, wait_for_bindings=wait_for_bindings)
        active = self.member.active()
        if time.monotonic() > self._published_at + PUBLISH_PERIOD_S or active - self._published_share:
            # every period, and at once for vnodes gained since the last publication: an instance
            # whose share was still locked at its first pass publishes it at the pass that
            # unlocked it, not a period later
            self._published_at = time.monotonic()
            self._published_share = active
            self.publish_share(time.time() if now_s is None else now_s)
        return report

    def publish_share(self, now_s: float) -> int:
        """The batch-capacity publisher for the nodes of the active vnodes (docs/design.md §14)."""
        from kalena_web.inventory.models import Node
        from kalena_web.kubehooks.services import batch_capacity_publish

        active = self.member.active()
        names = [name for name in Node.objects.filter(cluster=self.cluster).values_list("name", flat=True)
                 if self.shard.node_vnode(name) in active]
        if not names:
            return 0
        buckets = self.pass_policy(now_s).placement.slack_buckets
        try:
            return batch_capacity_publish(cluster=self.cluster, orchestrator=self.orchestrator, now_s=now_s,
                                          buckets=(buckets[0], buckets[1]), node_names=names)
        except Exception:  # noqa: BLE001 - publishing must never stop scheduling; tried again next period
            log.exception("shard %s: publishing batch capacity failed", self.member.identity)
            return 0
