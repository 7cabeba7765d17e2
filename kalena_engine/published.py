"""Published batch capacity (docs/design.md §14): the extended resources a Kubernetes node advertises
so the kubelet admits batch pods that run in reclaimed capacity (Koordinator's batch resource
model; case C10).

Per node n, on cpu and ram only (Kalena's extended resources
``kalena.naughtian.io/batch-cpu`` in millicores and ``kalena.naughtian.io/batch-memory`` in
bytes)::

    room_n    = S_n + Σ_{b∈B_n} q_b                  reservation-ledger room for batch (docs/design.md §6)
    floor_n   = Σ_{b admitted, non-terminal on n} q_b   what the kubelet has admitted and still
                                                     counts (terminating pods too: it counts a
                                                     pod until it is terminal)
    target_n  = max(⌊room_n⌋, ⌈floor_n⌉)             never below what admitted batch holds, else
                                                     a kubelet restart would reject running pods
    published = target_n                  if there is no previous value, or target_n < previous
                                          (lowered at once)
              = target_n                  if target_n − previous ≥ bucket and
                                          now − changed_s ≥ raise_interval_s (raised lazily)
              = previous                  otherwise (slack jitter causes no patch storm)

``bucket`` is the score cache's slack bucket on that dimension (:data:`DEFAULT_SLACK_BUCKETS`:
50 mcpu, 128 MiB), ``raise_interval_s`` 30 s; ``changed_s`` is when the node's published value
last changed in either direction (so a value lowered at t waits until t + 30 s to rise again).

Worked example (case C10): C = 8 cores / 32 GiB; production reservations 1.15 cores / 9.2 GiB;
no batch yet → S = 6.85 cores / 22.8 GiB, room = 6850 mcpu / ⌊22.8 · 2³⁰⌋ = 24,481,313,587 bytes,
published at once (no previous value). A 4-core / 8 GiB batch pod binds (r_b = q_b): S falls to
2.85 cores / 14.8 GiB, room = 2.85 + 4 = 6.85 cores again → unchanged. Ten seconds later the
production reservation drops to 1.10 cores: room 6900 mcpu, +50 mcpu = one bucket, but only
10 s since the last change → still 6850; at 30 s it is raised to 6900. Production then jumps to
5 cores: room 3000 mcpu, lowered at once — but the admitted pod holds 4000, so 4000 is published.

*Admitted* means the kubelet accepted the pod: its phase is ``Running``, or it is ``Pending``
with ``status.startTime`` set (the kubelet sets it when it acknowledges the pod, before pulling
images; the scheduler's ``PodScheduled`` condition and ``spec.nodeName`` say only that it is
bound). A pod merely bound is not in the floor: the kubelet may still refuse it, so a
10¹⁵-mcpu pod bound by someone else adds nothing to the published value until it runs (case:
with room 6850 mcpu and such a pod bound, 6850 is published, not 10¹⁵; were it admitted, the
floor would be 10¹⁵ mcpu).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kalena_engine.ledger import NodeLedgers
from kalena_engine.resources import CPU, RAM

#: The two published dimensions, in this order: cpu (mcpu), ram (bytes).
PUBLISHED_DIMS: tuple[int, int] = (CPU, RAM)
#: Default seconds between two raises of a node's published value.
RAISE_INTERVAL_S = 30.0


@dataclass(frozen=True, eq=False)
class PublishedBatch:
    """What each node publishes: ``value`` ``(n, 2)`` whole mcpu / bytes (float64 holding
    integers), ``changed_s`` ``(n,)`` when it last changed, ``changed`` ``(n,)`` bool: this call
    changed it (the caller patches exactly these nodes)."""

    value: np.ndarray
    changed_s: np.ndarray
    changed: np.ndarray


def batch_room(ledgers: NodeLedgers) -> np.ndarray:
    """``(n, 2)`` reservation-ledger room for batch, ``S + Σ_{b∈B} q_b`` on cpu and ram, floored
    to whole mcpu / bytes and never negative. Example: S = 2.85 cores, batch requests 4 cores →
    6850 mcpu."""
    dims = list(PUBLISHED_DIMS)
    room = ledgers.slack[:, dims] + ledgers.batch_request[:, dims]
    return np.floor(np.maximum(0.0, np.nan_to_num(room, posinf=0.0, neginf=0.0)))


def publish_batch(*, room: np.ndarray, held: np.ndarray, previous: np.ndarray, changed_s: np.ndarray,
                  now_s: float, buckets: tuple[float, float],
                  raise_interval_s: float = RAISE_INTERVAL_S) -> PublishedBatch:
    """Apply the floor and the hysteresis of the module doc.

    Args:
        room: ``(n, 2)`` from :func:`batch_room`.
        held: ``(n, 2)`` Σ requests of admitted, non-terminal batch pods (terminating included;
            a pod bound but not yet admitted by the kubelet excluded).
        previous: ``(n, 2)`` what each node publishes now; NaN where it publishes nothing yet.
        changed_s: ``(n,)`` when ``previous`` last changed (ignored where ``previous`` is NaN).
        now_s: the caller's time, seconds.
        buckets: score-cache bucket widths on cpu (mcpu) and ram (bytes).
        raise_interval_s: minimum seconds between a change and a raise.

    Raises:
        ValueError: shapes disagree, or a bucket or the interval is not positive.
    """
    room, held, previous = (np.asarray(a, dtype=np.float64) for a in (room, held, previous))
    changed_s = np.asarray(changed_s, dtype=np.float64)
    n = room.shape[0]
    for name, arr, shape in (("room", room, (n, 2)), ("held", held, (n, 2)), ("previous", previous, (n, 2)),
                             ("changed_s", changed_s, (n,))):
        if arr.shape != shape:
            raise ValueError(f"{name} has shape {arr.shape}, expected {shape}")
    bucket = np.asarray(buckets, dtype=np.float64)
    if bucket.shape != (2,) or not (bucket > 0).all() or not raise_interval_s > 0:
        raise ValueError(f"buckets {buckets} need two positive widths and raise_interval_s "
                         f"{raise_interval_s} must be positive")
    target = np.maximum(np.floor(room), np.ceil(held))
    fresh = np.isnan(previous)
    lower = ~fresh & (target < previous)
    may_raise = (now_s - changed_s >= raise_interval_s)[:, None]
    raise_ = ~fresh & may_raise & (target - previous >= bucket)
    take = fresh | lower | raise_
    value = np.where(take, target, previous)
    changed = np.any(value != previous, axis=1) | fresh.any(axis=1)
    return PublishedBatch(value=value, changed_s=np.where(changed, now_s, changed_s), changed=changed)


def kubelet_room(published: np.ndarray, held: np.ndarray) -> np.ndarray:
    """``(n, 2)`` what kubelet admission still admits (Σ requests ≤ allocatable, per resource):
    ``published − held``, where ``held`` counts terminating pods until they are terminal
    (case C11: published 4000, terminating V holds 3000 → 1000 mcpu; a 2000 pod is refused)."""
    return np.asarray(published, dtype=np.float64) - np.asarray(held, dtype=np.float64)
