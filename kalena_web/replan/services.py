"""Export back to Kuberina (docs/design.md §3), the drift loop and recommendation decisions (§10).

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
    coverage: float = 0.0  # :func:`drift_coverage` of this pass


def drift_coverage(*, observed_pods: int, production_pods: int) -> float:
    """Coverage of a drift figure: production pods with steady (p95) samples in the window ÷ the
    blueprint's production pods, 0–1 (0 when there is no production pod).

    Example: 11 pods seen of 2,714 → 11 / 2714 = 0.0041 (0.4 %): far too few to stand for the
    cluster, whatever D they give."""
    return observed_pods / production_pods if production_pods > 0 else 0.0


def _node_coverage(export: Export, production: list[Workload]) -> dict[int, tuple[int, int]]:
    """``{node id: (production pods seen, production pods)}`` over the blueprint's placements."""
    out: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for w in production:
        if w.node_id is None:
            continue
        out[w.node_id][1] += 1
        out[w.node_id][0] += int(w.name in export.steady)
    return {k: (v[0], v[1]) for k, v in out.items()}


def drift_pass(*, cluster: Cluster, now_s: float) -> DriftReport:
    """The drift loop: compute D over the window; above the threshold — with at least
    ``KALENA_DRIFT_MIN_COVERAGE`` of the blueprint's production pods observed (see
    :func:`drift_coverage`: D from a handful of pods recommends nothing) — or when the
    orchestrator's watch found production pods running where the blueprint did not put them
    (the blueprint no longer describes the cluster), open a recommendation carrying the export,
    the coverage and the findings (one open recommendation per cluster at a time)."""
    window_s = float(getattr(settings, "KALENA_DRIFT_WINDOW_S", 86_400))
    threshold = float(getattr(settings, "KALENA_DRIFT_THRESHOLD", 0.25))
    min_coverage = float(getattr(settings, "KALENA_DRIFT_MIN_COVERAGE", 0.5))
    from kalena_web.policy.selectors import current_policy

    export = build_export(cluster=cluster, now_s=now_s, window_s=window_s,
                          policy=current_policy(cluster_id=cluster.id).policy.estimator)
    per_dim = export.report["drift"]
    from kalena_web.control.selectors import fidelity_findings

    findings = [{"pod": f.workload.name, "blueprint_node": f.blueprint_node.name if f.blueprint_node else None,
                 "seen_node": f.seen_node.name if f.seen_node else None} for f in fidelity_findings(cluster=cluster)]
    export.report["fidelity_findings"] = findings
    out = DriftReport(drift=per_dim, fidelity_findings=len(findings))
    production = list(Workload.objects.filter(cluster=cluster, kind=Workload.PRODUCTION).only("id", "name", "node_id"))
    observed = sum(1 for w in production if w.name in export.steady)
    coverage = drift_coverage(observed_pods=observed, production_pods=len(production))
    export.report["coverage"] = {"observed_pods": observed, "production_pods": len(production),
                                 "ratio": coverage, "min_ratio": min_coverage}
    out.coverage = coverage
    covered = coverage >= min_coverage
    over = [d for d in ("cpu", "ram") if (per_dim.get(d) or 0.0) > threshold] if covered else []
    check = dict(time_s=now_s, window_s=window_s, threshold=threshold,
                 drift={d: per_dim.get(d) for d in ("cpu", "ram")}, observed_pods=observed,
                 production_pods=len(production), findings=len(findings), recommended=False)
    if (not over and not findings) or ReplanRecommendation.objects.filter(
            cluster=cluster, state=ReplanRecommendation.OPEN).exists():
        DriftCheck.objects.update_or_create(cluster=cluster, defaults=check)
        return out
    nodes = sorted(export.report["nodes"], key=lambda n: -(n["drift"].get("cpu", 0) + n["drift"].get("ram", 0)))[:10]
    by_name = {n.name: n.id for n in Node.objects.filter(cluster=cluster).only("id", "name")}
    per_node = _node_coverage(export, production)
    with transaction.atomic():  # the recommendation never stands without the check it came from
        ReplanRecommendation.objects.create(
            cluster=cluster, created_s=now_s, window_s=window_s, threshold=threshold, drift=per_dim,
            top_nodes=[{"name": n["name"], "drift": n["drift"],
                        "pods_seen": per_node.get(by_name.get(n["name"]), (0, 0))[0],
                        "pods": per_node.get(by_name.get(n["name"]), (0, 0))[1]} for n in nodes],
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



# -- re-plan adoption ------------------------------------------------------------------------------

@dataclass(frozen=True)
class AdoptedBlueprint:
    """What :func:`live_cluster_blueprint_replace` changed: blueprint pods whose blueprint node
    changed (``moved``), pods whose charge moved to their new blueprint node (``recharged``: not
    seen running elsewhere), fidelity findings the new blueprint resolves (``resolved``) and
    those still open (``findings``), and the new blueprint's soft violations."""

    cluster: Cluster
    moved: int
    recharged: int
    resolved: int
    findings: int
    soft_violations: int


def live_cluster_blueprint_replace(*, name: str, infra, workloads, blueprint, now_s: float, actor_kind: str,
                                   actor: str, workloads_document: str | None = None,
                                   policy=None) -> AdoptedBlueprint:
    """Adopt a re-plan: load ``blueprint`` (Kuberina's new solution for the same production pods
    and nodes) as the live cluster ``name``'s blueprint, keeping everything recorded about it —
    its archive, batch pods and their ledger debits, telemetry, tokens, policy — and audited as
    ``cluster.replace_blueprint``.

    Replicas of one declaration are interchangeable (a live pod holds *a* replica of its
    declaration, docs/design.md §15): within a declaration the new blueprint's nodes are renumbered so
    that a pod running where the new blueprint puts one of its declaration keeps its entry there
    (:func:`kalena_engine.kuberina.identity.renumbered_replicas`) — a re-plan that only renumbers
    replicas between nodes moves no one. A declaration is taken as written when a live pod holds
    one of its entries by a forge label or by name (those pin the entry to the pod).

    Per blueprint pod: its blueprint node becomes the new one; its request and limit become the
    new workloads' (``r`` keeps its estimate, or becomes the new request while no sample came);
    its charge (the node whose ledger holds its request and reservation) is where the watch saw
    it run, else the new blueprint node; a fidelity finding stays only where it runs off the
    new blueprint. Every node's production request and reservation are then re-summed from its
    charged pods, and ``Node.active`` follows the new blueprint. The nodes' capacity stays as
    imported. All-or-nothing.

    Raises:
        InputError: no live cluster ``name``.
        BlueprintRefused: the blueprint has hard violations; the infrastructure names nodes the
            cluster does not have; or the workloads are not the cluster's blueprint pods (pods it
            does not hold, or pods of it missing) — each naming what and the file it came from.
    """
    from kalena_engine.errors import BlueprintRefused
    from kalena_engine.estimator import estimator_limit
    from kalena_engine.kuberina import phase0_capacity, verify_blueprint
    from kalena_engine.kuberina.identity import ORDINAL, REPLICA, interchangeable_declarations, renumbered_replicas
    from kalena_engine.policy import Policy
    from kalena_web.control.models import ProductionPlacement
    from kalena_web.ledger.models import LiveNodeLedger, WorkloadReservation
    from kalena_web.policy.services import audit_record

    policy = policy or Policy()
    cluster = Cluster.objects.filter(kind=Cluster.LIVE, name=name).first()
    if cluster is None:
        names = ", ".join(Cluster.objects.filter(kind=Cluster.LIVE).order_by("name").values_list("name", flat=True))
        raise InputError(f"no live cluster named {name!r}", field="name", accepted=names or "none exists")
    capacity = phase0_capacity(infra)
    report = verify_blueprint(infra, workloads, blueprint, capacity)
    if report.hard:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(report.hard_counts.items()))
        first = report.hard[0]
        raise BlueprintRefused(f"the blueprint has {len(report.hard)} hard violation(s): {kinds} "
                               f"(first: {first.subject}: {first.detail})", source=blueprint.source,
                               field="solution", accepted="a blueprint with no hard violations; nothing was changed")
    with transaction.atomic():
        Cluster.objects.select_for_update().filter(id=cluster.id).first()
        nodes = {n.name: n for n in Node.objects.filter(cluster=cluster)}
        unknown = [spec.name for spec in infra.nodes if spec.name not in nodes]
        if unknown:
            raise BlueprintRefused(
                f"{len(unknown)} node(s) of the infrastructure are not nodes of cluster {name!r}: "
                f"{', '.join(unknown[:5])}{' …' if len(unknown) > 5 else ''}", source=infra.source, field="nodes",
                accepted=f"the cluster's nodes ({', '.join(sorted(nodes)[:5])}{' …' if len(nodes) > 5 else ''}); "
                         "nothing was changed")
        ledgers = {led.node_id: led for led in LiveNodeLedger.objects.select_for_update().filter(
            node__cluster=cluster).order_by("node_id")}
        blueprint_ids = {wid for led in ledgers.values() for wid in (led.blueprint_workloads or [])}
        held = {w.name: w for w in Workload.objects.select_for_update().filter(
            cluster=cluster, kind=Workload.PRODUCTION, id__in=blueprint_ids)}
        wanted = {pod.id for pod in workloads.pods}
        foreign, missing = sorted(wanted - held.keys()), sorted(held.keys() - wanted)
        if foreign or missing:
            parts = ([f"{len(foreign)} pod(s) cluster {name!r} does not hold (e.g. {', '.join(foreign[:3])})"]
                     if foreign else []) + ([f"{len(missing)} of its blueprint pod(s) missing (e.g. "
                                             f"{', '.join(missing[:3])})"] if missing else [])
            raise BlueprintRefused(
                f"the workloads are not cluster {name!r}'s production pods: {'; '.join(parts)}",
                source=workloads.source, field="pods",
                accepted="the workloads the cluster was imported from (or its export), re-solved by Kuberina; "
                         "nothing was changed")
        placements = {p.workload_id: p for p in ProductionPlacement.objects.select_for_update().filter(
            workload__in=held.values())}
        reservations = {r.workload_id: r for r in WorkloadReservation.objects.select_for_update().filter(
            workload__in=held.values())}
        findings_before = sum(1 for p in placements.values() if p.finding)
        node_names = {n.id: node_name for node_name, n in nodes.items()}
        swappable = interchangeable_declarations(workloads.pods)
        seen_names = []
        for pod in workloads.pods:
            placement = placements.get(held[pod.id].id)
            seen_names.append(node_names.get(placement.seen_node_id, "") if placement is not None else "")
            if placement is not None and placement.rule not in (REPLICA, ORDINAL):
                swappable.discard((pod.namespace, pod.declaration))  # a forge label or a name pins it
        planned = renumbered_replicas(
            [f"{pod.namespace}/{pod.declaration}" if (pod.namespace, pod.declaration) in swappable else ""
             for pod in workloads.pods],
            [infra.nodes[int(row)].name for row in report.node_of_pod], seen_names)
        moved = recharged = resolved = 0
        moved_pods: list[str] = []
        blueprint_of: dict[int, list[int]] = defaultdict(list)  # node id → its blueprint pods' ids
        for i, pod in enumerate(workloads.pods):
            w = held[pod.id]
            new_node = nodes[planned[i]]
            blueprint_of[new_node.id].append(w.id)
            placement = placements.get(w.id)
            old_blueprint = placement.blueprint_node_id if placement is not None else w.node_id
            if old_blueprint != new_node.id:
                moved += 1
                moved_pods.append(pod.id)
            seen = placement.seen_node_id if placement is not None else None
            charge = seen if seen is not None else new_node.id
            if charge != w.node_id:
                recharged += 1
            request = pod.requests.tolist()
            limit = estimator_limit(pod.limits if pod.limits is not None else np.full(8, np.inf), pod.requests,
                                    policy.estimator.limit_ratio).tolist()
            r = reservations.get(w.id)
            if r is not None and r.last_sample_s is None and list(r.value) != request:
                r.value, r.updated_s = request, now_s
                r.save(update_fields=["value", "updated_s"])
            # the IR's name lists come from the new workloads; the live pod's own required
            # anti-affinity terms (read by the watch) stay until the watch reports it again
            constraints = {k: v for k, v in (w.constraints or {}).items() if k == "anti_affinity_terms"}
            if pod.anti_affinity:
                constraints["anti_affinity"] = list(pod.anti_affinity)
            Workload.objects.filter(id=w.id).update(
                node_id=charge, request=request, limit=limit, owner=pod.declaration, priority=pod.priority,
                labels=dict(pod.labels), constraints=constraints)
            if placement is not None:
                finding = seen is not None and seen != new_node.id
                resolved += int(placement.finding and not finding)
                placement.blueprint_node_id, placement.finding = new_node.id, finding
                fields = ["blueprint_node", "finding"]
                if placement.identity != ProductionPlacement.EXTRA and seen is not None:
                    placement.identity = ProductionPlacement.MOVED if finding else ProductionPlacement.MAPPED
                    fields.append("identity")
                placement.save(update_fields=fields)
        _ledgers_resum(cluster=cluster, ledgers=ledgers,
                       blueprint={node_id: sorted(ids) for node_id, ids in blueprint_of.items()})
        active = {infra.nodes[row].name for row in report.active_nodes}
        for n in nodes.values():
            if n.name in infra.node_index and n.active != (n.name in active):
                Node.objects.filter(id=n.id).update(active=n.name in active)
        before = {"blueprint": cluster.sources.get("blueprint", ""), "findings": findings_before}
        cluster.sources = {**cluster.sources, "infra": infra.source, "workloads": workloads.source,
                           "blueprint": blueprint.source}
        fields = ["sources"]
        if workloads_document is not None:
            cluster.workloads_document = workloads_document
            fields.append("workloads_document")
        cluster.save(update_fields=fields)
        findings = ProductionPlacement.objects.filter(workload__cluster=cluster, finding=True).count()
        audit_record(actor_kind=actor_kind, actor=actor, action="cluster.replace_blueprint", cluster_name=name,
                     target=blueprint.source, before=before,
                     after={"blueprint": blueprint.source, "moved": moved_pods[:100], "recharged": recharged,
                            "resolved": resolved, "findings": findings})
    return AdoptedBlueprint(cluster=cluster, moved=moved, recharged=recharged, resolved=resolved, findings=findings,
                            soft_violations=len(report.soft))


