"""Policy console pages: the policy of a live cluster (draft, pre-flight, save), its history
(diff, rollback), import/export of the policy file, the calibration page, and the audit log.

Reading needs a login (every console page does); changing needs ``policy.tune_policy`` (the
operator and approver roles) — without it a change answers 403 and nothing is stored. Bad
input re-renders the page with a message per field (400) and stores nothing.
"""

from __future__ import annotations

import datetime as dt
import time

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from kalena_engine.errors import PolicyError
from kalena_engine.policy_file import (
    PolicyDocument, dump_policy_text, parse_policy_text, policy_from_document, policy_to_document,
)
from kalena_engine.replay.calibration import parse_variant
from kalena_engine.preflight import policy_preflight
from kalena_web.console.live_views import live_page
from kalena_web.console.views import error_page
from kalena_web.control import selectors as control_selectors
from kalena_web.policy import drafts, figures, mappers, selectors, services
from kalena_web.policy.models import CalibrationImport
from kalena_web.policy.preflight_io import preflight_cluster_load

TUNE = "policy.tune_policy"
MAX_FILE_BYTES = 1_000_000


def _policy_page(request: HttpRequest, cluster, *, draft: drafts.Draft | None = None, preflight=None,
                 message: str = "", status: int = 200, origin: str = "", current=None) -> HttpResponse:
    current = current or selectors.current_policy(cluster_id=cluster.id)
    version, agents = selectors.agents_policy_state(cluster=cluster)
    parts = selectors.parts_policy_state(cluster=cluster, current=current.version)
    fields = draft.fields if draft else drafts.form_fields(current.document)
    sections: dict[str, list] = {}
    for f in fields:
        sections.setdefault(f.section, []).append(f)
    return render(request, "policy/policy.html", {
        "cluster": cluster, "current": current, "sections": sections, "origin": origin,
        "namespaces": draft.namespaces if draft else drafts.namespaces_text(dict(current.policy.placement.namespace_batch_caps)),
        "errors": draft.errors if draft else {}, "form_error": (draft.errors.get("", "") if draft else "") or message,
        "preflight": preflight, "figure": figures.preflight_slack_figure(preflight) if preflight else None,
        "chart_caption": figures.preflight_chart_caption(preflight) if preflight else "",
        "slack_rows": figures.preflight_slack_rows(preflight) if preflight else "",
        "agents": agents, "behind": [a for a in agents if a.behind], "can_tune": request.user.has_perm(TUNE),
        "parts": parts, "parts_behind": [p for p in parts if p.behind],
        "carried": drafts.carried_text(draft.document if draft and draft.document else current.document),
    }, status=status)


def _preflight(cluster, document: PolicyDocument, current=None):
    current = current or selectors.current_policy(cluster_id=cluster.id)
    now = time.time()
    cooldown_s = max(current.policy.eviction.cooldown_s, document.policy.eviction.cooldown_s)
    return policy_preflight(preflight_cluster_load(cluster=cluster, now_s=now, cooldown_s=cooldown_s),
                            current=current.policy, proposed=document.policy, now_s=now)


def _user(request: HttpRequest) -> str:
    return request.user.get_username()


@require_http_methods(["GET", "POST"])
@live_page
def policy(request: HttpRequest, cluster: str) -> HttpResponse:
    """GET: the current version as a form (``?calibration=<id>`` starts a draft from that
    calibration's knee and runs its pre-flight). POST ``action=preflight`` checks the draft and
    shows its pre-flight; ``action=save`` stores it as a new version."""
    c = control_selectors.live_cluster_get(name=cluster)
    if request.method == "GET":
        calibration_id = request.GET.get("calibration")
        if not calibration_id:
            return _policy_page(request, c)
        row = CalibrationImport.objects.filter(cluster=c, id=int(calibration_id) if calibration_id.isdigit() else -1).first()
        if row is None:
            return error_page(request, 404, f"no calibration {calibration_id!r} for {c.name!r}")
        imported = mappers.calibration_document(row)
        cal = imported.metadata.calibration
        try:
            setting, what = _calibration_setting(imported, request.GET.get("point"))
        except ValueError as exc:
            return error_page(request, 400, str(exc))
        base = selectors.current_policy(cluster_id=c.id).document
        try:
            _, params = parse_variant(str(setting.pop("predictor", "")) or base.policy.estimator.predictor)
        except ValueError as exc:
            return error_page(request, 400, f"calibration {row.filename or row.id}: {exc}")
        values = dict(params)
        mapping = policy_to_document(base)
        mapping["spec"]["estimator"].update({"predictor": values.pop("predictor")})
        if "members" in values:
            mapping["spec"]["estimator"]["members"] = list(values.pop("members"))
        base = policy_from_document(mapping, source="calibration")
        posted = {f.name: f.value for f in drafts.form_fields(base)}
        posted.update({f"estimator.{k}": f"{float(v):g}" for k, v in {**values, **setting}.items()})
        draft = drafts.draft_read(posted, base=base)
        if draft.document is None:
            return _policy_page(request, c, draft=draft, status=400)
        return _policy_page(request, c, draft=draft, preflight=_preflight(c, draft.document),
                            origin=f"calibration {row.filename or row.id} {what}")
    if not request.user.has_perm(TUNE):
        return error_page(request, 403, "tuning policy needs the operator or approver role")
    current = selectors.current_policy(cluster_id=c.id)
    try:
        base = drafts.carried_base(request.POST.get("carried", ""), base=current.document)
    except PolicyError as exc:
        return _policy_page(request, c, message=f"Refused, nothing changed — {exc}", status=400, current=current)
    draft = drafts.draft_read(request.POST, base=base)
    if draft.document is None:
        return _policy_page(request, c, draft=draft, status=400)
    if request.POST.get("action") == "save":
        row = services.policy_version_create(cluster=c, document=draft.document, user=_user(request),
                                             source=request.POST.get("origin", "")[:200] or "console",
                                             note=request.POST.get("note", ""))
        return redirect(f"/policy/{c.name}/history/?saved={row.version}")
    return _policy_page(request, c, draft=draft, preflight=_preflight(c, draft.document, current),
                        origin=request.POST.get("origin", ""), current=current)


