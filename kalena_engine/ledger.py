"""Request and reservation ledgers, slack, headroom and reclaimed capacity (docs/design.md §6).

Per node n and dimension d, with production set P_n, batch set B_n and post-Phase-0 capacity
C_n (all ``(n_nodes, 8)``)::

    request ledger      Σ_{p∈P_n} q_p ≤ C_n                      (the blueprint; batch never here)
    reservation ledger  Σ_{p∈P_n} r_p + Σ_{b∈B_n} r_b + q_new ≤ C_n
    slack               S_n = C_n − Σ_{w∈P_n∪B_n} r_w            (gpu: C − Σ q of everything)
    headroom            H_n = C_n − Σ_{p∈P_n} q_p                (Kuberina's reserve)
    reclaimed in use    X_n = max(0, Σ_{p∈P_n} q_p + Σ_{b∈B_n} q_b − C_n)

Worked example: C = 64 cores, production requests 56, production reservations 30, batch
requests (= reservations) 20 → slack 64 − 50 = 14, headroom 8, reclaimed 56 + 20 − 64 = 12.
Unconstrained (+inf) capacity gives +inf slack and headroom and 0 reclaimed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kalena_engine.resources import DIMS, GPU, N_DIMS

#: Relative tolerance for ledger comparisons (float sums of decimal quantities).
LEDGER_RTOL = 1e-9


def node_sum(node_of: np.ndarray, values: np.ndarray, n_nodes: int,
             weights: np.ndarray | None = None) -> np.ndarray:
    """``Σ_{w on n} weight_w · values_w`` per node, shape ``(n_nodes, 8)``.

    Args:
        node_of: ``(k,)`` int node row per workload; rows < 0 (unplaced) are skipped.
        values: ``(k, 8)``.
        weights: optional ``(k,)`` multiplier (e.g. instance counts of grouped batch pods).
    """
    out = np.zeros((n_nodes, N_DIMS))
    if len(node_of) == 0:
        return out
    placed = node_of >= 0
    if placed.all():
        rows = node_of
        vals = values if weights is None else values * weights[:, None]
    else:
        rows = node_of[placed]
        vals = values[placed] if weights is None else values[placed] * weights[placed, None]
    # one bincount over (node, dimension) cells: each cell sums its workloads in the same order
    # as a per-dimension bincount would, so the result is bit-identical, in one numpy call
    cells = (np.asarray(rows, dtype=np.int64)[:, None] * N_DIMS + np.arange(N_DIMS)).ravel()
    flat = np.bincount(cells, weights=np.asarray(vals, dtype=np.float64).reshape(-1), minlength=n_nodes * N_DIMS)
    return flat[: n_nodes * N_DIMS].reshape(n_nodes, N_DIMS)


@dataclass(frozen=True, eq=False)
class NodeLedgers:
    """Per-node aggregates, each ``(n_nodes, 8)`` in internal units.

    ``prod_*`` cover the production (service) set, ``batch_*`` the running batch set
    (terminated workloads never count; in-flight ones count at their request).
    """

    capacity: np.ndarray
    prod_request: np.ndarray
    prod_reservation: np.ndarray
    batch_request: np.ndarray
    batch_reservation: np.ndarray

    @property
    def reservation(self) -> np.ndarray:
        """Σ r over production and batch."""
        return self.prod_reservation + self.batch_reservation

    @property
    def request(self) -> np.ndarray:
        """Σ q over production and batch."""
        return self.prod_request + self.batch_request

    @property
    def slack(self) -> np.ndarray:
        """``S_n = C_n − Σ r``; GPU slack is ``C_gpu − Σ q_gpu`` (no GPU reclaim)."""
        return slack_of(self.capacity, self.reservation, self.request)

    @property
    def headroom(self) -> np.ndarray:
        """``H_n = C_n − Σ_{p∈P_n} q_p``."""
        return self.capacity - self.prod_request

    @property
    def reclaimed(self) -> np.ndarray:
        """``X_n = max(0, Σ q_p + Σ q_b − C_n)``: batch beyond what requests alone admit."""
        return reclaimed_in_use(self.capacity, self.request)


def slack_of(capacity: np.ndarray, reservation: np.ndarray, request: np.ndarray) -> np.ndarray:
    """Slack (docs/design.md §6) from ``(…, 8)`` capacity, Σ r and Σ q: ``C − Σ r`` on every dimension
    but GPU, where it is ``C − Σ q`` (GPU is never reclaimed). Example: C = (4 cores, …, 1 GPU),
    Σ r = (2.5, …, 0), Σ q = (3, …, 1) → cpu 1.5, GPU 0."""
    slack = capacity - reservation
    slack[..., GPU] = capacity[..., GPU] - request[..., GPU]
    return slack


def reclaimed_in_use(capacity: np.ndarray, request: np.ndarray) -> np.ndarray:
    """``X = max(0, Σ q − C)`` elementwise (``(..., 8)``); unconstrained (+inf) capacity gives 0."""
    with np.errstate(invalid="ignore"):
        return np.maximum(0.0, np.nan_to_num(request - capacity, nan=0.0, neginf=0.0))


def ledgers(capacity: np.ndarray, *, prod_node: np.ndarray, prod_request: np.ndarray,
            prod_reservation: np.ndarray, batch_node: np.ndarray, batch_request: np.ndarray,
            batch_reservation: np.ndarray, batch_count: np.ndarray | None = None) -> NodeLedgers:
    """Aggregate workloads into :class:`NodeLedgers`.

    Args:
        capacity: ``(n_nodes, 8)`` post-Phase-0 capacity.
        prod_node: ``(p,)`` node row per production pod (−1 = unplaced).
        prod_request, prod_reservation: ``(p, 8)``.
        batch_node: ``(b,)`` node row per running batch row.
        batch_request, batch_reservation: ``(b, 8)`` per instance.
        batch_count: optional ``(b,)`` instances per batch row (grouped identical pods).
    """
    n = capacity.shape[0]
    return NodeLedgers(
        capacity=capacity,
        prod_request=node_sum(prod_node, prod_request, n),
        prod_reservation=node_sum(prod_node, prod_reservation, n),
        batch_request=node_sum(batch_node, batch_request, n, batch_count),
        batch_reservation=node_sum(batch_node, batch_reservation, n, batch_count),
    )


def fits(request: np.ndarray, slack: np.ndarray) -> np.ndarray:
    """``(n_nodes,)`` bool: one workload of ``request`` ``(8,)`` fits every dimension of
    ``slack`` ``(n_nodes, 8)`` (reservation ledger admission, docs/design.md §6)."""
    return np.all(request <= slack + LEDGER_RTOL * np.abs(slack) + 1e-9, axis=1)


@dataclass(frozen=True)
class BlueprintViolation:
    """One way a node's state without batch differs from the blueprint (docs/design.md §6 invariant).

    ``kind``: ``missing`` (the blueprint placed these production pods here and they are not),
    ``extra`` (production pods here the blueprint did not place here) or ``over_capacity``
    (the request ledger Σ_{p∈P_n} q_p exceeds C_n on ``dimension``: ``request`` > ``capacity``,
    internal units).
    """

    node: str
    kind: str
    workloads: tuple[str, ...] = ()
    dimension: str | None = None
    request: float | None = None
    capacity: float | None = None

    def to_dict(self) -> dict:
        return {"node": self.node, "kind": self.kind, "workloads": list(self.workloads),
                "dimension": self.dimension, "request": self.request, "capacity": self.capacity}

    def __str__(self) -> str:
        if self.kind == "over_capacity":
            return (f"{self.node}: production requests {self.request:.6g} > capacity {self.capacity:.6g} "
                    f"on {self.dimension}")
        listed = ", ".join(self.workloads[:5]) + (f" and {len(self.workloads) - 5} more" if len(self.workloads) > 5 else "")
        return f"{self.node}: {self.kind} production {listed}"


def blueprint_violations(*, node_names: Sequence[str], capacity: np.ndarray, prod_ids: Sequence[str],
                         prod_node: np.ndarray, prod_request: np.ndarray, blueprint_ids: Sequence[str] | None,
                         blueprint_node: np.ndarray | None,
                         explained: Sequence[str] = ()) -> tuple[BlueprintViolation, ...]:
    """Blueprint fidelity (docs/design.md §6): with every batch workload removed, each node holds exactly
    the blueprint's production set and its request ledger fits, ``Σ_{p∈P_n} q_p ≤ C_n``.

    Args:
        node_names: ``n`` names, for the violations.
        capacity: ``(n, 8)`` post-Phase-0 capacity.
        prod_ids, prod_node, prod_request: the production workloads in the state now — ids,
            ``(p,)`` node row (−1: on no node), ``(p, 8)`` requests. Batch must not be among them.
        blueprint_ids, blueprint_node: the blueprint's production pods and ``(b,)`` node rows;
            ``None`` checks the request ledger only (no blueprint recorded).
        explained: production ids the orchestrator runs that map to no blueprint pod, already
            explained (production identity's ``extra``, docs/design.md §15): never an ``extra``
            violation, still in the request ledger.

    Returns:
        Violations by node, then kind (``missing``, ``extra``, ``over_capacity``); empty when the
        blueprint state holds. Example: the blueprint puts ``a`` and ``b`` on n0; the state has
        ``a`` on n0 and ``b`` on n1 → ``(n0 missing b, n1 extra b)``, and ``over_capacity`` on n1
        if ``b`` does not fit there.
    """
    n = len(node_names)
    prod_node = np.asarray(prod_node, dtype=np.int64)
    explained_set = {str(w) for w in explained}
    out: list[BlueprintViolation] = []
    now: list[set[str]] = [set() for _ in range(n)]
    for wid, row in zip(prod_ids, prod_node.tolist(), strict=True):
        if 0 <= row < n:
            now[row].add(str(wid))
    want: list[set[str]] | None = None
    if blueprint_ids is not None and blueprint_node is not None:
        want = [set() for _ in range(n)]
        for wid, row in zip(blueprint_ids, np.asarray(blueprint_node, dtype=np.int64).tolist(), strict=True):
            if 0 <= row < n:
                want[row].add(str(wid))
    ledger = node_sum(prod_node, np.asarray(prod_request, dtype=np.float64).reshape(-1, N_DIMS), n)
    over = ledger > capacity * (1 + LEDGER_RTOL) + 1e-6
    for row in range(n):
        if want is not None:
            if missing := sorted(want[row] - now[row]):
                out.append(BlueprintViolation(node_names[row], "missing", tuple(missing)))
            if extra := sorted(now[row] - want[row] - explained_set):
                out.append(BlueprintViolation(node_names[row], "extra", tuple(extra)))
        for dim in np.flatnonzero(over[row]).tolist():
            out.append(BlueprintViolation(node_names[row], "over_capacity", dimension=DIMS[dim],
                                          request=float(ledger[row, dim]), capacity=float(capacity[row, dim])))
    return tuple(out)
