"""The scheduler's pending queue: pending batch pods in queue order, held between passes
(kube-scheduler's ``internal/queue``).

The database is the record of which pods are pending (the watch's reconciler and the REST
submit path queue them there; the lifecycle puts requeued pods back there). The watch hands
the pods it queued to the queue whole (:meth:`PendingQueue.feed`, through the cache's inbox);
each pass the queue syncs with the record by a key-only read — ``(id, queued_s, requeues,
uid, source)`` of every pending pod — and reads whole rows (labels, constraints, requests: the
costly JSON) only for the pods it does not hold yet or whose key moved (submitted through
REST, queued again). A pod a pass assumed on a node leaves the
queue at once; one whose binding failed comes back through the record at the next sync.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from django.db.models import Count

from agents.orchestrators import BatchSpec
from kalena_web.inventory.models import Cluster
from kalena_web.scheduling.mappers import PendingRow
from kalena_web.scheduling.models import BatchPod


@dataclass(frozen=True)
class QueuedPod:
    """What the cycle and the binder need of one pending pod beyond its :class:`PendingRow`:
    its ids, where it came from (``rest`` | ``watch``), the object's ``uid`` and the
    orchestrator's :class:`BatchSpec` (request and limit in mcpu and bytes)."""

    id: int
    workload_id: int
    request: tuple[float, ...]
    source: str
    uid: str
    spec: BatchSpec
    #: a node refused to run it before (its backoff restarts from 10 s once a binding succeeds)
    refused: bool = False

    @property
    def name(self) -> str:
        return self.spec.id


def spec_of(p: BatchPod) -> BatchSpec:
    """What the orchestrator is asked to bind or start for ``p`` (its workload loaded)."""
    w = p.workload
    return BatchSpec(id=w.name, image=p.image, request_mcpu=w.request[0], request_bytes=w.request[1],
                     limit_mcpu=w.limit[0], limit_bytes=w.limit[1], priority=w.priority, command=tuple(p.command),
                     attempt=p.requeues, grace_s=p.grace_s, labels={k: str(v) for k, v in (w.labels or {}).items()},
                     uid=p.uid)


def _queued(p: BatchPod) -> tuple[PendingRow, QueuedPod]:
    w = p.workload
    row = PendingRow(pod_id=p.id, name=w.name, namespace=w.namespace, owner=w.owner, labels=w.labels or {},
                     constraints=w.constraints or {}, request=w.request, priority=w.priority, queued_s=p.queued_s,
                     gang=p.gang, min_member=p.min_member, image=p.image,
                     avoid=tuple((n, float(v["until_s"])) for n, v in (p.refused_on or {}).items()
                                 if isinstance(v, dict) and "until_s" in v))
    return row, QueuedPod(id=p.id, workload_id=w.id, request=tuple(float(v) for v in w.request), source=p.source,
                          uid=p.uid, spec=spec_of(p), refused=p.refusals > 0)


