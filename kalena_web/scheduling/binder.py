"""The binder: the orchestrator's binding calls, off the decision path (kube-scheduler binds
each pod asynchronously once the cycle assumed it).

:class:`BindingPool` takes the pods a pass assumed (:meth:`~BindingPool.submit`) and makes their
calls on a bounded pool of ``bind_concurrency`` threads (Kubernetes: each over one of the
client's keep-alive connections; an orchestrator without ``bind_concurrency`` > 1 — Docker,
Swarm — gets each call made at once in the caller's thread). The pass does not wait: the answers
are applied in the scheduler's own thread when it next asks (:meth:`~BindingPool.collect`, at
the start of every pass, and :meth:`~BindingPool.close`). A refused or failed binding returns
the pod to the queue and its room to the node (:mod:`.lifecycle`) and the cache forgets the
assumption; a stale one (409 already assigned, 404 gone) drops a watched pod from the queue.

Fencing: before every call the pool asks ``keep_going`` (the scheduler still holds its Lease and
is not stopping) and whether it was :meth:`~BindingPool.stop`\\ ped; once either says no, no
further call is made and the pods not yet bound go back to the queue together.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable, Sequence

from agents.orchestrators import BindingUncertain, Orchestrator, OrchestratorError, StaleBinding
from kalena_web.scheduling.lifecycle import batch_bind_refused, batch_drop, batch_requeue, batch_requeue_many
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.queue import QueuedPod

LEASE_LAPSED = "scheduler lost its lease (or stopped) before binding"


class LeaseLapsed(Exception):
    """No binding call was made: the scheduler lost its Lease or was stopped first."""


def bind_call(orchestrator: Orchestrator, pod: QueuedPod, node_name: str,
              may_call: Callable[[], bool]) -> Exception | None:
    """One binding call (no database access: it runs on a pool thread); returns the refusal,
    :class:`LeaseLapsed` when ``may_call()`` said no first, or None when the orchestrator bound
    the pod."""
    if not may_call():
        return LeaseLapsed(LEASE_LAPSED)
    try:
        orchestrator.bind(pod.spec, node_name)
    except OrchestratorError as exc:
        return exc
    return None


class BindingPool:
    """Bounded binding pool for one scheduler (module doc). ``on_answer(pod_id, bound)`` is told
    of every answer applied (the cache confirms or forgets the assumption); ``on_acknowledged(pod,
    now_s)`` of every binding the orchestrator accepted (not of an uncertain one: a timeout may or
    may not have landed)."""

    def __init__(self, orchestrator: Orchestrator, *, keep_going: Callable[[], bool] | None = None,
                 on_answer: Callable[[int, bool], object] | None = None,
                 on_acknowledged: Callable[[QueuedPod, float], object] | None = None) -> None:
        self.orchestrator, self.keep_going, self.on_answer = orchestrator, keep_going, on_answer
        self.on_acknowledged = on_acknowledged
        self.workers = int(getattr(orchestrator, "bind_concurrency", 1) or 1)
        self._pool: list[threading.Thread] | None = None
        self._stopped = threading.Event()
        self._waiting: list[tuple[QueuedPod, Exception | None]] = []
        self._answered: collections.deque = collections.deque()  # (pod, answer) as the pool threads finish
        self._calls: queue.SimpleQueue = queue.SimpleQueue()  # (pod, node name) for the pool threads
        self._unanswered = 0  # calls asked of the pool whose answer has not come back
        self._pending_ids: set[int] = set()  # pods whose answer has not been applied

    def may_call(self) -> bool:
        return not self._stopped.is_set() and (self.keep_going is None or self.keep_going())

    def stop(self) -> None:
        """No call starts after this (calls under way finish); their pods go back to the queue
        at the next :meth:`collect` or :meth:`close`. Any thread may call it."""
        self._stopped.set()

    @property
    def in_flight(self) -> set[int]:
        """Pod ids whose answer has not been applied yet."""
        return set(self._pending_ids)

    def submit(self, calls: Sequence[tuple[QueuedPod, str]]) -> None:
        """Ask for ``(pod, node name)`` bindings (pods already assumed in the record)."""
        self._pending_ids.update(pod.id for pod, _ in calls)
        if self.workers <= 1:
            self._waiting += [(pod, bind_call(self.orchestrator, pod, name, self.may_call)) for pod, name in calls]
            return
        if self._pool is None:
            self._pool = [threading.Thread(target=self._work, name=f"kalena-bind-{i}", daemon=True)
                          for i in range(self.workers)]
            for thread in self._pool:
                thread.start()
        for pod, name in calls:
            self._unanswered += 1
            self._calls.put((pod, name))

    def _work(self) -> None:
        """A pool thread: makes the calls in the order they were asked for, each answer handed
        over to :meth:`collect` as it comes (None in the queue: the pool closes)."""
        while (call := self._calls.get()) is not None:
            pod, name = call
            try:
                answer = bind_call(self.orchestrator, pod, name, self.may_call)
            except Exception as exc:  # noqa: BLE001 - an unexpected failure is that pod's refusal
                answer = OrchestratorError(f"bind {pod.name}: {type(exc).__name__}: {exc}")
            self._answered.append((pod, answer))

    def collect(self, *, now_s: float, report, wait: bool = False) -> int:
        """Apply the answers that came back (every one with ``wait``) in this thread, in the
        order they came back (each pool thread hands its answer over as it finishes: nothing is
        scanned); returns how many were applied. ``report`` (a
        :class:`~kalena_web.scheduling.cycle.PassReport`) counts them."""
        done, lapsed = [], []
        for pod, answer in self._waiting:  # answers made in the caller's thread (no pool)
            done.append((pod, answer))
        self._waiting = []
        while self._unanswered and (wait or self._answered):  # the pool's, in the order they came back
            if not self._answered:
                time.sleep(0.001)
                continue
            pod, answer = self._answered.popleft()
            self._unanswered -= 1
            done.append((pod, answer))
        for pod, answer in done:
            self._pending_ids.discard(pod.id)
            if isinstance(answer, LeaseLapsed):
                lapsed.append(pod)
            else:
                bind_outcome(pod, answer, now_s=now_s, report=report)
                if answer is None and self.on_acknowledged is not None:
                    self.on_acknowledged(pod, now_s)
                if self.on_answer is not None:
                    self.on_answer(pod.id, answer is None or isinstance(answer, BindingUncertain))
        if lapsed:  # everything not bound once the lease lapsed goes back to the queue at once
            report.stopped_early = True
            batch_requeue_many(pods=lapsed, now_s=now_s, reason=LEASE_LAPSED)
            if self.on_answer is not None:
                for pod in lapsed:
                    self.on_answer(pod.id, False)
        return len(done)

    def close(self, *, now_s: float, report) -> None:
        """Wait for every answer, apply them, and let the threads go."""
        try:
            self.collect(now_s=now_s, report=report, wait=True)
        finally:
            if self._pool is not None:
                for _ in self._pool:
                    self._calls.put(None)
                for thread in self._pool:
                    thread.join()
                self._pool = None


def bind_outcome(pod: QueuedPod, answer: Exception | None, *, now_s: float, report) -> None:
    """Apply one binding call's answer: bound (a pod a node refused before has its backoff
    reset); the lease lapsed first (requeued); a stale
    binding (409 already assigned, 404 gone: a watched pod leaves the queue, never loops); an
    uncertain one (a watched pod stays bound, unconfirmed, until the watch or a read —
    :func:`~kalena_web.scheduling.lifecycle.batch_unconfirmed` — settles it); any other refusal
    (requeued with backoff, the node avoided: :func:`~kalena_web.scheduling.lifecycle.batch_bind_refused`)."""
    if answer is None:
        report.placed += 1
        if pod.refused:  # the engine ran it: the next refusal backs off from the start again
            BatchPod.objects.filter(id=pod.id).update(refusals=0, retry_s=None)
    elif isinstance(answer, LeaseLapsed):
        report.stopped_early = True
        batch_requeue(pod=pod, now_s=now_s, reason=LEASE_LAPSED)
    elif isinstance(answer, StaleBinding):
        report.failed += 1
        report.stale_bindings += 1
        report.errors.append(str(answer))
        if pod.source == BatchPod.WATCH:
            batch_drop(pod=pod, now_s=now_s, reason=str(answer), uid=pod.uid)
        else:
            batch_requeue(pod=pod, now_s=now_s, reason="bind refused")
    elif isinstance(answer, BindingUncertain):
        report.uncertain += 1
        report.errors.append(str(answer))
        if pod.source != BatchPod.WATCH:
            batch_requeue(pod=pod, now_s=now_s, reason="bind failed")
    else:  # the engine could not run it there: its words are the pod's reason, backoff, another node
        report.failed += 1
        report.errors.append(str(answer))
        batch_bind_refused(pod=pod, now_s=now_s, error=str(answer) or "bind refused")
