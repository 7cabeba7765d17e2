"""One scheduler per Kubernetes cluster: lease, watch and scheduling loop in one process.

kube-scheduler's shape: every ``kalena watch`` process (or ``kalena serve`` thread) is a
candidate for the cluster's Lease (:class:`~agents.orchestrators.kubernetes.lease.LeaderElector`,
renewed on its own thread). While it leads, it runs the watch (pods and nodes →
:class:`~kalena_web.control.reconciler.Reconciler`) and scheduling passes — event-driven (a
queued pod wakes it, once the watch has been quiet for ``COALESCE_QUIET_S`` or
``COALESCE_MAX_S`` has passed, so a burst is decided in a few large passes) and at least every
``pass_period_s``. Each leadership term has its own
scheduler cache (:class:`~kalena_web.scheduling.cache.SchedulerCache`) and binding pool
(:class:`~kalena_web.scheduling.binder.BindingPool`): the first pass waits until the watch's
first list was applied (its ``Resynced``, at most ``sync_timeout_s``), so a newly elected
scheduler decides on the list and the record, never on what it held before; passes then
hand their decisions to the pool and do not wait for the Binding calls, whose answers the next
pass applies. The pool asks :meth:`ClusterScheduler.may_act` before every call, so no binding
outlives the lease nor a :meth:`ClusterScheduler.stop`. When it loses the lease it stops the
pool and the watch at once, gives the pods not bound back to the queue, and a standby takes
over after the lease expires. Each pass also
records the agents' evictions, settles bindings the watch has not confirmed after 30 s by
reading the pod (:func:`~kalena_web.scheduling.lifecycle.batch_unconfirmed`; not those whose call is still
in the pool), and retries evictions a
PodDisruptionBudget refused (:func:`~kalena_web.control.escalation.eviction_retries_run`), and
every 5 s moves the watch's counters into ``/metrics/cluster`` (:class:`~kalena_web.control.watching.WatchCounters`).

Every pass decides with the cluster's current policy version (docs/design.md §15), re-read at the start
of the pass (:func:`~kalena_web.policy.services.policy_apply`: one query of the version number
while it is unchanged), so a version saved in the console — namespace caps, weights, the
eviction cooldown — takes effect on the next pass; the version applied is recorded for the
policy page.

The Celery scheduling task skips Kubernetes clusters (this loop schedules them).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

import numpy as np
from django.db import close_old_connections, connection

from agents.orchestrators.kubernetes.lease import LeaderElector
from kalena_engine.policy import Policy
from kalena_web.control.reconciler import Reconciler
from kalena_web.control.watching import RunningWatch, WatchCounters, watch_start
from kalena_web.inventory.models import Cluster
from kalena_web.policy.models import PolicyApplied
from kalena_web.policy.selectors import CurrentPolicy
from kalena_web.policy.services import policy_apply
from kalena_web.scheduling.binder import BindingPool
from kalena_web.scheduling.cache import SchedulerCache
from kalena_web.scheduling.cycle import PASS_PODS, scheduling_pass

log = logging.getLogger(__name__)
#: seconds between two moves of the watch's counters into /metrics/cluster (and once at stop)
COUNTERS_PERIOD_S = 5.0
#: a pass the watch woke waits until the watch has queued nothing new for this long (seconds) —
#: longer than the reconciler's batches are apart under a burst (its ``BATCH_MAX_WAIT_S``, one
#: wake per batch), so a burst is not cut into one pass per batch …
COALESCE_QUIET_S = 0.3
#: … and at most this long: pods that arrive together are decided in one pass (a burst arrives in
#: the watch's chunks; a pass per chunk paid the pass's fixed cost — its snapshot, its ledger
#: transaction — once per chunk; Volcano's scheduler runs a session per 1 s period)
COALESCE_MAX_S = 1.0


@dataclass
class SchedulerStats:
    passes: int = 0
    placed: int = 0
    stale_bindings: int = 0
    requeued_unconfirmed: int = 0
    leader_since_s: list[float] = field(default_factory=list)
    lost_s: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    phase_s: dict[str, float] = field(default_factory=dict)


class ClusterScheduler:
    """Candidate scheduler for ``cluster`` over ``orchestrator`` (a
    :class:`~agents.orchestrators.kubernetes.KubernetesOrchestrator`); see module doc."""

    def __init__(self, *, cluster: Cluster, orchestrator, elector: LeaderElector, policy: Policy | None = None,
                 pass_period_s: float = 2.0, rng: np.random.Generator | None = None,
                 sync_timeout_s: float = 30.0) -> None:
        """``policy``: a fixed policy for every pass (benchmarks); ``None`` (a live scheduler)
        follows the cluster's current version, re-read every pass."""
        self.cluster = cluster
        self.orchestrator = orchestrator
        self.elector = elector
        self.fixed_policy = policy
        self.current: CurrentPolicy | None = None  # the version the last pass read (None: none yet)
        self.pass_period_s = pass_period_s
        self._deferred = False  # the last pass left pods to the next one
        self.rng = rng or np.random.default_rng()
        self.stats = SchedulerStats()
        self.wake = threading.Event()
        self.watch: RunningWatch | None = None
        self.reconcilers: list[Reconciler] = []  # of the watches this candidate ran and stopped
        self.sync_timeout_s = sync_timeout_s
        self.cache: SchedulerCache | None = None  # this leadership term's (None: not leading)
        self.binder: BindingPool | None = None
        self._synced = False
        self._watch_started = 0.0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.counters = WatchCounters(cluster)
        self._counters_at = -COUNTERS_PERIOD_S
        #: issue 32: a sharded instance's view (:class:`~kalena_web.control.sharding.ShardedScheduler`)
        self.shard = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._threads = [threading.Thread(target=self.elector.run, args=(self._stop,), name="kalena-lease", daemon=True),
                         threading.Thread(target=self._loop, name="kalena-scheduler", daemon=True)]
        for t in self._threads:
            t.start()

    def stop(self, *, release: bool = True) -> None:
        """Stop; ``release=False`` leaves the Lease to expire (what a crash does)."""
        self._stop.set()
        self.wake.set()
        for t in self._threads:
            t.join(timeout=30)
        self._stop_watch()
        self.record_counters(force=True)
        if release:
            self.elector.release()

    def record_counters(self, *, force: bool = False) -> int:
        """Move the watch's counters (lists, 410s, reconnects, malformed objects, the
        reconciler's outcomes) into ``/metrics/cluster``, at most every
        :data:`COUNTERS_PERIOD_S` unless ``force``; returns the series that rose."""
        if not force and time.monotonic() < self._counters_at + COUNTERS_PERIOD_S:
            return 0
        self._counters_at = time.monotonic()
        reconcilers = [*self.reconcilers, *([self.watch.reconciler] if self.watch is not None else [])]
        try:
            return self.counters.record(self.counters.totals(getattr(self.orchestrator, "watchers", []), reconcilers))
        except Exception:  # noqa: BLE001 - metrics must never stop scheduling; the rise is kept for next time
            log.exception("watch counters for %s not recorded", self.cluster.name)
            return 0

    # -- the loop -------------------------------------------------------------------------------

    def _start_watch(self) -> None:
        self.cache = SchedulerCache(cluster=self.cluster, warm=True)
        reconciler = Reconciler(cluster=self.cluster, wake=lambda _cluster_id: self.wake.set(),
                                listeners=[self.cache.watch_feed])
        self.binder = BindingPool(self.orchestrator, keep_going=self.may_act, on_answer=self.cache.answer,
                                  on_acknowledged=self.cache.acknowledge)
        self._synced = False
        self._watch_started = time.monotonic()
        self.watch = watch_start(cluster=self.cluster, orchestrator=self.orchestrator, reconciler=reconciler)
        self.stats.leader_since_s.append(time.time())

    def _synced_now(self) -> bool:
        """Whether the watch of this term has applied its first list (its ``Resynced``), or
        ``sync_timeout_s`` passed without it (then the record alone is decided on)."""
        if not self._synced and self.watch is not None:
            resynced = self.watch.reconciler.counts.get("Resynced")
            self._synced = bool(resynced and resynced.total() >= 1) or (
                time.monotonic() - self._watch_started > self.sync_timeout_s)
        return self._synced

    def _close_binder(self) -> None:
        """Stop the pool (no call starts after this), wait for the calls under way and apply
        every answer: the pods not bound go back to the queue (in the scheduler's thread)."""
        if self.binder is None:
            return
        from kalena_web.scheduling.cycle import PassReport

        binder, self.binder = self.binder, None
        binder.stop()
        report = PassReport()
        try:
            binder.close(now_s=time.time(), report=report)
        except Exception:  # noqa: BLE001 - the record settles them: batch_unconfirmed after 30 s
            log.exception("binding answers for %s not applied", self.cluster.name)
        self._count(report)
        self.cache = None

    def _stop_watch(self) -> None:
        if self.binder is not None and threading.current_thread() in self._threads:
            self._close_binder()
        if self.watch is not None:
            self.watch.stop()
            self.reconcilers.append(self.watch.reconciler)
            self.watch = None
            self.stats.lost_s.append(time.time())

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                if not self.elector.is_leader():
                    self._stop_watch()
                    self._stop.wait(min(0.2, self.elector.retry_period_s))
                    continue
                if self.watch is None:
                    self._start_watch()
                woken = self.wake.wait(self.pass_period_s if self._synced else min(0.1, self.pass_period_s))
                if woken and not self._deferred:  # (pods left by the last pass are decided at once)
                    self._let_the_burst_arrive()
                self.wake.clear()
                if self._stop.is_set() or not self.elector.is_leader() or not self._synced_now():
                    continue
                close_old_connections()
                try:
                    self.run_pass(wait_for_bindings=False)
                except Exception:  # noqa: BLE001 - a failed pass is retried at the next one
                    log.exception("scheduling pass for %s failed", self.cluster.name)
                self.record_counters()  # after a failed pass too: the counters may say why
        finally:
            try:
                self._close_binder()
            finally:
                connection.close()

    def _let_the_burst_arrive(self) -> None:
        """Woken by the watch: wait until it has queued nothing new for ``COALESCE_QUIET_S``
        (at most ``COALESCE_MAX_S``), so pods that arrive together are decided in one pass."""
        deadline = time.monotonic() + COALESCE_MAX_S
        while not self._stop.is_set():
            self.wake.clear()
            left = deadline - time.monotonic()
            if left <= 0 or not self.wake.wait(min(COALESCE_QUIET_S, left)):
                return

    def may_act(self) -> bool:
        """Whether this candidate may bind now: it holds the Lease and is not stopping (a
        stopped scheduler binds nothing more, as kube-scheduler's cancelled context)."""
        return not self._stop.is_set() and self.elector.is_leader()

    def _settle_unconfirmed(self, now: float, older_than_s: float | None = None) -> int:
        """Bindings the watch has not confirmed after 30 s: ask the API where each pod is —
        bound (the watch is behind: confirm it there), pending (the call never landed: queue it
        again), gone (leave every ledger). Returns how many were queued again."""
        from kalena_web.inventory.models import Node
        from kalena_web.scheduling.lifecycle import batch_gone, batch_requeue, batch_unconfirmed
        from kalena_web.scheduling.observe import batch_observe_running

        requeued = 0
        in_pool = self.binder.in_flight if self.binder is not None else set()
        kw = {} if older_than_s is None else {"older_than_s": older_than_s}
        # the bindings this term's calls saw accepted have landed: a watch behind is no reason to
        # ask the API about each (under a burst that read was most of the scheduler's CPU)
        landed = self.cache.acknowledged_ids(now) if self.cache is not None else set()
        for pod in batch_unconfirmed(cluster=self.cluster, now_s=now, skip=landed, **kw):
            if pod.id in in_pool:
                continue  # its call has not been answered yet
            if self.shard is not None and not self.shard.owns_pod(pod.workload.name, pod.gang):
                continue  # issue 32: another shard's pod (its binding is that shard's to settle)
            if not self.may_act():
                break
            try:
                where = self.orchestrator.pod_node(pod.workload.name)
            except Exception as exc:  # noqa: BLE001 - asked again next pass
                log.info("could not read %s: %s", pod.workload.name, exc)
                continue
            if where is None:
                batch_gone(pod=pod, now_s=now, reason="gone before its binding was confirmed")
            elif where:
                node_id = Node.objects.filter(cluster=self.cluster, name=where).values_list("id", flat=True).first()
                if node_id is not None:
                    batch_observe_running(pod=pod, node_id=node_id, at_s=now, now_s=now,
                                          admitted=False)  # bound; the watch reports admission
            else:
                batch_requeue(pod=pod, now_s=now, reason="binding never reached the API")
                requeued += 1
        return requeued

    def pass_policy(self, now_s: float) -> Policy:
        """The policy of this pass: the fixed one, else the cluster's current version (read
        afresh when it changed), recorded as the scheduler's applied version."""
        if self.fixed_policy is not None:
            return self.fixed_policy
        self.current = policy_apply(cluster_id=self.cluster.id, part=PolicyApplied.SCHEDULER, now_s=now_s,
                                    known=self.current)
        return self.current.policy

    def run_pass(self, now_s: float | None = None, *, wait_for_bindings: bool = True):
        """One pass as the leader (see module doc); returns the pass report. The loop passes
        ``wait_for_bindings=False`` (the next pass applies the answers); a pass asked for from
        outside (tests, the console) waits for its bindings' answers before it returns."""
        from kalena_web.archive.evictions import evictions_record
        from kalena_web.control.escalation import eviction_retries_run

        now = time.time() if now_s is None else now_s
        if self.cache is None:  # a pass asked for outside the loop (tests, benchmarks): a term of its own
            self.cache = SchedulerCache(cluster=self.cluster)
            self.binder = BindingPool(self.orchestrator, keep_going=self.may_act, on_answer=self.cache.answer,
                                      on_acknowledged=self.cache.acknowledge)
        policy = self.pass_policy(now)
        cluster_wide = self.shard is None or self.shard.owns_vnode(0)  # issue 32: one shard runs these
        if cluster_wide:
            evictions_record(cluster=self.cluster, now_s=now)
        self.stats.requeued_unconfirmed += self._settle_unconfirmed(now)
        if cluster_wide:
            eviction_retries_run(cluster=self.cluster, orchestrator=self.orchestrator, now_s=now)
        report = scheduling_pass(cluster=self.cluster, orchestrator=self.orchestrator, policy=policy, now_s=now,
                                 rng=self.rng, keep_going=self.may_act, cache=self.cache, binder=self.binder,
                                 max_pods=None if wait_for_bindings else PASS_PODS, shard=self.shard)
        self._deferred = bool(report.deferred)
        if report.deferred:
            self.wake.set()  # the rest of the queue: decided by the next pass at once
        if wait_for_bindings:
            self.binder.collect(now_s=now, report=report, wait=True)
            report.in_flight = 0
        self.stats.passes += 1
        self._count(report)
        return report

    def _count(self, report) -> None:
        self.stats.placed += report.placed
        self.stats.stale_bindings += report.stale_bindings
        self.stats.errors = (self.stats.errors + report.errors)[-20:]
        for phase, seconds in report.phase_s.items():
            self.stats.phase_s[phase] = round(self.stats.phase_s.get(phase, 0.0) + seconds, 3)
