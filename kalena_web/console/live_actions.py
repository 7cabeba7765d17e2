"""The console's write actions on a live cluster (operator role, each confirmed in the page
before it is sent): submit, complete and delete batch pods; create and revoke agent tokens and
the user's own API tokens. Each calls the very service the REST API and the CLI call
(:func:`~kalena_web.scheduling.services.batch_queue`, ``batch_complete``, ``batch_delete``,
:func:`~kalena_web.telemetry.services.agent_token_create` / ``agent_token_revoke``,
:func:`~kalena_web.api.services.api_token_create` / ``api_token_revoke``): no second
implementation. POST only, CSRF-protected; a user without the permission gets 403, a refused
input a message naming the field (nothing changed), and a token's plaintext is shown once.
"""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from kalena_engine.errors import InputError
from kalena_web.api import services as api_services
from kalena_web.api.models import SCOPES, ApiToken
from kalena_web.console.live_views import live_page
from kalena_web.console.views import error_page
from kalena_web.control import selectors
from kalena_web.control.orchestrators import orchestrator_for
from kalena_web.inventory.models import Node
from kalena_web.scheduling import selectors as scheduling_selectors
from kalena_web.scheduling import services as scheduling_services
from kalena_web.scheduling.models import BatchPod
from kalena_web.scheduling.tasks import scheduling_request
from kalena_web.telemetry import services as telemetry_services

OPERATE_BATCH = "scheduling.operate_batch"
MANAGE_AGENT_TOKENS = "telemetry.manage_agent_tokens"


def _refused(request: HttpRequest, what: str, perm: str) -> HttpResponse:
    return error_page(request, 403, f"{what} needs the operator role (permission {perm})")


def _number(raw: str, field: str, *, integer: bool = False):
    text = (raw or "").strip()
    if text == "":
        return None
    try:
        return int(text) if integer else float(text)
    except ValueError:
        raise InputError(f"{text!r} is not {'an integer' if integer else 'a number'}", source="form",
                         field=field) from None


def _block(request: HttpRequest, prefix: str) -> dict[str, object] | None:
    """The form's ``<prefix>_cpu`` (IR quantity: cores or millicores, ``0.5``, ``300m``) and
    ``<prefix>_ram`` (IR quantity, ``2Gi``) as an IR block, parsed by the REST API's parser."""
    block: dict[str, object] = {}
    cpu = (request.POST.get(f"{prefix}_cpu") or "").strip()
    if cpu:
        block["cpu"] = cpu
    ram = (request.POST.get(f"{prefix}_ram") or "").strip()
    if ram:
        block["ram"] = ram
    return block or None


SUBMIT_FIELDS = ("name", "owner", "request_cpu", "request_ram", "priority", "image")


def _said(exc: InputError) -> str:
    """An input error as a form shows it under its field: the problem and what is accepted,
    without the ``source: field:`` prefix the message carries for logs and the API."""
    return exc.problem + (f" (accepted: {exc.accepted})" if exc.accepted else "")


def _submit_errors(form: dict[str, str]) -> dict[str, str]:
    """Every field of the submit form checked on its own, so one submission shows every error
    at once (``{field: message}``); the service checks them again when it queues."""
    errors: dict[str, str] = {}
    name = form["name"]
    if not scheduling_services.POD_NAME.fullmatch(name) or len(name) > scheduling_services.NAME_MAX:
        errors["name"] = (f"{name!r} is not namespace/pod" if name else "a name is required") + \
            " (accepted: namespace/pod in Kubernetes' DNS-1123 form: lower-case letters, digits, '-', '.')"
    for field, dim in (("request_cpu", "cpu"), ("request_ram", "ram")):
        if form[field]:
            try:
                scheduling_services.resource_block({dim: form[field]}, "request")
            except InputError as exc:
                errors[field] = _said(exc)
    if not form["request_cpu"] and not form["request_ram"]:
        errors["request_cpu"] = "a batch pod must request cpu or ram (accepted: cpu > 0 or ram > 0)"
    try:
        priority = _number(form["priority"], "priority", integer=True)
        if priority is not None and not 0 <= priority <= scheduling_services.PRIORITY_MAX:
            errors["priority"] = f"{priority} is out of range (accepted: 0–{scheduling_services.PRIORITY_MAX:,})"
    except InputError as exc:
        errors["priority"] = _said(exc)
    return errors


