"""One active scheduler per cluster through a ``coordination.k8s.io/v1`` Lease (docs/design.md §14).

client-go's leader election, in small (its Python port in ``kubernetes.leaderelection`` has no
request timeouts and no way to ask "may I still act?", which a scheduling pass needs):

* A candidate reads the Lease. It may take it when there is none, when it holds it already, or
  when the holder's record has not changed for ``lease_duration_s`` *as observed locally* (the
  observation time, not the holder's ``renewTime``, so clock skew between machines does not
  matter). It writes with the Lease's ``resourceVersion``: a 409 means another candidate won.
* The holder renews every ``retry_period_s``. It acts as leader only until
  ``last successful renewal + renew_deadline_s``; since ``renew_deadline_s < lease_duration_s``,
  a standby can take over only after the old leader has stopped acting (worked example with the
  defaults 15 / 10 / 2 s: the leader renews at t = 0 and then dies; it would stop acting at
  t = 10; a standby that observed that renewal at t ≈ 0 takes over at t ≥ 15 — a gap of at least
  5 s in which nobody binds).
* The Lease holds whole seconds (``leaseDurationSeconds``), and a standby waits what the holder
  wrote: the duration is rounded up, never down, so a fractional ``lease_duration_s`` (10.4 s
  with a 10.2 s renew deadline) never lets a standby take over while the holder may still act.
* ``release()`` (a clean shutdown) clears the holder, so a standby takes over at its next retry.

Only :mod:`agents.orchestrators.kubernetes.client` calls the API (``lease_read``,
``lease_write``); every call there has a timeout.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone

from agents.orchestrators.base import OrchestratorError

log = logging.getLogger(__name__)


def _micro_time() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquire and renew the Lease ``namespace/name`` as ``identity`` (see module doc).

    ``api`` provides ``lease_read(namespace, name) -> dict | None`` and
    ``lease_write(namespace, lease, create=bool) -> dict`` (raising an
    :class:`~agents.orchestrators.base.OrchestratorError` subclass on a conflict or failure).
    ``clock`` is monotonic seconds (injectable).
    """

    def __init__(self, api, *, identity: str, namespace: str = "kube-system", name: str = "kalena-scheduler",
                 lease_duration_s: float = 15.0, renew_deadline_s: float = 10.0, retry_period_s: float = 2.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError("need retry_period_s < renew_deadline_s < lease_duration_s")
        self.api, self.identity, self.namespace, self.name = api, identity, namespace, name
        self.lease_duration_s, self.renew_deadline_s, self.retry_period_s = lease_duration_s, renew_deadline_s, retry_period_s
        self.clock = clock
        self._observed: tuple | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self.transitions = 0
        self.acquired_at: float | None = None

    def is_leader(self) -> bool:
        """Whether this candidate may act now (renewed within ``renew_deadline_s``)."""
        return self._renewed_at is not None and self.clock() < self._renewed_at + self.renew_deadline_s

    def valid_for_s(self) -> float:
        """Seconds this candidate may still act without another renewal (0 when not leading)."""
        return 0.0 if self._renewed_at is None else max(0.0, self._renewed_at + self.renew_deadline_s - self.clock())

    def try_acquire_or_renew(self) -> bool:
        """One attempt (see module doc); returns whether this candidate holds the Lease now."""
        now = self.clock()
        try:
            lease = self.api.lease_read(self.namespace, self.name)
        except OrchestratorError as exc:
            log.warning("lease %s/%s: read failed: %s", self.namespace, self.name, exc)
            return self.is_leader()
        spec = (lease or {}).get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        if lease is not None and holder and holder != self.identity and \
                now < self._observed_at + float(spec.get("leaseDurationSeconds") or self.lease_duration_s):
            self._renewed_at = None
            return False
        stamp = _micro_time()
        # client-go: a new Lease starts at 0 transitions; each change of holder adds one
        transitions = int(spec.get("leaseTransitions") or 0) + (1 if lease is not None and holder != self.identity else 0)
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {"holderIdentity": self.identity, "leaseDurationSeconds": math.ceil(self.lease_duration_s),
                         "acquireTime": spec.get("acquireTime") if holder == self.identity else stamp,
                         "renewTime": stamp, "leaseTransitions": transitions}}
        if lease is not None:
            body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
        try:
            written = self.api.lease_write(self.namespace, body, create=lease is None)
        except OrchestratorError as exc:
            log.info("lease %s/%s: not acquired by %s: %s", self.namespace, self.name, self.identity, exc)
            if holder != self.identity:
                self._renewed_at = None
            return self.is_leader()
        if holder != self.identity:
            self.acquired_at = now
            log.info("lease %s/%s: %s is the leader (transition %d)", self.namespace, self.name, self.identity,
                     transitions)
        self.transitions = transitions
        wspec = written.get("spec") or {}
        self._observed = (self.identity, wspec.get("renewTime"), wspec.get("leaseTransitions"))
        self._observed_at = now
        self._renewed_at = now
        return True

    def release(self) -> None:
        """Give the Lease up (clean shutdown): a standby takes it at its next attempt."""
        if self._renewed_at is None:
            return
        self._renewed_at = None
        try:
            lease = self.api.lease_read(self.namespace, self.name)
            if lease and (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                self.api.lease_write(self.namespace, lease, create=False)
        except OrchestratorError as exc:
            log.info("lease %s/%s: release failed (it expires on its own): %s", self.namespace, self.name, exc)

    def run(self, stop: threading.Event) -> None:
        """Attempt every ``retry_period_s`` until ``stop``; does not release (see :meth:`release`)."""
        while not stop.is_set():
            try:
                self.try_acquire_or_renew()
            except Exception:  # noqa: BLE001 - one failed attempt is a missed renewal, never the end of the elector
                log.exception("lease %s/%s: attempt by %s failed", self.namespace, self.name, self.identity)
            stop.wait(self.retry_period_s)
