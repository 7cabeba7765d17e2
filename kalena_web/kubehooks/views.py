"""The webhook view (DESIGN §14): reads the body, answers with the pure decision. It touches no
database, so it answers within the API server's timeout even when the database is slow or down;
anything but POST with a JSON body is refused with a JSON denial, never an exception."""

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

def _extender_cluster(name: str):
    return scheduling.live_cluster(name=name)


def _extender_policy(cluster) -> Policy:
    """The cluster's current policy version (DESIGN §15), recorded as the extender's."""
    return policy_apply(cluster_id=cluster.id, part=PolicyApplied.EXTENDER, now_s=time.time()).policy


@csrf_exempt
@login_not_required
def extender_filter(request: HttpRequest, cluster: str) -> JsonResponse:
    """``POST /kubernetes/extender/<cluster>/filter``: ExtenderArgs → ExtenderFilterResult."""
    try:
        args = extender.parse_args(request.read(MAX_BODY_BYTES + 1))
        found = _extender_cluster(cluster)
        failed, _ = extender_verdicts(cluster=found, pod=args.pod, node_names=args.node_names,
                                      now_s=time.time(), policy=_extender_policy(found))
    except _BAD as exc:
        return JsonResponse(extender.error_filter_result(f"kalena extender: {exc}"))
    return JsonResponse(extender.filter_result(args, failed))


@csrf_exempt
@login_not_required
def extender_prioritize(request: HttpRequest, cluster: str) -> JsonResponse:
    """``POST /kubernetes/extender/<cluster>/prioritize``: ExtenderArgs → HostPriorityList
    (0–10). A pod that cannot be read scores 0 everywhere (a priority call has no error field)."""
    try:
        args = extender.parse_args(request.read(MAX_BODY_BYTES + 1))
    except ValueError:
        return JsonResponse([], safe=False, status=400)
    try:
        found = _extender_cluster(cluster)
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
        binding = extender.parse_binding(request.read(MAX_BODY_BYTES + 1))
        found = _extender_cluster(cluster)
        services.extender_bind(cluster=found, binding=binding, orchestrator=orchestrator_for(found), now_s=time.time())
    except (*_BAD, services.ExtenderBindRefused, OrchestratorNotConfigured) as exc:
        return JsonResponse({"Error": f"kalena extender: {exc}"})
    return JsonResponse({"Error": ""})
