"""Export back to Kuberina (DESIGN §3), the drift loop and recommendation decisions (§10).

Statistics come from the live archive's 1-minute workload rollups over the window, startup
grace excluded: per production declaration (and, for the legacy per-pod ``pods:`` list, per
pod) the reservation p50/p95/p99/peak and the fraction of samples whose usage exceeded the
request; per node the batch requests it carried (slack yield), its evictions by cause and its
drift contribution.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
import yaml
from django.conf import settings
from django.db import transaction

from kalena_engine.archive import ObservedStats, reservation_percentiles
from kalena_engine.drift import drift
from kalena_engine.errors import InputError
from kalena_engine.export import annotate_workloads, kalena_report, observed_block
from kalena_engine.kuberina.yamlio import parse_yaml
from kalena_engine.policy import EstimatorPolicy
from kalena_web.archive.models import EvictionRecord, UsageRollup
from kalena_web.inventory.mappers import vector
from kalena_web.inventory.models import Cluster, Node, Workload
from kalena_web.replan.models import DriftCheck, ReplanRecommendation

NOTE_MAX = 500  # characters of a decision's note


class RecommendationClosed(ValueError):
    """A decision on a recommendation that is no longer open."""


@dataclass(frozen=True)
class Export:
    """The two parts: the annotated workloads document (YAML text) and the Kalena report."""

    workloads_yaml: str
    report: dict
    steady: dict[str, np.ndarray]


def _stats(rows: list[tuple[float, list, int, int, int]], window_s: float) -> ObservedStats | None:
    """ObservedStats from minute rows ``(bucket_s, reservation, samples, above_request, above_limit)``.

    The percentiles are :func:`~kalena_engine.archive.reservation_percentiles` of the rows'
    ``reservation`` — per minute, the estimator's reservation when the minute was archived raised
    to ``min(L, μ · the minute's peak usage)`` (:mod:`kalena_web.archive.samples`): an upper
    envelope of the estimator's series, one value per minute, every minute weighted equally (not
    every sample). ``exceeded_request_fraction`` counts samples: above-request samples / samples.
    """
    if not rows:
        return None
    r = np.array([vector(row[1]) for row in rows])
    samples = sum(row[2] for row in rows)
    p50, p95, p99, peak = reservation_percentiles(r)
    return ObservedStats(window_s=window_s, samples=samples, p50=p50, p95=p95, p99=p99, peak=peak,
                         usage_peak=peak,
                         exceeded_request_fraction=(sum(row[3] for row in rows) / samples) if samples else 0.0,
                         exceeded_limit_events=sum(row[4] for row in rows))


def export_window_check(window_s: float, *, field: str) -> float:
    """The export window (s) if the archive can cover it: 60 s up to the retention of the
    1-minute rows the export reads (``KALENA_RETENTION_MINUTE_S``).

    Raises:
        InputError: naming ``field`` and the accepted range.
    """
    longest = float(settings.KALENA_RETENTION_MINUTE_S)
    if not 60 <= window_s <= longest:
        raise InputError(f"{window_s:g} s is outside what the archive's minute rows cover", source="export",
                         field=field, accepted=f"60–{longest:g} s (KALENA_RETENTION_MINUTE_S)")
    return window_s


def build_export(*, cluster: Cluster, now_s: float, window_s: float, policy: EstimatorPolicy | None = None) -> Export:
    """Both export parts for ``cluster`` over ``[now − window, now]`` (see module doc)."""
    policy = policy or EstimatorPolicy()
    since = now_s - window_s
    production = list(Workload.objects.filter(cluster=cluster, kind=Workload.PRODUCTION).select_related("node"))
    by_workload: dict[int, list] = defaultdict(list)
    peaks: dict[int, np.ndarray] = {}
    start_of = {w.id: (w.start_s if w.start_s is not None else -np.inf) for w in production}
    for wid, bucket, reservation, samples, above_q, above_l, peak in UsageRollup.objects.filter(
            cluster=cluster, resolution=UsageRollup.MINUTE, workload__isnull=False, bucket_s__gte=since,
            bucket_s__lte=now_s).values_list("workload_id", "bucket_s", "reservation", "samples", "above_request",
                                             "above_limit", "usage_peak"):
        if wid not in start_of or bucket < start_of[wid] + policy.grace_s:
            continue
        by_workload[wid].append((bucket, reservation, samples, above_q, above_l))
        peaks[wid] = np.maximum(peaks.get(wid, np.zeros(8)), vector(peak))
    blocks: dict[str, dict] = {}
    by_declaration: dict[str, list] = defaultdict(list)
    steady: dict[str, np.ndarray] = {}
    for w in production:
        rows = by_workload.get(w.id, [])
        by_declaration[f"{w.namespace}/{w.owner}"].extend(rows)
        stats = _stats(rows, window_s)
        if stats is not None:
            blocks[w.name] = observed_block(stats)  # the legacy pods: list is per pod
            steady[w.name] = stats.p95
    for key, rows in by_declaration.items():
        stats = _stats(rows, window_s)
        if stats is not None:
            blocks[key] = observed_block(stats)
    document = parse_yaml(cluster.workloads_document, source=f"cluster {cluster.name}") \
        if cluster.workloads_document.strip() else {}
    annotated = annotate_workloads(document, blocks) if document else {}
    request = np.array([vector(w.request) for w in production]).reshape(len(production), 8)
    steady_r = np.array([steady.get(w.name, np.full(8, np.nan)) for w in production]).reshape(len(production), 8)
    nodes = list(Node.objects.filter(cluster=cluster).order_by("row"))
    row_of = {n.id: i for i, n in enumerate(nodes)}
    report_drift = drift(request, steady_r, np.array([row_of.get(w.node_id, -1) for w in production], dtype=np.int64),
                         len(nodes))
    yield_by_node: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(8))
    for node_id, batch_request in UsageRollup.objects.filter(
            cluster=cluster, resolution=UsageRollup.MINUTE, node__isnull=False, bucket_s__gte=since,
            bucket_s__lte=now_s).values_list("node_id", "batch_request"):
        yield_by_node[node_id] = yield_by_node[node_id] + vector(batch_request) * 60.0
    evictions: dict[int, Counter] = defaultdict(Counter)
    for node_id, cause in EvictionRecord.objects.filter(cluster=cluster, time_s__gte=since).values_list("node_id", "cause"):
        evictions[node_id][cause] += 1
    report = kalena_report(
        window_s=window_s, drift_per_dimension=report_drift.per_dimension,
        workloads=[{"id": w.name, "declared_request": vector(w.request), "observed_peak": peaks.get(w.id),
                    "exceeded_limit_events": sum(r[4] for r in by_workload.get(w.id, []))} for w in production],
        nodes=[{"name": n.name, "slack_yield": yield_by_node[n.id] / window_s, "eviction_events": dict(evictions[n.id]),
                "drift": report_drift.per_node[i]} for i, n in enumerate(nodes)],
    )
    text = yaml.safe_dump(annotated, sort_keys=False, allow_unicode=True) if annotated else ""
    return Export(workloads_yaml=text, report=report, steady=steady)


@dataclass
class DriftReport:
    drift: dict
    recommended: bool = False
    fidelity_findings: int = 0


def drift_pass(*, cluster: Cluster, now_s: float) -> DriftReport:
    """The drift loop: compute D over the window; above the threshold — or when the
    orchestrator's watch found production pods running where the blueprint did not put them
    (the blueprint no longer describes the cluster) — open a recommendation carrying the export
    and the findings (one open recommendation per cluster at a time)."""
    window_s = float(getattr(settings, "KALENA_DRIFT_WINDOW_S", 86_400))
    threshold = float(getattr(settings, "KALENA_DRIFT_THRESHOLD", 0.25))
    from kalena_web.policy.selectors import current_policy

    export = build_export(cluster=cluster, now_s=now_s, window_s=window_s,
                          policy=current_policy(cluster_id=cluster.id).policy.estimator)
    per_dim = export.report["drift"]
    from kalena_web.control.selectors import fidelity_findings

    findings = [{"pod": f.workload.name, "blueprint_node": f.blueprint_node.name if f.blueprint_node else None,
                 "seen_node": f.seen_node.name if f.seen_node else None} for f in fidelity_findings(cluster=cluster)]
    export.report["fidelity_findings"] = findings
    out = DriftReport(drift=per_dim, fidelity_findings=len(findings))
    over = [d for d in ("cpu", "ram") if (per_dim.get(d) or 0.0) > threshold]
    check = dict(time_s=now_s, window_s=window_s, threshold=threshold,
                 drift={d: per_dim.get(d) for d in ("cpu", "ram")}, observed_pods=len(export.steady),
                 production_pods=Workload.objects.filter(cluster=cluster, kind=Workload.PRODUCTION).count(),
                 findings=len(findings), recommended=False)
    if (not over and not findings) or ReplanRecommendation.objects.filter(
            cluster=cluster, state=ReplanRecommendation.OPEN).exists():
        DriftCheck.objects.update_or_create(cluster=cluster, defaults=check)
        return out
    nodes = sorted(export.report["nodes"], key=lambda n: -(n["drift"].get("cpu", 0) + n["drift"].get("ram", 0)))[:10]
    ReplanRecommendation.objects.create(
        cluster=cluster, created_s=now_s, window_s=window_s, threshold=threshold, drift=per_dim,
        top_nodes=[{"name": n["name"], "drift": n["drift"]} for n in nodes],
        workloads_yaml=export.workloads_yaml, report=export.report)
    DriftCheck.objects.update_or_create(cluster=cluster, defaults={**check, "recommended": True})
    out.recommended = True
    return out


def recommendation_decide(*, recommendation: ReplanRecommendation, user, approve: bool, note: str, now_s: float) -> None:
    """Approve or reject an open recommendation (the caller checked the approver permission).

    Raises:
        RecommendationClosed: it was already decided.
        InputError: the note is longer than ``NOTE_MAX`` characters (nothing is decided).
    """
    if len(note) > NOTE_MAX or "\x00" in note:
        raise InputError(f"the note has {len(note)} characters" + (" and a NUL" if "\x00" in note else ""),
                         field="note", accepted=f"at most {NOTE_MAX}, without NUL")
    with transaction.atomic():
        rec = ReplanRecommendation.objects.select_for_update().get(id=recommendation.id)
        if rec.state != ReplanRecommendation.OPEN:
            raise RecommendationClosed(f"recommendation {rec.id} is already {rec.state}")
        rec.state = ReplanRecommendation.APPROVED if approve else ReplanRecommendation.REJECTED
        rec.decided_by, rec.decided_s, rec.note = user, now_s, note
        rec.save(update_fields=["state", "decided_by", "decided_s", "note"])
        from kalena_web.policy.services import audit_record

        audit_record(actor_kind="user", actor=user.get_username(), action=f"replan.{'approve' if approve else 'reject'}",
                     cluster_name=rec.cluster.name, target=f"recommendation {rec.id}", before={"state": "open"},
                     after={"state": rec.state, "note": note})

