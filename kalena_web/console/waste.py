"""The waste view of a live cluster: per namespace and workload, what production requested, used and
reserved, and the capacity Kalena reclaimed from it (the Crane "waste" view, with the reservation
beside it).

Per production pod ``p`` over the window, from its archived usage rollups (bucket width ``w``,
internal units; docs/design.md §5–6):

* idle request, core-hours: ``Σ_buckets max(0, q_cpu − u_mean,cpu) · w / 3600`` — what it asked
  for and did not use (Crane's waste);
* reclaimed, core-hours: ``Σ_buckets max(0, q_cpu − r_cpu) · w / 3600`` — request the reservation
  released to slack, the room batch may use (the same for ram in GiB-hours);
* now: request ``q``, reservation ``r`` (the estimator's current value) and the newest usage.

Rows are grouped by namespace, then workload (the pod's owner: its declaration or controller;
the pod name when it has none). A pod with no rollup in the window contributes 0 hours and is
counted in ``unobserved``.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from kalena_web.archive.models import UsageRollup
from kalena_web.inventory.models import Cluster, Workload
from kalena_web.ledger.models import WorkloadReservation

GIB = float(2**30)
#: windows the page offers (seconds) and the rollup resolution each reads
WINDOWS_S = {"1h": 3600.0, "6h": 6 * 3600.0, "24h": 86_400.0, "7d": 7 * 86_400.0}


@dataclass
class WasteRow:
    """One workload or namespace: cpu in cores (core-hours), ram in GiB (GiB-hours)."""

    namespace: str
    workload: str
    pods: int = 0
    unobserved: int = 0
    request: np.ndarray = field(default_factory=lambda: np.zeros(2))
    reservation: np.ndarray = field(default_factory=lambda: np.zeros(2))
    usage: np.ndarray = field(default_factory=lambda: np.zeros(2))
    idle_hours: np.ndarray = field(default_factory=lambda: np.zeros(2))
    reclaimed_hours: np.ndarray = field(default_factory=lambda: np.zeros(2))

    def add(self, other: WasteRow) -> None:
        self.pods += other.pods
        self.unobserved += other.unobserved
        for name in ("request", "reservation", "usage", "idle_hours", "reclaimed_hours"):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def reclaimed_share(self) -> float | None:
        """Reclaimed ÷ idle request, cpu (how much of the waste Kalena turned into slack)."""
        return float(self.reclaimed_hours[0] / self.idle_hours[0]) if self.idle_hours[0] > 0 else None


def _two(vector) -> np.ndarray:  # type: ignore[no-untyped-def]
    """cpu (cores) and ram (GiB) of an internal-unit vector (None → zeros)."""
    if vector is None:
        return np.zeros(2)
    v = np.asarray(vector, dtype=float)
    return np.array([v[0] / 1000.0, v[1] / GIB])


def waste(cluster: Cluster, *, window_s: float, now_s: float | None = None) -> dict:
    """The waste view of ``cluster`` over the last ``window_s`` seconds.

    Returns ``{"namespaces": [(namespace row, [workload rows…])…], "total": row, "window_s",
    "resolution", "buckets"}``, namespaces by reclaimed cpu core-hours (largest first).
    Raises ``ValueError`` for a window that is not positive.
    """
    if not window_s > 0:
        raise ValueError(f"window: {window_s!r} s is not a positive duration")
    now_s = time.time() if now_s is None else now_s
    resolution = UsageRollup.MINUTE if window_s <= 6 * 3600 else UsageRollup.HOUR
    width_h = UsageRollup.WIDTH_S[resolution] / 3600.0
    pods = list(Workload.objects.filter(cluster=cluster, kind=Workload.PRODUCTION)
                .only("id", "name", "namespace", "owner", "request").order_by("row"))
    index = {w.id: i for i, w in enumerate(pods)}
    n = len(pods)
    request = np.array([_two(w.request) for w in pods]).reshape(n, 2)
    reservation, usage = request.copy(), np.zeros((n, 2))
    for wid, value, last_usage in WorkloadReservation.objects.filter(workload_id__in=index).values_list(
            "workload_id", "value", "last_usage"):
        reservation[index[wid]] = _two(value)
        usage[index[wid]] = _two(last_usage)
    rows = list(UsageRollup.objects.filter(cluster=cluster, resolution=resolution, workload__isnull=False,
                                           bucket_s__gte=now_s - window_s).values_list(
        "workload_id", "usage_mean", "reservation"))
    idle, reclaimed, seen = np.zeros((n, 2)), np.zeros((n, 2)), np.zeros(n, dtype=bool)
    if rows:
        which = np.array([index.get(r[0], -1) for r in rows])
        keep = which >= 0
        which = which[keep]
        u = np.array([_two(r[1]) for r, k in zip(rows, keep, strict=True) if k]).reshape(-1, 2)
        r = np.array([_two(r[2]) for r, k in zip(rows, keep, strict=True) if k]).reshape(-1, 2)
        q = request[which]
        np.add.at(idle, which, np.maximum(0.0, q - u) * width_h)
        np.add.at(reclaimed, which, np.maximum(0.0, q - r) * width_h)
        seen[which] = True
    by_workload: dict[tuple[str, str], WasteRow] = {}
    for i, w in enumerate(pods):
        namespace = w.namespace or w.name.partition("/")[0]
        key = (namespace, w.owner or w.name)
        row = by_workload.setdefault(key, WasteRow(namespace=key[0], workload=key[1]))
        row.add(WasteRow(namespace=key[0], workload=key[1], pods=1, unobserved=int(not seen[i]),
                         request=request[i], reservation=reservation[i], usage=usage[i], idle_hours=idle[i],
                         reclaimed_hours=reclaimed[i]))
    grouped: dict[str, list[WasteRow]] = defaultdict(list)
    for row in by_workload.values():
        grouped[row.namespace].append(row)
    total = WasteRow(namespace="", workload="")
    namespaces = []
    for namespace, members in grouped.items():
        ns_row = WasteRow(namespace=namespace, workload="")
        for m in members:
            ns_row.add(m)
        total.add(ns_row)
        members.sort(key=lambda m: (-m.reclaimed_hours[0], -m.idle_hours[0], m.workload))
        namespaces.append((ns_row, members))
    namespaces.sort(key=lambda pair: (-pair[0].reclaimed_hours[0], -pair[0].idle_hours[0], pair[0].namespace))
    return {"namespaces": namespaces, "total": total, "window_s": window_s, "resolution": resolution,
            "buckets": len(rows)}
