"""Export back to Kuberina, in two parts (docs/design.md §3).

(a) Into the IR itself: per production declaration an IR v1 ``observed:`` block with exactly
its fields — ``window``, ``p50``, ``p95``, ``p99``, ``peak`` (resource blocks in IR units, from
reservations outside the startup grace window) and ``exceeded_request_fraction`` — so the planner
reads it unchanged. ``window`` is written as a string in seconds (``"86400s"``): the IR types it
as a string kept verbatim, and docs/design.md §3 fixes the unit.

(b) A Kalena report beside it (JSON, same resource-block shape) for what the IR has no field
for: per workload ``declared_request``, ``observed_peak``, ``exceeded_limit_events``; per node
``slack_yield``, ``eviction_events`` (by cause) and ``drift``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import numpy as np

from kalena_engine.archive import ObservedStats
from kalena_engine.resources import DIMS, to_ir_block

OBSERVED_FIELDS = ("window", "p50", "p95", "p99", "peak", "exceeded_request_fraction")


def observed_block(stats: ObservedStats) -> dict[str, Any]:
    """The IR v1 ``observed:`` block for one declaration, exactly :data:`OBSERVED_FIELDS`."""
    return {
        "window": f"{int(round(stats.window_s))}s",
        "p50": to_ir_block(stats.p50),
        "p95": to_ir_block(stats.p95),
        "p99": to_ir_block(stats.p99),
        "peak": to_ir_block(stats.peak),
        "exceeded_request_fraction": round(float(stats.exceeded_request_fraction), 6),
    }


def annotate_workloads(document: Mapping[str, Any], blocks: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """A copy of a parsed workloads document with ``observed:`` set where ``blocks`` has one.

    Args:
        document: the workloads YAML as loaded (``namespaces:`` and/or legacy ``pods:``).
        blocks: ``{"namespace/declaration": observed block}``; for the legacy ``pods:`` list
            (one entry per pod) the key is ``"namespace/pod"``.

    Returns:
        A new plain ``dict``; the input is not modified. Declarations without a block are left
        as they were; an existing ``observed`` is replaced.
    """
    out = copy.deepcopy(_plain(document))
    for namespace, declarations in (out.get("namespaces") or {}).items():
        for declaration in declarations or []:
            block = blocks.get(f"{namespace}/{declaration.get('name')}")
            if block is not None:
                declaration["observed"] = block
    if "namespaces" not in out:
        for pod in out.get("pods") or []:
            block = blocks.get(f"{pod.get('namespace') or 'default'}/{pod.get('name')}")
            if block is not None:
                pod["observed"] = block
    return out


def kalena_report(*, window_s: float, workloads: list[dict[str, Any]], nodes: list[dict[str, Any]],
                  drift_per_dimension: np.ndarray) -> dict[str, Any]:
    """The JSON report beside the IR (part b).

    Args:
        workloads: per workload ``{"id", "declared_request" (8,), "observed_peak" (8,) or None,
            "exceeded_limit_events"}``.
        nodes: per node ``{"name", "slack_yield" (8,), "eviction_events": {cause: n},
            "drift" (8,)}``.
        drift_per_dimension: ``(8,)`` cluster drift D (NaN where undefined).
    """
    def ratio_block(values: np.ndarray) -> dict[str, float]:
        return {DIMS[i]: round(float(v), 6) for i, v in enumerate(values) if np.isfinite(v)}

    return {
        "kind": "KalenaReport",
        "window": f"{int(round(window_s))}s",
        "drift": ratio_block(drift_per_dimension),
        "workloads": [
            {
                "id": w["id"],
                "declared_request": to_ir_block(w["declared_request"]),
                "observed_peak": None if w.get("observed_peak") is None else to_ir_block(w["observed_peak"]),
                "exceeded_limit_events": int(w.get("exceeded_limit_events", 0)),
            }
            for w in workloads
        ],
        "nodes": [
            {
                "name": n["name"],
                "slack_yield": to_ir_block(n["slack_yield"]),
                "eviction_events": dict(n.get("eviction_events", {})),
                "drift": ratio_block(n["drift"]),
            }
            for n in nodes
        ],
    }


def _plain(value: Any) -> Any:
    """Strip line-tracking containers (and YAML anchors) into plain dicts and lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
