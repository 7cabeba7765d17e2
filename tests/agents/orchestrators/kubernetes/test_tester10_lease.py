"""Tester 10: one scheduler per cluster when the lease timings are not whole seconds
(``kalena watch --lease-duration`` / ``--renew-deadline`` take floats)."""

from __future__ import annotations

from agents.orchestrators.kubernetes.lease import LeaderElector
from tests.agents.orchestrators.kubernetes.test_watcher import api, orchestrator  # noqa: F401 - fixture


def test_a_fractional_lease_duration_never_lets_two_candidates_act_at_once(api) -> None:
    """Observed: the Lease is written with ``leaseDurationSeconds = round(10.4) = 10``, and the
    standby waits that (10 s) from when it observed the renewal, while the holder acts until its
    renewal + renew deadline (10.2 s): at t = 10.1 both ``is_leader()``. Expected: the written
    duration is never shorter than the holder's own (round up), or the ValueError check
    compares what is written; so at most one candidate may act."""
    now = [0.0]
    a = LeaderElector(orchestrator(api), identity="a", lease_duration_s=10.4, renew_deadline_s=10.2,
                      retry_period_s=2.0, clock=lambda: now[0])
    b = LeaderElector(orchestrator(api), identity="b", lease_duration_s=10.4, renew_deadline_s=10.2,
                      retry_period_s=2.0, clock=lambda: now[0])
    assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()  # a leads from t = 0, b observed it
    now[0] = 10.1  # a's renewals since failed (it is partitioned from the API); b retries
    b.try_acquire_or_renew()
    assert not (a.is_leader() and b.is_leader())