@require_POST
@live_page
def batch_submit(request: HttpRequest, cluster: str) -> HttpResponse:
    """Queue a batch pod from the form; a refused one re-shows the form with what was typed and
    every error under its field (HTTP 400), nothing queued."""
    from kalena_web.console.live_views import batch_page

    c = selectors.live_cluster_get(name=cluster)
    if not request.user.has_perm(OPERATE_BATCH):
        return _refused(request, "submitting batch", OPERATE_BATCH)
    form = {f: (request.POST.get(f) or "").strip() for f in SUBMIT_FIELDS}
    name = form["name"]
    errors = _submit_errors(form)
    if not errors:
        try:
            queued = scheduling_services.batch_queue(
                cluster=c, orchestrator_kind=settings.KALENA_ORCHESTRATOR, name=name, owner=form["owner"],
                request=_block(request, "request") or {}, limit=_block(request, "limit"),
                priority=_number(form["priority"], "priority", integer=True) or 0, image=form["image"],
                now_s=time.time(), wake=scheduling_request)
        except InputError as exc:  # BatchConflict and BatchRejected are InputErrors too
            field = exc.field.replace("request.", "request_").split(".")[0] if exc.field else ""
            errors[field if field in SUBMIT_FIELDS else ""] = _said(exc)
    if errors:
        return batch_page(request, c, form=form, errors=errors, status=400)
    pod = queued.pod
    if queued.created:
        messages.success(request, f"{pod.workload.name} queued; the scheduler places it within seconds")
    else:
        messages.info(request, f"{pod.workload.name} was already submitted with this spec; nothing changed")
    return redirect(reverse("console:live_batch_pod", args=[c.name, pod.workload.name]))


def _pod_or_404(c, name: str) -> BatchPod:
    try:
        return scheduling_selectors.batch_pod(cluster=c, name=name)
    except BatchPod.DoesNotExist:
        raise selectors.NotFound(f"no batch pod {name!r} in {c.name!r}") from None


