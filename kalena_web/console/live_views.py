"""Live-cluster console pages: clusters, a cluster's nodes and events, a node's live chart,
pending batch with why-pending, why-evicted, and re-plan recommendations (approve / reject).

Views parse, call selectors/services, shape, render. Unknown names → 404 page; a decision by a
user without the approver permission → 403; a decision on a closed recommendation → 409.
"""

from __future__ import annotations

import time
from functools import wraps

from django.conf import settings
from django.core.paginator import InvalidPage
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from kalena_engine.errors import InputError, KalenaError
from kalena_web.archive.models import EvictionRecord
from kalena_web.console.listing import ListSpec, everything, listing
from kalena_web.console.live_figures import live_node_figure
from kalena_web.console.params import BadParameter
from kalena_web.console.views import error_page
from kalena_web.console.why import THROTTLE_ACTIONS, reduction_text, rejection_lines, throttle_text
from kalena_web.control import selectors
from kalena_web.control.selectors import NotFound
from kalena_web.control.schedules import PERIODS_S
from kalena_web.ledger.estimation import live_policy
from kalena_web.ledger.mappers import predictor_notes
from kalena_web.replan.models import DriftCheck, ReplanRecommendation
from kalena_web.replan.services import (
    BLUEPRINT_MAX_BYTES, RecommendationClosed, drift_coverage, recommendation_adopt, recommendation_decide,
)
from kalena_web.scheduling import selectors as scheduling_selectors
from kalena_web.scheduling.models import BatchPod
from kalena_web.telemetry.models import MitigationEvent

HISTORY_S = 6 * 3600.0
DRIFT_INTERVAL_S = PERIODS_S["kalena.replan.drift"]


def live_page(view):
    """Unknown names → 404 page; a bad list parameter → 400; a page past the end → 404."""
    @wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except NotFound as exc:
            return error_page(request, 404, str(exc))
        except InvalidPage as exc:
            return error_page(request, 404, f"page: {exc}")
        except BadParameter as exc:
            return error_page(request, 400, str(exc))
    return wrapper


LIVE_NODES = ListSpec(
    search=("node__name",),
    filters={"telemetry": {"all": everything, "fresh": lambda v: not v.stale, "stale": lambda v: v.stale},
             "condition": {"all": everything, "memory_pressure": lambda v: v.pressure_since_s is not None,
                           "slack_ineligible": lambda v: v.ineligible_until_s > time.time(),
                           "blueprint_broken": lambda v: bool(v.blueprint_violations),
                           "with_batch": lambda v: v.batch_pods > 0}},
    sorts={"row": ("node__row",), "name": ("node__name",), "slack_cpu": ("slack__0",), "slack_ram": ("slack__1",),
           "headroom_cpu": ("headroom__0",), "headroom_ram": ("headroom__1",), "usage_cpu": ("usage__0",),
           "usage_ram": ("usage__1",), "batch": ("batch_pods",)},
    per_page=100)

PENDING_LIST = ListSpec(
    search=("workload__name", "workload__owner", "why_pending__binding"),
    sorts={"queued": ("queued_s",), "name": ("workload__name",), "priority": ("workload__priority",),
           "owner": ("workload__owner",), "binding": ("why_pending__binding",)},
    filters={"checked": {"all": Q(), "through_a_pass": Q(why_pending__isnull=False),
                         "not_yet": Q(why_pending__isnull=True)}},
    per_page=100)

EVICTION_LIST = ListSpec(
    search=("workload_name", "node__name"),
    filters={"cause": {"all": Q(), "priority": Q(cause="priority"), "limit_breach": Q(cause="limit_breach"),
                       "escalation": Q(cause="escalation"), "node_drained": Q(cause="node_drained"),
                       "node_lost": Q(cause="node_lost")},
             "condition": {"all": Q(), "memory_pressure": Q(dimension="ram"), "cpu_pressure": Q(dimension="cpu")},
             "tier": {"all": Q(), "batch": Q(tier="batch"), "service": ~Q(tier="batch")}},
    labels={"limit_breach": "over its limit", "priority": "lowest priority", "node_drained": "node drained",
            "node_lost": "node lost"},
    sorts={"time": ("time_s",), "workload": ("workload_name",), "node": ("node__name",), "priority": ("priority",)},
    default_sort="-time", per_page=50)

