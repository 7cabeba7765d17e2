"""The webhook and extender views (docs/design.md §12, §14), routed only on the hooks listener
(:mod:`kalena_web.kubehooks.listener`: mutual TLS, so every caller here presented a client
certificate the configured CA signed; the console's port routes none of them).

The webhook reads the body and answers with the pure decision. It touches no database, so it
answers within the API server's timeout even when the database is slow or down; anything but POST
with a JSON body is refused with a JSON denial, never an exception.

The extender acts only in extender mode (``KALENA_ADMISSION_EXTENDER_MODE``), only for a live
Kubernetes cluster, only on pods Kalena manages and only with the pod's uid given; a bind also
needs the uid to match the pod the API server holds and the filter to accept the node
(:func:`kalena_web.kubehooks.services.extender_bind`). Every refusal is counted and audited with
the caller's certificate subject and address (:func:`~kalena_web.kubehooks.services.hooks_refusal_record`).
"""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.exceptions import ObjectDoesNotExist
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from agents.orchestrators.kubernetes import extender
from agents.orchestrators.kubernetes.admission import MAX_BODY_BYTES, AdmissionConfig, review
from kalena_engine.errors import InputError
from kalena_engine.policy import Policy
from kalena_web.control.orchestrators import OrchestratorNotConfigured, orchestrator_for
from kalena_web.inventory.models import Cluster
from kalena_web.kubehooks import services
from kalena_web.kubehooks.selectors import extender_verdicts
from kalena_web.policy.models import PolicyApplied
from kalena_web.policy.services import policy_apply
from kalena_web.scheduling import selectors as scheduling

#: What an extender request can fail with (answered as the verb's error, never a 500).
_BAD = (ValueError, InputError, ObjectDoesNotExist)


def admission_config() -> AdmissionConfig:
    """The operator's switches (``KALENA_ADMISSION_INFER_JOBS``, ``KALENA_ADMISSION_EXTENDER_MODE``)."""
    return AdmissionConfig(infer_jobs=settings.KALENA_ADMISSION_INFER_JOBS,
                           extender_mode=settings.KALENA_ADMISSION_EXTENDER_MODE)


def caller(request: HttpRequest) -> tuple[str, str]:
    """``(who, peer)`` of a hooks request: the client certificate's subject (RFC 4514, from the
    ASGI TLS extension the hooks listener fills in; ``anonymous`` without one) and
    ``host:port`` of the peer."""
    scope = getattr(request, "scope", None) or {}
    tls = (scope.get("extensions") or {}).get("tls") or {}
    client = scope.get("client") or (request.META.get("REMOTE_ADDR", ""), request.META.get("REMOTE_PORT", ""))
    return tls.get("client_cert_name") or "anonymous", ":".join(str(p) for p in client if p != "")


def refused(request: HttpRequest, *, endpoint: str, reason: str, detail: str, body, status: int = 200,
            cluster_name: str = "") -> JsonResponse:
    """Record the refusal (counter + audit entry) and answer ``body`` with ``status``."""
    who, peer = caller(request)
    services.hooks_refusal_record(endpoint=endpoint, reason=reason, peer=peer, client=who, detail=detail,
                                  cluster_name=cluster_name)
    return JsonResponse(body, status=status, safe=False)


@csrf_exempt
@login_not_required
def mutate(request: HttpRequest) -> JsonResponse:
    """``POST /kubernetes/admission/mutate``: AdmissionReview v1 in and out (always HTTP 200 with a
    review, as the API server expects; a bad method gets 405 with a denial)."""
    if request.method != "POST":
        return JsonResponse(review(b"", admission_config()), status=405)
    # read the stream (not request.body, which Django caps at DATA_UPLOAD_MAX_MEMORY_SIZE, 2.5 MiB,
    # below what the API server may send); one byte past the cap is enough to refuse it
    return JsonResponse(review(request.read(MAX_BODY_BYTES + 1), admission_config()))


# -- scheduler extender ----------------------------------------------------------------------------

class _Refusal(Exception):
    """A gate refusal: ``reason`` (counter label), HTTP ``status`` and the message."""

    def __init__(self, message: str, *, reason: str, status: int) -> None:
        super().__init__(message)
        self.reason, self.status = reason, status


def _extender_cluster(request: HttpRequest, name: str) -> Cluster:
    """The live Kubernetes cluster the extender acts for.

    Raises:
        _Refusal: not POST (405), extender mode off, not Kubernetes, or no such live cluster (404).
    """
    if request.method != "POST":
        raise _Refusal(f"{request.method} is not allowed: kube-scheduler POSTs", reason="method", status=405)
    if not settings.KALENA_ADMISSION_EXTENDER_MODE:
        raise _Refusal("the extender is off (set KALENA_ADMISSION_EXTENDER_MODE=1 with "
                       "deploy/kubernetes/scheduler-extender.yaml)", reason="extender_off", status=404)
    if settings.KALENA_ORCHESTRATOR != "kubernetes":
        raise _Refusal(f"the extender serves Kubernetes clusters only (KALENA_ORCHESTRATOR="
                       f"{settings.KALENA_ORCHESTRATOR})", reason="not_kubernetes", status=404)
    try:
        return scheduling.live_cluster(name=name)
    except ObjectDoesNotExist:
        raise _Refusal(f"no live cluster named {name[:100]!r}", reason="unknown_cluster", status=404) from None