@require_POST
@live_page
def batch_complete(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    c = selectors.live_cluster_get(name=cluster)
    if not request.user.has_perm(OPERATE_BATCH):
        return _refused(request, "completing batch", OPERATE_BATCH)
    pod = _pod_or_404(c, name)
    try:
        scheduling_services.batch_complete(pod=pod, orchestrator_kind=settings.KALENA_ORCHESTRATOR, now_s=time.time())
    except InputError as exc:
        messages.error(request, f"not completed: {exc.problem}")
    else:
        messages.success(request, f"{name} completed: it has left every ledger")
    return redirect(reverse("console:live_batch_pod", args=[c.name, name]))


@require_POST
@live_page
def batch_delete(request: HttpRequest, cluster: str, name: str) -> HttpResponse:
    c = selectors.live_cluster_get(name=cluster)
    if not request.user.has_perm(OPERATE_BATCH):
        return _refused(request, "deleting batch", OPERATE_BATCH)
    pod = _pod_or_404(c, name)
    try:
        scheduling_services.batch_delete(pod=pod, orchestrator=lambda: orchestrator_for(c), now_s=time.time(),
                                         by=f"from the console by {request.user.get_username()}")
    except InputError as exc:
        messages.error(request, f"not deleted: {exc.problem}")
    else:
        messages.success(request, f"{name} deleted")
    return redirect(reverse("console:live_batch_pod", args=[c.name, name]))


@require_POST
@live_page
def agent_token_create(request: HttpRequest, cluster: str) -> HttpResponse:
    c = selectors.live_cluster_get(name=cluster)
    if not request.user.has_perm(MANAGE_AGENT_TOKENS):
        return _refused(request, "creating agent tokens", MANAGE_AGENT_TOKENS)
    node_name = request.POST.get("node") or ""
    node = Node.objects.filter(cluster=c, name=node_name).first()
    if node is None:
        raise selectors.NotFound(f"no node {node_name!r} in live cluster {c.name!r}")
    plaintext, row = telemetry_services.agent_token_create(node=node, created_by=request.user)
    messages.success(request, f"agent token {row.id} for {node.name} created")
    return render(request, "console/token_created.html", {
        "cluster": c, "kind": "agent", "plaintext": plaintext, "row": row, "node": node,
        "back": reverse("telemetry:agents", args=[c.name]) + "#agent-tokens"})


@require_POST
@live_page
def agent_token_revoke(request: HttpRequest, cluster: str) -> HttpResponse:
    c = selectors.live_cluster_get(name=cluster)
    if not request.user.has_perm(MANAGE_AGENT_TOKENS):
        return _refused(request, "revoking agent tokens", MANAGE_AGENT_TOKENS)
    token_id = _id(request)
    from kalena_web.telemetry.models import AgentToken

    if token_id is None or not AgentToken.objects.filter(id=token_id, node__cluster=c).exists():
        raise selectors.NotFound(f"no agent token {request.POST.get('id')!r} in live cluster {c.name!r}")
    try:
        row = telemetry_services.agent_token_revoke(token_id=token_id)
    except InputError as exc:
        messages.error(request, f"not revoked: {exc.problem}")
    else:
        messages.success(request, f"agent token {row.id} of {row.node.name} revoked: its agent is refused from now on")
    return redirect(reverse("telemetry:agents", args=[c.name]) + "#agent-tokens")


def _id(request: HttpRequest) -> int | None:
    raw = request.POST.get("id") or ""
    return int(raw) if raw.isdigit() and len(raw) < 19 else None


@require_GET
def api_tokens(request: HttpRequest) -> HttpResponse:
    """The user's own API tokens (newest first) with the create form."""
    return render(request, "console/api_tokens.html", {
        "tokens": ApiToken.objects.filter(user=request.user).order_by("-created_at", "-id")[:200],
        "scopes": SCOPES, "can_create": request.user.has_perm(OPERATE_BATCH)})


@require_POST
def api_token_create(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm(OPERATE_BATCH):
        return _refused(request, "creating API tokens", OPERATE_BATCH)
    name = (request.POST.get("name") or "").strip()
    if not name:
        messages.error(request, "not created: name: a token needs a name (what will use it)")
        return redirect("console:api_tokens")
    try:
        plaintext, row = api_services.api_token_create(user=request.user, name=name,
                                                       scopes=request.POST.getlist("scopes") or ["read"])
    except InputError as exc:
        messages.error(request, f"not created: {exc}")
        return redirect("console:api_tokens")
    return render(request, "console/token_created.html", {
        "kind": "API", "plaintext": plaintext, "row": row, "back": reverse("console:api_tokens")})


@require_POST
def api_token_revoke(request: HttpRequest) -> HttpResponse:
    if not request.user.has_perm(OPERATE_BATCH):
        return _refused(request, "revoking API tokens", OPERATE_BATCH)
    token_id = _id(request)
    if token_id is None or not ApiToken.objects.filter(id=token_id, user=request.user).exists():
        return error_page(request, 404, f"you have no API token {request.POST.get('id')!r}")
    if api_services.api_token_revoke(token_id=token_id):
        messages.success(request, f"API token {token_id} revoked: requests with it are refused from now on")
    else:
        messages.error(request, f"API token {token_id} was already revoked")
    return redirect("console:api_tokens")
