"""The agents page of a live cluster (login required by the console middleware): every node
with its tokens, its agent's connection, last sample and staleness, accepted samples and
rejected samples per reason; then rejections per reason with the last problem, and refused
connections. GET only; nothing changes."""

from __future__ import annotations

import time

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from kalena_web.console.listing import ListSpec, everything, listing
from kalena_web.telemetry import selectors
from kalena_web.telemetry.models import AgentToken
from kalena_web.telemetry.validation import REASONS

AGENT_LIST = ListSpec(
    search=("node__name",),
    filters={"agent": {"all": everything, "connected": lambda r: bool(r.status and r.status.connected),
                       "disconnected": lambda r: bool(r.status and not r.status.connected),
                       "never_seen": lambda r: r.status is None,
                       "without_token": lambda r: not r.tokens_active},
             "telemetry": {"all": everything, "stale": lambda r: r.stale, "fresh": lambda r: not r.stale}},
    sorts={"node": ("node__row",), "name": ("node__name",), "last_sample": ("ledger_last_sample_s",),
           "accepted": ("status__accepted_samples",), "rejected": ("rejected_total",), "tokens": ("tokens_active",)},
    per_page=100)


@require_GET
def agents(request: HttpRequest, cluster: str) -> HttpResponse:
    from kalena_web.console.live_views import live_page

    return live_page(_agents)(request, cluster)


def _agents(request: HttpRequest, cluster: str) -> HttpResponse:
    from kalena_web.policy import selectors as policy_selectors

    try:
        found = selectors.live_cluster_get(cluster=cluster)
    except selectors.NotFound as exc:
        raise Http404(str(exc)) from None
    rows = selectors.cluster_agents(cluster=found)
    reasons = sorted({reason for r in rows for reason in r.rejected})
    now = time.time()
    for r in rows:
        r.age_s = None if r.ledger_last_sample_s is None else max(0.0, now - r.ledger_last_sample_s)
    return render(request, "telemetry/agents.html", {
        "cluster": found, "rows": rows, "listing": listing(rows, request.GET, AGENT_LIST),
        "tokens": AgentToken.objects.filter(node__cluster=found).select_related("node", "created_by")
                                    .order_by("revoked_at", "node__row", "-id")[:500],
        "can_manage_tokens": request.user.has_perm("telemetry.manage_agent_tokens"), "reasons": reasons, "reason_labels": REASONS, "now_s": now,
        "connected": sum(1 for r in rows if r.status and r.status.connected),
        "stale": sum(1 for r in rows if r.stale), "without_token": sum(1 for r in rows if not r.tokens_active),
        "accepted": sum(r.status.accepted_samples for r in rows if r.status),
        "rejected": sum(r.rejected_total for r in rows),
        "rejections": selectors.cluster_rejections(cluster=found),
        "refusals": selectors.cluster_refusals(cluster=found),
        "policy_version": policy_selectors.current_versions(cluster_ids=[found.id])[found.id],
    })
