"""Ledger writes (keyword-only arguments, ``<entity>_<action>``)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kalena_web.archive.models import Run
from kalena_web.inventory.models import Node
from kalena_web.ledger.models import NodeLedger


def node_ledgers_create(*, run: Run, nodes: Sequence[Node], figures: dict[str, np.ndarray],
                        pods: np.ndarray, batch_placed: np.ndarray, batch_evicted: np.ndarray) -> list[NodeLedger]:
    """One :class:`NodeLedger` per node (``nodes`` in engine row order) in one bulk insert.

    Args:
        figures: ``{field: (n,) array}`` from :meth:`LedgerAccumulator.figures`.
        pods, batch_placed, batch_evicted: ``(n,)`` production pods and batch instances placed
            on / evicted from each node over the run.
    """
    rows = [
        NodeLedger(run=run, node=node, pods=int(pods[i]), batch_placed=int(batch_placed[i]),
                   batch_evicted=int(batch_evicted[i]),
                   **{name: float(values[i]) for name, values in figures.items()})
        for i, node in enumerate(nodes)
    ]
    return NodeLedger.objects.bulk_create(rows, batch_size=500)
