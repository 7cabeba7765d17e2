"""The webhook view (DESIGN §14): reads the body, answers with the pure decision. It touches no
database, so it answers within the API server's timeout even when the database is slow or down;
anything but POST with a JSON body is refused with a JSON denial, never an exception."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from agents.orchestrators.kubernetes.admission import MAX_BODY_BYTES, AdmissionConfig, review


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