def _uploaded_text(request: HttpRequest, name: str = "file") -> tuple[str, str]:
    upload = request.FILES.get(name)
    if upload is None:
        raise PolicyError("no file chosen", source="import", field=name, accepted="a YAML or JSON policy file")
    if upload.size > MAX_FILE_BYTES:
        raise PolicyError(f"{upload.size} bytes is too large", source=upload.name, accepted=f"up to {MAX_FILE_BYTES} bytes")
    try:
        return upload.name, upload.read().decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError("not UTF-8 text", source=upload.name, accepted="a YAML or JSON policy file") from None


def _for_cluster(document: PolicyDocument, cluster, source: str) -> None:
    if document.metadata.cluster and document.metadata.cluster != cluster.name:
        raise PolicyError(f"this file is for cluster {document.metadata.cluster!r}, not {cluster.name!r}",
                          source=source, field="metadata.cluster", accepted=f"{cluster.name!r} or no metadata.cluster")


@require_POST
@live_page
def policy_import(request: HttpRequest, cluster: str) -> HttpResponse:
    """A policy file becomes a draft (shown with its pre-flight, saved only by Save)."""
    c = control_selectors.live_cluster_get(name=cluster)
    if not request.user.has_perm(TUNE):
        return error_page(request, 403, "importing policy needs the operator or approver role")
    try:
        name, text = _uploaded_text(request)
        document = parse_policy_text(text, source=name)
        _for_cluster(document, c, name)
    except PolicyError as exc:
        return _policy_page(request, c, message=f"Import refused, nothing changed — {exc}", status=400)
    posted = {f.name: f.value for f in drafts.form_fields(document)}
    posted["namespaces"] = drafts.namespaces_text(dict(document.policy.placement.namespace_batch_caps))
    draft = drafts.draft_read(posted, base=document)
    return _policy_page(request, c, draft=draft, preflight=_preflight(c, draft.document), origin=f"import {name}")