def _ledgers_resum(*, cluster: Cluster, ledgers: dict, blueprint: dict[int, list[int]]) -> None:
    """Every node's production request and reservation re-summed from the production pods
    charged there (their request; their reservation, or the request while none is stored), and
    its blueprint reference replaced; each changed ledger's version moves on (a binding computed
    against the old one is refused)."""
    from kalena_web.ledger.models import WorkloadReservation

    request: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(8))
    reservation: dict[int, np.ndarray] = defaultdict(lambda: np.zeros(8))
    r_of = dict(WorkloadReservation.objects.filter(workload__cluster=cluster, workload__kind=Workload.PRODUCTION)
                .values_list("workload_id", "value"))
    for wid, node_id, q in Workload.objects.filter(cluster=cluster, kind=Workload.PRODUCTION,
                                                   node__isnull=False).values_list("id", "node_id", "request"):
        request[node_id] = request[node_id] + vector(q)
        reservation[node_id] = reservation[node_id] + vector(r_of.get(wid, q))
    for node_id, led in ledgers.items():
        led.prod_request = request[node_id].tolist()
        led.prod_reservation = reservation[node_id].tolist()
        led.blueprint_workloads = blueprint.get(node_id, [])
        led.version += 1
        led.save(update_fields=["prod_request", "prod_reservation", "blueprint_workloads", "version"])