def _checked_args(request: HttpRequest) -> extender.ExtenderArgs:
    """The ExtenderArgs of a filter or prioritize call, for a pod Kalena manages, uid given.

    Raises:
        ExtenderInputError: not the extender JSON. _Refusal: no uid (400), a pod Kalena does not
            manage (403).
    """
    args = extender.parse_args(request.read(MAX_BODY_BYTES + 1))
    if not extender.pod_uid(args.pod):
        raise _Refusal("Pod.metadata.uid: missing (kube-scheduler sends the pod object with its uid)",
                       reason="no_uid", status=400)
    unmanaged = extender.unmanaged_reason(args.pod)
    if unmanaged:
        raise _Refusal(unmanaged, reason="unmanaged", status=403)
    return args


def _extender_policy(cluster: Cluster) -> Policy:
    """The policy the extender decides with (filter, prioritize and the bind's filter check): the
    cluster's current version (docs/design.md §15), recorded as the extender's."""
    return policy_apply(cluster_id=cluster.id, part=PolicyApplied.EXTENDER, now_s=time.time()).policy


@csrf_exempt
@login_not_required
def extender_filter(request: HttpRequest, cluster: str) -> JsonResponse:
    """``POST /kubernetes/extender/<cluster>/filter``: ExtenderArgs → ExtenderFilterResult."""
    try:
        found = _extender_cluster(request, cluster)
        args = _checked_args(request)
        failed, _ = extender_verdicts(cluster=found, pod=args.pod, node_names=args.node_names,
                                      now_s=time.time(), policy=_extender_policy(found))
    except _Refusal as exc:
        return refused(request, endpoint="filter", reason=exc.reason, detail=str(exc), status=exc.status,
                       body=extender.error_filter_result(f"kalena extender: {exc}"), cluster_name=cluster)
    except _BAD as exc:
        return refused(request, endpoint="filter", reason="malformed", detail=str(exc), cluster_name=cluster,
                       body=extender.error_filter_result(f"kalena extender: {exc}"))
    return JsonResponse(extender.filter_result(args, failed))


@csrf_exempt
@login_not_required
def extender_prioritize(request: HttpRequest, cluster: str) -> JsonResponse:
    """``POST /kubernetes/extender/<cluster>/prioritize``: ExtenderArgs → HostPriorityList
    (0–10). A pod whose resources cannot be read scores 0 everywhere (a priority call has no
    error field); a refused call answers its status with an empty list."""
    try:
        found = _extender_cluster(request, cluster)
        args = _checked_args(request)
    except _Refusal as exc:
        return refused(request, endpoint="prioritize", reason=exc.reason, detail=str(exc), status=exc.status,
                       body=[], cluster_name=cluster)
    except ValueError as exc:
        return refused(request, endpoint="prioritize", reason="malformed", detail=str(exc), status=400, body=[],
                       cluster_name=cluster)
    try:
        _, scores = extender_verdicts(cluster=found, pod=args.pod, node_names=args.node_names,
                                      now_s=time.time(), policy=_extender_policy(found))
    except _BAD:
        scores = {}
    return JsonResponse(extender.priorities(args.node_names, scores), safe=False)


@csrf_exempt
@login_not_required
def extender_bind(request: HttpRequest, cluster: str) -> JsonResponse:
    """``POST /kubernetes/extender/<cluster>/bind``: ExtenderBindingArgs → ExtenderBindingResult."""
    try:
        found = _extender_cluster(request, cluster)
        binding = extender.parse_binding(request.read(MAX_BODY_BYTES + 1))
        services.extender_bind(cluster=found, binding=binding, orchestrator=orchestrator_for(found),
                               now_s=time.time(), policy=_extender_policy(found))
    except _Refusal as exc:
        return refused(request, endpoint="bind", reason=exc.reason, detail=str(exc), status=exc.status,
                       body={"Error": f"kalena extender: {exc}"}, cluster_name=cluster)
    except services.ExtenderBindRefused as exc:
        status = 403 if exc.reason in ("uid_mismatch", "unmanaged") else 200
        return refused(request, endpoint="bind", reason=exc.reason, detail=str(exc), status=status,
                       body={"Error": f"kalena extender: {exc}"}, cluster_name=cluster)
    except OrchestratorNotConfigured as exc:
        return refused(request, endpoint="bind", reason="orchestrator", detail=str(exc), cluster_name=cluster,
                       body={"Error": f"kalena extender: {exc}"})
    except _BAD as exc:
        return refused(request, endpoint="bind", reason="malformed", detail=str(exc), cluster_name=cluster,
                       body={"Error": f"kalena extender: {exc}"})
    return JsonResponse({"Error": ""})


@csrf_exempt
@login_not_required
def not_found(request: HttpRequest, exception=None) -> JsonResponse:
    """A path under ``/kubernetes/`` the hooks listener does not serve: a JSON 404, recorded."""
    return refused(request, endpoint="other", reason="not_a_hook", detail=f"{request.method} {request.path[:200]}",
                   status=404, body={"detail": f"not found: {request.path[:200]}"})