@require_GET
@live_page
def policy_export(request: HttpRequest, cluster: str) -> HttpResponse:
    """The current version (or ``?version=N``) as a policy file (YAML)."""
    c = control_selectors.live_cluster_get(name=cluster)
    wanted = request.GET.get("version")
    if wanted == "0":
        document = PolicyDocument()
    elif wanted:
        row = selectors.policy_version_get(cluster=c, version=int(wanted)) if wanted.isdigit() else None
        if row is None:
            return error_page(request, 404, f"{c.name} has no policy version {wanted!r}")
        document = mappers.version_document(row)
    else:
        document = selectors.current_policy(cluster_id=c.id).document
    from dataclasses import replace

    document = replace(document, metadata=replace(document.metadata, cluster=c.name))
    response = HttpResponse(dump_policy_text(document), content_type="application/yaml; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{c.name}-policy-v{document.metadata.version}.yaml"'
    return response


@require_GET
@live_page
def history(request: HttpRequest, cluster: str) -> HttpResponse:
    c = control_selectors.live_cluster_get(name=cluster)
    rows = list(selectors.policy_versions(cluster=c)[:200])
    from kalena_engine.policy_file import policy_to_document

    entries = []
    for i, row in enumerate(rows):
        before = rows[i + 1].document if i + 1 < len(rows) else policy_to_document(PolicyDocument())
        entries.append({"row": row, "diff": mappers.spec_diff(before, row.document)})
    return render(request, "policy/history.html", {
        "cluster": c, "entries": entries, "saved": request.GET.get("saved", ""),
        "current": rows[0].version if rows else 0, "can_tune": request.user.has_perm(TUNE)})


@require_POST
@live_page
def rollback(request: HttpRequest, cluster: str, version: int) -> HttpResponse:
    c = control_selectors.live_cluster_get(name=cluster)
    if not request.user.has_perm(TUNE):
        return error_page(request, 403, "rolling back policy needs the operator or approver role")
    try:
        row = services.policy_rollback(cluster=c, version=version, user=_user(request))
    except services.VersionNotFound as exc:
        return error_page(request, 404, str(exc))
    return redirect(f"/policy/{c.name}/history/?saved={row.version}")


def _calibration_setting(imported, point: str | None) -> tuple[dict[str, object], str]:
    """The setting a calibration proposes: point ``point`` (its index in the file's points) when
    given, else the shipped setting, else the knee, else the file's own μ and h; with a phrase
    naming it.

    Raises:
        ValueError: ``point`` is not an index of the file's points.
    """
    cal = imported.metadata.calibration
    if point is not None:
        points = cal.points if cal else ()
        if not point.isdigit() or int(point) >= len(points):
            raise ValueError(f"point {point!r} is not one of the calibration's {len(points)} points (0–{len(points) - 1})")
        p = points[int(point)]
        return ({"predictor": p.predictor, "margin_ratio": p.margin_ratio, "half_life_s": p.half_life_s},
                f"point {int(point)} ({p.predictor}, μ {p.margin_ratio:g}, h {p.half_life_s:g} s)")
    if cal and cal.shipped:
        shipped = {k: v for k, v in cal.shipped if k != "qualified"}
        return shipped, "shipped setting"
    if cal and cal.knee:
        return dict(cal.knee), "knee"
    return ({"margin_ratio": imported.policy.estimator.margin_ratio, "half_life_s": imported.policy.estimator.half_life_s},
            "values")


@require_http_methods(["GET", "POST"])
@live_page
def calibration(request: HttpRequest, cluster: str) -> HttpResponse:
    """GET: the newest imported calibration with its safety curve; POST: import one."""
    c = control_selectors.live_cluster_get(name=cluster)
    message, status = "", 200
    if request.method == "POST":
        if not request.user.has_perm(TUNE):
            return error_page(request, 403, "importing a calibration needs the operator or approver role")
        try:
            name, text = _uploaded_text(request)
            document = parse_policy_text(text, source=name)
            _for_cluster(document, c, name)
        except PolicyError as exc:
            message, status = f"Import refused, nothing changed — {exc}", 400
        else:
            services.calibration_import(cluster=c, document=document, filename=name, user=_user(request))
            return redirect(f"/policy/{c.name}/calibration/")
    row = CalibrationImport.objects.filter(cluster=c).first()
    document = mappers.calibration_document(row) if row else None
    cal = document.metadata.calibration if document else None
    current = selectors.current_policy(cluster_id=c.id)
    points = figures.calibration_rows(cal) if cal else []
    return render(request, "policy/calibration.html", {
        "cluster": c, "row": row, "document": document, "calibration": cal, "current": current,
        "knee": dict(cal.knee) if cal else {}, "shipped": dict(cal.shipped) if cal else {},
        "tolerance": dict(cal.tolerance) if cal else {},
        "points": points,
        "contention_drawn": any(r["contention_share"] is not None for r in points),
        "figure": figures.calibration_figure(cal, current.policy) if cal and cal.points else None,
        "message": message, "can_tune": request.user.has_perm(TUNE)}, status=status)


def _date(text: str, field: str) -> dt.datetime | None:
    if not text:
        return None
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        raise PolicyError(f"{text!r} is not a date", field=field, accepted="YYYY-MM-DD or an ISO 8601 time") from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def audit_filter(params) -> selectors.AuditFilter:
    """Query parameters → :class:`AuditFilter` (raises PolicyError naming a bad date)."""
    return selectors.AuditFilter(action=params.get("action", "").strip(), actor=params.get("actor", "").strip(),
                                 cluster=params.get("cluster", "").strip(),
                                 since=_date(params.get("since", "").strip(), "since"),
                                 until=_date(params.get("until", "").strip(), "until"))


@require_GET
def audit(request: HttpRequest) -> HttpResponse:
    try:
        filters = audit_filter(request.GET)
    except PolicyError as exc:
        return error_page(request, 400, str(exc))
    entries = [{"e": e, "before": _json(e.before), "after": _json(e.after)}
               for e in selectors.audit_entries(filters)[:300]]
    actions = selectors.audit_actions()
    prefixes = sorted({a.split(".")[0] for a in actions} - set(actions))
    return render(request, "policy/audit.html", {"entries": entries, "filters": request.GET,
                                                 "actions": prefixes + actions})


def _json(value) -> str:
    import json

    return "" if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)