BATCH_LIST = ListSpec(
    search=("workload__name", "workload__owner", "workload__node__name", "ran_on"),
    filters={"state": {"all": Q(), **{state: Q(state=state) for state, _ in BatchPod.STATES}}},
    sorts={"queued": ("queued_s",), "submitted": ("submitted_s",), "name": ("workload__name",),
           "priority": ("workload__priority",), "node": ("workload__node__name", "ran_on"), "bound": ("bound_s",),
           "ended": ("ended_s",), "state": ("state",)},
    per_page=50)


@require_GET
@live_page
def batch_list(request: HttpRequest, cluster: str) -> HttpResponse:
    """Every batch pod of the cluster — pending, bound (running), completed, deleted — with its
    node and times; searchable, filterable by state, sortable, paged (3 queries + session)."""
    return batch_page(request, selectors.live_cluster_get(name=cluster))


def batch_page(request: HttpRequest, c, *, form: dict | None = None, errors: dict | None = None,
               status: int = 200) -> HttpResponse:
    """The batch list page; ``form`` and ``errors`` (``{field: message}``) re-show a refused
    submission with what was typed and every error under its field."""
    rows = BatchPod.objects.filter(cluster=c).select_related("workload", "workload__node")
    return render(request, "console/live_batch.html", {
        "cluster": c, "listing": listing(rows, request.GET, BATCH_LIST), "now_s": time.time(),
        "can_operate": request.user.has_perm("scheduling.operate_batch"),
        "orchestrator": settings.KALENA_ORCHESTRATOR, "form": form or {}, "errors": errors or {}}, status=status)


@require_GET
@live_page
def clusters(request: HttpRequest) -> HttpResponse:
    return render(request, "console/live_clusters.html", {"clusters": selectors.live_clusters()})


@require_GET
@live_page
def cluster(request: HttpRequest, cluster: str) -> HttpResponse:
    c = selectors.live_cluster_get(name=cluster)
    now = time.time()
    views = selectors.node_views(cluster=c)
    pending = BatchPod.objects.filter(cluster=c, state=BatchPod.PENDING).count()
    return render(request, "console/live_cluster.html", {
        "cluster": c, "views": views, "listing": listing(views, request.GET, LIVE_NODES), "now_s": now, "totals": selectors.totals(views, now_s=now),
        "pending": pending, **selectors.cluster_events(cluster=c)})


@require_GET
@live_page
def node(request: HttpRequest, cluster: str, node: str) -> HttpResponse:
    c = selectors.live_cluster_get(name=cluster)
    view = selectors.node_view(cluster=c, name=node)
    now = time.time()
    history = selectors.node_history(node=view.node, since_s=now - HISTORY_S)
    workloads = selectors.node_workloads(node=view.node)
    notes = predictor_notes(workloads, live_policy([view.node.id]).estimator)
    for w in workloads:
        w.predictor, w.predictor_why = notes.get(w.id, ("", ""))
    return render(request, "console/live_node.html", {
        "cluster": c, "view": view, "now_s": now, "figure": live_node_figure(history),
        "points": len(history["times_s"]), "workloads": workloads,
        "extras": selectors.node_extras(node=view.node),
        "throttles": [(e, throttle_text(e.action, e.reason, e.numbers)) for e in MitigationEvent.objects.filter(
            node=view.node, action__in=THROTTLE_ACTIONS).order_by("-ts")[:20]],
        "evictions": EvictionRecord.objects.filter(node=view.node)[:20]})


@require_GET
@live_page
def pending(request: HttpRequest, cluster: str) -> HttpResponse:
    c = selectors.live_cluster_get(name=cluster)
    found = listing(scheduling_selectors.pending_pods(cluster=c), request.GET, PENDING_LIST)
    return render(request, "console/live_pending.html", {"cluster": c, "listing": found, "pods": found.page})


