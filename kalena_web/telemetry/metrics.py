"""This process's ingest series for ``/metrics`` (per pod: the agents' WebSockets are held by the
console processes, so each one measures its own): ``kalena_ingest_ack_latency_seconds`` — from a
``samples`` frame's arrival to its ``ack`` (the group commit that stored it included) — and
``kalena_ingest_frames_total{outcome}`` (``acked``, ``not_stored``). Accepted and refused samples
per node and reason are cluster-wide and live in ``/metrics/cluster``.

prometheus_client's process registry is the one place a process's series live; the series are
created once per process (:func:`ingest_metrics`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from prometheus_client import REGISTRY, Counter, Histogram

#: seconds; the ack waits for the group commit (``KALENA_INGEST_FLUSH_S``) and the database
ACK_BUCKETS_S = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@dataclass(frozen=True)
class IngestMetrics:
    ack_latency: Histogram
    frames: Counter


@functools.cache
def ingest_metrics() -> IngestMetrics:
    """The process's ingest series, registered once on prometheus_client's process registry."""
    return IngestMetrics(
        ack_latency=Histogram("kalena_ingest_ack_latency_seconds", "From a samples frame's arrival to its ack "
                              "(stored and committed)", buckets=ACK_BUCKETS_S, registry=REGISTRY),
        frames=Counter("kalena_ingest_frames", "Samples frames by outcome (acked, not_stored)", ["outcome"],
                       registry=REGISTRY))
