"""Layouts and the binary codec of archived time series (pure numpy + zlib; no Django).

A run's series are cut into chunks of ``chunk_steps`` consecutive steps; each chunk of each
node (or workload, or the cluster) is one database row whose ``data`` is the float64 array of
that chunk, C order, zlib-compressed. A 24 h Irina run at 60 s steps is ≈ 8 MB of node series
and ≈ 46 MB of per-pod series after compression; reading one node's whole run is a handful of
rows and a few milliseconds of decompression.

Layouts (internal units: mcpu, bytes, bytes/s — docs/design.md §2):

* node chunk ``(steps, len(NODE_SERIES), 8)``: capacity and the production / batch aggregates
  of request, reservation, usage and limit on the node, all 8 dimensions. Batch terms are
  time-weighted within a step exactly as :class:`~kalena_engine.replay.StepRecord` gives them.
* workload chunk ``(steps, len(WORKLOAD_SERIES), len(WORKLOAD_DIMS))``: one production pod's
  usage and reservation (as the ledgers read it) on cpu and ram.
* cluster chunk ``(steps, len(CLUSTER_SERIES))``: cluster-wide figures per step (see names).
"""

from __future__ import annotations

import zlib

import numpy as np

from kalena_engine.resources import CPU, N_DIMS, RAM

NODE_SERIES: tuple[str, ...] = (
    "capacity",
    "prod_request", "prod_reservation", "prod_usage", "prod_limit",
    "batch_request", "batch_reservation", "batch_usage", "batch_limit",
)
NODE_INDEX = {name: i for i, name in enumerate(NODE_SERIES)}

WORKLOAD_SERIES: tuple[str, ...] = ("usage", "reservation")
WORKLOAD_DIMS: tuple[int, ...] = (CPU, RAM)

CLUSTER_SERIES: tuple[str, ...] = (
    "reclaimed_cpu", "reclaimed_ram",            # Σ_n X_n over all nodes (docs/design.md §6)
    "request_cpu", "request_ram",                # Σ_n Σ_w q_w over all nodes (production + batch)
    "capacity_cpu", "capacity_ram",              # Σ C over the nodes taking batch
    "reservation_cpu", "reservation_ram",        # Σ r over the nodes taking batch
    "usage_cpu", "usage_ram",                    # Σ u over the nodes taking batch
    "batch_request_cpu", "batch_request_ram",    # Σ q of running batch over all nodes
    "running_instances", "pending_instances",    # batch pods
)
CLUSTER_INDEX = {name: i for i, name in enumerate(CLUSTER_SERIES)}

NODE_SHAPE = (len(NODE_SERIES), N_DIMS)
WORKLOAD_SHAPE = (len(WORKLOAD_SERIES), len(WORKLOAD_DIMS))
CLUSTER_SHAPE = (len(CLUSTER_SERIES),)


class SeriesCorrupt(ValueError):
    """An archived chunk does not decode to the shape its row declares."""


def encode(array: np.ndarray) -> bytes:
    """float64, C order, zlib level 1 (fast; series of held samples compress well)."""
    return zlib.compress(np.ascontiguousarray(array, dtype=np.float64).tobytes(), 1)


def decode(blob: bytes, steps: int, shape: tuple[int, ...]) -> np.ndarray:
    """Inverse of :func:`encode` for a chunk of ``steps`` rows of ``shape``.

    Raises:
        SeriesCorrupt: the blob is not a zlib stream of ``steps × shape`` float64 values.
    """
    try:
        raw = zlib.decompress(bytes(blob))
    except zlib.error as exc:
        raise SeriesCorrupt(f"archived chunk is not zlib data: {exc}") from exc
    expected = steps * int(np.prod(shape)) * 8
    if len(raw) != expected:
        raise SeriesCorrupt(f"archived chunk holds {len(raw)} bytes, expected {expected} for {steps} × {shape}")
    return np.frombuffer(raw, dtype=np.float64).reshape((steps, *shape))


def join(chunks: list[tuple[int, int, bytes]], shape: tuple[int, ...]) -> np.ndarray:
    """Concatenate ``(first_step, steps, blob)`` chunks (in step order) into ``(T, *shape)``.

    Raises:
        SeriesCorrupt: chunks overlap or leave a gap.
    """
    if not chunks:
        return np.zeros((0, *shape))
    parts = []
    expected_first = chunks[0][0]
    for first, steps, blob in chunks:
        if first != expected_first:
            raise SeriesCorrupt(f"archived chunks are not contiguous: expected step {expected_first}, got {first}")
        parts.append(decode(blob, steps, shape))
        expected_first = first + steps
    return np.concatenate(parts, axis=0)