@require_GET
@live_page
def batch_pod(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    c = selectors.live_cluster_get(name=cluster)
    try:
        pod = scheduling_selectors.batch_pod(cluster=c, name=name)
    except BatchPod.DoesNotExist:
        raise NotFound(f"no batch pod {name!r} in {cluster!r}") from None
    why = scheduling_selectors.why_pending(pod=pod)
    return render(request, "console/live_batch_pod.html", {
        "cluster": c, "pod": pod, "can_operate": request.user.has_perm("scheduling.operate_batch"), "why": why, "examples": rejection_lines(why.record if why else {}),
        "reduction": reduction_text(why.record if why else {}),
        "evictions": EvictionRecord.objects.filter(workload=pod.workload).select_related("node")[:20]})


@require_GET
@live_page
def evictions(request: HttpRequest, cluster: str) -> HttpResponse:
    c = selectors.live_cluster_get(name=cluster)
    rows = EvictionRecord.objects.filter(cluster=c).select_related("node")
    found = listing(rows, request.GET, EVICTION_LIST)
    return render(request, "console/live_evictions.html", {"cluster": c, "listing": found, "records": found.page})


@require_GET
@live_page
def recommendations(request: HttpRequest, cluster: str) -> HttpResponse:
    c = selectors.live_cluster_get(name=cluster)
    recs = list(ReplanRecommendation.objects.filter(cluster=c).select_related("decided_by")[:20])
    check = DriftCheck.objects.filter(cluster=c).first()
    min_coverage = float(getattr(settings, "KALENA_DRIFT_MIN_COVERAGE", 0.5))
    coverage = drift_coverage(observed_pods=check.observed_pods, production_pods=check.production_pods) \
        if check else 0.0
    return render(request, "console/live_replan.html", {
        "cluster": c, "recommendations": recs, "check": check, "now_s": time.time(),
        "coverage": coverage, "min_coverage": min_coverage, "covered": coverage >= min_coverage,
        "open": next((r for r in recs if r.state == ReplanRecommendation.OPEN), None),
        "threshold": float(getattr(settings, "KALENA_DRIFT_THRESHOLD", 0.25)),
        "window_s": float(getattr(settings, "KALENA_DRIFT_WINDOW_S", 86_400)),
        "interval_s": DRIFT_INTERVAL_S,
        "can_approve": request.user.has_perm("replan.approve_replan")})


@require_POST
@live_page
def decide(request: HttpRequest, cluster: str, rec_id: int) -> HttpResponse:
    c = selectors.live_cluster_get(name=cluster)
    if not request.user.has_perm("replan.approve_replan"):
        return error_page(request, 403, "approving or rejecting a re-plan needs the approver role")
    try:
        rec = ReplanRecommendation.objects.get(cluster=c, id=rec_id)
    except ReplanRecommendation.DoesNotExist:
        raise NotFound(f"no recommendation {rec_id} in {cluster!r}") from None
    decision = request.POST.get("decision")
    if decision not in ("approve", "reject"):
        return error_page(request, 400, f"decision {decision!r} is not approve or reject")
    upload = request.FILES.get("blueprint") if decision == "approve" else None
    try:
        if upload is not None:  # approve and adopt Kuberina's re-plan in one step
            recommendation_adopt(recommendation=rec, user=request.user, filename=upload.name,
                                 blueprint_text=upload.read(BLUEPRINT_MAX_BYTES + 1).decode("utf-8", "replace"),
                                 note=request.POST.get("note", ""), now_s=time.time())
        else:
            recommendation_decide(recommendation=rec, user=request.user, approve=decision == "approve",
                                  note=request.POST.get("note", ""), now_s=time.time())
    except RecommendationClosed as exc:
        return error_page(request, 409, str(exc))
    except KalenaError as exc:
        return error_page(request, 400, str(exc))
    return redirect("console:live_replan", cluster=c.name)


@require_GET
@live_page
def waste(request: HttpRequest, cluster: str) -> HttpResponse:
    """Per namespace and workload: request vs usage vs reservation, and the core-hours reclaimed
    from it over ``?window=`` (1h, 6h, 24h or 7d; default 24h). Math in :mod:`kalena_web.console.waste`."""
    from kalena_web.console.waste import WINDOWS_S, waste as waste_view

    c = selectors.live_cluster_get(name=cluster)
    window = request.GET.get("window", "24h")
    if window not in WINDOWS_S:
        raise BadParameter(f"window: {window!r} is not offered (accepted: {', '.join(WINDOWS_S)})")
    view = waste_view(c, window_s=WINDOWS_S[window])
    return render(request, "console/live_waste.html", {"cluster": c, "window": window, "windows": list(WINDOWS_S),
                                                       **view})