class PendingQueue:
    """Pending pods of one cluster, synced from the record (module doc); not thread-safe (the
    cycle's thread owns it)."""

    def __init__(self) -> None:
        #: pod id → (key, row, pod); key = (queued_s, requeues, uid, source) as last read
        self._held: dict[int, tuple[tuple, PendingRow, QueuedPod]] = {}
        #: pending pod id → (name, gang), read once per pod for a ``keep`` test (:meth:`sync`)
        self._names: dict[int, tuple[str, str]] = {}
        #: the last ``keep`` test and its answer per pending pod id (asked once per pod and test)
        self._keep: Callable[[str, str], bool] | None = None
        self._kept: dict[int, bool] = {}
        self._gangs: dict[str, int] = {}
        self.full_reads = 0  # rows read whole since the queue was made (a figure for tests and benchmarks)
        self.fed = 0  # pods the watch handed over whole (:meth:`feed`), likewise

    def __len__(self) -> int:
        return len(self._held)

    def sync(self, *, cluster: Cluster, now_s: float | None = None,
             keep: Callable[[str, str], bool] | None = None) -> None:
        """Make the queue what the record says is pending (2 queries, plus 1 for pods not held:
        their whole rows). With ``now_s``, a pod still backing off after a refused binding
        (``retry_s`` later than ``now_s``, kube-scheduler's backoffQ) is not held. ``keep(name,
        gang)`` (a sharded instance's share, issue 32; None: every pod): only the pods it answers
        True for are held, so the pods another instance decides are never read whole — their
        names and gangs are read once per pod (1 query, only when there are pods not seen yet)."""
        pending = BatchPod.objects.filter(cluster=cluster, state=BatchPod.PENDING)
        if now_s is not None:
            pending = pending.exclude(retry_s__gt=now_s)
        keys = {pod_id: (queued_s, requeues, uid, source) for pod_id, queued_s, requeues, uid, source in pending
                .values_list("id", "queued_s", "requeues", "uid", "source")}
        if keep is not None:
            for pod_id in [i for i in self._names if i not in keys]:
                del self._names[pod_id]
            unseen = [i for i in keys if i not in self._names]
            if unseen:
                self._names.update((pod_id, (name, gang)) for pod_id, name, gang in BatchPod.objects.filter(
                    id__any=unseen).values_list("id", "workload__name", "gang"))
            if keep is not self._keep:
                self._keep, self._kept = keep, {}
            kept = self._kept
            for pod_id in [i for i in kept if i not in keys]:
                del kept[pod_id]
            for i in keys:
                if i not in kept and i in self._names:
                    kept[i] = keep(*self._names[i])
            keys = {i: key for i, key in keys.items() if kept.get(i)}
        else:
            self._names.clear()
        for pod_id in [i for i in self._held if i not in keys]:
            del self._held[pod_id]
        missing = [i for i, key in keys.items() if i not in self._held or self._held[i][0] != key]
        if missing:
            for p in BatchPod.objects.filter(id__any=missing, state=BatchPod.PENDING).select_related("workload"):
                row, pod = _queued(p)
                self._held[p.id] = ((p.queued_s, p.requeues, p.uid, p.source), row, pod)
            self.full_reads += len(missing)
        self._gangs = dict(BatchPod.objects.filter(cluster=cluster, state=BatchPod.BOUND).exclude(gang="")
                           .values("gang").annotate(n=Count("id")).values_list("gang", "n"))

    def feed(self, pods: Iterable[BatchPod]) -> None:
        """Hold pods the watch has just queued in the record (their ``workload`` loaded), so
        the next :meth:`sync` finds them held under the key it reads and reads no row whole."""
        for p in pods:
            if p.id is None or p.state != BatchPod.PENDING:
                continue
            row, pod = _queued(p)
            self._held[p.id] = ((p.queued_s, p.requeues, p.uid, p.source), row, pod)
            self._names[p.id] = (row.name, row.gang)
            self._kept.pop(p.id, None)
            self.fed += 1

    def rows(self) -> list[PendingRow]:
        """The pending pods in queue order (``queued_s``, then id), each with how many pods of
        its gang are bound."""
        ordered = sorted(self._held.values(), key=lambda held: (held[1].queued_s, held[1].pod_id))
        return [dataclasses.replace(row, gang_running=self._gangs.get(row.gang, 0)) if row.gang else row
                for _, row, _ in ordered]

    def row(self, pod_id: int) -> PendingRow | None:
        """The held row of ``pod_id`` (None: not held)."""
        held = self._held.get(pod_id)
        return held[1] if held is not None else None

    def pods(self, ids: Iterable[int]) -> list[QueuedPod]:
        """The held pods of ``ids`` (ids not held are skipped)."""
        return [self._held[i][2] for i in ids if i in self._held]

    def assumed(self, ids: Iterable[int]) -> None:
        """Pods a pass assumed on nodes leave the queue (a failed binding brings them back
        through the record)."""
        for i in ids:
            self._held.pop(i, None)

    def by_id(self) -> Mapping[int, QueuedPod]:
        return {i: held[2] for i, held in self._held.items()}