BLUEPRINT_MAX_BYTES = 16 * 2**20  # an uploaded solution file


def recommendation_adopt(*, recommendation: ReplanRecommendation, user, blueprint_text: str, filename: str,
                         note: str, now_s: float) -> AdoptedBlueprint:
    """Approve an open recommendation and adopt the re-plan Kuberina made from its export, in
    one transaction (the console's approve with a new blueprint): ``blueprint_text`` (the
    solution document) is read against the workloads the recommendation exported (else those
    the cluster was imported from) and the cluster's own nodes, then
    :func:`live_cluster_blueprint_replace` applies it. Refused → nothing is decided or changed.

    Raises:
        RecommendationClosed: already decided.
        InputError / BlueprintRefused / IRError: the note, the file (too large, not YAML, not a
            blueprint of these pods and nodes), or a cluster imported from manifests (no
            workloads document to read the blueprint against) — naming the file.
    """
    from kalena_engine.kuberina import parse_blueprint, parse_workloads
    from kalena_web.inventory.mappers import infra_from_cluster

    source = f"uploaded {filename or 'blueprint'}"
    if len(blueprint_text.encode("utf-8")) > BLUEPRINT_MAX_BYTES:
        raise InputError(f"{source} is larger than {BLUEPRINT_MAX_BYTES // 2**20} MiB", field="blueprint",
                         accepted="a Kuberina solution file")
    cluster = recommendation.cluster
    text = recommendation.workloads_yaml.strip() or cluster.workloads_document.strip()
    if not text:
        raise InputError(f"cluster {cluster.name!r} keeps no Kuberina workloads document (imported from "
                         "manifests)", field="blueprint",
                         accepted="`kalena cluster import NAME --replace-blueprint --manifests … --blueprint …`")
    workloads = parse_workloads(parse_yaml(text, source=f"recommendation {recommendation.id}'s export"),
                                source=f"recommendation {recommendation.id}'s export")
    blueprint = parse_blueprint(parse_yaml(blueprint_text, source=source), workloads, source=source)
    with transaction.atomic():
        recommendation_decide(recommendation=recommendation, user=user, approve=True, note=note, now_s=now_s)
        return live_cluster_blueprint_replace(name=cluster.name, infra=infra_from_cluster(cluster), workloads=workloads,
                                              blueprint=blueprint, now_s=now_s, actor_kind="user",
                                              actor=user.get_username())
